// ONNX ops of current language models (ONNX 1.23) on layers/llm.hpp: TensorScatter (24: KV-cache update,
// linear / circular), SwiGLU (28: gate and value inputs), CausalConvWithState (27) and LinearAttention (27:
// linear, gated, delta, gated_delta; GQA). f32 and f16 activations (fp32 arithmetic); TensorScatter moves
// any dtype. Inputs known when planning still run on the device (the ops are cheap and run per token);
// TensorScatter's write_indices, when known then, are checked against the cache length.
// FlexAttention (ai.onnx.preview 1) is expanded when planning (expand_flex_attention below, called by the
// control-flow expander): without modifiers into ONNX Attention (the fused kernel), with them into device
// ops over the full score tensor: a QK^T MatMul, the score_mod subgraph inlined, Softmax, the prob_mod
// subgraph inlined, a MatMul with V.
#include <algorithm>
#include <cmath>

#include "layers/llm.hpp"
#include "models/control_flow.hpp"
#include "models/ops_cnn_common.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

void require_float(const InferCtx& c, size_t i, const char* what) {
  const DType t = c.input(i).dtype;
  if (t != DType::f32 && t != DType::f16)
    c.error("input '{}' ({}) has dtype {}; cldl runs this op on float32 and float16", c.input(i).name, what,
            to_string(t));
}

void require_same_dtype(const InferCtx& c, size_t i, const char* what, size_t ref, const char* ref_what) {
  if (c.input(i).dtype != c.input(ref).dtype)
    c.error("input '{}' ({}) has dtype {}, but {} has {}", c.input(i).name, what, to_string(c.input(i).dtype), ref_what,
            to_string(c.input(ref).dtype));
}

bool has(const LowerCtx& c, size_t i) { return i < c.in.size() && !c.in[i].name.empty(); }

// ---------------------------------------------------------------- TensorScatter
TensorScatterConfig tensor_scatter_config(const Node& n, Shape cache, Shape update, DType dt, bool has_indices,
                                          const std::function<void(const std::string&)>& error) {
  const std::string mode = n.attr_s("mode", "linear");
  if (mode != "linear" && mode != "circular")
    error(fmt::format("attribute mode must be 'linear' or 'circular', got '{}'", mode));
  return {std::move(cache), std::move(update), dt, n.attr_i("axis", -2), mode == "circular", has_indices};
}

void infer_tensor_scatter(InferCtx& c) {
  require_same_dtype(c, 1, "update", 0, "past_cache");
  if (c.has_input(2) && c.input(2).dtype != DType::i64)
    c.error("input '{}' (write_indices) has dtype {}, expected int64", c.input(2).name, to_string(c.input(2).dtype));
  auto cfg = tensor_scatter_config(c.node, c.shape(0), c.shape(1), c.input(0).dtype, c.has_input(2),
                                   [&](const std::string& m) { c.error("{}", m); });
  const int64_t axis = checked(c, [&] { return TensorScatter::validate(cfg); });
  if (c.has_input(2)) {
    const Shape s = c.shape(2);
    if (s != Shape{cfg.cache[0]})
      c.error("input '{}' (write_indices) has shape {}, expected [{}] (one per batch entry)", c.input(2).name, s.str(),
              cfg.cache[0]);
    if (c.value[2] && !cfg.circular) {  // linear: every row must fit (the spec's requirement)
      const int64_t L = cfg.cache[size_t(axis)], S = cfg.update[size_t(axis)];
      for (int64_t w : to_ints(*c.value[2]))
        if (w < 0 || w + S > L)
          c.error(
              "input '{}' (write_indices) holds {}: linear mode needs 0 <= index and index + {} (update length) "
              "<= {} (max_sequence_length)",
              c.input(2).name, w, S, L);
    }
  }
  c.set(0, cfg.dtype, cfg.cache);
}

