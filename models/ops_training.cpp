// ONNX training ops on layers/training.hpp: the losses NegativeLogLikelihoodLoss (opsets 12, 13, 22: only
// the types changed) and SoftmaxCrossEntropyLoss (12, 13), and the optimizers Adagrad, Momentum and Adam of
// the domain ai.onnx.preview.training (opset 1), each updating several (X, G, state) groups in one node.
// Class targets known when planning are checked against [0, C) here; at run time the kernel turns an id out
// of range into a NaN loss term (kernels/training.cl).
#include "layers/training.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

const char* const kTrainingDomain = "ai.onnx.preview.training";

void require_f32(const InferCtx& c, size_t i, const char* what) {
  if (c.input(i).dtype != DType::f32)
    c.error("unsupported: input '{}' ({}) is {}, only f32 is implemented", c.input(i).name, what,
            to_string(c.input(i).dtype));
}

bool has_output(const std::vector<ValueInfo>& out, size_t i) { return out.size() > i && !out[i].name.empty(); }

// ---------------------------------------------------------------- losses
LossConfig loss_config(const Node& n, Shape input, DType target, bool weight, bool log_prob) {
  LossConfig k;
  k.input = std::move(input);
  k.target = target;
  k.weight = weight;
  if (n.has("ignore_index")) k.ignore_index = n.attr_i("ignore_index", 0);
  k.reduction = loss_reduction_from_onnx(n.op_type, n.attr_s("reduction", "mean"));
  k.softmax = n.op_type == "SoftmaxCrossEntropyLoss";
  k.log_prob = log_prob;
  return k;
}

void infer_loss(InferCtx& c) {
  const bool sce = c.node.op_type == "SoftmaxCrossEntropyLoss";
  require_f32(c, 0, sce ? "scores" : "input");
  const DType tt = c.input(1).dtype;
  if (tt != DType::i64 && tt != DType::i32)
    c.error("input '{}' (target) has dtype {}, expected int64 or int32", c.input(1).name, to_string(tt));
  const bool weight = c.has_input(2);
  if (weight) require_f32(c, 2, "weights");
  const bool log_prob = sce && has_output(c.out, 1);
  auto k = checked(c, [&] { return loss_config(c.node, c.shape(0), tt, weight, log_prob); });
  const Shape out = checked(c, [&] { return Loss::validate(k); });
  const Shape x = c.shape(0);
  Shape target{x[0]};
  for (size_t i = 2; i < x.rank(); ++i) target.dims.push_back(x[i]);
  if (c.shape(1) != target)
    c.error("input '{}' (target) has shape {}, expected {} for input of shape {}", c.input(1).name, c.shape(1).str(),
            target.str(), x.str());
  if (weight && c.shape(2) != Shape{x[1]})
    c.error("input '{}' (weight) has shape {}, expected [{}] (one per class)", c.input(2).name, c.shape(2).str(), x[1]);
  if (c.value[1])
    for (int64_t t : to_ints(*c.value[1]))
      if ((t < 0 || t >= x[1]) && !(k.ignore_index && t == *k.ignore_index))
        c.error("input '{}' (target) holds class {}, outside [0, {}) and not ignore_index{}", c.input(1).name, t, x[1],
                k.ignore_index ? fmt::format(" ({})", *k.ignore_index) : std::string());
  c.set(0, DType::f32, out);
  if (log_prob) c.set(1, DType::f32, x);
}

std::unique_ptr<NodeKernel> lower_loss(LowerCtx& c) {
  const bool weight = c.in.size() > 2 && !c.in[2].name.empty();
  const bool log_prob = c.node.op_type == "SoftmaxCrossEntropyLoss" && has_output(c.out, 1);
  auto k = loss_config(c.node, c.in[0].shape.to_shape(), c.in[1].dtype, weight, log_prob);
  return wrap(Loss::create(c.ctx, c.device, k), c, weight ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1});
}

