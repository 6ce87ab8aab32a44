// Squeeze-excitation block as one op (kernels/se.cl): y = x * act2(W2 act1(W1 mean_hw(x) + b1) + b2),
// the channel gate of MobileNetV3, EfficientNet and RegNetY. The graph pass that forms it from the
// exported GlobalAveragePool -> Conv 1x1 -> act -> Conv 1x1 -> gate -> Mul is models/fusion_se.cpp.
#pragma once
#include <memory>
#include <string>

#include "layers/activation.hpp"
#include "layers/op.hpp"
#include "layers/pool.hpp"

namespace cldl {

struct SqueezeExciteConfig {
  Shape input;         // X: N, C, spatial... (any number of spatial dims, at least one)
  int64_t hidden = 0;  // CR: rows of W1 [CR, C] (trailing 1s allowed), columns of W2 [C, CR]
  Activation act1{Act::relu}, act2{Act::sigmoid};
  // Images of at most this many elements run the whole block as one work-group (one command); larger
  // ones pool in parallel, gate in one work-group per image, and scale in parallel (three commands).
  // 0 = the default (kWholeBlockElements).
  int64_t whole_block_elements = 0;
  // Work-items per image; 0 = by device (1 on CPUs, 256 elsewhere). Tests set it to run the GPU form on
  // a CPU.
  size_t work_items = 0;
};

// Inputs X, W1, B1, W2, B2 (biases required: the pass gives zeros where the model has none); output Y
// of X's shape.
class SqueezeExcite : public Op {
 public:
  static constexpr int64_t kWholeBlockElements = int64_t(1) << 16;
  // C + CR floats of local memory; 16 KiB is within every OpenCL device's minimum.
  static constexpr int64_t kMaxLocalFloats = 4096;
  static void validate(const SqueezeExciteConfig& cfg);
  static std::unique_ptr<SqueezeExcite> create(Context& ctx, int device, const SqueezeExciteConfig& cfg);
  std::string_view type() const override { return "SqueezeExcite"; }
  std::string algorithm() const override { return algorithm_; }
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  SqueezeExciteConfig cfg_;
  int64_t n_ = 0, c_ = 0, hw_ = 0;
  bool whole_ = true;
  size_t items_ = 1;
  std::unique_ptr<Pool> pool_;  // the split form's parallel pool
  cl::Kernel block_, scale_;
  std::string algorithm_;
};

}  // namespace cldl