std::unique_ptr<NodeKernel> lower_tensor_scatter(LowerCtx& c) {
  auto cfg = tensor_scatter_config(c.node, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(), c.in[0].dtype, has(c, 2),
                                   [&](const std::string& m) { c.error("{}", m); });
  return wrap(TensorScatter::create(c.ctx, c.device, cfg), c,
              cfg.has_indices ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1});
}

// ---------------------------------------------------------------- SwiGLU
void infer_swiglu(InferCtx& c) {
  require_float(c, 0, "A");
  require_same_dtype(c, 1, "B", 0, "A");
  const Shape a = c.shape(0), b = c.shape(1);
  if (a != b) c.error("inputs A {} and B {} must have the same shape (SwiGLU does not broadcast)", a.str(), b.str());
  checked(c, [&] { SwiGluPair::validate(a, c.input(0).dtype); });
  c.set(0, c.input(0).dtype, a);
}

std::unique_ptr<NodeKernel> lower_swiglu(LowerCtx& c) {
  return wrap(
      SwiGluPair::create(c.ctx, c.device, c.in[0].shape.to_shape(), c.in[0].dtype, c.node.attr_f("alpha", 1.0f)), c);
}

// ---------------------------------------------------------------- CausalConvWithState
bool causal_conv_silu(const Node& n, const std::function<void(const std::string&)>& error) {
  const std::string act = n.attr_s("activation", "none");
  if (act != "none" && act != "silu" && act != "swish")
    error(fmt::format("attribute activation must be 'none', 'silu' or 'swish', got '{}'", act));
  return act != "none";
}

void infer_causal_conv(InferCtx& c) {
  require_float(c, 0, "input");
  const char* names[] = {"input", "weight", "bias", "past_state"};
  for (size_t i = 1; i < 4; ++i)
    if (c.has_input(i)) require_same_dtype(c, i, names[i], 0, "input");
  const Shape x = c.shape(0), w = c.shape(1);
  if (x.rank() != 3)
    c.error("input '{}' must be 3-D [batch, channels, length], got shape {}", c.input(0).name, x.str());
  if (w.rank() != 3 || w[0] != x[1] || w[1] != 1)
    c.error("input '{}' (weight) has shape {}, expected [{}, 1, k] (depthwise: channels, 1, kernel size)",
            c.input(1).name, w.str(), x[1]);
  const int64_t k = w[2];
  if (c.has_input(2) && c.shape(2) != Shape{x[1]})
    c.error("input '{}' (bias) has shape {}, expected [{}]", c.input(2).name, c.shape(2).str(), x[1]);
  if (c.has_input(3) && c.shape(3) != Shape{x[0], x[1], k - 1})
    c.error("input '{}' (past_state) has shape {}, expected [{}, {}, {}] (batch, channels, k - 1)", c.input(3).name,
            c.shape(3).str(), x[0], x[1], k - 1);
  CausalConvConfig cfg{
      x, k, c.input(0).dtype, c.has_input(2), c.has_input(3), causal_conv_silu(c.node, [&](const std::string& m) {
        c.error("{}", m);
      })};
  checked(c, [&] { CausalConvWithState::validate(cfg); });
  c.set(0, cfg.dtype, x);
  if (c.out.size() > 1) c.set(1, cfg.dtype, Shape{x[0], x[1], k - 1});
}

std::unique_ptr<NodeKernel> lower_causal_conv(LowerCtx& c) {
  const Shape x = c.in[0].shape.to_shape();
  CausalConvConfig cfg{x,
                       c.in[1].shape.to_shape()[2],
                       c.in[0].dtype,
                       has(c, 2),
                       has(c, 3),
                       causal_conv_silu(c.node, [&](const std::string& m) { c.error("{}", m); })};
  std::vector<int> inputs{0, 1};
  if (cfg.has_bias) inputs.push_back(2);
  if (cfg.has_past) inputs.push_back(3);
  return wrap(CausalConvWithState::create(c.ctx, c.device, cfg), c, inputs);
}

