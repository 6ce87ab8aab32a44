// Element-wise fusion: connected groups of element-wise nodes with one output shape become one
// FusedElementwise node (layers/fused.hpp), one generated kernel per group. It runs last among the
// passes of a plan (FusionStage::late), on the typed graph, so the pattern passes (GELU, LayerNorm,
// attention) and the GEMM / conv epilogues take what they match first; what is left of the element-wise
// chains (bias adds, residual adds, masks, scaling, activations, Where / Cast chains) is fused here.
//
// A node joins a group when it is an f32 / bool element-wise op (unary math, activations, Clip with
// constant bounds, arithmetic and comparisons with numpy broadcasting, And / Or / Xor / Not, Where, Cast
// to f32 or bool, Sum / Mean / Max / Min, Identity), its output has the group's static shape, and moving
// the group to the position of its last node keeps every reader of a group value after it. Groups of one
// node stay on the shared element-wise kernels unless they are f32 arithmetic over many elements
// (kLoneMinElements). Scalar f32 initializers become literals in the generated code. A group value read
// outside the group (or a graph output) is an output of the fused node; the others never reach memory.
//
// CLDL_FUSION=0 turns the pass off (for A/B comparisons); `cldl run --stats` lists each group's nodes.
#include <cstdlib>
#include <set>

#include "layers/fused.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

const std::set<std::string> kBinary = {"Add", "Sub", "Mul", "Div", "Pow", "Mod", "PRelu", "Equal", "Less",
                                       "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor"};
const std::set<std::string> kVariadic = {"Sum", "Mean", "Max", "Min"};
const std::set<std::string> kUnaryMath = {"Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil",
                                          "Round", "Sign", "Erf", "Sin", "Cos", "Sinh", "Cosh", "Tan", "Asin",
                                          "Acos", "Atan", "Asinh", "Acosh", "Atanh"};

bool enabled() {
  const char* e = std::getenv("CLDL_FUSION");
  return !(e && (std::string(e) == "0" || std::string(e) == "off"));
}

std::optional<DType> dtype_of(const Graph& g, const std::string& v) {
  auto it = g.values.find(v);
  if (it == g.values.end()) return std::nullopt;
  return it->second.dtype;
}

FusedStep make(FusedKind kind, int op = 0, float alpha = 0.0f, float beta = 0.0f) {
  FusedStep s;
  s.kind = kind, s.op = op, s.alpha = alpha, s.beta = beta;
  return s;
}

const HostTensor* constant(const Graph& g, const std::string& v) {
  auto it = g.initializers.find(v);
  return it == g.initializers.end() ? nullptr : &it->second;
}

// The node's output shape when it can be a step of a fused group; nullopt otherwise.
std::optional<Shape> fusible(const Graph& g, const Node& n) {
  // cldl's own nodes (kFusedDomain) run as the newest ai.onnx op of their name: the GELU pattern's Gelu, the
  // backward nodes of a Gradient (models/autodiff.cpp) and a training graph's loss arithmetic.
  if (!n.domain.empty() && n.domain != kFusedDomain) return std::nullopt;
  if (n.outputs.size() != 1 || n.outputs[0].empty()) return std::nullopt;
  auto out = g.values.find(n.outputs[0]);
  if (out == g.values.end() || !out->second.shape.is_static()) return std::nullopt;
  const DType ot = out->second.dtype;
  const std::string& t = n.op_type;
  const size_t n_in = n.input_count();
  auto all_in = [&](DType want, size_t count) {
    if (n_in != count) return false;
    for (size_t i = 0; i < count; ++i)
      if (n.input(i).empty() || dtype_of(g, n.input(i)) != want) return false;
    return true;
  };
  bool ok = false;
  if (t == "Clip") {
    ok = ot == DType::f32 && !n.input(0).empty() && dtype_of(g, n.input(0)) == DType::f32;
    for (size_t i = 1; i < n_in && ok; ++i) ok = n.input(i).empty() || constant(g, n.input(i));
  } else if (is_activation(t) || kUnaryMath.count(t)) {
    ok = ot == DType::f32 && all_in(DType::f32, 1);
    if (t == "Swish") ok = ok && n.attr_f("alpha", 1.0f) == 1.0f;
  } else if (t == "Not") {
    ok = all_in(DType::boolean, 1);
  } else if (t == "Identity") {
    ok = (ot == DType::f32 || ot == DType::boolean) && all_in(ot, 1);
  } else if (kBinary.count(t)) {
    if (node_opset(g, n) < 7) return std::nullopt;  // legacy broadcasting: left to the op itself
    BinaryOp op = binary_of(n);
    ok = is_logical(op) ? all_in(DType::boolean, 2) : all_in(DType::f32, 2);
  } else if (kVariadic.count(t)) {
    ok = ot == DType::f32 && n_in >= 1 && node_opset(g, n) >= 8 && all_in(DType::f32, n_in);
  } else if (t == "Where") {
    ok = ot == DType::f32 && n_in == 3 && dtype_of(g, n.input(0)) == DType::boolean &&
         dtype_of(g, n.input(1)) == DType::f32 && dtype_of(g, n.input(2)) == DType::f32;
  } else if (t == "Cast") {
    std::optional<DType> from = n_in == 1 ? dtype_of(g, n.input(0)) : std::nullopt;
    bool from_ok = from == DType::f32 || from == DType::boolean || from == DType::i8 || from == DType::i16 ||
                   from == DType::i32 || from == DType::i64 || from == DType::u8 || from == DType::u16 ||
                   from == DType::u32 || from == DType::u64;
    ok = from_ok && (ot == DType::f32 || ot == DType::boolean);
  }
  if (!ok) return std::nullopt;
  return out->second.shape.to_shape();
}

