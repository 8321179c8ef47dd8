"""Workloads written in plain JAX for trnsim's compiler, shipped with the package so that ``trnsim demo``
finds them wherever trnsim is installed (``examples/`` in the repository re-exports them)."""
