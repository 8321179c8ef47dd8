"""Evaluation rules, one module per op family; importing a module registers its rules."""

from __future__ import annotations


def load_all() -> None:
    from trnsim.ir.semantics import (  # noqa: F401  (imported for their registrations)
        control,
        elementwise,
        indexing,
        linalg,
        reduce,
        shape,
        sort,
    )
