// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<4x2x3xbf16> {jax.result_info = ""}) {
    %0 = call @inputs() : () -> tensor<2x3xbf16>
    %1 = call @expected() : () -> tensor<4x2x3xbf16>
    %r = "stablehlo.broadcast"(%0) {broadcast_sizes = array<i64: 4>} : (tensor<2x3xbf16>) -> tensor<4x2x3xbf16>
    stablehlo.custom_call @check.expect_eq(%r, %1) {has_side_effect = true} : (tensor<4x2x3xbf16>, tensor<4x2x3xbf16>) -> ()
    return %r : tensor<4x2x3xbf16>
  }
  func.func private @inputs() -> tensor<2x3xbf16> {
    %c0 = stablehlo.constant dense<"0x85BF3B408BBFDE3F0E4027BF"> : tensor<2x3xbf16>
    return %c0 : tensor<2x3xbf16>
  }
  func.func private @expected() -> (tensor<4x2x3xbf16> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x85BF3B408BBFDE3F0E4027BF85BF3B408BBFDE3F0E4027BF85BF3B408BBFDE3F0E4027BF85BF3B408BBFDE3F0E4027BF"> : tensor<4x2x3xbf16>
    return %c : tensor<4x2x3xbf16>
  }
}
