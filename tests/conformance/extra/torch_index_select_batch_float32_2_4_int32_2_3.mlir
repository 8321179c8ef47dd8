// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3xf32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<2x4xf32>, tensor<2x3xi32>)
    %1 = call @expected() : () -> tensor<2x3xf32>
    %r = "stablehlo.torch_index_select"(%0#0, %0#1) {batch_dims = 1 : i64, dim = 1 : i64} : (tensor<2x4xf32>, tensor<2x3xi32>) -> tensor<2x3xf32>
    stablehlo.custom_call @check.expect_eq(%r, %1) {has_side_effect = true} : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()
    return %r : tensor<2x3xf32>
  }
  func.func private @inputs() -> (tensor<2x4xf32>, tensor<2x3xi32>) {
    %c0 = stablehlo.constant dense<"0xCCF0943FA347593FC2990EC00B5614C0EA896B3F3FBA07409C08E5BFCB8FD8BF"> : tensor<2x4xf32>
    %c1 = stablehlo.constant dense<"0x030000000000000001000000020000000200000000000000"> : tensor<2x3xi32>
    return %c0, %c1 : tensor<2x4xf32>, tensor<2x3xi32>
  }
  func.func private @expected() -> (tensor<2x3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x0B5614C0CCF0943FA347593F9C08E5BF9C08E5BFEA896B3F"> : tensor<2x3xf32>
    return %c : tensor<2x3xf32>
  }
}
