// Fusion passes (registered with passes.hpp, run by prepare() before shape inference, on structure and
// initializers only):
//  - BatchNorm folding: Conv / Gemm with constant weights followed by an inference BatchNormalization
//    with constant parameters becomes one Conv / Gemm with rescaled weights and bias.
//  - Activation fusion: Gemm / MatMul / Conv followed by an activation (Relu, Sigmoid, ...) that is its
//    only reader becomes one node whose epilogue applies it (attributes _cldl_act, _cldl_act_alpha/beta).
//    It runs after BatchNorm folding, so Conv -> BN -> Relu becomes one Conv. Gelu joins too, also the
//    one the GELU pattern pass (fusion_patterns.cpp) makes from PyTorch's erf / tanh spelling.
//  - MatMul bias (typed): MatMul by a 2-D weight, then Add of a per-column bias, becomes one MatMul
//    whose GEMM epilogue adds the bias (attribute _cldl_bias, bias as input 2).
//  - MatMul residual (typed, after it): MatMul by a 2-D weight, then Add of a same-shaped earlier tensor,
//    becomes one MatMul whose GEMM epilogue adds it (attribute _cldl_residual, input 3).
#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "layers/activation.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

ValueReaders readers(const Graph& g) { return value_readers(g); }

const HostTensor* f32_const(const Graph& g, const std::string& v) {
  auto it = g.initializers.find(v);
  return it != g.initializers.end() && it->second.dtype() == DType::f32 ? &it->second : nullptr;
}

size_t fold_batchnorm(Graph& g) {
  if (!has_op(g, {"BatchNormalization"})) return 0;
  size_t n = 0;
  auto rd = readers(g);
  std::set<size_t> drop;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& bn = g.nodes[i];
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.attr_i("training_mode", 0) != 0) continue;
    if (bn.outputs.size() > 1 && !bn.outputs[1].empty()) continue;
    if (g.opset(bn.domain) < 7 && bn.attr_i("is_test", 0) == 0) continue;  // opset 6 training: inference says why
    const HostTensor *scale = f32_const(g, bn.input(1)), *shift = f32_const(g, bn.input(2)),
                     *mean = f32_const(g, bn.input(3)), *var = f32_const(g, bn.input(4));
    if (!scale || !shift || !mean || !var) continue;
    auto pr = g.producers();
    auto p = pr.find(bn.input(0));
    if (p == pr.end() || rd[bn.input(0)].size() != 1) continue;
    Node& prod = g.nodes[p->second];
    bool conv = prod.op_type == "Conv" && prod.domain.empty();
    bool gemm = prod.op_type == "Gemm" && prod.domain.empty() && prod.attr_i("transA", 0) == 0;
    if (!conv && !gemm) continue;
    const HostTensor* w = f32_const(g, prod.input(1));
    if (!w || rd[prod.input(1)].size() != 1) continue;
    int64_t C = scale->numel();
    if (mean->numel() != C || var->numel() != C || shift->numel() != C) continue;
    const HostTensor* bias = prod.input(2).empty() ? nullptr : f32_const(g, prod.input(2));
    if (!prod.input(2).empty() && (!bias || bias->numel() != C || rd[prod.input(2)].size() != 1)) continue;
    bool trans_b = gemm && prod.attr_i("transB", 0) != 0;
    if (conv ? w->shape()[0] != C : (w->shape().rank() != 2 || w->shape()[trans_b ? 0 : 1] != C)) continue;
    float eps = bn.attr_f("epsilon", 1e-5f);
    float alpha = gemm ? prod.attr_f("alpha", 1.0f) : 1.0f, beta = gemm ? prod.attr_f("beta", 1.0f) : 1.0f;
    std::vector<float> s(static_cast<size_t>(C), 0.0f);
    for (int64_t c = 0; c < C; ++c) s[c] = scale->as<float>()[c] / std::sqrt(var->as<float>()[c] + eps);
    HostTensor nw = *w;
    float* wp = nw.as<float>();
    int64_t per = w->numel() / C;
    for (int64_t k = 0; k < w->numel(); ++k) {
      int64_t c = conv || trans_b ? k / per : k % C;
      wp[k] *= s[c] * alpha;
    }
    HostTensor nb(DType::f32, Shape{C});
    for (int64_t c = 0; c < C; ++c) {
      float b0 = bias ? beta * bias->as<float>()[c] : 0.0f;
      nb.as<float>()[c] = (b0 - mean->as<float>()[c]) * s[c] + shift->as<float>()[c];
    }
    std::string wn = g.unique_name(prod.input(1) + "_bnfold"), bname = g.unique_name(bn.name + "_bias");
    g.initializers[wn] = std::move(nw);
    g.initializers[bname] = std::move(nb);
    prod.inputs.resize(3);
    prod.inputs[1] = wn;
    prod.inputs[2] = bname;
    if (gemm) {
      prod.attrs["alpha"] = 1.0f;
      prod.attrs["beta"] = 1.0f;
    }
    prod.outputs[0] = bn.outputs[0];
    drop.insert(i);
    ++n;
  }
  erase_nodes(g, drop);
  return n;
}