// A lone f32 arithmetic / activation node over at least this many elements also gets a generated kernel:
// specialised code runs several times faster than the shared kernels, whose op is a run-time switch over
// strided indexing (a [4, 64, 128] Add: 0.057 ms shared on PoCL). Below it, launch cost dominates and a
// program per op would only cost build time (the conformance suite's one-op graphs stay on the shared
// kernels).
constexpr int64_t kLoneMinElements = 4096;

bool lone_worth_generating(const Graph& g, const Node& n, const Shape& s) {
  if (s.numel() < kLoneMinElements || dtype_of(g, n.outputs[0]) != DType::f32) return false;
  const std::string& t = n.op_type;
  return kBinary.count(t) || kVariadic.count(t) || kUnaryMath.count(t) || is_activation(t);
}

// Builds one group's program. Values are referred to while building as input k -> -(k + 1), step s -> s,
// and renumbered (inputs first) at the end.
class Emitter {
 public:
  explicit Emitter(const Graph& g) : g_(g) {}

  void add(const Node& n) {
    const std::string& t = n.op_type;
    auto arg = [&](size_t i) { return ref(n.input(i)); };
    int r = 0;
    if (t == "Clip" || is_activation(t) || kUnaryMath.count(t)) {
      std::vector<const HostTensor*> value;
      for (size_t i = 0; i < n.inputs.size(); ++i) value.push_back(n.input(i).empty() ? nullptr : constant(g_, n.input(i)));
      UnaryConfig u = unary_config(n, value, DType::f32, Shape{});
      bool act = u.op == UnaryOp::activation;
      r = step({FusedKind::unary, act ? int(u.act.kind) : int(u.op), u.act.alpha, u.act.beta, {}}, {arg(0)});
    } else if (t == "Not") {
      r = step(make(FusedKind::not_), {arg(0)});
    } else if (t == "Identity") {
      r = dtype_of(g_, n.input(0)) == DType::boolean ? step(make(FusedKind::to_bool), {arg(0)})
                                                       : step(make(FusedKind::unary, int(Act::none)), {arg(0)});
    } else if (kBinary.count(t)) {
      BinaryOp op = binary_of(n);
      const bool pred = is_comparison(op) || is_logical(op);
      r = step(make(pred ? FusedKind::compare : FusedKind::binary, int(op)), {arg(0), arg(1)});
    } else if (kVariadic.count(t)) {
      BinaryOp op = binary_of(n);
      r = arg(0);
      for (size_t i = 1; i < n.input_count(); ++i) r = step(make(FusedKind::binary, int(op)), {r, arg(i)});
      if (t == "Mean")
        r = step(make(FusedKind::unary, int(Act::affine), 1.0f / float(n.input_count()), 0.0f), {r});
      else if (n.input_count() == 1)
        r = step(make(FusedKind::unary, int(Act::none)), {r});
    } else if (t == "Where") {
      r = step(make(FusedKind::where), {arg(0), arg(1), arg(2)});
    } else if (t == "Cast") {
      r = step(make(dtype_of(g_, n.outputs[0]) == DType::boolean ? FusedKind::to_bool : FusedKind::to_float), {arg(0)});
    }
    value_[n.outputs[0]] = r;
  }

  // The fused node's config; `exports` are the group values its outputs carry.
  FusedConfig finish(const std::vector<std::string>& exports, const Shape& shape) {
    FusedConfig c;
    c.shape = shape;
    const int n_in = int(inputs_.size());
    auto index = [&](int r) { return r < 0 ? -r - 1 : n_in + r; };
    for (auto& in : inputs_) {
      const ValueInfo& v = g_.values.at(in);
      c.in_dtypes.push_back(v.dtype);
      c.in_shapes.push_back(v.shape.to_shape());
    }
    for (FusedStep s : steps_) {
      for (int& a : s.args) a = index(a);
      c.steps.push_back(std::move(s));
    }
    for (auto& e : exports) c.outputs.push_back(index(value_.at(e)));
    return c;
  }
  const std::vector<std::string>& inputs() const { return inputs_; }

