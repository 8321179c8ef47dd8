// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<i32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<3xi32>, tensor<3xi32>)
    %1 = call @expected() : () -> tensor<i32>
    %r = "stablehlo.dot"(%0#0, %0#1) : (tensor<3xi32>, tensor<3xi32>) -> tensor<i32>
    stablehlo.custom_call @check.expect_eq(%r, %1) {has_side_effect = true} : (tensor<i32>, tensor<i32>) -> ()
    return %r : tensor<i32>
  }
  func.func private @inputs() -> (tensor<3xi32>, tensor<3xi32>) {
    %c0 = stablehlo.constant dense<"0xFFFFFFFF0000000000000000"> : tensor<3xi32>
    %c1 = stablehlo.constant dense<"0x020000000000000001000000"> : tensor<3xi32>
    return %c0, %c1 : tensor<3xi32>, tensor<3xi32>
  }
  func.func private @expected() -> (tensor<i32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0xFEFFFFFF"> : tensor<i32>
    return %c : tensor<i32>
  }
}
