// Typed fusion passes (passes.hpp FusionStage::typed: after shape inference, every constant an
// initializer) that recognise the decomposed forms exporters write (PyTorch before opset 17/20, or
// attention written out by hand) and replace them by the fused op:
//  - LayerNorm: ReduceMean -> Sub -> Pow 2 (or Mul by itself) -> ReduceMean -> Add eps -> Sqrt -> Div
//    [-> Mul gamma] [-> Add beta] over the last axes  => LayerNormalization;
//  - GELU, erf form: Div sqrt2 (or Mul 1/sqrt2) -> Erf -> Add 1, times x and 0.5 in either Mul order
//    => Gelu; tanh form: x + 0.044715 x^3 -> Mul sqrt(2/pi) -> Tanh -> Add 1, times x and 0.5
//    => Gelu(approximate = tanh);
//  - attention: MatMul(Q, K^T) [-> Div / Mul scale] [-> Add mask] [-> Where(mask, -inf)] -> Softmax
//    (last axis) -> MatMul V  => Attention (scale, additive or boolean mask, is_causal when a constant
//    Where mask is the lower triangle). K^T's Transpose is rewritten to give K; any other K^T gets a
//    Transpose.
// Intermediate values must have no other reader (and not be graph outputs); otherwise nothing changes.
// The fused nodes are in kFusedDomain, so a model's opset need not know the fused op.
#include <cmath>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "models/op_registry.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

class Matcher {
 public:
  explicit Matcher(Graph& g) : g_(g), rd_(value_readers(g)), pr_(g.producers()) {}

  // The producer of `v` when it is an ai.onnx `op` not yet claimed by another rewrite.
  Node* producer(const std::string& v, const char* op) {
    auto it = pr_.find(v);
    if (it == pr_.end() || claimed(it->second)) return nullptr;
    Node& n = g_.nodes[it->second];
    return n.op_type == op && n.domain.empty() ? &n : nullptr;
  }
  // The only reader of `v` when it is an ai.onnx `op` (not a graph output, not claimed).
  Node* sole_reader(const std::string& v, const char* op) {
    auto it = rd_.find(v);
    if (it == rd_.end() || it->second.size() != 1 || it->second[0] < 0 || claimed(size_t(it->second[0])))
      return nullptr;
    Node& n = g_.nodes[size_t(it->second[0])];
    return n.op_type == op && n.domain.empty() ? &n : nullptr;
  }
  size_t reader_count(const std::string& v) const {
    auto it = rd_.find(v);
    return it == rd_.end() ? 0 : it->second.size();
  }
  size_t index(const Node* n) const { return size_t(n - g_.nodes.data()); }

  // A one-element f32 initializer's value.
  std::optional<double> scalar(const std::string& v) const {
    auto it = g_.initializers.find(v);
    if (it == g_.initializers.end() || it->second.numel() != 1 || it->second.dtype() != DType::f32) return {};
    return double(std::as_const(it->second).as<float>()[0]);  // const: no copy of shared bytes
  }
  bool scalar_is(const std::string& v, double want, double rel = 1e-5) const {
    auto s = scalar(v);
    return s && std::fabs(*s - want) <= rel * std::fabs(want);
  }
  const ValueInfo* info(const std::string& v) const {
    auto it = g_.values.find(v);
    return it == g_.values.end() ? nullptr : &it->second;
  }
  bool f32(const std::string& v) const {
    auto* i = info(v);
    return i && i->dtype == DType::f32 && i->shape.known && i->shape.is_static();
  }
  Shape shape(const std::string& v) const { return info(v)->shape.to_shape(); }
  // The input of a binary node other than `v` (empty when `v` is not one of them).
  static std::string other(const Node& n, const std::string& v) {
    if (n.input_count() != 2) return {};
    if (n.input(0) == v) return n.input(1);
    if (n.input(1) == v) return n.input(0);
    return {};
  }

  // Nodes of a candidate match are claimed as it is checked; commit() keeps them for removal once the
  // whole pattern matched, begin() forgets a failed candidate's.
  void begin() { pending_.clear(); }
  void claim(std::initializer_list<const Node*> ns) {
    for (auto* n : ns)
      if (n) pending_.insert(index(n));
  }
  void commit() { drop_.insert(pending_.begin(), pending_.end()), pending_.clear(); }
  bool claimed(size_t i) const { return drop_.count(i) || pending_.count(i); }
  void finish(std::vector<Node>& added) {
    erase_nodes(g_, drop_);
    for (auto& n : added) g_.nodes.push_back(std::move(n));
  }