// Activations the GEMM epilogue applies, with their ONNX attribute names for alpha / beta.
const std::map<std::string, std::pair<const char*, const char*>> kActs = {
    {"Relu", {"", ""}},           {"Sigmoid", {"", ""}},        {"Tanh", {"", ""}},
    {"LeakyRelu", {"alpha", ""}}, {"Elu", {"alpha", ""}},       {"Selu", {"alpha", "gamma"}},
    {"HardSigmoid", {"alpha", "beta"}}, {"Softplus", {"", ""}}, {"Softsign", {"", ""}},
    {"HardSwish", {"", ""}},      {"Mish", {"", ""}},           {"ThresholdedRelu", {"alpha", ""}},
    {"Celu", {"alpha", ""}},      {"Gelu", {"", ""}},
};

// The producer `prod` (Gemm / MatMul / Conv) applies activation `name` in its epilogue and now writes `out`.
void set_epilogue_act(Node& prod, const std::string& name, float alpha, float beta, const std::string& out) {
  prod.attrs["_cldl_act"] = name;
  prod.attrs["_cldl_act_alpha"] = alpha;
  prod.attrs["_cldl_act_beta"] = beta;
  prod.outputs[0] = out;
}

// A Clip's bounds where they are known at load: attributes before opset 11, then optional inputs that are f32
// scalar initializers or Constant nodes (ReLU6 as torch exports it: Clip(x, Constant 0, Constant 6), MobileNet
// v2's every conv; the structure passes run before Constants fold). Absent bounds are -inf / +inf, as the
// kernels' Clip treats them. nullopt where a bound is data.
std::optional<std::pair<float, float>> clip_bounds(const Graph& g, const Node& clip,
                                                   const std::map<std::string, size_t>& producers) {
  if (g.opset(clip.domain) < 11) return std::pair{clip.attr_f("min", -INFINITY), clip.attr_f("max", INFINITY)};
  float b[2] = {-INFINITY, INFINITY};
  for (size_t k = 1; k < 3; ++k) {
    if (k >= clip.input_count() || clip.input(k).empty()) continue;
    const HostTensor* t = f32_const(g, clip.input(k));
    if (auto p = producers.find(clip.input(k)); !t && p != producers.end()) {
      const Node& c = g.nodes[p->second];
      if (c.op_type != "Constant" || !c.domain.empty()) return std::nullopt;
      if (c.has("value_float")) {
        b[k - 1] = c.attr_f("value_float", 0);
        continue;
      }
      t = c.attr_t("value");
      if (t && t->dtype() != DType::f32) t = nullptr;
    }
    if (!t || t->numel() != 1) return std::nullopt;
    b[k - 1] = t->as<float>()[0];
  }
  return std::pair{b[0], b[1]};
}

