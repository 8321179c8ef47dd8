// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: jaxlib's StableHLO reference interpreter (stablehlo.eval_module).
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3xf32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<2x3xf32>, tensor<2x3xf32>)
    %1 = call @expected() : () -> tensor<2x3xf32>
    %r = "stablehlo.map"(%0#0, %0#1) ({
    ^bb0(%p: tensor<f32>, %q: tensor<f32>):
      %m = stablehlo.multiply %p, %q : tensor<f32>
      %a = stablehlo.add %m, %p : tensor<f32>
      stablehlo.return %a : tensor<f32>
    }) {dimensions = array<i64: 0, 1>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    stablehlo.custom_call @check.expect_eq(%r, %1) {has_side_effect = true} : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()
    return %r : tensor<2x3xf32>
  }
  func.func private @inputs() -> (tensor<2x3xf32>, tensor<2x3xf32>) {
    %c0 = stablehlo.constant dense<"0xF614B7BF41C29ABF4B53F13F4CB41CC021C1193FD488AF3F"> : tensor<2x3xf32>
    %c1 = stablehlo.constant dense<"0x581C1FC02921CABFF860E73FDB66FC3EC7DA1BC01D6FCDBE"> : tensor<2x3xf32>
    return %c0, %c1 : tensor<2x3xf32>, tensor<2x3xf32>
  }
  func.func private @expected() -> (tensor<2x3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x190A0840CA40333F9C63A94084F469C033AC5CBFE634523F"> : tensor<2x3xf32>
    return %c : tensor<2x3xf32>
  }
}
