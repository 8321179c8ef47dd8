"""Tuples at import: ``tuple``/``get_tuple_element`` flatten to their elements, tuple-typed arguments and
results of the entry function to their leaves (the nesting kept in ``Imported.signature``), and what cannot
be flattened is an UnsupportedError. Checked against jaxlib's reference interpreter (``stablehlo.eval_module``)
where it can run the module; it cannot take tuple arguments or return tuples, so those modules are checked
against the reference's results for the same computation written without tuples.

NOTE: the reference runs in this process, not in the oracle's forked child: a fork of a pytest process whose
XLA thread pools are running can hang, and eval_module is known to run every module here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conformance.oracle import _reference as reference  # pyright: ignore[reportPrivateUsage]
from conformance.oracle import assert_same
from trnsim.errors import UnsupportedError
from trnsim.frontend.importer import Imported, import_module
from trnsim.frontend.mlir import parse
from trnsim.ir.interp import Interpreter

A = np.array([1.5, -2.0, 0.25], np.float32)
B = np.array([3, -4, 5], np.int32)
F, N = "tensor<3xf32>", "tensor<3xi32>"
NESTED = f"tuple<{F}, tuple<{N}>>"

LOCAL = f"""
func.func @main(%a: {F}, %b: {N}) -> ({F}, {N}) {{
  %i = "stablehlo.tuple"(%b) : ({N}) -> tuple<{N}>
  %t = "stablehlo.tuple"(%a, %i) : ({F}, tuple<{N}>) -> {NESTED}
  %x = "stablehlo.get_tuple_element"(%t) {{index = 0 : i32}} : ({NESTED}) -> {F}
  %j = "stablehlo.get_tuple_element"(%t) {{index = 1 : i32}} : ({NESTED}) -> tuple<{N}>
  %y = "stablehlo.get_tuple_element"(%j) {{index = 0 : i32}} : (tuple<{N}>) -> {N}
  %z = "stablehlo.add"(%x, %x) : ({F}, {F}) -> {F}
  %w = "stablehlo.multiply"(%y, %y) : ({N}, {N}) -> {N}
  func.return %z, %w : {F}, {N}
}}
"""

CALL = f"""
func.func private @pair(%x: {F}, %y: {N}) -> tuple<{F}, {N}> {{
  %n = "stablehlo.negate"(%x) : ({F}) -> {F}
  %r = "stablehlo.tuple"(%n, %y) : ({F}, {N}) -> tuple<{F}, {N}>
  func.return %r : tuple<{F}, {N}>
}}
func.func @main(%a: {F}, %b: {N}) -> ({N}, {F}) {{
  %r = func.call @pair(%a, %b) : ({F}, {N}) -> tuple<{F}, {N}>
  %x = "stablehlo.get_tuple_element"(%r) {{index = 0 : i32}} : (tuple<{F}, {N}>) -> {F}
  %y = "stablehlo.get_tuple_element"(%r) {{index = 1 : i32}} : (tuple<{F}, {N}>) -> {N}
  func.return %y, %x : {N}, {F}
}}
"""

# tuple-typed entry arguments and results (older JAX exports, HLO conversions): the reference cannot run it
ENTRY = f"""
func.func private @swap(%t: {NESTED}) -> tuple<{N}, {F}> {{
  %x = "stablehlo.get_tuple_element"(%t) {{index = 0 : i32}} : ({NESTED}) -> {F}
  %j = "stablehlo.get_tuple_element"(%t) {{index = 1 : i32}} : ({NESTED}) -> tuple<{N}>
  %y = "stablehlo.get_tuple_element"(%j) {{index = 0 : i32}} : (tuple<{N}>) -> {N}
  %r = "stablehlo.tuple"(%y, %x) : ({N}, {F}) -> tuple<{N}, {F}>
  func.return %r : tuple<{N}, {F}>
}}
func.func @main(%t: {NESTED}, %s: {F}) -> (tuple<{N}, tuple<{F}>>, {F}) {{
  %r = func.call @swap(%t) : ({NESTED}) -> tuple<{N}, {F}>
  %y = "stablehlo.get_tuple_element"(%r) {{index = 0 : i32}} : (tuple<{N}, {F}>) -> {N}
  %x = "stablehlo.get_tuple_element"(%r) {{index = 1 : i32}} : (tuple<{N}, {F}>) -> {F}
  %e = "stablehlo.exponential"(%x) : ({F}) -> {F}
  %inner = "stablehlo.tuple"(%e) : ({F}) -> tuple<{F}>
  %out = "stablehlo.tuple"(%y, %inner) : ({N}, tuple<{F}>) -> tuple<{N}, tuple<{F}>>
  %m = "stablehlo.multiply"(%x, %s) : ({F}, {F}) -> {F}
  func.return %out, %m : tuple<{N}, tuple<{F}>>, {F}
}}
"""
ENTRY_FLAT = f"""
func.func @main(%a: {F}, %b: {N}, %s: {F}) -> ({N}, {F}, {F}) {{
  %e = "stablehlo.exponential"(%a) : ({F}) -> {F}
  %m = "stablehlo.multiply"(%a, %s) : ({F}, {F}) -> {F}
  func.return %b, %e, %m : {N}, {F}, {F}
}}
"""


def imported(text: str) -> Imported:
    mod, _ = parse(text)
    return import_module(mod, where="<test>")


def run(text: str, args: list[np.ndarray]) -> list[np.ndarray]:
    return Interpreter().run(imported(text).graph, args)


@pytest.mark.parametrize("text", [LOCAL, CALL], ids=["local", "call"])
def test_tuples_inside_the_program_match_the_reference(text: str) -> None:
    expected = reference(text, [A, B], ["f32", "i32"])
    actual = run(text, [A, B])
    assert len(actual) == len(expected) == 2
    for a, e in zip(actual, expected, strict=True):
        assert_same(a, e)
    assert not imported(text).signature.has_tuples
    assert "tuple" not in str(imported(text).graph)


def test_tuple_arguments_and_results_flatten_and_come_back_structured() -> None:
    imp = imported(ENTRY)
    assert [str(p.type) for p in imp.graph.params] == [F, N, F]
    assert imp.signature.params == ((0, (1,)), 2)
    assert imp.signature.results == ((0, (1,)), 2)
    s = np.array([2.0, 0.5, -1.0], np.float32)
    flat = imp.signature.flatten_params([(A, (B,)), s])
    outputs = Interpreter().run(imp.graph, flat)
    expected = reference(ENTRY_FLAT, [A, B, s], ["f32", "i32", "f32"])
    for a, e in zip(outputs, expected, strict=True):
        assert_same(a, e)
    (y, (e,)), m = imp.signature.unflatten_results(outputs)
    assert_same(y, B)
    assert_same(e, expected[1])
    assert_same(m, expected[2])


def test_a_tuple_operand_of_another_op_is_unsupported_with_a_hint() -> None:
    text = f"""