 private:
  int step(FusedStep s, std::vector<int> args) {
    s.args = std::move(args);
    steps_.push_back(std::move(s));
    return int(steps_.size()) - 1;
  }
  int ref(const std::string& v) {
    if (auto it = value_.find(v); it != value_.end()) return it->second;
    const HostTensor* c = constant(g_, v);
    int r;
    if (c && c->dtype() == DType::f32 && c->numel() == 1) {
      r = step(make(FusedKind::constant, 0, c->as<float>()[0]), {});
    } else {
      inputs_.push_back(v);
      r = -int(inputs_.size());
    }
    value_[v] = r;
    return r;
  }
  const Graph& g_;
  std::vector<std::string> inputs_;
  std::vector<FusedStep> steps_;
  std::map<std::string, int> value_;
};

size_t fuse_elementwise(Graph& g) {
  if (!enabled()) return 0;
  const size_t N = g.nodes.size();
  auto readers = value_readers(g);
  auto producers = g.producers();
  std::vector<std::optional<Shape>> shape(N);
  for (size_t i = 0; i < N; ++i) shape[i] = fusible(g, g.nodes[i]);
  // group[i]: the group node i belongs to (-1: none); groups[k]: its members in order.
  std::vector<int> group(N, -1);
  // A group runs on one device: nodes placed on devices (kDeviceAttr) join only nodes placed alike.
  auto device_of = [&](size_t i) { return placed_device(g.nodes[i]); };
  std::vector<std::vector<size_t>> groups;
  // Whether the members plus node i may run as one node at i's place: every reader of a member's output
  // that comes before i is a member too.
  auto placeable = [&](const std::set<size_t>& members, size_t i) {
    for (size_t m : members)
      for (auto& o : g.nodes[m].outputs)
        for (int r : readers[o])
          if (r >= 0 && size_t(r) < i && !members.count(size_t(r))) return false;
    return true;
  };
  for (size_t i = 0; i < N; ++i) {
    if (!shape[i]) continue;
    std::set<int> cand;
    for (auto& in : g.nodes[i].inputs) {
      auto p = producers.find(in);
      if (p == producers.end()) continue;
      int k = group[p->second];
      if (k >= 0 && shape[p->second] == shape[i] && device_of(p->second) == device_of(i)) cand.insert(k);
    }
    auto try_join = [&](const std::set<int>& ks) {
      std::set<size_t> members;
      for (int k : ks) members.insert(groups[size_t(k)].begin(), groups[size_t(k)].end());
      if (!placeable(members, i)) return false;
      int into = *ks.begin();
      for (int k : ks) {
        if (k == into) continue;
        for (size_t m : groups[size_t(k)]) group[m] = into;
        groups[size_t(into)].insert(groups[size_t(into)].end(), groups[size_t(k)].begin(), groups[size_t(k)].end());
        groups[size_t(k)].clear();
      }
      groups[size_t(into)].push_back(i);
      std::sort(groups[size_t(into)].begin(), groups[size_t(into)].end());
      group[i] = into;
      return true;
    };
    bool joined = !cand.empty() && try_join(cand);
    for (auto it = cand.begin(); !joined && cand.size() > 1 && it != cand.end(); ++it) joined = try_join({*it});
    if (!joined) {
      group[i] = int(groups.size());
      groups.push_back({i});
    }
  }
  std::set<size_t> drop;
  std::map<size_t, Node> replace;  // the last member's index -> the fused node
  size_t fused = 0;
  for (auto& members : groups) {
    if (members.size() < 2 && !lone_worth_generating(g, g.nodes[members[0]], *shape[members[0]])) continue;
    // Identity alone (chains of them after host folding) is a plain copy: nothing to generate.
    if (std::all_of(members.begin(), members.end(), [&](size_t m) { return g.nodes[m].op_type == "Identity"; }))
      continue;
    std::set<size_t> mset(members.begin(), members.end());
    Emitter e(g);
    std::vector<std::string> exports, names;
    for (size_t m : members) {
      const Node& n = g.nodes[m];
      e.add(n);
      names.push_back(fmt::format("{} ({})", n.name, n.op_type));
      for (int r : readers[n.outputs[0]])
        if (r < 0 || !mset.count(size_t(r))) {
          exports.push_back(n.outputs[0]);
          break;
        }
    }
    FusedConfig cfg = e.finish(exports, *shape[members.back()]);
    try {
      FusedElementwise::validate(cfg);
    } catch (const Error& err) {
      log::warn("element-wise fusion of {} skipped: {}\n{}", g.nodes[members.back()].describe(), err.what(),
                FusedElementwise::describe(cfg));
      continue;
    }
    Node f;
    f.name = g.nodes[members.back()].name + "/fused";
    f.op_type = "FusedElementwise";
    f.domain = kFusedDomain;
    f.inputs = e.inputs();
    f.outputs = exports;
    std::vector<int64_t> steps, outs(cfg.outputs.begin(), cfg.outputs.end());
    std::vector<float> params;
    for (auto& s : cfg.steps) {
      steps.push_back(int64_t(s.kind));
      steps.push_back(s.op);
      steps.push_back(int64_t(s.args.size()));
      for (int a : s.args) steps.push_back(a);
      params.push_back(s.alpha);
      params.push_back(s.beta);
    }
    f.attrs["steps"] = steps;
    f.attrs["params"] = params;
    f.attrs["results"] = outs;
    f.attrs["shape"] = cfg.shape.dims;
    f.attrs["members"] = names;
    place_like(f, g.nodes[members.back()]);
    for (size_t m : members) {
      drop.insert(m);
      for (auto& o : g.nodes[m].outputs)
        if (std::find(exports.begin(), exports.end(), o) == exports.end()) g.values.erase(o);
    }
    drop.erase(members.back());
    replace[members.back()] = std::move(f);
    fused += members.size();
  }
  for (auto& [i, f] : replace) g.nodes[i] = std::move(f);
  erase_nodes(g, drop);
  if (fused) log::debug("element-wise fusion of '{}': {} nodes into {} kernels", g.name, fused, replace.size());
  return replace.size();
}

