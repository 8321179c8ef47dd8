// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x4xf32> {jax.result_info = ""}) {
    %0:2 = call @inputs() : () -> (tensor<2x3xf32>, tensor<3x4xf32>)
    %1 = call @expected() : () -> tensor<2x4xf32>
    %r = "stablehlo.dot"(%0#0, %0#1) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    stablehlo.custom_call @check.expect_close(%r, %1) {has_side_effect = true} : (tensor<2x4xf32>, tensor<2x4xf32>) -> ()
    return %r : tensor<2x4xf32>
  }
  func.func private @inputs() -> (tensor<2x3xf32>, tensor<3x4xf32>) {
    %c0 = stablehlo.constant dense<"0x30222A4066318B3DA9E036407FF520C008E6243F74B73DBF"> : tensor<2x3xf32>
    %c1 = stablehlo.constant dense<"0x043EEA3F9F7FEC3F0C52BC3D2A81A4BF654A2BC0392533BFCD950CBF449D2EC0EC462DC002AF3F40F9096A3F6BE5CBBF"> : tensor<3x4xf32>
    return %c0, %c1 : tensor<2x3xf32>, tensor<3x4xf32>
  }
  func.func private @expected() -> (tensor<2x4xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x526D43C0FEC15641EB7134406C7502C1693D8AC0F225EAC0A799A1BF8FF02940"> : tensor<2x4xf32>
    return %c : tensor<2x4xf32>
  }
}
