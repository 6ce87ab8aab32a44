// Normalisation ops in ONNX semantics on N, C, spatial... (any rank >= 2): BatchNormalization
// (inference: running mean/var; training mode: batch statistics, updated running mean/var as outputs),
// InstanceNormalization, GroupNormalization (scale/bias per channel as in
// opset 21, or per group as in opset 18). Optional fused activation. LRN (across channels).
// LpNormalization and MeanVarianceNormalization (over any set of axes). Kernels: kernels/norm.cl.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/activation.hpp"
#include "layers/op.hpp"

namespace cldl {

enum class NormKind { batch, instance, group };

struct NormConfig {
  NormKind kind = NormKind::batch;
  Shape input;             // N, C, ...
  float epsilon = 1e-5f;
  int num_groups = 1;      // group only
  bool scale_per_group = false;  // group only: scale/bias have num_groups entries (opset 18)
  Activation act{};          // applied after the affine step
  // batch only, ONNX training_mode 1: normalise with the batch mean and (population) variance over N
  // and spatial; outputs running_mean / running_var = input * momentum + batch * (1 - momentum).
  bool training = false;
  float momentum = 0.9f;
};

// Inputs: batch X, scale, B, mean, var; instance / group X, scale, B. Output Y (shape of X); batch
// training mode also running_mean and running_var [C] (either may be left out: an empty tensor).
class Norm : public Op {
 public:
  static Shape validate(const NormConfig& cfg);
  static std::unique_ptr<Norm> create(Context& ctx, int device, const NormConfig& cfg);
  std::string_view type() const override;
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  NormConfig cfg_;
  std::string algorithm_;
  cl::Kernel kernel_;
  size_t group_ = 1;
};

struct LrnConfig {
  Shape input;   // N, C, ... (rank >= 3 in ONNX; any rank >= 2 here)
  int size = 1;  // channels in the window (ONNX attribute, required)
  float alpha = 1e-4f, beta = 0.75f, bias = 1.0f;
};

// LRN (local response normalisation across channels, ONNX semantics): input X, output Y (shape of X), f32.
class Lrn : public Op {
 public:
  static Shape validate(const LrnConfig& cfg);
  static std::unique_ptr<Lrn> create(Context& ctx, int device, const LrnConfig& cfg);
  std::string_view type() const override { return "LRN"; }
  std::string algorithm() const override { return "direct window sum"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  LrnConfig cfg_;
  cl::Kernel kernel_;
};

enum class AxesNormKind { l1, l2, mean_variance };

struct AxesNormConfig {
  AxesNormKind kind = AxesNormKind::l2;
  Shape input;
  std::vector<int64_t> axes;  // the axes one statistic spans (negative count from the end); LpNormalization: one
};

// LpNormalization (p = 1 or 2: x / ||x|| along one axis; a zero norm gives 0, as the ONNX reference does) and
// MeanVarianceNormalization ((x - mean) / (std + 1e-9) over `axes`, the population std of the ONNX function,
// computed in two passes so that it is never the square root of a negative rounding error). Input X, output Y
// (shape of X), f32. One work-item per statistic walks its elements.
class AxesNorm : public Op {
 public:
  static Shape validate(const AxesNormConfig& cfg);
  static std::unique_ptr<AxesNorm> create(Context& ctx, int device, const AxesNormConfig& cfg);
  std::string_view type() const override {
    return cfg_.kind == AxesNormKind::mean_variance ? "MeanVarianceNormalization" : "LpNormalization";
  }
  std::string algorithm() const override { return "one work-item per statistic"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  AxesNormConfig cfg_;
  cl_long8 keep_dims_{}, keep_strides_{}, red_dims_{}, red_strides_{};
  int keep_rank_ = 0, red_rank_ = 0;
  int64_t groups_ = 1, count_ = 1;
  cl::Kernel kernel_;
};

// Folds an inference BatchNormalization that follows a conv or dense layer into that layer's weights,
// on the host (the graph's BatchNorm-folding pass): weight has `scale.size()` output-channel rows of any
// length (conv [Cout, Cin/g, kh, kw], dense [N, K]); bias has one entry per output channel (zeros when
// the layer had none). Afterwards layer(x) with the new weight/bias equals BN(layer(x)).
void fold_batch_norm(std::span<float> weight, std::span<float> bias, std::span<const float> scale,
                     std::span<const float> b, std::span<const float> mean, std::span<const float> var, float eps);

}  // namespace cldl