 private:
  std::set<size_t> drop_, pending_;
  Graph& g_;
  ValueReaders rd_;
  std::map<std::string, size_t> pr_;
};

Node fused_node(Graph& g, const char* op, const std::string& like, std::vector<std::string> in, std::string out) {
  Node n;
  n.op_type = op;
  n.domain = kFusedDomain;
  n.name = g.unique_name(like.empty() ? std::string(op) : like + "_" + op);
  n.inputs = std::move(in);
  n.outputs = {std::move(out)};
  return n;
}

// ------------------------------------------------------------------ GELU
// `t` (1 + erf(..) or 1 + tanh(..)) times x times 0.5, in any order of the two Muls:
//   (x * t) * 0.5,  (t * x) * 0.5,  (x * 0.5) * t,  (t * 0.5) * x,  0.5 * (x * t)...
// Returns the product's value and claims its Muls.
std::optional<std::string> times_half_x(Matcher& m, const std::string& t, const std::string& x) {
  Node* m1 = m.sole_reader(t, "Mul");
  if (!m1) return {};
  std::string o1 = Matcher::other(*m1, t);
  if (o1.empty()) return {};
  if (o1 == x || m.scalar_is(o1, 0.5)) {  // (x * t) or (0.5 * t); the second Mul brings the other factor
    Node* m2 = m.sole_reader(m1->outputs[0], "Mul");
    if (!m2) return {};
    std::string o2 = Matcher::other(*m2, m1->outputs[0]);
    if (!(o1 == x ? m.scalar_is(o2, 0.5) : o2 == x)) return {};
    m.claim({m1, m2});
    return m2->outputs[0];
  }
  Node* h = m.producer(o1, "Mul");  // (x * 0.5) * t
  if (!h || m.reader_count(o1) != 1) return {};
  std::string hx = Matcher::other(*h, x);
  if (hx.empty() || !m.scalar_is(hx, 0.5)) return {};
  m.claim({m1, h});
  return m1->outputs[0];
}

size_t fuse_gelu(Graph& g) {
  // The patterns read opset-7+ forms (numpy broadcasting, not broadcast / axis) and start at an Erf or a Tanh.
  if (g.opset() < 7 || !has_op(g, {"Erf", "Tanh"})) return 0;
  Matcher m(g);
  std::vector<Node> added;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& e = g.nodes[i];
    if (!e.domain.empty() || (e.op_type != "Erf" && e.op_type != "Tanh") || m.claimed(i)) continue;
    const bool tanh_form = e.op_type == "Tanh";
    m.begin();
    std::string x;
    std::vector<const Node*> front;
    if (!tanh_form) {  // x / sqrt2 or x * (1/sqrt2)
      Node* d = m.producer(e.input(0), "Div");
      if (d && m.scalar_is(d->input(1), std::sqrt(2.0))) x = d->input(0);
      if (!d) {
        d = m.producer(e.input(0), "Mul");
        if (d) {
          if (m.scalar_is(d->input(1), std::sqrt(0.5)))
            x = d->input(0);
          else if (m.scalar_is(d->input(0), std::sqrt(0.5)))
            x = d->input(1);
        }
      }
      if (x.empty() || m.reader_count(e.input(0)) != 1) continue;
      front = {d};
    } else {  // sqrt(2/pi) * (x + 0.044715 * x^3)
      Node* s = m.producer(e.input(0), "Mul");
      if (!s || m.reader_count(e.input(0)) != 1) continue;
      std::string inner = m.scalar_is(s->input(0), std::sqrt(2.0 / M_PI))   ? s->input(1)
                          : m.scalar_is(s->input(1), std::sqrt(2.0 / M_PI)) ? s->input(0)
                                                                            : "";
      Node* add = inner.empty() ? nullptr : m.producer(inner, "Add");
      if (!add || m.reader_count(inner) != 1) continue;
      bool found = false;
      for (int side = 0; side < 2 && !found; ++side) {
        std::string cx = add->input(size_t(side)), cubic = add->input(size_t(1 - side));
        Node* c = m.producer(cubic, "Mul");
        if (!c || m.reader_count(cubic) != 1) continue;
        std::string cube = m.scalar_is(c->input(0), 0.044715)   ? c->input(1)
                           : m.scalar_is(c->input(1), 0.044715) ? c->input(0)
                                                                : "";
        if (cube.empty() || m.reader_count(cube) != 1) continue;
        // x^3 as Pow(x, 3), x * (x * x) or (x * x) * x
        if (Node* p = m.producer(cube, "Pow"); p && p->input(0) == cx && m.scalar_is(p->input(1), 3.0)) {
          front = {s, add, c, p};
          found = true;
        } else if (Node* q = m.producer(cube, "Mul")) {
          std::string sq = Matcher::other(*q, cx);
          Node* q2 = sq.empty() ? nullptr : m.producer(sq, "Mul");
          if (q2 && q2->input(0) == cx && q2->input(1) == cx && m.reader_count(sq) == 1) {
            front = {s, add, c, q, q2};
            found = true;
          }
        }
        if (found) x = cx;
      }
      if (!found) continue;
    }
    Node* one = m.sole_reader(e.outputs[0], "Add");
    if (!one || !m.scalar_is(Matcher::other(*one, e.outputs[0]), 1.0) || !m.f32(x)) continue;
    for (auto* n : front) m.claim({n});
    m.claim({&e, one});
    auto y = times_half_x(m, one->outputs[0], x);
    if (!y) continue;
    Node gelu = fused_node(g, "Gelu", e.name, {x}, *y);
    if (tanh_form) gelu.attrs["approximate"] = std::string("tanh");
    added.push_back(std::move(gelu));
    m.commit();
  }
  m.finish(added);
  return added.size();
}

