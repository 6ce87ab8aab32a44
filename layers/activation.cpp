// Activation names, ONNX defaults and host evaluation.
#include "layers/activation.hpp"

#include <algorithm>
#include <cmath>

#include "runtime/error.hpp"

namespace cldl {

namespace {
struct Entry {
  const char* onnx;
  Act act;
  float alpha, beta;
};
// ONNX defaults: LeakyRelu alpha .01, Elu 1, Selu 1.67326/1.0507, HardSigmoid .2/.5, Celu 1,
// ThresholdedRelu 1.
constexpr Entry kTable[] = {
    {"Identity", Act::none, 0, 0},         {"Relu", Act::relu, 0, 0},
    {"LeakyRelu", Act::leaky_relu, 0.01f, 0}, {"Sigmoid", Act::sigmoid, 0, 0},
    {"Tanh", Act::tanh, 0, 0},             {"Elu", Act::elu, 1.0f, 0},
    {"Selu", Act::selu, 1.67326319217681884765625f, 1.05070102214813232421875f},
    {"Gelu", Act::gelu, 0, 0},             {"GeluTanh", Act::gelu_tanh, 0, 0},
    {"Silu", Act::silu, 0, 0},             {"HardSigmoid", Act::hard_sigmoid, 0.2f, 0.5f},
    {"HardSwish", Act::hard_swish, 0, 0},  {"Softplus", Act::softplus, 0, 0},
    {"Mish", Act::mish, 0, 0},             {"Clip", Act::clip, -INFINITY, INFINITY},
    {"Softsign", Act::softsign, 0, 0},     {"Affine", Act::affine, 1.0f, 0},
    {"ScaledTanh", Act::scaled_tanh, 1.0f, 1.0f}, {"ThresholdedRelu", Act::thresholded_relu, 1.0f, 0},
    {"Celu", Act::celu, 1.0f, 0},
};
}  // namespace

Activation activation_from_onnx(std::string_view name) {
  for (const auto& e : kTable)
    if (name == e.onnx) return {e.act, e.alpha, e.beta};
  fail("unknown activation '{}'", name);
}

Activation activation_from_onnx(std::string_view name, float alpha, float beta) {
  Activation a = activation_from_onnx(name);
  a.alpha = alpha;
  a.beta = beta;
  return a;
}

std::string_view to_string(Act a) {
  for (const auto& e : kTable)
    if (e.act == a) return e.onnx;
  return "?";
}

float apply(const Activation& a, float x) {
  auto softplus = [](float v) { return v > 20.0f ? v : std::log1p(std::exp(v)); };
  switch (a.kind) {
    case Act::none: return x;
    case Act::relu: return std::max(x, 0.0f);
    case Act::leaky_relu: return x >= 0 ? x : a.alpha * x;
    case Act::sigmoid: return 1.0f / (1.0f + std::exp(-x));
    case Act::tanh: return std::tanh(x);
    case Act::elu: return x >= 0 ? x : a.alpha * (std::exp(x) - 1.0f);
    case Act::selu: return a.beta * (x > 0 ? x : a.alpha * (std::exp(x) - 1.0f));
    case Act::gelu: return 0.5f * x * (1.0f + std::erf(x * 0.70710678118654752f));
    case Act::gelu_tanh: return 0.5f * x * (1.0f + std::tanh(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case Act::silu: return x / (1.0f + std::exp(-x));
    case Act::hard_sigmoid: return std::max(0.0f, std::min(1.0f, a.alpha * x + a.beta));
    case Act::hard_swish: return x * std::max(0.0f, std::min(1.0f, x / 6.0f + 0.5f));
    case Act::softplus: return softplus(x);
    case Act::mish: return x * std::tanh(softplus(x));
    case Act::clip: return std::min(std::max(x, a.alpha), a.beta);
    case Act::softsign: return x / (1.0f + std::fabs(x));
    case Act::affine: return a.alpha * x + a.beta;
    case Act::scaled_tanh: return a.alpha * std::tanh(a.beta * x);
    case Act::thresholded_relu: return x > a.alpha ? x : 0.0f;
    case Act::celu: return std::max(0.0f, x) + std::min(0.0f, a.alpha * (std::exp(x / a.alpha) - 1.0f));
  }
  return x;
}

}  // namespace cldl