size_t fuse_activations(Graph& g) {
  if (!has_op(g, {"Gemm", "MatMul", "Conv"})) return 0;  // the epilogues that take an activation
  size_t n = 0;
  auto rd = readers(g);
  auto pr = g.producers();
  std::set<size_t> drop;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& act = g.nodes[i];
    auto a = kActs.find(act.op_type);
    // Gelu also as the node the GELU pattern pass makes (kFusedDomain).
    bool domain_ok = act.domain.empty() || (act.op_type == "Gelu" && act.domain == kFusedDomain);
    std::optional<std::pair<float, float>> clip;
    if (act.op_type == "Clip" && act.domain.empty()) clip = clip_bounds(g, act, pr);
    if (clip) {
      if (act.input_count() < 1 || act.input(0).empty()) continue;
    } else if (a == kActs.end() || !domain_ok || act.input_count() != 1) {
      continue;
    }
    auto p = pr.find(act.input(0));
    if (p == pr.end() || rd[act.input(0)].size() != 1) continue;
    Node& prod = g.nodes[p->second];
    bool epilogue = prod.op_type == "Gemm" || prod.op_type == "MatMul" || prod.op_type == "Conv";
    // A Conv that pools (_cldl_pool) applies its activation before the pool: one after it stays a node.
    if (!epilogue || !prod.domain.empty() || prod.has("_cldl_act") || prod.has("_cldl_pool")) continue;
    if (clip) {
      set_epilogue_act(prod, "Clip", clip->first, clip->second, act.outputs[0]);
      drop.insert(i);
      ++n;
      continue;
    }
    const std::string name =
        act.op_type == "Gelu" && act.attr_s("approximate", "none") == "tanh" ? "GeluTanh" : act.op_type;
    Activation def = activation_from_onnx(name);
    set_epilogue_act(prod, name, *a->second.first ? act.attr_f(a->second.first, def.alpha) : def.alpha,
                     *a->second.second ? act.attr_f(a->second.second, def.beta) : def.beta, act.outputs[0]);
    drop.insert(i);
    ++n;
  }
  erase_nodes(g, drop);
  return n;
}

// SiLU and hard-swish as exporters write them, x * Sigmoid(x) (torch's nn.SiLU before opset 24's Swish;
// EfficientNet's every conv) and x * HardSigmoid(x) with alpha 1/6, beta 0.5 (torch's nn.Hardswish before
// opset 14's HardSwish; MobileNet v3's convs), where x is a Gemm / MatMul / Conv output read only by the
// two: the producer's epilogue applies SiLU (x / (1 + e^-x)) or HardSwish (x * clamp(x / 6 + 0.5, 0, 1))
// instead, with no element-wise kernel and no extra pass over the tensor. Runs before activation fusion,
// which would take the gate alone.
size_t fuse_gated_activations(Graph& g) {
  if (!has_op(g, {"Sigmoid", "HardSigmoid"})) return 0;
  // The epilogue that x * gate(x) is, or "" where the gate's attributes make it another function. HardSwish's
  // x / 6 and torch's alpha, the float nearest 1/6, differ by at most an ulp.
  auto gated = [](const Node& gate) -> std::string {
    if (gate.op_type == "Sigmoid") return "Silu";
    if (gate.op_type == "HardSigmoid" && std::abs(gate.attr_f("alpha", 0.2f) - 1.0f / 6.0f) <= 1e-7f &&
        gate.attr_f("beta", 0.5f) == 0.5f)
      return "HardSwish";
    return "";
  };
  size_t n = 0;
  auto rd = readers(g);
  auto pr = g.producers();
  std::set<size_t> drop;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& mul = g.nodes[i];
    if (mul.op_type != "Mul" || !mul.domain.empty() || mul.input_count() != 2 || drop.count(i)) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string &s = mul.input(side), &x = mul.input(1 - side);
      auto ps = pr.find(s), px = pr.find(x);
      if (ps == pr.end() || px == pr.end()) continue;
      const Node& gate = g.nodes[ps->second];
      if (!gate.domain.empty() || gate.input_count() != 1 || gate.input(0) != x) continue;
      const std::string act = gated(gate);
      if (act.empty()) continue;
      const std::vector<int> want_x = {int(std::min(ps->second, i)), int(std::max(ps->second, i))};
      std::vector<int> rx = rd[x];
      std::sort(rx.begin(), rx.end());
      if (rd[s] != std::vector<int>{int(i)} || rx != want_x) continue;
      Node& prod = g.nodes[px->second];
      const bool epilogue = prod.op_type == "Gemm" || prod.op_type == "MatMul" || prod.op_type == "Conv";
      if (!epilogue || !prod.domain.empty() || prod.has("_cldl_act") || prod.has("_cldl_pool")) continue;
      const Activation def = activation_from_onnx(act);
      set_epilogue_act(prod, act, def.alpha, def.beta, mul.outputs[0]);
      drop.insert(ps->second);
      drop.insert(i);
      ++n;
      break;
    }
  }
  erase_nodes(g, drop);
  return n;
}

