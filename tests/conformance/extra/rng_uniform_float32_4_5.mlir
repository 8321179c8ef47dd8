// Hand-made for trnsim's conformance tests (tests/conformance/make_extra.py); expected: float64 numpy, rounded once.
module @jit_main attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main() -> (tensor<i1> {jax.result_info = ""}) {
    %0 = call @inputs() : () -> tensor<f32>
    %1 = call @expected() : () -> tensor<i1>
    %lo = stablehlo.constant dense<2.0> : tensor<f32>
    %hi = stablehlo.constant dense<3.0> : tensor<f32>
    %shape = stablehlo.constant dense<[4, 5]> : tensor<2xi64>
    %v = "stablehlo.rng"(%lo, %hi, %shape) {rng_distribution = #stablehlo<rng_distribution UNIFORM>} : (tensor<f32>, tensor<f32>, tensor<2xi64>) -> tensor<4x5xf32>
    %b = stablehlo.broadcast_in_dim %0, dims = [] : (tensor<f32>) -> tensor<4x5xf32>
    %w = stablehlo.add %v, %b : tensor<4x5xf32>
    %lob = stablehlo.broadcast_in_dim %lo, dims = [] : (tensor<f32>) -> tensor<4x5xf32>
    %hib = stablehlo.broadcast_in_dim %hi, dims = [] : (tensor<f32>) -> tensor<4x5xf32>
    %ge = stablehlo.compare GE, %w, %lob, FLOAT : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xi1>
    %lt = stablehlo.compare LT, %w, %hib, FLOAT : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xi1>
    %in = stablehlo.and %ge, %lt : tensor<4x5xi1>
    %t = stablehlo.constant dense<true> : tensor<i1>
    %r = stablehlo.reduce(%in init: %t) applies stablehlo.and across dimensions = [0, 1] : (tensor<4x5xi1>, tensor<i1>) -> tensor<i1>
    stablehlo.custom_call @check.expect_eq(%r, %1) {has_side_effect = true} : (tensor<i1>, tensor<i1>) -> ()
    return %r : tensor<i1>
  }
  func.func private @inputs() -> tensor<f32> {
    %c0 = stablehlo.constant dense<"0x00000000"> : tensor<f32>
    return %c0 : tensor<f32>
  }
  func.func private @expected() -> (tensor<i1> {jax.result_info = ""}) {
    %c = stablehlo.constant dense<true> : tensor<i1>
    return %c : tensor<i1>
  }
}