// ------------------------------------------------------------------ LayerNorm
// ReduceMean axes as the first normalised axis when they are the last axes of a rank-`rank` input
// with keepdims; -1 otherwise.
int64_t trailing_axes(const Graph& g, const Node& r, int64_t rank) {
  if (r.attr_i("keepdims", 1) != 1) return -1;
  std::vector<int64_t> axes;
  if (r.has("axes"))
    axes = r.attr_ints("axes");
  else if (!r.input(1).empty()) {
    auto it = g.initializers.find(r.input(1));
    if (it == g.initializers.end()) return -1;
    axes = to_ints(it->second);
  }
  if (axes.empty()) return -1;
  for (auto& a : axes) {
    if (a < -rank || a >= rank) return -1;
    if (a < 0) a += rank;
  }
  std::sort(axes.begin(), axes.end());
  for (size_t k = 0; k < axes.size(); ++k)
    if (axes[k] != rank - int64_t(axes.size()) + int64_t(k)) return -1;
  return axes[0];
}

std::vector<int64_t> strip_leading_ones(std::vector<int64_t> d) {
  while (!d.empty() && d.front() == 1) d.erase(d.begin());
  return d;
}

// A new f32 initializer of the normalised shape `dims` (`cols` elements) for a fused norm's scale / bias:
// the constant `from` reshaped, or ones when `from` is empty. Returns its name; added to `inits`. The
// reshape shares `from`'s bytes, so a plan finds a model weight already on the device (ConstantCache)
// instead of uploading a copy per signature (26 uploads, 2.7 ms of a MiniLM plan, with copies).
std::string norm_param(Graph& g, std::vector<std::pair<std::string, HostTensor>>& inits, const std::string& from,
                       const std::string& tag, const std::vector<int64_t>& dims, int64_t cols) {
  std::string n = g.unique_name(from.empty() ? tag + "_ones" : from + "_" + tag);
  HostTensor h;
  if (from.empty()) {
    h = HostTensor(DType::f32, Shape{dims});
    std::fill_n(h.as<float>(), cols, 1.0f);
  } else {
    h = g.initializers.at(from);
    h.reshape(Shape{dims});
  }
  inits.emplace_back(n, std::move(h));
  return n;
}

