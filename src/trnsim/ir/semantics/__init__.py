"""Evaluation rules, one module per op family; importing a module registers its rules."""

from __future__ import annotations

from importlib import import_module

MODULES = ("control", "elementwise", "indexing", "legacy", "linalg", "quant", "reduce", "shape", "sort")


def load_all() -> None:
    for name in MODULES:
        import_module(f"trnsim.ir.semantics.{name}")
