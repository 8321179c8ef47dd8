// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<2x3x4xf32> {jax.result_info = ""}) {
    %0:5 = call @inputs() : () -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
    %1 = call @expected() : () -> tensor<2x3x4xf32>
    %r = "stablehlo.batch_norm_inference"(%0#0, %0#1, %0#2, %0#3, %0#4) {epsilon = 1.000000e-03 : f32, feature_index = 2 : i64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
    stablehlo.custom_call @check.expect_close(%r, %1) {has_side_effect = true} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> ()
    return %r : tensor<2x3x4xf32>
  }
  func.func private @inputs() -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
    %c0 = stablehlo.constant dense<"0x9E43913D62FA2C4089A408C009482C40718390BF898AEBBEF4ACFB3F5A780BBF105A983ED46A35C0B5B2C23F3F5A6A3E1BC482BF6483DD3F792597BFBFDA8EBE2A870CC086D114BF12BFE3BF198BB6BFB347C03F65A5A8BF2BF9B5BD649A3840"> : tensor<2x3x4xf32>
    %c1 = stablehlo.constant dense<"0x7D16E73F47236E3FF0CDB33F5B49D53F"> : tensor<4xf32>
    %c2 = stablehlo.constant dense<"0x658DF73FF4BF4F3FB90FDF3F0853393F"> : tensor<4xf32>
    %c3 = stablehlo.constant dense<"0x09A10EC060FA8DBBC7E61B3FC1FB34C0"> : tensor<4xf32>
    %c4 = stablehlo.constant dense<"0x0C51603FCDC6F53FF3B2483F10D9443F"> : tensor<4xf32>
    return %c0, %c1, %c2, %c3, %c4 : tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
  }
  func.func private @expected() -> (tensor<2x3x4xf32> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<"0xF9B9CB401A3728408DE826C0AB4B33412FB681404A74013FDB3F794022E7A140A2B4D94094438BBFBF144C40C3EAD0401E56884098E9FC3FED2A8CBFF90DB240F5A6FF3FDE3BD93EC8CE02C0ACB1584034011241CCFE8EBD2FE1223F34253941"> : tensor<2x3x4xf32>
    return %c : tensor<2x3x4xf32>
  }
}