size_t fuse_layernorm(Graph& g) {
  // The patterns read opset-7+ forms (numpy broadcasting, not broadcast / axis) and start at a ReduceMean.
  if (g.opset() < 7 || !has_op(g, {"ReduceMean"})) return 0;
  Matcher m(g);
  std::vector<Node> added;
  std::vector<std::pair<std::string, HostTensor>> new_inits;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& r1 = g.nodes[i];
    if (r1.op_type != "ReduceMean" || !r1.domain.empty() || m.claimed(i)) continue;
    const std::string x = r1.input(0);
    if (!m.f32(x)) continue;
    Shape xs = m.shape(x);
    const int64_t axis = trailing_axes(g, r1, int64_t(xs.rank()));
    if (axis < 0) continue;
    m.begin();
    Node* sub = m.sole_reader(r1.outputs[0], "Sub");
    if (!sub || sub->input(0) != x || sub->input(1) != r1.outputs[0]) continue;
    const std::string d = sub->outputs[0];
    if (m.reader_count(d) != 2) continue;
    // d^2 (Pow 2 or d * d) and d / sqrt(...) are d's two readers.
    Node *sq = nullptr, *div = nullptr;
    for (auto& n : g.nodes) {
      bool reads = std::find(n.inputs.begin(), n.inputs.end(), d) != n.inputs.end();
      if (!reads || !n.domain.empty()) continue;
      if (n.op_type == "Pow" && n.input(0) == d && m.scalar_is(n.input(1), 2.0))
        sq = &n;
      else if (n.op_type == "Mul" && n.input(0) == d && n.input(1) == d)
        sq = &n;
      else if (n.op_type == "Div" && n.input(0) == d)
        div = &n;
    }
    if (!sq || !div || m.claimed(m.index(sq)) || m.claimed(m.index(div))) continue;
    Node* r2 = m.sole_reader(sq->outputs[0], "ReduceMean");
    if (!r2 || trailing_axes(g, *r2, int64_t(xs.rank())) != axis) continue;
    Node* add = m.sole_reader(r2->outputs[0], "Add");
    if (!add) continue;
    auto eps = m.scalar(Matcher::other(*add, r2->outputs[0]));
    Node* sqrt = eps ? m.sole_reader(add->outputs[0], "Sqrt") : nullptr;
    if (!sqrt || div->input(1) != sqrt->outputs[0] || m.reader_count(sqrt->outputs[0]) != 1) continue;
    m.claim({&r1, sub, sq, r2, add, sqrt, div});
    std::string y = div->outputs[0];
    int64_t cols = 1;
    for (size_t a = size_t(axis); a < xs.rank(); ++a) cols *= xs[a];
    std::vector<int64_t> norm_dims(xs.dims.begin() + axis, xs.dims.end());
    // A constant of the normalised shape (leading 1s aside) is gamma / beta.
    auto affine = [&](const std::string& v) -> const HostTensor* {
      auto it = g.initializers.find(v);
      if (it == g.initializers.end() || it->second.dtype() != DType::f32 || it->second.numel() != cols) return nullptr;
      if (it->second.shape().rank() > xs.rank()) return nullptr;
      return strip_leading_ones(it->second.shape().dims) == strip_leading_ones(norm_dims) ? &it->second : nullptr;
    };
    std::string scale, bias;
    if (Node* mul = m.sole_reader(y, "Mul")) {
      std::string gname = Matcher::other(*mul, y);
      if (!gname.empty() && affine(gname)) {
        scale = gname;
        m.claim({mul});
        y = mul->outputs[0];
        if (Node* badd = m.sole_reader(y, "Add")) {
          std::string bname = Matcher::other(*badd, y);
          if (!bname.empty() && affine(bname)) {
            bias = bname;
            m.claim({badd});
            y = badd->outputs[0];
          }
        }
      }
    }
    // gamma / beta as the normalised shape (gamma = ones when absent)
    scale = norm_param(g, new_inits, scale, scale.empty() ? r1.name : std::string("ln"), norm_dims, cols);
    std::vector<std::string> in{x, scale};
    if (!bias.empty()) in.push_back(norm_param(g, new_inits, bias, "ln", norm_dims, cols));
    Node ln = fused_node(g, "LayerNormalization", r1.name, in, y);
    ln.attrs["axis"] = axis;
    ln.attrs["epsilon"] = float(*eps);
    added.push_back(std::move(ln));
    m.commit();
  }
  for (auto& [n, h] : new_inits) g.initializers[n] = std::move(h);
  m.finish(added);
  return added.size();
}

