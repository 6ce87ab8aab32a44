// MatMul (numpy semantics: broadcast batch dims, 1-D operands promoted then squeezed) and Dense
// (y = act(x * W^T + b)), both built on the Gemm op (layers/gemm.hpp): one strided-batched Gemm call for
// the innermost collapsed batch dim (stride 0 where an operand is broadcast), looped over the rest.
#pragma once
#include <memory>
#include <string>

#include "layers/activation.hpp"
#include "layers/gemm.hpp"
#include "layers/op.hpp"
#include "layers/strided.hpp"

namespace cldl {

struct MatMulConfig {
  Shape a, b;
  GemmProvider provider = GemmProvider::automatic;
};

// Inputs A, B (f32); output Y of the shape validate() returns.
class MatMul : public Op {
 public:
  static Shape validate(const MatMulConfig& cfg);
  static std::unique_ptr<MatMul> create(Context& ctx, int device, const MatMulConfig& cfg);
  std::string_view type() const override { return "MatMul"; }
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  // Gemm launches per enqueue (1 unless the batch broadcast needs a loop).
  int64_t gemm_calls() const { return batch_.outer(); }

 private:
  MatMulConfig cfg_;
  Shape out_;
  Iteration batch_;  // operands A, B, Y; strides in elements
  std::unique_ptr<Gemm> gemm_;
};

struct DenseConfig {
  Shape input;        // ..., K
  int64_t units = 0;  // N; W is N x K (ONNX Gemm with transB = 1, PyTorch Linear)
  bool bias = true;
  Activation act{};
  GemmProvider provider = GemmProvider::automatic;
};

// Inputs x, W [N, K], [b [N]]; output [..., N].
class Dense : public Op {
 public:
  static Shape validate(const DenseConfig& cfg);
  static std::unique_ptr<Dense> create(Context& ctx, int device, const DenseConfig& cfg);
  std::string_view type() const override { return "Dense"; }
  std::string algorithm() const override { return gemm_->algorithm(); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  DenseConfig cfg_;
  Shape out_;
  std::unique_ptr<Gemm> gemm_;
};

}  // namespace cldl
