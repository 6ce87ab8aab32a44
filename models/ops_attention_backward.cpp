// Attention training ops (layers/attention_backward.hpp), in cldl's own domain (kFusedDomain: never in a model
// file). The backward rule of ONNX Attention (models/autodiff.cpp, attention_rule) emits them:
//   AttentionTrain(Q, K, V, attn_mask?) -> Y, LSE            (the forward again, saving each row's log-sum-exp)
//   AttentionGrad(Q, K, V, attn_mask?, O, LSE, dO) -> dQ, dK, dV
// Attributes as the ONNX Attention node's (q_num_heads, kv_num_heads, is_causal, scale); 3-D and 4-D Q / K / V.
// LSE is f32 [B, Hq, Sq].
#include "layers/attention_backward.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

constexpr size_t kMask = 3;

// The config of a training attention node from its Q, K, V (and mask) shapes and the mask's dtype.
AttentionConfig train_config(const Node& n, const Shape& q, const Shape& k, const Shape& v, const Shape* mask,
                             bool mask_bool) {
  OnnxAttentionNode a;
  a.q = q, a.k = k, a.v = v;
  if (mask) a.attn_mask = *mask, a.attn_mask_bool = mask_bool;
  a.q_num_heads = n.attr_i("q_num_heads", 0);
  a.kv_num_heads = n.attr_i("kv_num_heads", 0);
  a.is_causal = n.attr_i("is_causal", 0) != 0;
  if (n.has("scale")) a.scale = n.attr_f("scale", 0.0f);
  a.softcap = n.attr_f("softcap", 0.0f);
  AttentionConfig c = onnx_attention_config(a);
  AttentionTrainForward::validate(c);
  return c;
}

AttentionConfig infer_config(InferCtx& c) {
  for (size_t i : {size_t(0), size_t(1), size_t(2)})
    if (c.input(i).dtype != DType::f32)
      c.error("input '{}' is {}, only f32 is implemented for training", c.input(i).name, to_string(c.input(i).dtype));
  std::optional<Shape> m;
  bool mb = false;
  if (c.has_input(kMask)) {
    m = c.shape(kMask);
    const DType t = c.input(kMask).dtype;
    if (t != DType::f32 && t != DType::boolean) c.error("attn_mask is {}, expected bool or f32", to_string(t));
    mb = t == DType::boolean;
  }
  return checked(c, [&] { return train_config(c.node, c.shape(0), c.shape(1), c.shape(2), m ? &*m : nullptr, mb); });
}

AttentionConfig lower_config(LowerCtx& c) {
  const bool mask = c.in.size() > kMask && !c.in[kMask].name.empty();
  Shape m = mask ? c.in[kMask].shape.to_shape() : Shape{};
  return train_config(c.node, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(), c.in[2].shape.to_shape(),
                      mask ? &m : nullptr, mask && c.in[kMask].dtype == DType::boolean);
}

void infer_train(InferCtx& c) {
  const AttentionConfig k = infer_config(c);
  if (c.out.size() != 2) c.error("{} outputs, expected 2 (Y, LSE)", c.out.size());
  c.set(0, DType::f32, Attention::validate(k));
  c.set(1, DType::f32, AttentionTrainForward::lse_shape(k));
}

std::unique_ptr<NodeKernel> lower_train(LowerCtx& c) { return wrap(AttentionTrainForward::create(c.ctx, c.device, lower_config(c)), c); }

void infer_grad(InferCtx& c) {
  const AttentionConfig k = infer_config(c);
  if (c.in.size() != 7) c.error("{} inputs, expected 7 (Q, K, V, attn_mask, O, LSE, dO)", c.in.size());
  const Shape y = Attention::validate(k), lse = AttentionTrainForward::lse_shape(k);
  const std::pair<size_t, Shape> want[] = {{4, y}, {5, lse}, {6, y}};
  for (auto& [i, s] : want)
    if (!c.has_input(i) || c.shape(i) != s)
      c.error("input {} ('{}') must have shape {}", i, c.has_input(i) ? c.input(i).name : "", s.str());
  if (c.out.size() != 3) c.error("{} outputs, expected 3 (dQ, dK, dV)", c.out.size());
  for (size_t o = 0; o < 3; ++o) c.set(o, DType::f32, c.shape(o));
}

std::unique_ptr<NodeKernel> lower_grad(LowerCtx& c) { return wrap(AttentionBackward::create(c.ctx, c.device, lower_config(c)), c); }

const OpRegistration kAttentionBackwardOps{
    {.type = "AttentionTrain", .domain = kFusedDomain, .since = 1, .family = "training", .infer = infer_train, .lower = lower_train},
    {.type = "AttentionGrad", .domain = kFusedDomain, .since = 1, .family = "training", .infer = infer_grad, .lower = lower_grad},
};

}  // namespace
}  // namespace cldl::graph