// ------------------------------------------------------------------ RMSNorm
// x^2 (Pow 2 or x * x) -> ReduceMean over the last axes (keepdims) -> Add eps -> Sqrt, then x / sqrt, or
// x * (1 / sqrt) with 1 / sqrt as Reciprocal or Div(1, sqrt) (torch.rsqrt's export), in either Mul order;
// then an optional Mul by a weight of the normalised shape: RMSNormalization (LLaMA / T5 code).
size_t fuse_rmsnorm(Graph& g) {
  if (g.opset() < 7 || !has_op(g, {"ReduceMean"})) return 0;
  Matcher m(g);
  std::vector<Node> added;
  std::vector<std::pair<std::string, HostTensor>> new_inits;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& r = g.nodes[i];
    if (r.op_type != "ReduceMean" || !r.domain.empty() || m.claimed(i)) continue;
    m.begin();
    Node* sq = m.producer(r.input(0), "Pow");
    std::string x;
    if (sq && m.scalar_is(sq->input(1), 2.0)) {
      x = sq->input(0);
    } else if ((sq = m.producer(r.input(0), "Mul")) && sq->input(0) == sq->input(1)) {
      x = sq->input(0);
    } else {
      continue;
    }
    if (m.reader_count(r.input(0)) != 1 || !m.f32(x)) continue;
    Shape xs = m.shape(x);
    const int64_t axis = trailing_axes(g, r, int64_t(xs.rank()));
    if (axis < 0) continue;
    Node* add = m.sole_reader(r.outputs[0], "Add");
    auto eps = add ? m.scalar(Matcher::other(*add, r.outputs[0])) : std::nullopt;
    Node* sqrt = eps ? m.sole_reader(add->outputs[0], "Sqrt") : nullptr;
    if (!sqrt) continue;
    const std::string sv = sqrt->outputs[0];
    std::string y;
    if (Node* div = m.sole_reader(sv, "Div"); div && div->input(1) == sv) {
      if (div->input(0) == x) {  // x / sqrt
        m.claim({div});
        y = div->outputs[0];
      } else if (m.scalar_is(div->input(0), 1.0)) {  // 1 / sqrt, then times x
        Node* mul = m.sole_reader(div->outputs[0], "Mul");
        if (!mul || Matcher::other(*mul, div->outputs[0]) != x) continue;
        m.claim({div, mul});
        y = mul->outputs[0];
      }
    } else if (Node* rec = m.sole_reader(sv, "Reciprocal")) {
      Node* mul = m.sole_reader(rec->outputs[0], "Mul");
      if (!mul || Matcher::other(*mul, rec->outputs[0]) != x) continue;
      m.claim({rec, mul});
      y = mul->outputs[0];
    }
    if (y.empty()) continue;
    m.claim({sq, &r, add, sqrt});
    int64_t cols = 1;
    for (size_t a = size_t(axis); a < xs.rank(); ++a) cols *= xs[a];
    std::vector<int64_t> norm_dims(xs.dims.begin() + axis, xs.dims.end());
    std::string scale;
    if (Node* wm = m.sole_reader(y, "Mul")) {
      std::string w = Matcher::other(*wm, y);
      auto it = g.initializers.find(w);
      if (!w.empty() && it != g.initializers.end() && it->second.dtype() == DType::f32 && it->second.numel() == cols &&
          it->second.shape().rank() <= xs.rank() &&
          strip_leading_ones(it->second.shape().dims) == strip_leading_ones(norm_dims)) {
        scale = norm_param(g, new_inits, w, "rms", norm_dims, cols);
        m.claim({wm});
        y = wm->outputs[0];
      }
    }
    if (scale.empty()) scale = norm_param(g, new_inits, "", r.name, norm_dims, cols);
    Node rn = fused_node(g, "RMSNormalization", r.name, {x, scale}, y);
    rn.attrs["axis"] = axis;
    rn.attrs["epsilon"] = float(*eps);
    added.push_back(std::move(rn));
    m.commit();
  }
  for (auto& [n, h] : new_inits) g.initializers[n] = std::move(h);
  m.finish(added);
  return added.size();
}

// ------------------------------------------------------------------ attention
bool is_minus_inf(std::optional<double> v) { return v && (std::isinf(*v) ? *v < 0 : *v <= -1e30); }

// `v` = x / c, x * c or c * x with c a finite, non-zero one-element constant: the factor (1 / c for Div),
// x and the node.
struct Scaled {
  double factor;
  std::string x;
  Node* node;
};
std::optional<Scaled> scaled(Matcher& m, const std::string& v) {
  Node* d = m.producer(v, "Div");
  Node* mu = d ? nullptr : m.producer(v, "Mul");
  Node* n = d ? d : mu;
  if (!n) return {};
  std::optional<double> c;
  std::string x;
  if ((c = m.scalar(n->input(1))))
    x = n->input(0);
  else if (mu && (c = m.scalar(n->input(0))))
    x = n->input(1);
  if (!c || *c == 0.0 || !std::isfinite(*c)) return {};
  return Scaled{d ? 1.0 / *c : *c, x, n};
}

