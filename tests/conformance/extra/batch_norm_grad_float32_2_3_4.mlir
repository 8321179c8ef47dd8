// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3x4xf32> {jax.result_info = ""}) {
    %0:5 = call @inputs() : () -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>)
    %1 = call @expected() : () -> tensor<2x3x4xf32>
    %r, %gs, %go = "stablehlo.batch_norm_grad"(%0#0, %0#1, %0#2, %0#3, %0#4) {epsilon = 1.000000e-03 : f32, feature_index = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
    stablehlo.custom_call @check.expect_almost_eq(%r, %1) {has_side_effect = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> ()
    return %r : tensor<2x3x4xf32>
  }
  func.func private @inputs() -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>) {
    %c0 = stablehlo.constant dense<"0x9E43913D62FA2C4089A408C009482C40718390BF898AEBBEF4ACFB3F5A780BBF105A983ED46A35C0B5B2C23F3F5A6A3E1BC482BF6483DD3F792597BFBFDA8EBE2A870CC086D114BF12BFE3BF198BB6BFB347C03F65A5A8BF2BF9B5BD649A3840"> : tensor<2x3x4xf32>
    %c1 = stablehlo.constant dense<"0xB901C53F0BA3DC3F4820823FC637113F"> : tensor<4xf32>
    %c2 = stablehlo.constant dense<"0x8B91CD3E05C1D4BE2BE01BC08D5969BF"> : tensor<4xf32>
    %c3 = stablehlo.constant dense<"0x1E41E23F4CD03D3F4316AB3FDEAB863F"> : tensor<4xf32>
    %c4 = stablehlo.constant dense<"0x95AA1ABF77F9A63FE353A8BFCF3B20C0666434400A62C43E50AD5D3F2E26EC3ED86117BE65FF10C07E288FBF7F68B53FF96F1C4020391540BC272C40B13E36C04AD0B63F8E8E843FC949403F0864533F11830FC089CA413F8C7CDC3F73283DC0"> : tensor<2x3x4xf32>
    return %c0, %c1, %c2, %c3, %c4 : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<2x3x4xf32>
  }
  func.func private @expected() -> (tensor<2x3x4xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0x873FF4BF02D88DC1FD77F4BFB1DAB440068A813EF52C11BE34F245C092A0B73F7E2185BFF25A12418C0590C0093857409E189CBC263F1BC12BA2633F2D1BB13D8D353DC0C32FF43F93AEB9BE3D3F2A3DAA19D4BFFEF2BB40895A49BFAD01B840"> : tensor<2x3x4xf32>
    return %c : tensor<2x3x4xf32>
  }
}