// ---------------------------------------------------------------- LinearAttention
LinearAttentionRule la_rule(const Node& n, const std::function<void(const std::string&)>& error) {
  const std::string r = n.attr_s("update_rule", "gated_delta");
  if (r == "linear") return LinearAttentionRule::linear;
  if (r == "gated") return LinearAttentionRule::gated;
  if (r == "delta") return LinearAttentionRule::delta;
  if (r == "gated_delta") return LinearAttentionRule::gated_delta;
  error(fmt::format("attribute update_rule must be 'linear', 'gated', 'delta' or 'gated_delta', got '{}'", r));
  return LinearAttentionRule::linear;
}

// The config from the node and its input shapes (index 3 past_state, 4 decay, 5 beta; empty = absent).
// Errors name the input and the shape expected.
LinearAttentionConfig la_config(const Node& n, const std::vector<std::optional<Shape>>& s, const std::vector<DType>& dt,
                                const std::vector<std::string>& names,
                                const std::function<void(const std::string&)>& error) {
  LinearAttentionConfig cfg;
  if (!n.has("q_num_heads") || !n.has("kv_num_heads")) error("attributes q_num_heads and kv_num_heads are required");
  cfg.q_heads = n.attr_i("q_num_heads", 0);
  cfg.kv_heads = n.attr_i("kv_num_heads", 0);
  if (cfg.q_heads <= 0 || cfg.kv_heads <= 0 || cfg.q_heads % cfg.kv_heads)
    error(fmt::format("q_num_heads ({}) must be a positive multiple of kv_num_heads ({})", cfg.q_heads, cfg.kv_heads));
  cfg.rule = la_rule(n, error);
  cfg.scale = n.attr_f("scale", 0.0f);
  const char* what[] = {"query", "key", "value"};
  for (size_t i = 0; i < 3; ++i)
    if (s[i]->rank() != 3)
      error(fmt::format("input '{}' ({}) must be 3-D [B, T, heads * head dim], got shape {}", names[i], what[i],
                        s[i]->str()));
  const Shape &q = *s[0], &k = *s[1], &v = *s[2];
  cfg.batch = q[0], cfg.seq = q[1];
  if (q[2] % cfg.q_heads)
    error(fmt::format("input '{}' (query) has last dim {}, not a multiple of q_num_heads ({})", names[0], q[2],
                      cfg.q_heads));
  cfg.head_dim_k = q[2] / cfg.q_heads;
  if (k != Shape{cfg.batch, cfg.seq, cfg.kv_heads * cfg.head_dim_k})
    error(fmt::format("input '{}' (key) has shape {}, expected [{}, {}, {}] (kv_num_heads * d_k)", names[1], k.str(),
                      cfg.batch, cfg.seq, cfg.kv_heads * cfg.head_dim_k));
  if (v.dims.size() != 3 || v[0] != cfg.batch || v[1] != cfg.seq || v[2] % cfg.kv_heads)
    error(fmt::format("input '{}' (value) has shape {}, expected [{}, {}, kv_num_heads ({}) * d_v]", names[2], v.str(),
                      cfg.batch, cfg.seq, cfg.kv_heads));
  cfg.head_dim_v = v[2] / cfg.kv_heads;
  if (cfg.head_dim_k == 0 || cfg.head_dim_v == 0) error("the head dims d_k and d_v must be positive");
  const bool gated = cfg.rule == LinearAttentionRule::gated || cfg.rule == LinearAttentionRule::gated_delta;
  const bool delta = cfg.rule == LinearAttentionRule::delta || cfg.rule == LinearAttentionRule::gated_delta;
  const std::string rule = n.attr_s("update_rule", "gated_delta");
  if (gated != s[4].has_value())
    error(fmt::format("update_rule '{}' {} input decay", rule, gated ? "requires" : "forbids"));
  if (delta != s[5].has_value())
    error(fmt::format("update_rule '{}' {} input beta", rule, delta ? "requires" : "forbids"));
  cfg.dtype = dt[0];
  for (size_t i : {size_t(1), size_t(2), size_t(4), size_t(5)})
    if (s[i] && dt[i] != cfg.dtype)
      error(fmt::format("input '{}' has dtype {}, but query has {}", names[i], to_string(dt[i]), to_string(cfg.dtype)));
  if (s[4]) {
    const Shape& d = *s[4];
    const int64_t per_key = cfg.kv_heads * cfg.head_dim_k;
    if (d.rank() != 3 || d[0] != cfg.batch || d[1] != cfg.seq || (d[2] != cfg.kv_heads && d[2] != per_key))
      error(
          fmt::format("input '{}' (decay) has shape {}, expected [{}, {}, {}] (per key dim) or [{}, {}, {}] (per head)",
                      names[4], d.str(), cfg.batch, cfg.seq, per_key, cfg.batch, cfg.seq, cfg.kv_heads));
    cfg.decay_per_key = d[2] == per_key;  // when kv_heads == per_key (d_k 1) both read the same
  }
  if (s[5]) {
    const Shape& b = *s[5];
    if (b.rank() != 3 || b[0] != cfg.batch || b[1] != cfg.seq || (b[2] != cfg.kv_heads && b[2] != 1))
      error(fmt::format("input '{}' (beta) has shape {}, expected [{}, {}, {}] or [{}, {}, 1]", names[5], b.str(),
                        cfg.batch, cfg.seq, cfg.kv_heads, cfg.batch, cfg.seq));
    cfg.beta_heads = b[2];
  }
  cfg.has_past = s[3].has_value();
  cfg.state_dtype = cfg.has_past ? dt[3] : cfg.dtype;
  if (s[3] && *s[3] != Shape{cfg.batch, cfg.kv_heads, cfg.head_dim_k, cfg.head_dim_v})
    error(fmt::format("input '{}' (past_state) has shape {}, expected [{}, {}, {}, {}] (B, kv_num_heads, d_k, d_v)",
                      names[3], s[3]->str(), cfg.batch, cfg.kv_heads, cfg.head_dim_k, cfg.head_dim_v));
  return cfg;
}