// ---------------------------------------------------------------- optimizers
OptimizerConfig optimizer_config(const Node& n, size_t inputs, const std::function<void(const std::string&)>& error) {
  OptimizerConfig k;
  if (n.op_type == "Adagrad") {
    k.kind = OptimizerKind::adagrad;
    k.decay_factor = n.attr_f("decay_factor", 0.0f);
    k.epsilon = n.attr_f("epsilon", 0.0f);
    k.norm_coefficient = n.attr_f("norm_coefficient", 0.0f);
  } else if (n.op_type == "Momentum") {
    // Momentum's four attributes have no defaults in the spec.
    for (const char* a : {"alpha", "beta", "mode", "norm_coefficient"})
      if (!n.has(a)) error(fmt::format("attribute {} is required", a));
    const std::string mode = n.attr_s("mode", "standard");
    if (mode != "standard" && mode != "nesterov")
      error(fmt::format("attribute mode must be 'standard' or 'nesterov', got '{}'", mode));
    k.kind = mode == "nesterov" ? OptimizerKind::nesterov : OptimizerKind::momentum;
    k.alpha = n.attr_f("alpha", 0.0f);
    k.beta = n.attr_f("beta", 0.0f);
    k.norm_coefficient = n.attr_f("norm_coefficient", 0.0f);
  } else {
    k.kind = OptimizerKind::adam;
    k.alpha = n.attr_f("alpha", 0.9f);
    k.beta = n.attr_f("beta", 0.999f);
    k.epsilon = n.attr_f("epsilon", 0.0f);
    k.norm_coefficient = n.attr_f("norm_coefficient", 0.0f);
    k.norm_coefficient_post = n.attr_f("norm_coefficient_post", 0.0f);
    // AdamW (cldl's domain, the training graph's): Adam's attributes and weight_decay, decoupled.
    if (n.op_type == "AdamW") k.decoupled_weight_decay = n.attr_f("weight_decay", 0.0f);
  }
  const size_t per = 2 + Optimizer::states(k.kind);  // X, G and the states of one tensor
  if (inputs < 2 + per || (inputs - 2) % per != 0)
    error(fmt::format("has {} inputs; expected R, T and then {} inputs per optimized tensor (X, G{})", inputs, per,
                      k.kind == OptimizerKind::adam      ? ", V, H"
                      : k.kind == OptimizerKind::adagrad ? ", H"
                                                         : ", V"));
  k.tensors.resize((inputs - 2) / per);
  return k;
}

void infer_optimizer(InferCtx& c) {
  auto k = optimizer_config(c.node, c.in.size(), [&](const std::string& m) { c.error("{}", m); });
  const size_t n = k.tensors.size(), s = Optimizer::states(k.kind);
  if (c.out.size() != n * (1 + s))
    c.error("has {} outputs; expected {} for {} optimized tensors (X_new then the new states)", c.out.size(),
            n * (1 + s), n);
  for (size_t i = 0; i < c.in.size(); ++i)
    if (!c.has_input(i)) c.error("input {} is missing (no input of {} is optional)", i, c.node.op_type);
  require_f32(c, 0, "R");
  if (c.input(1).dtype != DType::i64)
    c.error("input '{}' (T) has dtype {}, expected int64", c.input(1).name, to_string(c.input(1).dtype));
  if (c.shape(0).numel() != 1 || c.shape(1).numel() != 1)
    c.error("inputs R and T must hold one value each, got shapes {} and {}", c.shape(0).str(), c.shape(1).str());
  for (size_t i = 0; i < n; ++i) {
    require_f32(c, 2 + i, "X");
    k.tensors[i] = c.shape(2 + i);
    for (size_t j = 1; j < 2 + s; ++j) {
      const size_t in = 2 + j * n + i;
      require_f32(c, in, j == 1 ? "G" : "state");
      if (c.shape(in) != k.tensors[i])
        c.error("input '{}' has shape {}, but the tensor it belongs to ('{}') has {}", c.input(in).name,
                c.shape(in).str(), c.input(2 + i).name, k.tensors[i].str());
    }
  }
  checked(c, [&] {
    Optimizer::validate(k);
    return 0;
  });
  for (size_t i = 0; i < n; ++i)
    for (size_t j = 0; j < 1 + s; ++j) c.set(j * n + i, DType::f32, k.tensors[i]);
}

std::unique_ptr<NodeKernel> lower_optimizer(LowerCtx& c) {
  auto k = optimizer_config(c.node, c.in.size(), [&](const std::string& m) { c.error("{}", m); });
  for (size_t i = 0; i < k.tensors.size(); ++i) k.tensors[i] = c.in[2 + i].shape.to_shape();
  return wrap(Optimizer::create(c.ctx, c.device, k), c);
}

const OpRegistration kTrainingOps{
    // NegativeLogLikelihoodLoss-13 and -22 and SoftmaxCrossEntropyLoss-13 changed only the types.
    {.type = "NegativeLogLikelihoodLoss", .since = 12, .family = "training", .infer = infer_loss, .lower = lower_loss},
    {.type = "SoftmaxCrossEntropyLoss", .since = 12, .family = "training", .infer = infer_loss, .lower = lower_loss},
    {.type = "Adagrad",
     .domain = kTrainingDomain,
     .since = 1,
     .family = "training",
     .infer = infer_optimizer,
     .lower = lower_optimizer},
    {.type = "Momentum",
     .domain = kTrainingDomain,
     .since = 1,
     .family = "training",
     .infer = infer_optimizer,
     .lower = lower_optimizer},
    {.type = "AdamW",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_optimizer,
     .lower = lower_optimizer},
    {.type = "Adam",
     .domain = kTrainingDomain,
     .since = 1,
     .family = "training",
     .infer = infer_optimizer,
     .lower = lower_optimizer},
};

}  // namespace
}  // namespace cldl::graph
