// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<4x2xf32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<2x3xf32>, tensor<3x4xf32>)
    %1 = call @expected() : () -> tensor<4x2xf32>
    %r = "stablehlo.einsum"(%0#0, %0#1) {einsum_config = "ab,bc->ca"} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<4x2xf32>
    stablehlo.custom_call @check.expect_close(%r, %1) {has_side_effect = true} : (tensor<4x2xf32>, tensor<4x2xf32>) -> ()
    return %r : tensor<4x2xf32>
  }
  func.func private @inputs() -> (tensor<2x3xf32>, tensor<3x4xf32>) {
    %c0 = stablehlo.constant dense<"0xAA98F4BEA9882340F8AAADBFFBF028C0AC8091BFF890A73F"> : tensor<2x3xf32>
    %c1 = stablehlo.constant dense<"0xD3E6A8BFF1B66EBE784211C0DDE70A3E6F840BBF8C7D24C02EFF19C017BC3A404C0B953F09A19DBEC44F573FBA43B0BF"> : tensor<3x4xf32>
    return %c0, %c1 : tensor<2x3xf32>, tensor<3x4xf32>
  }
  func.func private @expected() -> (tensor<4x2xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0xCBE315C0E410B4404939C1C0709248400D91C6C0B23D1D41E1241441C147AFC0"> : tensor<4x2xf32>
    return %c : tensor<4x2xf32>
  }
}