void infer_linear_attention(InferCtx& c) {
  std::vector<std::optional<Shape>> s(6);
  std::vector<DType> dt(6, DType::f32);
  std::vector<std::string> names(6);
  for (size_t i = 0; i < 6; ++i)
    if (c.has_input(i)) s[i] = c.shape(i), dt[i] = c.input(i).dtype, names[i] = c.input(i).name;
  auto cfg = la_config(c.node, s, dt, names, [&](const std::string& m) { c.error("{}", m); });
  checked(c, [&] { LinearAttention::validate(cfg); });
  c.set(0, cfg.dtype, Shape{cfg.batch, cfg.seq, cfg.q_heads * cfg.head_dim_v});
  if (c.out.size() > 1) c.set(1, cfg.state_dtype, Shape{cfg.batch, cfg.kv_heads, cfg.head_dim_k, cfg.head_dim_v});
}

std::unique_ptr<NodeKernel> lower_linear_attention(LowerCtx& c) {
  std::vector<std::optional<Shape>> s(6);
  std::vector<DType> dt(6, DType::f32);
  std::vector<std::string> names(6);
  std::vector<int> inputs;
  for (size_t i = 0; i < 6; ++i)
    if (has(c, i))
      s[i] = c.in[i].shape.to_shape(), dt[i] = c.in[i].dtype, names[i] = c.in[i].name, inputs.push_back(int(i));
  auto cfg = la_config(c.node, s, dt, names, [&](const std::string& m) { c.error("{}", m); });
  return wrap(LinearAttention::create(c.ctx, c.device, cfg), c, inputs);
}

const OpRegistration kLlmOps{
    {.type = "TensorScatter",
     .since = 24,
     .family = "llm",
     .infer = infer_tensor_scatter,
     .lower = lower_tensor_scatter},
    {.type = "SwiGLU", .since = 28, .family = "llm", .infer = infer_swiglu, .lower = lower_swiglu},
    {.type = "CausalConvWithState",
     .since = 27,
     .family = "llm",
     .infer = infer_causal_conv,
     .lower = lower_causal_conv},
    {.type = "LinearAttention",
     .since = 27,
     .family = "llm",
     .infer = infer_linear_attention,
     .lower = lower_linear_attention},
};

}  // namespace

