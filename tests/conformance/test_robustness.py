"""Bad input never escapes as a Python traceback: malformed text, no entry function, unknown or rejected ops
and element types outside trnsim's support give CompileError / UnsupportedError with a location; every
element type StableHLO spells either runs or is rejected with UnsupportedError."""

from __future__ import annotations

from pathlib import Path

import pytest

from trnsim.compiler import compile
from trnsim.conformance import run_file
from trnsim.errors import CompileError, UnsupportedError

ADD = """func.func @main(%a: tensor<4xT>) -> tensor<4xT> {
  %r = stablehlo.add %a, %a : tensor<4xT>
  return %r : tensor<4xT>
}"""


@pytest.mark.parametrize(("text", "error", "needle"), [
    ("func.func @main( {", CompileError, "not a valid StableHLO module"),
    ("this is not MLIR", CompileError, "not a valid StableHLO module"),
    ('func.func @main() {\n  "mydialect.op"() : () -> ()\n  return\n}', CompileError, "not a valid"),
    ("func.func private @f() {\n  return\n}\nfunc.func private @g() {\n  return\n}", CompileError, "@main"),
    ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
     "  %r = stablehlo.fft %a, type = RFFT, length = [4] : (tensor<4xf32>) -> tensor<3xcomplex<f32>>\n"
     "  return %a : tensor<4xf32>\n}", UnsupportedError, "not supported"),
    ("func.func @main(%a: tensor<?xf32>) -> tensor<?xf32> {\n  return %a : tensor<?xf32>\n}",
     UnsupportedError, "dynamic shape"),
    ("func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {\n"
     "  %r = stablehlo.custom_call @lapack_sgetrf_ffi(%a) : (tensor<4xf32>) -> tensor<4xf32>\n"
     "  return %r : tensor<4xf32>\n}", UnsupportedError, "lapack_sgetrf_ffi"),
    ("func.func @main() -> !stablehlo.token {\n  %t = stablehlo.after_all : !stablehlo.token\n"
     "  return %t : !stablehlo.token\n}", UnsupportedError, "token"),
])
def test_bad_input_is_a_compile_error(text: str, error: type[Exception], needle: str) -> None:
    import numpy as np

    with pytest.raises(error) as info:
        program = compile(text)
        program.run(*(np.zeros(t.shape, t.np_dtype) for t in program.input_types), timing=False)
    message = str(info.value)
    assert needle in message
    assert "hint:" in message


@pytest.mark.parametrize("t", ["ui2", "i2", "ui4", "i4", "f8E4M3FN", "f8E5M2", "f8E4M3", "f8E3M4", "f4E2M1FN",
                               "f6E2M3FN", "f6E3M2FN", "f8E4M3FNUZ", "f8E5M2FNUZ", "f8E4M3B11FNUZ", "f64",
                               "complex<f32>", "complex<f64>", "i64", "ui64"])
def test_every_element_type_runs_or_is_unsupported(t: str) -> None:
    import numpy as np

    try:
        program = compile(ADD.replace("T", t))
    except UnsupportedError as exc:
        assert t in str(exc) or "not supported" in str(exc)
        return
    x = np.ones(4, program.input_types[0].np_dtype)
    out = program.run(x, timing=False)[0]
    assert float(out.astype(np.float64)[0].real) == (-2.0 if t == "i2" else 2.0)   # 1 + 1 wraps in i2


def test_out_of_scope_file_in_the_runner_is_ok(tmp_path: Path) -> None:
    f = tmp_path / "add_float8_e4m3fnuz_4.mlir"
    f.write_text("""module {
  func.func public @main() -> tensor<4xf8E4M3FNUZ> {
    %0 = call @inputs() : () -> tensor<4xf8E4M3FNUZ>
    %1 = stablehlo.add %0, %0 : tensor<4xf8E4M3FNUZ>
    stablehlo.custom_call @check.expect_eq(%1, %0) : (tensor<4xf8E4M3FNUZ>, tensor<4xf8E4M3FNUZ>) -> ()
    return %1 : tensor<4xf8E4M3FNUZ>
  }
  func.func private @inputs() -> tensor<4xf8E4M3FNUZ> {
    %c = stablehlo.constant dense<0.0> : tensor<4xf8E4M3FNUZ>
    return %c : tensor<4xf8E4M3FNUZ>
  }
}""")
    r = run_file(f)
    assert r.ok and not r.in_scope and r.status in ("passed", "unsupported"), r


def test_check_eq_older_form(tmp_path: Path) -> None:
    """The older testdata form: ``check.eq`` returns an i1 and main returns it."""
    f = tmp_path / "neg_int32_3.mlir"
    f.write_text("""module {
  func.func public @main() -> tensor<i1> {
    %0 = stablehlo.constant dense<[1, -2, 3]> : tensor<3xi32>
    %1 = stablehlo.constant dense<[-1, 2, -3]> : tensor<3xi32>
    %2 = stablehlo.negate %0 : tensor<3xi32>
    %3 = stablehlo.custom_call @check.eq(%2, %1) : (tensor<3xi32>, tensor<3xi32>) -> tensor<i1>
    return %3 : tensor<i1>
  }
}""")
    assert run_file(f).status == "passed"
    f.write_text(f.read_text().replace("[-1, 2, -3]", "[-1, 2, 3]"))
    r = run_file(f)
    assert r.status == "failed" and "differ" in r.message
