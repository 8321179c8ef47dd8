// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3x3xf32> {jax.result_info = ""}) {
    %0 = call @inputs() : () -> tensor<2x3x3xf32>
    %1 = call @expected() : () -> tensor<2x3x3xf32>
    %r = "stablehlo.cholesky"(%0) {lower = true} : (tensor<2x3x3xf32>) -> tensor<2x3x3xf32>
    stablehlo.custom_call @check.expect_close(%r, %1) {has_side_effect = true} : (tensor<2x3x3xf32>, tensor<2x3x3xf32>) -> ()
    return %r : tensor<2x3x3xf32>
  }
  func.func private @inputs() -> tensor<2x3x3xf32> {
    %c0 = stablehlo.constant dense<"0x0000804000000040CDCCCC3E000000400000A0400000803FCDCCCC3E0000803F000040400000104100008040CDCC4C3F000080400000304100000040CDCC4C3F000000400000E040"> : tensor<2x3x3xf32>
    return %c0 : tensor<2x3x3xf32>
  }
  func.func private @expected() -> (tensor<2x3x3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x0000004000000000000000000000803F0000004000000000CDCC4C3ECDCCCC3E5A2FD63F000040400000000000000000ABAAAA3F1D5B4240000000008988883EFC9F0A3FD3DC2440"> : tensor<2x3x3xf32>
    return %c : tensor<2x3x3xf32>
  }
}