const bool kRegistered = (register_fusion_pass("elementwise", fuse_elementwise, FusionStage::late), true);

}  // namespace

// The FusedElementwise node's program (attributes steps / params / results / shape) over inputs `in`.
FusedConfig fused_config(const Node& n, const std::vector<ValueInfo>& in);
FusedConfig fused_config(const Node& n, const std::vector<ValueInfo>& in) {
  FusedConfig c;
  for (auto& v : in) {
    c.in_dtypes.push_back(v.dtype);
    c.in_shapes.push_back(v.shape.to_shape());
  }
  c.shape = Shape(n.attr_ints("shape"));
  std::vector<int64_t> steps = n.attr_ints("steps");
  std::vector<float> params;
  if (auto it = n.attrs.find("params"); it != n.attrs.end() && std::holds_alternative<std::vector<float>>(it->second))
    params = std::get<std::vector<float>>(it->second);
  for (size_t p = 0; p < steps.size();) {
    if (p + 3 > steps.size()) fail("{}: attribute 'steps' is truncated", n.describe());
    FusedStep s;
    s.kind = FusedKind(steps[p]);
    s.op = int(steps[p + 1]);
    size_t na = size_t(steps[p + 2]);
    p += 3;
    if (p + na > steps.size()) fail("{}: attribute 'steps' is truncated", n.describe());
    for (size_t a = 0; a < na; ++a) s.args.push_back(int(steps[p + a]));
    p += na;
    size_t k = c.steps.size();
    if (2 * k + 1 < params.size()) s.alpha = params[2 * k], s.beta = params[2 * k + 1];
    c.steps.push_back(std::move(s));
  }
  for (int64_t o : n.attr_ints("results")) c.outputs.push_back(int(o));
  return c;
}

namespace {

void infer_fused(InferCtx& c) {
  std::vector<ValueInfo> in;
  for (size_t i = 0; i < c.in.size(); ++i) {
    ValueInfo v = c.input(i);
    v.shape = c.shape(i);
    in.push_back(std::move(v));
  }
  FusedConfig cfg = fused_config(c.node, in);
  std::vector<DType> out = checked(c, [&] { return FusedElementwise::validate(cfg); });
  if (out.size() != c.out.size()) c.error("{} outputs, the expression computes {}", c.out.size(), out.size());
  for (size_t k = 0; k < out.size(); ++k) c.set(k, out[k], cfg.shape);
}

std::unique_ptr<NodeKernel> lower_fused(LowerCtx& c) {
  std::string members;
  if (auto it = c.node.attrs.find("members");
      it != c.node.attrs.end() && std::holds_alternative<std::vector<std::string>>(it->second))
    for (auto& m : std::get<std::vector<std::string>>(it->second)) members += (members.empty() ? "" : ", ") + m;
  return wrap(FusedElementwise::create(c.ctx, c.device, fused_config(c.node, c.in)), c, {},
              fmt::format("fuses {}", members));
}

const OpRegistration kOps{{.type = "FusedElementwise", .domain = kFusedDomain, .since = 1,
                           .family = "elementwise", .infer = infer_fused, .lower = lower_fused}};

}  // namespace

}  // namespace cldl::graph