size_t fuse_attention(Graph& g) {
  // The patterns read opset-7+ forms (numpy broadcasting, not broadcast / axis) and start at a Softmax.
  if (g.opset() < 7 || !has_op(g, {"Softmax"})) return 0;
  Matcher m(g);
  std::vector<Node> added;
  std::vector<std::pair<std::string, HostTensor>> new_inits;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& sm = g.nodes[i];
    if (sm.op_type != "Softmax" || !sm.domain.empty() || m.claimed(i) || !m.f32(sm.input(0))) continue;
    Shape ss = m.shape(sm.input(0));
    const int64_t rank = int64_t(ss.rank());
    // Before opset 13 the default axis is 1 and the input is coerced to 2-D there: the last axis only at rank - 1.
    const int64_t axis = sm.attr_i("axis", sm.opset < 13 ? 1 : -1);
    if ((rank != 3 && rank != 4) || (axis != -1 && axis != rank - 1)) continue;
    m.begin();
    Node* pv = m.sole_reader(sm.outputs[0], "MatMul");
    if (!pv || pv->input(0) != sm.outputs[0]) continue;
    // Walk back from the softmax input: at most one Add mask and one Where mask, then an optional scale.
    std::string v = sm.input(0), add_mask, where_cond;
    bool where_attend_is_cond = false, have_add = false, have_where = false;
    Node* qk = nullptr;
    double scale = 1.0;
    std::vector<const Node*> chain{&sm, pv};
    for (int step = 0; step < 4 && !qk; ++step) {
      if (m.reader_count(v) != 1) break;
      if (Node* n = m.producer(v, "MatMul")) {
        qk = n;
        break;
      }
      if (Node* a = m.producer(v, "Add"); a && !have_add) {
        // The scores are the input that leads to the QK MatMul; the other one is the mask.
        // A mask of another shape than the scores (HF's [B, 1, 1, S], itself often a Mul) tells them apart.
        std::string s = a->input(0), mk = a->input(1);
        const bool s_full = m.f32(s) && m.shape(s) == ss, mk_full = m.f32(mk) && m.shape(mk) == ss;
        if (s_full != mk_full) {
          if (mk_full) std::swap(s, mk);
        } else if (m.producer(mk, "MatMul") || m.producer(mk, "Div") || m.producer(mk, "Mul") ||
                   m.producer(mk, "Where")) {
          std::swap(s, mk);
        }
        if (!m.f32(mk) || !m.f32(s) || m.shape(s) != ss) break;
        add_mask = mk, have_add = true, v = s;
        chain.push_back(a);
        continue;
      }
      if (Node* w = m.producer(v, "Where"); w && !have_where) {
        std::string c = w->input(0);
        if (is_minus_inf(m.scalar(w->input(1))))
          v = w->input(2), where_attend_is_cond = false;
        else if (is_minus_inf(m.scalar(w->input(2))))
          v = w->input(1), where_attend_is_cond = true;
        else
          break;
        if (!m.f32(v) || m.shape(v) != ss) break;
        where_cond = c, have_where = true;
        chain.push_back(w);
        continue;
      }
      if (auto sc = scaled(m, v); sc && scale == 1.0) {
        scale = sc->factor, v = sc->x;
        chain.push_back(sc->node);
        continue;
      }
      break;
    }
    if (!qk || qk->outputs[0] != v || !m.f32(qk->input(0)) || !m.f32(qk->input(1)) || !m.f32(pv->input(1))) continue;
    chain.push_back(qk);
    std::string q = qk->input(0);
    const std::string kt = qk->input(1), vv = pv->input(1);
    // Q scaled before the product (torchvision's MultiheadAttention divides Q by sqrt(D)): into the scale too.
    if (auto sc = m.reader_count(q) == 1 ? scaled(m, q) : std::nullopt; sc && m.f32(sc->x) && m.shape(sc->x) == m.shape(q)) {
      scale *= sc->factor, q = sc->x;
      chain.push_back(sc->node);
    }
    Shape qs = m.shape(q), kts = m.shape(kt), vs = m.shape(vv);
    if (int64_t(qs.rank()) != rank || int64_t(kts.rank()) != rank || int64_t(vs.rank()) != rank) continue;
    bool ok = true;
    for (int64_t a = 0; a < rank - 2; ++a) ok = ok && qs[a] == kts[a] && qs[a] == vs[a];
    const int64_t Sq = qs[rank - 2], D = qs[rank - 1], Skv = kts[rank - 1];
    if (!ok || kts[rank - 2] != D || vs[rank - 2] != Skv || ss[rank - 2] != Sq || ss[rank - 1] != Skv) continue;
    // Masks: a Where on a constant lower triangle is is_causal; other masks become the mask input.
    bool causal = false;
    std::string mask;
    if (have_where) {
      auto ci = g.initializers.find(where_cond);
      const ValueInfo* cinfo = m.info(where_cond);
      if (!cinfo || cinfo->dtype != DType::boolean || !cinfo->shape.is_static()) continue;
      Shape cs = cinfo->shape.to_shape();
      if (ci != g.initializers.end() && cs.rank() >= 2 && cs[cs.rank() - 2] == Sq && cs[cs.rank() - 1] == Skv &&
          cs.numel() == Sq * Skv) {
        const bool* c = ci->second.as<bool>();
        causal = Sq == Skv;
        for (int64_t r = 0; r < Sq && causal; ++r)
          for (int64_t k = 0; k < Skv && causal; ++k)
            causal = c[r * Skv + k] == (where_attend_is_cond ? k <= r : k > r);
      }
      if (!causal) {
        if (have_add) continue;  // two masks that are not causal + one: the fused op takes one mask
        if (cs.rank() < 2 || int64_t(cs.rank()) > rank || (rank == 3 && cs.rank() == 3 && cs[0] != 1)) continue;
        if (where_attend_is_cond) {
          mask = where_cond;
        } else if (ci != g.initializers.end()) {
          HostTensor inv = ci->second;
          for (int64_t k = 0; k < inv.numel(); ++k) inv.as<bool>()[k] = !inv.as<bool>()[k];
          mask = g.unique_name(where_cond + "_attend");
          new_inits.emplace_back(mask, std::move(inv));
        } else {
          Node no;
          no.op_type = "Not";
          no.name = g.unique_name(sm.name + "_mask_not");
          no.inputs = {where_cond};
          mask = g.unique_name(where_cond + "_attend");
          no.outputs = {mask};
          added.push_back(std::move(no));
        }
      }
    }
    if (have_add) {
      Shape ms = m.shape(add_mask);
      if (ms.rank() < 2 || int64_t(ms.rank()) > rank || (rank == 3 && ms.rank() == 3 && ms[0] != 1)) continue;
      mask = add_mask;
    }
    // K from K^T: a Transpose read only here gets its last two perm entries swapped, else a new Transpose.
    std::string k;
    Node* tr = m.producer(kt, "Transpose");
    if (tr && m.reader_count(kt) == 1 && tr->has("perm")) {
      auto perm = tr->attr_ints("perm");
      std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
      tr->attrs["perm"] = perm;
      k = g.unique_name(kt + "_k");
      tr->outputs[0] = k;
    } else {
      Node tn;
      tn.op_type = "Transpose";
      tn.name = g.unique_name(qk->name + "_k");
      tn.inputs = {kt};
      k = g.unique_name(kt + "_k");
      tn.outputs = {k};
      tn.attrs["perm"] = rank == 4 ? std::vector<int64_t>{0, 1, 3, 2} : std::vector<int64_t>{0, 2, 1};
      added.push_back(std::move(tn));
    }
    for (auto* n : chain) m.claim({n});
    std::vector<std::string> in{q, k, vv};
    if (!mask.empty()) in.push_back(mask);
    Node at = fused_node(g, "Attention", sm.name, in, pv->outputs[0]);
    at.attrs["scale"] = float(scale);
    if (causal) at.attrs["is_causal"] = int64_t(1);
    if (rank == 3) {  // [B, S, D]: one head in the 3-D layout
      at.attrs["q_num_heads"] = int64_t(1);
      at.attrs["kv_num_heads"] = int64_t(1);
    }
    added.push_back(std::move(at));
    m.commit();
  }
  for (auto& [n, h] : new_inits) g.initializers[n] = std::move(h);
  size_t fused = size_t(std::count_if(added.begin(), added.end(), [](auto& n) { return n.op_type == "Attention"; }));
  m.finish(added);
  return fused;
}