// An inference BatchNormalization with constant parameters that no Conv / Gemm took in (DenseNet's BN after
// each concatenation, pre-activation blocks) is a per-channel affine map: x * s + t with s = scale /
// sqrt(var + eps) and t = B - mean * s, as constants of shape [C, 1, ...] that broadcast over axis 1.
// Written as Mul and Add, element-wise fusion then makes one kernel of them and the ReLU after (DenseNet-121:
// 62 BatchNormalization kernels and 58 ReLU kernels become 58 fused ones). Typed stage (X's rank known);
// what BatchNorm folding can take it takes first.
size_t batchnorm_to_affine(Graph& g) {
  if (!has_op(g, {"BatchNormalization"})) return 0;
  size_t n = fold_batchnorm(g);
  if (g.opset() < 7) return n;  // Mul / Add broadcast the numpy way from opset 7 on
  std::vector<Node> out;
  out.reserve(g.nodes.size());
  for (Node& bn : g.nodes) {
    auto keep = [&] { out.push_back(std::move(bn)); };
    if (bn.op_type != "BatchNormalization" || !bn.domain.empty() || bn.attr_i("training_mode", 0) != 0 ||
        (bn.outputs.size() > 1 && !bn.outputs[1].empty()) || bn.input_count() != 5 ||
        (g.opset(bn.domain) < 7 && bn.attr_i("is_test", 0) == 0)) {
      keep();
      continue;
    }
    const HostTensor *scale = f32_const(g, bn.input(1)), *shift = f32_const(g, bn.input(2)),
                     *mean = f32_const(g, bn.input(3)), *var = f32_const(g, bn.input(4));
    auto xv = g.values.find(bn.input(0));
    if (!scale || !shift || !mean || !var || xv == g.values.end() || xv->second.dtype != DType::f32 ||
        xv->second.composite() || !xv->second.shape.known) {
      keep();
      continue;
    }
    const size_t rank = xv->second.shape.dims.size();
    const int64_t C = scale->numel();
    if (rank < 2 || shift->numel() != C || mean->numel() != C || var->numel() != C) {
      keep();
      continue;
    }
    Shape cs{C};
    for (size_t i = 2; i < rank; ++i) cs.dims.push_back(1);
    HostTensor sv(DType::f32, cs), tv(DType::f32, cs);
    const float eps = bn.attr_f("epsilon", 1e-5f);
    for (int64_t c = 0; c < C; ++c) {
      const float sc = scale->as<float>()[c] / std::sqrt(var->as<float>()[c] + eps);
      sv.as<float>()[c] = sc;
      tv.as<float>()[c] = shift->as<float>()[c] - mean->as<float>()[c] * sc;
    }
    const std::string sn = g.unique_name(bn.name + "_scale"), tn = g.unique_name(bn.name + "_shift"),
                      mid = g.unique_name(bn.outputs[0] + "_scaled");
    g.initializers[sn] = std::move(sv);
    g.initializers[tn] = std::move(tv);
    Node mul, add;
    mul.op_type = "Mul", add.op_type = "Add";
    mul.name = g.unique_name(bn.name + "_mul"), add.name = g.unique_name(bn.name + "_add");
    mul.opset = add.opset = bn.opset;
    mul.inputs = {bn.input(0), sn}, mul.outputs = {mid};
    add.inputs = {mid, tn}, add.outputs = {bn.outputs[0]};
    out.push_back(std::move(mul));
    out.push_back(std::move(add));
    ++n;
  }
  g.nodes = std::move(out);
  return n;
}