func.func @main(%a: {F}) -> tuple<{F}> {{
  %t = "stablehlo.tuple"(%a) : ({F}) -> tuple<{F}>
  %b = "stablehlo.custom_call"(%t) {{call_target_name = "Sharding"}} : (tuple<{F}>) -> tuple<{F}>
  func.return %b : tuple<{F}>
}}
"""
    with pytest.raises(UnsupportedError, match="tuple type") as info:
        imported(text)
    assert "get_tuple_element" in (info.value.hint or "")


def test_flatten_params_checks_the_structure() -> None:
    from trnsim.errors import CompileError

    sig = imported(ENTRY).signature
    with pytest.raises(CompileError, match="tuple of 2"):
        sig.flatten_params([A, A])
    with pytest.raises(CompileError, match="takes 2 arguments"):
        sig.flatten_params([A])


def test_a_compiled_program_is_called_in_the_declared_structure_also_after_a_save(tmp_path: Path) -> None:
    """``program(...)`` takes and returns tuples as declared; ``run`` stays flat; an artifact keeps the
    structure, and a damaged structure in its metadata is an ArtifactError."""
    import trnsim
    from trnsim.errors import ArtifactError
    from trnsim.runtime.artifact import pack_artifact, unpack_artifact
    from trnsim.runtime.program import from_artifact

    s = np.array([2.0, 0.5, -1.0], np.float32)
    expected = reference(ENTRY_FLAT, [A, B, s], ["f32", "i32", "f32"])
    program = trnsim.compile(ENTRY, cache=False)
    flat = program.run(A, B, s)
    assert len(flat) == 3
    path = program.save(tmp_path / "entry.neff")
    for p in (program, trnsim.load_artifact(path)):
        (y, (e,)), m = p((A, (B,)), s)
        for got, want in zip((y, e, m), expected, strict=True):
            assert_same(got, want)
    plain = trnsim.compile(ENTRY_FLAT, cache=False)
    assert plain.signature is None and len(plain(A, B, s)) == 3
    art = unpack_artifact(path.read_bytes(), where="t")
    for bad in ({"params": [[0, [1]], 2], "results": [[0, [0]], 2]}, {"params": [0, "x"], "results": []}, [1]):
        meta = {**art.meta, "signature": bad}
        broken = unpack_artifact(pack_artifact(meta, art.sections, target="trn3"), where="t")
        with pytest.raises(ArtifactError, match="signature is malformed"):
            from_artifact(broken, "t")
