// Selection and reordering along an axis in ONNX semantics: TopK (the k largest or smallest elements and
// their indices, sorted, ties to the lower index) and ReverseSequence (reverse the first lens[b] steps of
// each batch entry). Kernels: kernels/select.cl.
#pragma once
#include <memory>

#include "layers/op.hpp"

namespace cldl {

struct TopKConfig {
  Shape input;
  DType dtype = DType::f32;  // f32, f64 (cl_khr_fp64), f16, bf16, i8 ... i64, u8 ... u64
  int64_t k = 1;             // 0 <= k <= the axis' extent
  int64_t axis = -1;
  bool largest = true;
  // ONNX's `sorted`: the outputs are always sorted (an order `sorted = 0` also allows).
  // Kernel: -1 auto (see TopK::create), 0 one work-item per element counting its rank, 1 one work-item per
  // line inserting into the k best, 2 one work-item per line merge-sorting the line (a workspace).
  int kernel = -1;
};

// Input x; outputs values (x's dtype) and indices (i64), of x's shape with the axis' extent k.
class TopK : public Op {
 public:
  static Shape validate(const TopKConfig& cfg);
  static std::unique_ptr<TopK> create(Context& ctx, int device, const TopKConfig& cfg);
  std::string_view type() const override { return "TopK"; }
  std::string algorithm() const override {
    return kernel_id_ == 1 ? "insertion per line" : kernel_id_ == 2 ? "merge sort per line" : "rank count per element";
  }
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  TopKConfig cfg_;
  Shape out_;
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
  int kernel_id_ = 0;  // TopKConfig::kernel, resolved
  cl::Kernel kernel_;
};

struct ReverseSequenceConfig {
  Shape input;                            // rank >= 2
  DType dtype = DType::f32;               // any
  int64_t time_axis = 0, batch_axis = 1;  // 0 and 1, in either order
};

// Inputs x and sequence_lens (i64, [batch]); output of x's shape and dtype. Lengths beyond the time
// axis' extent are clamped to it (ONNX requires them within it).
class ReverseSequence : public Op {
 public:
  static Shape validate(const ReverseSequenceConfig& cfg);
  static std::unique_ptr<ReverseSequence> create(Context& ctx, int device, const ReverseSequenceConfig& cfg);
  std::string_view type() const override { return "ReverseSequence"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ReverseSequenceConfig cfg_;
  int64_t steps_ = 1, batch_ = 1, inner_ = 1, ts_ = 1, bs_ = 1;
  cl::Kernel kernel_;
};

}  // namespace cldl
