// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<3xf32> {jax.result_info = ""}) {
    %0 = call @inputs() : () -> tensor<2x3xf32>
    %1 = call @expected() : () -> tensor<3xf32>
    %r = "stablehlo.unary_einsum"(%0) {einsum_config = "ab->b"} : (tensor<2x3xf32>) -> tensor<3xf32>
    stablehlo.custom_call @check.expect_close(%r, %1) {has_side_effect = true} : (tensor<3xf32>, tensor<3xf32>) -> ()
    return %r : tensor<3xf32>
  }
  func.func private @inputs() -> tensor<2x3xf32> {
    %c0 = stablehlo.constant dense<"0xF8E5D73FBF94223F9820A13F53C91DC000C7483F9EA13840"> : tensor<2x3xf32>
    return %c0 : tensor<2x3xf32>
  }
  func.func private @expected() -> (tensor<3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x5C5947BFE0ADB53FF5988440"> : tensor<3xf32>
    return %c : tensor<3xf32>
  }
}