// A Pad whose pads are all zero copies its input (torchvision exports AvgPool2d as Pad [0...] -> AveragePool
// at opset 11+: before each of DenseNet's transition pools, 6 ms for [1, 128, 56, 56] on PoCL): it becomes
// Identity, a view of its input, so no kernel runs. Typed stage: the pads input is a folded constant then.
size_t drop_zero_pads(Graph& g) {
  if (!has_op(g, {"Pad"})) return 0;
  size_t n = 0;
  for (Node& node : g.nodes) {
    if (node.op_type != "Pad" || !node.domain.empty() || node.input_count() < 1) continue;
    std::vector<double> pads;
    if (node.opset < 11) {
      for (int64_t p : node.attr_ints("pads")) pads.push_back(double(p));
    } else {
      if (node.input_count() < 2) continue;
      auto it = g.initializers.find(node.input(1));
      if (it == g.initializers.end()) continue;
      pads = to_doubles(it->second);
    }
    if (pads.empty() || std::any_of(pads.begin(), pads.end(), [](double p) { return p != 0.0; })) continue;
    node.op_type = "Identity";
    node.inputs.resize(1);
    node.attrs.clear();
    ++n;
  }
  return n;
}

// A Concat of one input is that input: its readers read it directly. DenseNet's first layer of each
// block concatenates the block input alone; copied, it also made the block input a value read by two
// Concats, which the memory plan then copied into the next one too (DenseNet-121: 8 copies of 0.1 to
// 0.8 MB). A graph output, or a value a subgraph reads by name, keeps its node (as an Identity: a view).
size_t drop_single_concats(Graph& g) {
  if (!has_op(g, {"Concat"})) return 0;
  std::set<std::string> keep;
  for (auto& o : g.outputs) keep.insert(o.name);
  for (const Node& node : g.nodes)
    for (auto& v : node.outer_inputs()) keep.insert(v);
  size_t n = 0;
  std::set<size_t> drop;
  std::map<std::string, std::string> renamed;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& node = g.nodes[i];
    for (auto& in : node.inputs)
      if (auto r = renamed.find(in); r != renamed.end()) in = r->second;
    if (node.op_type != "Concat" || !node.domain.empty() || node.outputs.size() != 1 || node.inputs.size() != 1 ||
        node.inputs[0].empty())
      continue;
    if (keep.count(node.outputs[0])) {
      node.op_type = "Identity";
      node.attrs.clear();
    } else {
      renamed[node.outputs[0]] = node.inputs[0];
      drop.insert(i);
    }
    ++n;
  }
  erase_nodes(g, drop);
  return n;
}

// Concat(x0 .. xk) where an earlier Concat along the same axis made Concat(x0 .. xj) of a strict prefix:
// Concat(that, xj+1 .. xk), from the longest such prefix. DenseNet concatenates every earlier layer's
// features again at each layer (597 copies for DenseNet-121); chained, each concatenation adds its new
// input, and the memory plan's in-place concatenation then writes every layer's features once.
size_t chain_concats(Graph& g) {
  size_t n = 0;
  std::map<std::pair<int64_t, std::vector<std::string>>, std::string> made;  // (axis, inputs) -> output
  for (Node& node : g.nodes) {
    if (node.op_type != "Concat" || !node.domain.empty() || node.outputs.size() != 1 || node.input_count() < 2)
      continue;
    if (std::any_of(node.inputs.begin(), node.inputs.end(), [](auto& v) { return v.empty(); })) continue;
    const int64_t axis = node.attr_i("axis", 0);
    std::vector<std::string> original = node.inputs;
    for (size_t len = original.size() - 1; len >= 1; --len) {
      auto it = made.find({axis, std::vector<std::string>(original.begin(), original.begin() + long(len))});
      if (it == made.end()) continue;
      std::vector<std::string> in{it->second};
      in.insert(in.end(), original.begin() + long(len), original.end());
      node.inputs = std::move(in);
      ++n;
      break;
    }
    made.emplace(std::make_pair(axis, std::move(original)), node.outputs[0]);
  }
  return n;
}

