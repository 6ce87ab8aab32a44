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

struct ConvGradConfig {
  WindowGeometry geo;
  Shape w;  // [M, C / group, KH, KW]
  int group = 1;
  ConvGradMode mode = ConvGradMode::data;
  bool bias = false;  // forward: input b [M]
};

class ConvGrad : public Op {
 public:
  static void validate(const ConvGradConfig& cfg);
  static std::unique_ptr<ConvGrad> create(Context& ctx, int device, const ConvGradConfig& cfg);
  std::string_view type() const override;
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ConvGradConfig cfg_;
  cl::Kernel kernel_;
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

}  // namespace cldl