// ------------------------------------------------------------------ attention heads
// The head split and merge around an Attention as exporters write them: Q, K and V each a Transpose that
// swaps the sequence and head axes of [..., S, H, D] - HF / BERT-style [B, S, H, D] -> [B, H, S, D] (a 4-D
// Attention), torchvision's MultiheadAttention [L, N*H, D] -> [N*H, L, D] (a 3-D Attention of N*H one-head
// items) - and the output's only reader the Transpose back. The fused op reads ONNX's 3-D layout
// [B, S, H*D] itself, the heads being strides of its kernel, so the four copies become views: Reshapes of
// the untransposed values to [B, S, H*D] (B = 1 for the 3-D form, whose L rows each hold N*H heads) and of
// the output back. Masks broadcast to [B, H, Sq, Skv] either way (the 3-D form's mask has no batch).
size_t fold_attention_heads(Graph& g) {
  Matcher m(g);
  std::vector<Node> added;
  size_t folded = 0;
  auto reshape = [&](const std::string& from, const Shape& to, const std::string& out, const std::string& like) {
    const std::string sh = g.unique_name(out + "_shape");
    g.initializers[sh] = HostTensor::from<int64_t>(Shape{int64_t(to.rank())}, to.dims);
    g.values[sh] = ValueInfo{sh, DType::i64, ValueShape(Shape{int64_t(to.rank())})};
    Node n;
    n.op_type = "Reshape";
    n.name = g.unique_name(like + "_heads");
    n.inputs = {from, sh};
    n.outputs = {out};
    n.opset = 14;
    added.push_back(std::move(n));
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    Node& at = g.nodes[i];
    if (at.op_type != "Attention" || at.domain != kFusedDomain || m.claimed(i) || at.outputs.size() != 1 ||
        at.input_count() < 3 || at.input_count() > 4 || !m.f32(at.input(0)))
      continue;
    const int64_t r = int64_t(m.shape(at.input(0)).rank());
    if (r == 3 ? at.attr_i("q_num_heads", 0) != 1 || at.attr_i("kv_num_heads", 0) != 1 : r != 4 || at.has("q_num_heads"))
      continue;
    std::vector<int64_t> swap;
    for (int64_t a = 0; a < r; ++a) swap.push_back(a);
    std::swap(swap[size_t(r - 3)], swap[size_t(r - 2)]);
    // The Transpose (swap) node producing `v` for this node alone.
    auto heads = [&](const std::string& v) -> Node* {
      Node* t = m.producer(v, "Transpose");
      return t && m.reader_count(v) == 1 && t->attr_ints("perm") == swap && m.f32(t->input(0)) ? t : nullptr;
    };
    m.begin();
    Node *tq = heads(at.input(0)), *tk = heads(at.input(1)), *tv = heads(at.input(2));
    Node* to = m.sole_reader(at.outputs[0], "Transpose");
    if (!tq || !tk || !tv || !to || to->attr_ints("perm") != swap || !m.f32(to->outputs[0])) continue;
    // [..., S, H, D] -> [B, S, H * D]
    auto flat = [&](const Node* t) {
      const Shape s = m.shape(t->input(0));
      return Shape{r == 4 ? s[0] : 1, s[size_t(r - 3)], s[size_t(r - 2)] * s[size_t(r - 1)]};
    };
    const Shape sq = m.shape(tq->input(0)), sk = m.shape(tk->input(0)), so = m.shape(to->outputs[0]);
    Node fused = at;
    for (const Node* t : {tq, tk, tv}) {
      const size_t k = size_t(t == tq ? 0 : t == tk ? 1 : 2);
      fused.inputs[k] = g.unique_name(t->input(0) + "_bshd");
      reshape(t->input(0), flat(t), fused.inputs[k], t->name);
    }
    fused.attrs["q_num_heads"] = sq[size_t(r - 2)];
    fused.attrs["kv_num_heads"] = sk[size_t(r - 2)];
    fused.outputs = {g.unique_name(at.outputs[0] + "_bshd")};
    reshape(fused.outputs[0], so, to->outputs[0], to->name);
    added.push_back(std::move(fused));
    m.claim({tq, tk, tv, to, &at});
    m.commit();
    ++folded;
  }
  m.finish(added);
  return folded;
}

struct Register {
  Register() {
    register_fusion_pass("layernorm-pattern", fuse_layernorm, FusionStage::typed);
    register_fusion_pass("rmsnorm-pattern", fuse_rmsnorm, FusionStage::typed);
    register_fusion_pass("gelu-pattern", fuse_gelu, FusionStage::typed);
    register_fusion_pass("attention-pattern", fuse_attention, FusionStage::typed);
    register_fusion_pass("attention-heads", fold_attention_heads, FusionStage::typed);
  }
} const kRegister;

}  // namespace
}  // namespace cldl::graph
