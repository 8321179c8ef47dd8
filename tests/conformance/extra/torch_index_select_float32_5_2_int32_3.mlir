// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<3x2xf32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<5x2xf32>, tensor<3xi32>)
    %1 = call @expected() : () -> tensor<3x2xf32>
    %r = "stablehlo.torch_index_select"(%0#0, %0#1) {batch_dims = 0 : i64, dim = 0 : i64} : (tensor<5x2xf32>, tensor<3xi32>) -> tensor<3x2xf32>
    stablehlo.custom_call @check.expect_eq(%r, %1) {has_side_effect = true} : (tensor<3x2xf32>, tensor<3x2xf32>) -> ()
    return %r : tensor<3x2xf32>
  }
  func.func private @inputs() -> (tensor<5x2xf32>, tensor<3xi32>) {
    %c0 = stablehlo.constant dense<"0x884A4DBFEFF0E6BF5CFE1DC06C4D6B3F4CD579BE77443B408C000740A56401405D3F2CC03405AA3E"> : tensor<5x2xf32>
    %c1 = stablehlo.constant dense<"0x040000000000000002000000"> : tensor<3xi32>
    return %c0, %c1 : tensor<5x2xf32>, tensor<3xi32>
  }
  func.func private @expected() -> (tensor<3x2xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x5D3F2CC03405AA3E884A4DBFEFF0E6BF4CD579BE77443B40"> : tensor<3x2xf32>
    return %c : tensor<3x2xf32>
  }
}
