// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3x4xf32> {jax.result_info = ""}) {
    %0:3 = call @inputs() : () -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
    %1 = call @expected() : () -> tensor<2x3x4xf32>
    %r, %mean, %var = "stablehlo.batch_norm_training"(%0#0, %0#1, %0#2) {epsilon = 1.000000e-03 : f32, feature_index = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
    stablehlo.custom_call @check.expect_close(%r, %1) {has_side_effect = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> ()
    return %r : tensor<2x3x4xf32>
  }
  func.func private @inputs() -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) {
    %c0 = stablehlo.constant dense<"0x9E43913D62FA2C4089A408C009482C40718390BF898AEBBEF4ACFB3F5A780BBF105A983ED46A35C0B5B2C23F3F5A6A3E1BC482BF6483DD3F792597BFBFDA8EBE2A870CC086D114BF12BFE3BF198BB6BFB347C03F65A5A8BF2BF9B5BD649A3840"> : tensor<2x3x4xf32>
    %c1 = stablehlo.constant dense<"0x880AE63FD437E43F6CB7DB3F3965643F"> : tensor<4xf32>
    %c2 = stablehlo.constant dense<"0x7E8CDF3F404D853F0BEDC63F8F24E53F"> : tensor<4xf32>
    return %c0, %c1, %c2 : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>
  }
  func.func private @expected() -> (tensor<2x3x4xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0xC5921E40E331714038AAEFBE76253C40FAC1293FFB59383F754D80404B6C953FEA813440A1CAC8BFA4806140C3A6CB3F1956533FB9383540B9DB123F9D0DA83FFC3573BFE76C1A3FD42EA3BD604C2F3F228C944079E8D9BDC506E23FC9E44240"> : tensor<2x3x4xf32>
    return %c : tensor<2x3x4xf32>
  }
}
