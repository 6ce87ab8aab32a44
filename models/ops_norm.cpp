// ONNX LRN, BatchNormalization (inference, and training_mode 1: batch statistics, outputs running_mean /
// running_var; opsets 6 to 13 in test mode), InstanceNormalization and
// GroupNormalization (opset 21: scale / bias per channel; opset 18-20: per group) mapped onto
// layers/norm.hpp; LpNormalization (opsets 1 and 22: p = 1 or 2 along one axis) and MeanVarianceNormalization
// (9 and 13: axes, default [0, 2, 3]) on its AxesNorm. BatchNorm after a Conv / Gemm with constant weights is folded
// away by the fusion pass.
#include "layers/norm.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

NormConfig norm_config(const Node& n, int64_t opset, Shape s) {
  NormConfig cfg;
  const std::string& t = n.op_type;
  cfg.kind = t == "BatchNormalization" ? NormKind::batch : t == "InstanceNormalization" ? NormKind::instance : NormKind::group;
  cfg.input = std::move(s);
  cfg.epsilon = n.attr_f("epsilon", 1e-5f);
  if (cfg.kind == NormKind::batch) {
    // Opsets 6 to 13 have no training_mode: training is is_test = 0 (opset 6) or the running / saved
    // statistics as outputs (7 to 13); spatial = 0 (opsets 7, 8) gives scale, B, mean and var one value
    // per element of a sample instead of per channel. cldl runs the inference form of those opsets.
    if (opset < 7 && n.attr_i("is_test", 0) == 0)
      fail(
          "{}: attribute is_test = 0 (training mode) of opset {} is not supported: cldl runs opsets before 14 in "
          "test mode only (is_test = 1)",
          n.describe(), opset);
    if (opset >= 7 && opset < 9 && n.attr_i("spatial", 1) == 0 && cfg.input.rank() > 2)
      fail("{}: attribute spatial = 0 (statistics per element, opset {}) is not supported", n.describe(), opset);
    if (opset < 14 && n.has("training_mode"))
      fail("{}: attribute training_mode exists from opset 14 on (the model's opset is {})", n.describe(), opset);
    int64_t tm = n.attr_i("training_mode", 0);
    if (tm != 0 && tm != 1) fail("{}: attribute training_mode = {} must be 0 or 1", n.describe(), tm);
    cfg.training = tm == 1;
    cfg.momentum = n.attr_f("momentum", 0.9f);
  }
  if (cfg.kind == NormKind::group) {
    cfg.num_groups = int(n.attr_i("num_groups", 0));
    cfg.scale_per_group = opset < 21;
  }
  return cfg;
}

void infer_norm(InferCtx& c) {
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.input(i).dtype != DType::f32)
      c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
  auto cfg = checked(c, [&] { return norm_config(c.node, c.opset, c.shape(0)); });
  c.set(0, DType::f32, checked(c, [&] { return Norm::validate(cfg); }));
  // Training mode: running_mean and running_var, one per channel. Opsets before 14 name further
  // training outputs (saved mean / variance) that cldl does not compute.
  for (size_t i = 1; i < c.out.size(); ++i) {
    if (c.out[i].name.empty()) continue;
    if (c.opset < 14)
      c.error(
          "output {} is a training statistic (opset {}): cldl runs BatchNormalization before opset 14 in test "
          "mode only",
          i, c.opset);
    if (!cfg.training || i > 2)
      c.error("output {} is a training statistic{}", i,
              cfg.training ? " of opsets before 14 (saved mean / variance), not computed"
                           : "; it exists only with training_mode = 1");
    c.set(i, DType::f32, Shape{cfg.input[1]});
  }
}

std::unique_ptr<NodeKernel> lower_norm(LowerCtx& c) {
  auto cfg = norm_config(c.node, c.node.opset, c.in[0].shape.to_shape());
  return wrap(Norm::create(c.ctx, c.device, cfg), c);
}

LrnConfig lrn_config(const Node& n, Shape s) {
  LrnConfig cfg;
  cfg.input = std::move(s);
  cfg.size = int(n.attr_i("size", 0));
  cfg.alpha = n.attr_f("alpha", 1e-4f);
  cfg.beta = n.attr_f("beta", 0.75f);
  cfg.bias = n.attr_f("bias", 1.0f);
  return cfg;
}

void infer_lrn(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
  auto cfg = lrn_config(c.node, c.shape(0));
  c.set(0, DType::f32, checked(c, [&] { return Lrn::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_lrn(LowerCtx& c) {
  return wrap(Lrn::create(c.ctx, c.device, lrn_config(c.node, c.in[0].shape.to_shape())), c);
}

AxesNormConfig axes_norm_config(const Node& n, Shape s, const std::function<void(const std::string&)>& error) {
  AxesNormConfig cfg;
  cfg.input = std::move(s);
  if (n.op_type == "MeanVarianceNormalization") {
    cfg.kind = AxesNormKind::mean_variance;
    cfg.axes = n.attr_ints("axes", {0, 2, 3});
    return cfg;
  }
  const int64_t p = n.attr_i("p", 2);
  if (p != 1 && p != 2) error(fmt::format("attribute p must be 1 or 2, got {}", p));
  cfg.kind = p == 1 ? AxesNormKind::l1 : AxesNormKind::l2;
  cfg.axes = {n.attr_i("axis", -1)};
  return cfg;
}

void infer_axes_norm(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
  auto cfg = axes_norm_config(c.node, c.shape(0), [&](const std::string& m) { c.error("{}", m); });
  c.set(0, DType::f32, checked(c, [&] { return AxesNorm::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_axes_norm(LowerCtx& c) {
  auto cfg = axes_norm_config(c.node, c.in[0].shape.to_shape(), [&](const std::string& m) { c.error("{}", m); });
  return wrap(AxesNorm::create(c.ctx, c.device, cfg), c);
}

const OpRegistration kNormOps{
    {.type = "LRN", .since = 1, .family = "norm", .infer = infer_lrn, .lower = lower_lrn},
    {.type = "BatchNormalization", .since = 6, .family = "norm", .infer = infer_norm, .lower = lower_norm},
    {.type = "InstanceNormalization", .since = 6, .family = "norm", .infer = infer_norm, .lower = lower_norm},
    {.type = "GroupNormalization", .since = 18, .family = "norm", .infer = infer_norm, .lower = lower_norm},
    // LpNormalization-22 and MeanVarianceNormalization-13 added types only.
    {.type = "LpNormalization", .since = 1, .family = "norm", .infer = infer_axes_norm, .lower = lower_axes_norm},
    {.type = "MeanVarianceNormalization",
     .since = 9,
     .family = "norm",
     .infer = infer_axes_norm,
     .lower = lower_axes_norm},
};

}  // namespace
}  // namespace cldl::graph