// ---------------------------------------------------------------- FlexAttention
// Q [B, Hq, L, E], K [B, Hkv, S, E], V [B, Hkv, S, Ev] -> Y [B, Hq, L, Ev], as the ONNX reference computes it:
// scores = (Q * sqrt(scale)) (K * sqrt(scale))^T in the softmax precision (f32 for f16 / f32 inputs, f64 for
// f64), score_mod, Softmax over the last axis, prob_mod, then the product with V, cast back to the input
// type. GQA: each K / V head is repeated for its group of Hq / Hkv query heads (Reshape + Expand + Reshape).
std::vector<Node> expand_flex_attention(Graph& g, const Node& n) {
  if (n.inputs.size() != 3 || n.outputs.empty())
    fail("{}: expects 3 inputs (Q, K, V) and 1 output, got {} and {}", n.describe(), n.inputs.size(), n.outputs.size());
  const char* names[] = {"Q", "K", "V"};
  Shape s[3];
  DType t = DType::f32;
  for (size_t i = 0; i < 3; ++i) {
    const ValueInfo* info = n.inputs[i].empty() ? nullptr : g.info(n.inputs[i]);
    if (!info) fail("{}: input {} ({}) is missing", n.describe(), i, names[i]);
    if (!info->shape.is_static()) fail("{}: input '{}' ({}) has no static shape", n.describe(), n.inputs[i], names[i]);
    s[i] = info->shape.to_shape();
    if (s[i].rank() != 4)
      fail("{}: input '{}' ({}) must be rank 4 [batch, heads, sequence, head size], got shape {}", n.describe(),
           n.inputs[i], names[i], s[i].str());
    if (i == 0)
      t = info->dtype;
    else if (info->dtype != t)
      fail("{}: input '{}' ({}) has dtype {}, but Q has {}", n.describe(), n.inputs[i], names[i],
           to_string(info->dtype), to_string(t));
  }
  if (t != DType::f32 && t != DType::f16 && t != DType::f64)
    fail("{}: input Q has dtype {}; cldl runs FlexAttention on float32, float16 and float64", n.describe(),
         to_string(t));
  const Shape &q = s[0], &k = s[1], &v = s[2];
  const int64_t B = q[0], Hq = q[1], E = q[3], Hkv = k[1], S = k[2];
  if (k[0] != B || v[0] != B || v[1] != Hkv || v[2] != S || k[3] != E)
    fail("{}: shapes Q {}, K {}, V {} do not agree (K [{}, kv_heads, S, {}], V [{}, kv_heads, S, Ev])", n.describe(),
         q.str(), k.str(), v.str(), B, E, B);
  if (Hkv <= 0 || Hq % Hkv) fail("{}: Q's {} heads are not a multiple of K's {} (GQA)", n.describe(), Hq, Hkv);
  // The softmax precision: f32 for f16 / f32 inputs, f64 for f64 (the spec's default); another explicit one
  // is refused by name rather than computed differently.
  const DType ct = t == DType::f64 ? DType::f64 : DType::f32;
  const int64_t ct_code = ct == DType::f64 ? 11 : 1;
  if (n.has("softmax_precision") && n.attr_i("softmax_precision", ct_code) != ct_code)
    fail("{}: attribute softmax_precision = {} is not supported for {} inputs (cldl computes in {}, code {})",
         n.describe(), n.attr_i("softmax_precision", 0), to_string(t), to_string(ct), ct_code);
  const double scale = n.has("scale") ? double(n.attr_f("scale", 0.0f)) : 1.0 / std::sqrt(double(E));
  std::vector<Node> nodes;
  const std::string& base = n.name;
  // Without modifiers it is ONNX Attention (23+: 4-D inputs, GQA, scale), whose fused kernel never holds the
  // score tensor: that op serves it where the model's ai.onnx opset has it.
  const OpDef* attention = find_op("Attention", "");
  if (!n.attr_g("score_mod") && !n.attr_g("prob_mod") && ct == DType::f32 && attention &&
      attention->implements(g.opset(""))) {
    nodes.push_back(make_node(g, base + "/attention", "Attention", {n.inputs[0], n.inputs[1], n.inputs[2]},
                              {n.outputs[0]}, {{"scale", float(scale)}}));
    log::debug("{}: no modifiers, expanded into the fused Attention op", n.describe());
    return nodes;
  }
  auto value = [&](const char* what) { return g.unique_name(base + "/" + what); };
  auto node = [&](const char* what, const char* op, std::vector<std::string> in,
                  std::map<std::string, AttrValue> attrs = {}) {
    std::string out = value(what);
    nodes.push_back(make_node(g, base + "/" + what, op, std::move(in), {out}, std::move(attrs)));
    return out;
  };
  auto ints = [&](const char* what, std::vector<int64_t> d) {
    return add_constant(g, base + "/" + what, HostTensor::from<int64_t>(Shape{int64_t(d.size())}, d));
  };
  const HostTensor root = ct == DType::f64
                              ? HostTensor::from<double>(Shape{}, std::vector<double>{std::sqrt(scale)})
                              : HostTensor::from<float>(Shape{}, std::vector<float>{std::sqrt(float(scale))});
  const std::string sqrt_scale = add_constant(g, base + "/sqrt_scale", root);
  std::string x[3];
  for (size_t i = 0; i < 3; ++i) {
    x[i] = t == ct ? n.inputs[i] : node("cast", "Cast", {n.inputs[i]}, {{"to", ct_code}});
    if (i < 2) x[i] = node("scaled", "Mul", {x[i], sqrt_scale});
    if (i > 0 && Hq != Hkv) {  // repeat each K / V head for its query heads
      const int64_t d = s[i][3];
      x[i] = node("kv_split", "Reshape", {x[i], ints("kv_split_shape", {B, Hkv, 1, S, d})});
      x[i] = node("kv_repeat", "Expand", {x[i], ints("kv_repeat_shape", {B, Hkv, Hq / Hkv, S, d})});
      x[i] = node("kv_heads", "Reshape", {x[i], ints("kv_heads_shape", {B, Hq, S, d})});
    }
  }
  std::string scores =
      node("scores", "MatMul",
           {x[0], node("k_transposed", "Transpose", {x[1]}, {{"perm", std::vector<int64_t>{0, 1, 3, 2}}})});
  auto modify = [&](const char* attr, const std::string& in) {
    const Graph* sub = n.attr_g(attr);
    if (!sub) return in;
    if (sub->inputs.size() != 1 || sub->outputs.size() != 1)
      fail("{}: subgraph {} must have 1 input and 1 output, has {} and {}", n.describe(), attr, sub->inputs.size(),
           sub->outputs.size());
    std::vector<std::string> outs;
    auto body = inline_body(g, *sub, base + "/" + attr, {{sub->inputs[0].name, in}}, outs);
    nodes.insert(nodes.end(), std::make_move_iterator(body.begin()), std::make_move_iterator(body.end()));
    return outs[0];
  };
  scores = modify("score_mod", scores);
  std::string probs = modify("prob_mod", node("probs", "Softmax", {scores}, {{"axis", int64_t(-1)}}));
  if (t == ct) {
    nodes.push_back(make_node(g, base + "/output", "MatMul", {probs, x[2]}, {n.outputs[0]}));
  } else {
    nodes.push_back(make_node(g, base + "/output", "Cast", {node("y", "MatMul", {probs, x[2]})}, {n.outputs[0]},
                              {{"to", int64_t(t == DType::f16 ? 10 : 1)}}));
  }
  log::debug("{}: expanded into {} device ops (QK^T MatMul, modifiers inlined, Softmax, MatMul)", n.describe(),
             nodes.size());
  return nodes;
}

}  // namespace cldl::graph
