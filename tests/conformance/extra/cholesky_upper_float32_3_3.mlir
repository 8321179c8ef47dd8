// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<3x3xf32> {jax.result_info = ""}) {
    %0 = call @inputs() : () -> tensor<3x3xf32>
    %1 = call @expected() : () -> tensor<3x3xf32>
    %r = "stablehlo.cholesky"(%0) {lower = false} : (tensor<3x3xf32>) -> tensor<3x3xf32>
    stablehlo.custom_call @check.expect_close(%r, %1) {has_side_effect = true} : (tensor<3x3xf32>, tensor<3x3xf32>) -> ()
    return %r : tensor<3x3xf32>
  }
  func.func private @inputs() -> tensor<3x3xf32> {
    %c0 = stablehlo.constant dense<"0x0000804000000040CDCCCC3E000000400000A0400000803FCDCCCC3E0000803F00004040"> : tensor<3x3xf32>
    return %c0 : tensor<3x3xf32>
  }
  func.func private @expected() -> (tensor<3x3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x000000400000803FCDCC4C3E0000000000000040CDCCCC3E00000000000000005A2FD63F"> : tensor<3x3xf32>
    return %c : tensor<3x3xf32>
  }
}