// A Transpose that moves only dims of size 1 keeps every element where it was: a Reshape, which is a view
// (PyTorch's MultiheadAttention exports [S, 1, E] <-> [1, S, E] twice per layer; ViT-B/16 ran 24 such
// copies).
size_t transposes_as_reshapes(Graph& g) {
  size_t n = 0;
  for (Node& node : g.nodes) {
    if (node.op_type != "Transpose" || !node.domain.empty() || node.input_count() != 1 || node.outputs.size() != 1)
      continue;
    auto in = g.values.find(node.input(0)), out = g.values.find(node.outputs[0]);
    if (in == g.values.end() || out == g.values.end() || !in->second.shape.is_static() ||
        !out->second.shape.is_static())
      continue;
    const Shape is = in->second.shape.to_shape(), os = out->second.shape.to_shape();
    std::vector<int64_t> perm = node.attr_ints("perm");
    if (perm.empty())
      for (int64_t d = int64_t(is.rank()) - 1; d >= 0; --d) perm.push_back(d);
    if (perm.size() != is.rank() || os.numel() == 0) continue;
    int64_t last = -1;
    bool keeps_order = true;
    for (int64_t a : perm) {
      if (a < 0 || a >= int64_t(is.rank())) keeps_order = false;
      if (!keeps_order || is[size_t(a)] == 1) continue;
      keeps_order = a > last;
      last = a;
    }
    if (!keeps_order) continue;
    const std::string shape = g.unique_name(node.outputs[0] + "_shape");
    g.initializers[shape] = HostTensor::from<int64_t>(Shape{int64_t(os.rank())}, os.dims);
    g.values[shape] = ValueInfo{shape, DType::i64, ValueShape(Shape{int64_t(os.rank())})};
    node.op_type = "Reshape";
    node.inputs = {node.input(0), shape};
    node.attrs.clear();
    node.opset = std::max<int64_t>(node.opset, 14);
    ++n;
  }
  return n;
}

// MatMul by a 2-D B followed by an Add of a per-column bias (shape [N], or [1, ..., 1, N]) that is its
// only reader: the bias joins the GEMM's epilogue (input 2, attribute _cldl_bias), and an activation after
// the Add can then join too (the structure passes run again after a typed pass rewrites).
size_t fuse_matmul_bias(Graph& g) {
  if (g.opset() < 7 || !has_op(g, {"MatMul"})) return 0;
  size_t n = 0;
  auto rd = readers(g);
  auto pr = g.producers();
  std::set<size_t> drop;
  auto shape = [&](const std::string& v) -> std::optional<Shape> {
    auto it = g.values.find(v);
    if (it == g.values.end() || it->second.dtype != DType::f32 || !it->second.shape.is_static()) return std::nullopt;
    return it->second.shape.to_shape();
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& add = g.nodes[i];
    if (add.op_type != "Add" || !add.domain.empty() || add.input_count() != 2) continue;
    for (int side = 0; side < 2; ++side) {
      const std::string y = add.input(size_t(side)), bias = add.input(size_t(1 - side));
      auto p = pr.find(y);
      if (p == pr.end() || rd[y].size() != 1 || y == bias) continue;
      Node& mm = g.nodes[p->second];
      if (mm.op_type != "MatMul" || !mm.domain.empty() || mm.input_count() != 2 || mm.has("_cldl_act")) continue;
      auto a = shape(mm.input(0)), b = shape(mm.input(1)), ys = shape(y), bs = shape(bias), out = shape(add.outputs[0]);
      if (!a || !b || !ys || !bs || !out || a->rank() < 2 || b->rank() != 2 || *out != *ys) continue;
      const int64_t N = (*b)[1];
      bool per_col = bs->rank() >= 1 && bs->rank() <= ys->rank() && bs->numel() == N && (*bs)[bs->rank() - 1] == N;
      if (!per_col) continue;
      std::string bname = bias;
      if (bs->rank() != 1) {  // [1, ..., N]: a [N] copy for the epilogue (constant) or skip
        auto c = g.initializers.find(bias);
        if (c == g.initializers.end()) continue;
        HostTensor t = c->second;
        t.reshape(Shape{N});
        bname = g.unique_name(bias + "_col");
        g.initializers[bname] = std::move(t);
        g.values[bname] = ValueInfo{bname, DType::f32, Shape{N}};
      }
      mm.inputs.push_back(bname);
      mm.attrs["_cldl_bias"] = int64_t(1);
      mm.outputs[0] = add.outputs[0];
      drop.insert(i);
      ++n;
      break;
    }
  }
  erase_nodes(g, drop);
  return n;
}

