// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: jaxlib's StableHLO reference interpreter (stablehlo.eval_module).
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3xf32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<2x3xf32>, tensor<2x3xf32>)
    %1 = call @expected() : () -> tensor<2x3xf32>
    %r = stablehlo.composite "trnsim.fma" %0#0, %0#1 {composite_attributes = {k = 2 : i64}, decomposition = @trnsim.fma.impl} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    stablehlo.custom_call @check.expect_eq(%r, %1) {has_side_effect = true} : (tensor<2x3xf32>, tensor<2x3xf32>) -> ()
    return %r : tensor<2x3xf32>
  }
  func.func private @inputs() -> (tensor<2x3xf32>, tensor<2x3xf32>) {
    %c0 = stablehlo.constant dense<"0x815A82BFCCA511BF3698E53EDB471D3DC542C53E5514D63E"> : tensor<2x3xf32>
    %c1 = stablehlo.constant dense<"0x764802C053E13FC002A7D9BFFEB44ABFD1383FC05CB6EBBF"> : tensor<2x3xf32>
    return %c0, %c1 : tensor<2x3xf32>, tensor<2x3xf32>
  }
  func.func private @expected() -> (tensor<2x3xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0xEB00873FE482913F66CFA0BED6F7023CD00F44BFFD25B4BE"> : tensor<2x3xf32>
    return %c : tensor<2x3xf32>
  }
  func.func private @trnsim.fma.impl(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
    %m = stablehlo.multiply %x, %y : tensor<2x3xf32>
    %a = stablehlo.add %m, %x : tensor<2x3xf32>
    return %a : tensor<2x3xf32>
  }
}
