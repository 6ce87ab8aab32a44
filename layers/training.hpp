// Training ops in ONNX semantics (kernels/training.cl): the losses NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss (a log-softmax over C by layers/softmax.hpp, then the same loss kernel), and the
// optimizer updates of ai.onnx.preview.training: Adagrad, Momentum (standard and Nesterov) and Adam, each
// over several (X, G, state) groups in one op. f32 data, fp32 accumulation.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/op.hpp"

namespace cldl {

class Softmax;

enum class LossReduction { none, sum, mean };
LossReduction loss_reduction_from_onnx(std::string_view op, std::string_view name);  // "none", "sum", "mean"

struct LossConfig {
  Shape input;                // [N, C] or [N, C, d1, ..., dk]: log-probabilities, or logits with softmax
  DType target = DType::i64;  // targets [N] or [N, d1, ..., dk]: class ids, i64 or i32
  bool weight = false;        // a weight input [C]
  std::optional<int64_t> ignore_index;
  LossReduction reduction = LossReduction::mean;
  bool softmax = false;   // SoftmaxCrossEntropyLoss: log-softmax over C first
  bool log_prob = false;  // SoftmaxCrossEntropyLoss's optional output log_prob (shape of the input)
};

// Inputs: input (f32), target, weight (f32 [C], when cfg.weight); outputs: loss ([N, d1, ..., dk] with
// reduction none, else a scalar) and log_prob (with cfg.log_prob). mean divides by the sum of the weights of
// the non-ignored targets (their count without weights): NaN when every target is ignored, as the ONNX
// reference gives. A target outside [0, C) that is not ignore_index gives a NaN loss term.
class Loss : public Op {
 public:
  static Shape validate(const LossConfig& cfg);  // the shape of output loss
  static std::unique_ptr<Loss> create(Context& ctx, int device, const LossConfig& cfg);
  ~Loss() override;
  std::string_view type() const override {
    return cfg_.softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss";
  }
  std::string algorithm() const override;
  // The log-probabilities of SoftmaxCrossEntropyLoss without its log_prob output; the partial sums of sum / mean.
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  size_t log_prob_elems() const;
  LossConfig cfg_;
  Shape out_;
  int64_t classes_ = 1, inner_ = 1, count_ = 0;
  int64_t groups_ = 1;  // work-groups of the partial sums
  std::unique_ptr<Softmax> softmax_;
  cl::Kernel kernel_, finish_;
  size_t group_ = 64;
};

enum class OptimizerKind { adagrad, momentum, nesterov, adam };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::adam;
  std::vector<Shape> tensors;         // the shape of each optimized tensor X_i (its G_i and states alike)
  float alpha = 0.9f, beta = 0.999f;  // Momentum: alpha, beta; Adam: the two decay rates
  float epsilon = 0.0f, norm_coefficient = 0.0f;
  float norm_coefficient_post = 0.0f;  // Adam
  float decoupled_weight_decay = 0.0f;  // Adam: AdamW's, X' = X (1 - R wd) - the Adam step (torch.optim.AdamW)
  float decay_factor = 0.0f;           // Adagrad
};

// Inputs: R (f32, one element: the learning rate), T (i64, one element: the step count), X_1..X_n, G_1..G_n,
// then the state tensors (Adagrad: H_1..H_n; Momentum: V_1..V_n; Adam: V_1..V_n, H_1..H_n), all f32. Outputs:
// X_1'..X_n', then the new states in the inputs' order. One kernel launch per 8 tensors.
class Optimizer : public Op {
 public:
  static size_t states(OptimizerKind kind) { return kind == OptimizerKind::adam ? 2 : 1; }
  static void validate(const OptimizerConfig& cfg);
  static std::unique_ptr<Optimizer> create(Context& ctx, int device, const OptimizerConfig& cfg);
  std::string_view type() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  OptimizerConfig cfg_;
  cl::Kernel kernel_;
  size_t group_ = 1;  // work-items per group (fixed_group_items)
};

}  // namespace cldl