// MatMul by a 2-D B (one GEMM: A's batch folded into its rows) followed by an Add of a same-shaped tensor
// made before it (a transformer's residual stream: x + proj(...), after matmul-bias took the bias): the Add
// joins the GEMM epilogue (input 3, attribute _cldl_residual; input 2 is the fused bias or empty),
// y = act(A B + bias + r). Not when an activation is already fused (it comes before the Add).
// Gemm too (torch's nn.Linear on 2-D rows: tiny_gpt's projections), where its C is absent or a per-column bias
// with beta 1 (the case its lowering fuses): y = alpha op(A) op(B) + C + r.
size_t fuse_matmul_residual(Graph& g) {
  if (g.opset() < 7 || !has_op(g, {"MatMul", "Gemm"})) return 0;
  return fold_residual_adds(g, [&](Node& mm, const std::string& r) {
    if ((mm.op_type != "MatMul" && mm.op_type != "Gemm") || !mm.domain.empty() || mm.has("_cldl_act") ||
        mm.has("_cldl_residual"))
      return false;
    if (mm.op_type == "Gemm" && mm.input_count() > 2 && !mm.input(2).empty()) {
      auto c = g.values.find(mm.input(2));
      if (c == g.values.end() || !c->second.shape.is_static() || mm.attr_f("beta", 1.0f) != 1.0f) return false;
      const Shape cs = c->second.shape.to_shape();
      auto y = g.values.find(mm.outputs[0]);
      if (y == g.values.end() || !y->second.shape.is_static()) return false;
      const int64_t N = y->second.shape.to_shape()[1];
      if (!(cs == Shape{N} || cs == Shape{1, N})) return false;
    }
    auto a = g.values.find(mm.input(0)), b = g.values.find(mm.input(1));
    if (a == g.values.end() || b == g.values.end() || a->second.shape.dims.size() < 2 ||
        b->second.shape.dims.size() != 2)
      return false;
    mm.inputs.resize(3);
    mm.inputs.push_back(r);
    mm.attrs["_cldl_residual"] = int64_t(1);
    return true;
  });
}

struct Register {
  Register() {
    register_fusion_pass("batchnorm-folding", fold_batchnorm);
    register_fusion_pass("silu-fusion", fuse_gated_activations);  // the name CLDL_SKIP_PASSES knows; hard-swish too
    register_fusion_pass("activation-fusion", fuse_activations);
    register_fusion_pass("matmul-bias", fuse_matmul_bias, FusionStage::typed);
    register_fusion_pass("matmul-residual", fuse_matmul_residual, FusionStage::typed);  // after matmul-bias
    register_fusion_pass("zero-pad", drop_zero_pads, FusionStage::typed);
    register_fusion_pass("batchnorm-affine", batchnorm_to_affine, FusionStage::typed);
    register_fusion_pass("concat-single", drop_single_concats);
    register_fusion_pass("concat-chain", chain_concats);
    register_fusion_pass("transpose-view", transposes_as_reshapes, FusionStage::typed);
  }
} const kRegister;

}  // namespace

Activation fused_activation(const Node& n) {
  if (!n.has("_cldl_act")) return {};
  return activation_from_onnx(n.attr_s("_cldl_act", ""), n.attr_f("_cldl_act_alpha", 0), n.attr_f("_cldl_act_beta", 0));
}

}  // namespace cldl::graph
