// Activation functions shared by fused epilogues and the element-wise op. Numbers match ACT_* in
// kernels/common.cl.
#pragma once
#include <string>
#include <string_view>

namespace cldl {

enum class Act : int {
  none = 0, relu = 1, leaky_relu = 2, sigmoid = 3, tanh = 4, elu = 5, selu = 6, gelu = 7, gelu_tanh = 8,
  silu = 9, hard_sigmoid = 10, hard_swish = 11, softplus = 12, mish = 13, clip = 14, softsign = 15,
  affine = 16, scaled_tanh = 17, thresholded_relu = 18, celu = 19,
};

struct Activation {
  Act kind = Act::none;
  float alpha = 0.0f, beta = 0.0f;
  Activation() = default;
  Activation(Act k, float a = 0.0f, float b = 0.0f) : kind(k), alpha(a), beta(b) {}
  bool operator==(const Activation&) const = default;
};

// ONNX names ("Relu", "LeakyRelu", "HardSigmoid", ...) with ONNX default alpha/beta.
Activation activation_from_onnx(std::string_view name);
// Same, with explicit alpha/beta where the op has them.
Activation activation_from_onnx(std::string_view name, float alpha, float beta);
std::string_view to_string(Act a);
// Host evaluation (constant folding, references).
float apply(const Activation& a, float x);

}  // namespace cldl
