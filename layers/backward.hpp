// Backward ops of the convolution and the pools, and a convolution that reads its weights at run time, (kernels/backward.cl), which the reverse-mode differentiation
// of models/autodiff.cpp emits: the gradients of a 2-D (or 1-D, as H = 1) NCHW convolution with respect to its
// input and its weights (groups, strides, pads, dilations), and of MaxPool / AveragePool with respect to their
// input. f32, fp32 accumulation; each writes its whole output (no accumulation into it).
#pragma once
#include <array>
#include <memory>
#include <string>

#include "layers/op.hpp"

namespace cldl {

// The geometry of a forward 2-D window op: x [N, C, H, W] -> y [N, M, OH, OW] through windows of kernel taps
// (dilated), strides and the begin / end pads. Inputs of rank 3 ([N, C, W]) are read as H = 1.
struct WindowGeometry {
  Shape x, y;
  std::array<int, 2> kernel{1, 1}, stride{1, 1}, dilation{1, 1}, pad_begin{0, 0}, pad_end{0, 0};
};

// What a ConvGrad computes: forward (ConvDynamic: inputs x, w and optionally b; output y), the input's gradient
// (inputs dy, w; output dx) or the weights' (inputs dy, x; output dw).
enum class ConvGradMode { forward, data, filter };

// How a ConvGrad computes: direct kernels (a work-item per element written: any group) or the GEMM form (group 1:
// im2col + the project's GEMM for the forward and the filter gradient, GEMM + col2im for the data gradient; a 1x1
// window with stride 1 and no pads reads x / writes dx in place of col). automatic: gemm for group 1, unless the
// environment variable CLDL_CONV_GRAD is "direct" (or "gemm"): an A/B switch for benchmarks, logged.
enum class ConvGradAlgo { automatic, direct, gemm };

struct ConvGradConfig {
  WindowGeometry geo;
  Shape w;  // [M, C / group, KH, KW]
  int group = 1;
  ConvGradMode mode = ConvGradMode::data;
  bool bias = false;  // forward: input b [M]
  ConvGradAlgo algo = ConvGradAlgo::automatic;
};

class Gemm;

class ConvGrad : public Op {
 public:
  static void validate(const ConvGradConfig& cfg);
  static std::unique_ptr<ConvGrad> create(Context& ctx, int device, const ConvGradConfig& cfg);
  std::string_view type() const override;
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  size_t workspace_bytes() const override;
  ~ConvGrad() override;

 private:
  void enqueue_gemm(std::span<const Tensor> in, const Tensor& out, const Tensor* workspace, ExecutionContext& ec);
  ConvGradConfig cfg_;
  bool taps_ = false;  // filter: conv_grad_filter_taps (every tap of one weight plane per work-item)
  cl::Kernel kernel_;
  // The GEMM form: gemm_ and the kernels around it (forward / filter: conv_im2col, filter: conv_dy_by_channel
  // as well, data: conv_col2im). Workspace: [col or dcol][dy by channel (filter)][the GEMM's own].
  std::unique_ptr<Gemm> gemm_;
  bool pointwise_ = false;  // 1x1, stride 1, no pads: no col matrix for the forward and the data gradient
  cl::Kernel im2col_, by_channel_, col2im_;
  int64_t col_elems_ = 0, dyt_elems_ = 0;
};

struct PoolGradConfig {
  WindowGeometry geo;  // y: [N, C, OH, OW]
  bool max = true;     // MaxPool (inputs dy, x); AveragePool (inputs dy, x: x is read for nothing but its shape)
  bool count_include_pad = false;
};

class PoolGrad : public Op {
 public:
  static void validate(const PoolGradConfig& cfg);
  static std::unique_ptr<PoolGrad> create(Context& ctx, int device, const PoolGradConfig& cfg);
  std::string_view type() const override { return cfg_.max ? "MaxPoolGrad" : "AveragePoolGrad"; }
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  PoolGradConfig cfg_;
  cl::Kernel kernel_;
};

// Gather's gradient with respect to its data: dx (out_shape, the data's) sums the rows of dy whose index picks
// each row of dx along `axis` (a gather over the indices per row written: deterministic, no atomics). Inputs dy
// (f32, the Gather output's shape), indices (i32 or i64); output dx.
struct GatherGradConfig {
  Shape out;      // the data's shape
  Shape indices;  // the indices' shape
  int64_t axis = 0;
  DType index = DType::i64;
};

class GatherGrad : public Op {
 public:
  static Shape validate(const GatherGradConfig& cfg);  // dy's shape
  static std::unique_ptr<GatherGrad> create(Context& ctx, int device, const GatherGradConfig& cfg);
  std::string_view type() const override { return "GatherGrad"; }
  std::string algorithm() const override { return "gather per row of dx over the indices"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  GatherGradConfig cfg_;
  Shape dy_;
  cl::Kernel kernel_;
};

// Dropout in training mode: inputs x (f32) and T (i64, one element: the step, which draws a new mask each step);
// outputs y = x * scale and scale (f32, x's shape: 1 / (1 - ratio) where kept, 0 where dropped).
struct DropoutConfig {
  Shape shape;
  float ratio = 0.5f;
  uint32_t seed = 0;
};

class TrainingDropout : public Op {
 public:
  static void validate(const DropoutConfig& cfg);
  static std::unique_ptr<TrainingDropout> create(Context& ctx, int device, const DropoutConfig& cfg);
  std::string_view type() const override { return "TrainingDropout"; }
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  DropoutConfig cfg_;
  cl::Kernel kernel_;
};

// BatchNormalization's training-mode gradient (batch statistics recomputed from x): inputs dy, x ([N, C, ...] f32)
// and scale [C]; outputs dx (x's shape), dscale and dbias ([C]). One launch: a work-group per channel.
struct BatchNormGradConfig {
  Shape x;
  float epsilon = 1e-5f;
};

class BatchNormGrad : public Op {
 public:
  static void validate(const BatchNormGradConfig& cfg);
  static std::unique_ptr<BatchNormGrad> create(Context& ctx, int device, const BatchNormGradConfig& cfg);
  std::string_view type() const override { return "BatchNormGrad"; }
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  BatchNormGradConfig cfg_;
  size_t group_ = 64;
  cl::Kernel kernel_;
};

}  // namespace cldl
