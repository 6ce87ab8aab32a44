// Reverse-mode differentiation: the backward rule of each op, build_backward over a forward subgraph, and the
// Gradient op's two steps (prepare_gradients at load, expand_gradient when planning). See autodiff.hpp.
#include "models/autodiff.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "models/control_flow.hpp"
#include "models/op_registry.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";
// The forward subgraph prepare_gradients gives a Gradient node: its nodes, and y (as computed for it) as output.
constexpr const char* kForwardAttr = "_cldl_forward";

bool is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::f64; }

// Ops whose outputs carry no gradient: they read only their input's shape.
bool no_gradient(const Node& n) { return n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size"); }

std::vector<std::string> reads_of(const Node& n) {
  std::vector<std::string> r;
  for (auto& in : n.inputs)
    if (!in.empty()) r.push_back(in);
  for (auto& in : n.outer_inputs()) r.push_back(in);
  return r;
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t r = std::max(a.rank(), b.rank());
  Shape s(std::vector<int64_t>(r, 1));
  for (size_t i = 0; i < r; ++i) {
    const int64_t x = i + a.rank() >= r ? a[i + a.rank() - r] : 1, y = i + b.rank() >= r ? b[i + b.rank() - r] : 1;
    if (x != y && x != 1 && y != 1) fail("shapes {} and {} do not broadcast", a.str(), b.str());
    s[i] = x == 1 ? y : x;
  }
  return s;
}

// Emits the backward nodes (kFusedDomain: the newest opset's semantics whatever the model's) and tracks the
// shapes of the values it makes, which inference sees only once the nodes are in the graph.
class Builder {
 public:
  Builder(Graph& g, std::string base) : g_(g), base_(std::move(base)) {}

  std::vector<Node> nodes;
  DType dtype = DType::f32;  // of the gradients: y's

  Shape shape(const std::string& v) const {
    if (auto it = made_.find(v); it != made_.end()) return it->second;
    const ValueInfo* info = g_.info(v);
    if (!info || !info->shape.is_static()) fail("value '{}' has no static shape", v);
    return info->shape.to_shape();
  }
  void set_shape(const std::string& v, Shape s) { made_[v] = std::move(s); }
  const ValueInfo* info(const std::string& v) const { return g_.info(v); }
  std::string constant_tensor(HostTensor t) { return add_constant(g_, base_ + "/const", std::move(t)); }
  const HostTensor* constant(const std::string& v) const {
    auto it = g_.initializers.find(v);
    return it == g_.initializers.end() ? nullptr : &it->second;
  }

  std::string emit(const std::string& what, const std::string& op, std::vector<std::string> in, Shape out,
                   std::map<std::string, AttrValue> attrs = {}) {
    std::string v = g_.unique_name(base_ + "/" + what);
    Node n = make_node(g_, base_ + "/" + what, op, std::move(in), {v}, std::move(attrs));
    n.domain = kFusedDomain;
    nodes.push_back(std::move(n));
    made_[v] = std::move(out);
    return v;
  }
  std::string scalar(double x, DType t) {
    auto key = std::make_pair(x, int(t));
    if (auto it = scalars_.find(key); it != scalars_.end()) return it->second;
    return scalars_[key] = add_constant(g_, base_ + "/scalar", from_doubles(t, Shape{}, {x}));
  }
  std::string scalar(double x) { return scalar(x, dtype); }
  std::string ints(const std::vector<int64_t>& v) {
    return add_constant(g_, base_ + "/ints", HostTensor::from<int64_t>(Shape{int64_t(v.size())}, v));
  }

  std::string binary(const char* op, const std::string& a, const std::string& b) {
    return emit(op, op, {a, b}, broadcast_shapes(shape(a), shape(b)));
  }
  std::string add(const std::string& a, const std::string& b) { return binary("Add", a, b); }
  std::string sub(const std::string& a, const std::string& b) { return binary("Sub", a, b); }
  std::string mul(const std::string& a, const std::string& b) { return binary("Mul", a, b); }
  std::string div(const std::string& a, const std::string& b) { return binary("Div", a, b); }
  std::string neg(const std::string& x) { return emit("Neg", "Neg", {x}, shape(x)); }

  std::string reshape(const std::string& x, const Shape& s) {
    if (shape(x) == s) return x;
    return emit("Reshape", "Reshape", {x, ints(s.dims)}, s, {{"allowzero", int64_t(1)}});
  }
  std::string expand(const std::string& x, const Shape& s) {
    if (shape(x) == s) return x;
    return emit("Expand", "Expand", {x, ints(s.dims)}, s);
  }
  std::string fill(double x, const Shape& s, DType t) {
    return emit("Fill", "Expand", {scalar(x, t), ints(s.dims)}, s);
  }
  std::string transpose(const std::string& x, const std::vector<int64_t>& perm) {
    const Shape s = shape(x);
    Shape out = s;
    for (size_t i = 0; i < perm.size(); ++i) out[i] = s[size_t(perm[i])];
    return emit("Transpose", "Transpose", {x}, out, {{"perm", perm}});
  }
  std::string transpose_last2(const std::string& x) {
    std::vector<int64_t> perm(shape(x).rank());
    for (size_t i = 0; i < perm.size(); ++i) perm[i] = int64_t(i);
    std::swap(perm[perm.size() - 1], perm[perm.size() - 2]);
    return transpose(x, perm);
  }
  // ReduceSum with keepdims over `axes` (non-negative).
  std::string reduce_sum(const std::string& x, const std::vector<int64_t>& axes) {
    Shape out = shape(x);
    for (int64_t a : axes) out[size_t(a)] = 1;
    return emit("ReduceSum", "ReduceSum", {x, ints(axes)}, out, {{"keepdims", int64_t(1)}});
  }
  // `grad` summed over the axes along which a value of shape `target` was broadcast to grad's shape (numpy: the
  // leading axes it lacks, and its 1s), then given target's shape.
  std::string sum_to(const std::string& grad, const Shape& target) {
    const Shape s = shape(grad);
    if (s == target) return grad;
    if (target.rank() > s.rank()) fail("a gradient of shape {} cannot be summed to shape {}", s.str(), target.str());
    const size_t lead = s.rank() - target.rank();
    std::vector<int64_t> axes;
    for (size_t i = 0; i < s.rank(); ++i) {
      const int64_t t = i < lead ? 1 : target[i - lead];
      if (t != s[i] && t != 1) fail("a gradient of shape {} cannot be summed to shape {}", s.str(), target.str());
      if (t == 1 && s[i] != 1) axes.push_back(int64_t(i));
    }
    return reshape(axes.empty() ? grad : reduce_sum(grad, axes), target);
  }
  std::string matmul(const std::string& a, const std::string& b) {
    const Shape sa = shape(a), sb = shape(b);
    Shape out = broadcast_shapes(Shape(std::vector<int64_t>(sa.dims.begin(), sa.dims.end() - 2)),
                                 Shape(std::vector<int64_t>(sb.dims.begin(), sb.dims.end() - 2)));
    out.dims.push_back(sa[sa.rank() - 2]);
    out.dims.push_back(sb[sb.rank() - 1]);
    return emit("MatMul", "MatMul", {a, b}, out);
  }
  // alpha * op(a) op(b) for 2-D a, b.
  std::string gemm(const std::string& a, const std::string& b, float alpha, bool ta, bool tb) {
    const Shape sa = shape(a), sb = shape(b);
    std::map<std::string, AttrValue> attrs{{"transA", int64_t(ta)}, {"transB", int64_t(tb)}};
    if (alpha != 1.0f) attrs["alpha"] = alpha;
    return emit("Gemm", "Gemm", {a, b}, Shape{sa[ta ? 1 : 0], sb[tb ? 0 : 1]}, std::move(attrs));
  }
  // A node of several outputs, each (shape) made or not ("" for the ones left out).
  std::vector<std::string> emit_outputs(const std::string& what, const std::string& op, std::vector<std::string> in,
                                        const std::vector<std::optional<Shape>>& outs,
                                        std::map<std::string, AttrValue> attrs = {}) {
    std::vector<std::string> names;
    for (auto& o : outs) names.push_back(o ? g_.unique_name(base_ + "/" + what) : "");
    Node n = make_node(g_, base_ + "/" + what, op, std::move(in), names, std::move(attrs));
    n.domain = kFusedDomain;
    nodes.push_back(std::move(n));
    for (size_t i = 0; i < outs.size(); ++i)
      if (outs[i]) made_[names[i]] = *outs[i];
    return names;
  }
  // The sum of gradient contributions of one value (all of its shape).
  std::string sum(const std::vector<std::string>& parts, const Shape& s) {
    return parts.size() == 1 ? parts[0] : emit("Sum", "Sum", parts, s);
  }

 private:
  Graph& g_;
  std::string base_;
  std::map<std::string, Shape> made_;
  std::map<std::pair<double, int>, std::string> scalars_;
};

// One forward node as its rule sees it: dy (the gradient of its output 0) in, dx (per input; "" = none) out.
// A rule computes dx only for the inputs that carry a gradient (active). The rules of multi_output_ops() read the
// gradient of each output from dys ("" where y does not depend on that output; dy is dys[0], "" too then).
struct Step {
  const Node& node;
  int64_t opset;
  std::string dy;
  std::vector<bool> active;
  std::vector<std::string> dx;
  const std::string& in(size_t i) const { return node.input(i); }
  const std::string& y() const { return node.outputs.at(0); }
  bool wants(size_t i) const { return i < active.size() && active[i]; }
  std::vector<std::string> dys = {};
};

// Add, Sub, Mul, Div: numpy broadcasting (before opset 7, B read as legacy_broadcast says).
void binary_rule(Builder& b, Step& s) {
  const std::string &A = s.in(0), &B = s.in(1), &op = s.node.op_type;
  const Shape sa = b.shape(A), sb = b.shape(B);
  Shape sb_read = sb;
  if (auto lb = legacy_broadcast(s.node, s.opset, sa, sb)) sb_read = *lb;
  const std::string Bn = b.reshape(B, sb_read);
  if (s.wants(0)) {
    std::string d = op == "Mul" ? b.mul(s.dy, Bn) : op == "Div" ? b.div(s.dy, Bn) : s.dy;
    s.dx[0] = b.sum_to(d, sa);
  }
  if (s.wants(1)) {
    std::string d = op == "Add"   ? s.dy
                    : op == "Sub" ? b.neg(s.dy)
                    : op == "Mul" ? b.mul(s.dy, A)
                                  : b.neg(b.div(b.mul(s.dy, s.y()), Bn));  // d(A / B) / dB = -(A / B) / B
    s.dx[1] = b.reshape(b.sum_to(d, sb_read), sb);
  }
}

void unary_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const std::string &op = s.node.op_type, &x = s.in(0), &y = s.y();
  std::string d;
  if (op == "Identity")
    d = s.dy;
  else if (op == "Neg")
    d = b.neg(s.dy);
  else if (op == "Relu") {  // 0 at x = 0
    std::string pos = b.emit("Greater", "Greater", {x, b.scalar(0)}, b.shape(x));
    d = b.emit("Where", "Where", {pos, s.dy, b.scalar(0)}, b.shape(x));
  } else if (op == "Sigmoid")
    d = b.mul(s.dy, b.mul(y, b.sub(b.scalar(1), y)));
  else if (op == "Tanh")
    d = b.mul(s.dy, b.sub(b.scalar(1), b.mul(y, y)));
  else if (op == "Exp")
    d = b.mul(s.dy, y);
  else if (op == "Log")
    d = b.div(s.dy, x);
  else if (op == "Sqrt")
    d = b.div(b.mul(s.dy, b.scalar(0.5)), y);
  s.dx[0] = d;
}

// Reshape, Flatten, Squeeze, Unsqueeze: the same elements under x's shape.
void view_rule(Builder& b, Step& s) {
  if (s.wants(0)) s.dx[0] = b.reshape(s.dy, b.shape(s.in(0)));
}

void transpose_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const size_t r = b.shape(s.in(0)).rank();
  std::vector<int64_t> perm = s.node.attr_ints("perm");
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(int64_t(r - 1 - i));
  if (perm.size() != r) fail("{}: perm has {} entries for rank {}", s.node.describe(), perm.size(), r);
  std::vector<int64_t> inverse(r);
  for (size_t i = 0; i < r; ++i) inverse.at(size_t(perm[i])) = int64_t(i);
  s.dx[0] = b.transpose(s.dy, inverse);
}

// ReduceSum, ReduceMean: dy (with the reduced axes kept as 1s) broadcast back to x's shape.
void reduce_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Node& n = s.node;
  const Shape sx = b.shape(s.in(0));
  const size_t r = sx.rank();
  std::vector<int64_t> axes;
  if (n.has("axes")) {
    axes = n.attr_ints("axes");
  } else if (!n.input(1).empty()) {
    const HostTensor* t = b.constant(n.input(1));
    if (!t) fail("{}: axes '{}' are computed from run-time data", n.describe(), n.input(1));
    axes = to_ints(*t);
  }
  std::vector<bool> reduced(r, axes.empty() && n.attr_i("noop_with_empty_axes", 0) == 0);
  for (int64_t a : axes) {
    const int64_t k = a < 0 ? a + int64_t(r) : a;
    if (k < 0 || k >= int64_t(r)) fail("{}: axis {} is outside rank {}", n.describe(), a, r);
    reduced[size_t(k)] = true;
  }
  Shape kept = sx;
  int64_t count = 1;
  for (size_t i = 0; i < r; ++i) {
    if (!reduced[i]) continue;
    count *= sx[i];
    kept[i] = 1;
  }
  std::string d = b.reshape(s.dy, kept);
  if (n.op_type == "ReduceMean" && count > 1) d = b.mul(d, b.scalar(1.0 / double(count)));
  s.dx[0] = b.expand(d, sx);
}

// The softmax axes (opset 13's axis, or the 2-D coercion's axis..rank-1 before it).
std::vector<int64_t> softmax_axes(const Step& s, int64_t r) {
  const bool legacy = s.opset < 13;
  int64_t axis = s.node.attr_i("axis", legacy ? 1 : -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) fail("{}: axis {} is outside rank {}", s.node.describe(), s.node.attr_i("axis", 0), r);
  std::vector<int64_t> axes;
  for (int64_t a = axis; a < (legacy ? r : axis + 1) && a < r; ++a) axes.push_back(a);
  return axes;
}

// dx = y * (dy - sum(dy * y)) over the softmax axes.
void softmax_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const auto axes = softmax_axes(s, int64_t(b.shape(s.in(0)).rank()));
  const std::string& y = s.y();
  std::string dot = b.mul(s.dy, y);
  if (!axes.empty()) dot = b.reduce_sum(dot, axes);
  s.dx[0] = b.mul(y, b.sub(s.dy, dot));
}

// numpy matmul: a 1-D A is [1, K] and a 1-D B [K, 1] with that axis dropped from Y; batch dims broadcast.
void matmul_rule(Builder& b, Step& s) {
  const Shape sa = b.shape(s.in(0)), sb = b.shape(s.in(1));
  const Shape sa2 = sa.rank() == 1 ? Shape{1, sa[0]} : sa, sb2 = sb.rank() == 1 ? Shape{sb[0], 1} : sb;
  const std::string A = b.reshape(s.in(0), sa2), B = b.reshape(s.in(1), sb2);
  Shape batch = broadcast_shapes(Shape(std::vector<int64_t>(sa2.dims.begin(), sa2.dims.end() - 2)),
                                 Shape(std::vector<int64_t>(sb2.dims.begin(), sb2.dims.end() - 2)));
  const int64_t M = sa2[sa2.rank() - 2], K = sa2[sa2.rank() - 1], N = sb2[sb2.rank() - 1];
  Shape sy2 = batch;
  sy2.dims.push_back(M);
  sy2.dims.push_back(N);
  const std::string dy = b.reshape(s.dy, sy2);
  // With a 2-D B, the batch rows of A and dY are the rows of one GEMM (no transposes).
  const int64_t rows = batch.numel() * M;
  if (s.wants(0)) {  // dA = dY B^T
    Shape sd = batch;
    sd.dims.push_back(M);
    sd.dims.push_back(K);
    std::string d = sb2.rank() == 2 ? b.reshape(b.gemm(b.reshape(dy, Shape{rows, N}), B, 1.0f, false, true), sd)
                                    : b.matmul(dy, b.transpose_last2(B));
    s.dx[0] = b.reshape(b.sum_to(d, sa2), sa);
  }
  if (s.wants(1)) {  // dB = A^T dY
    std::string d = sb2.rank() == 2
                        ? b.gemm(b.reshape(A, Shape{rows, K}), b.reshape(dy, Shape{rows, N}), 1.0f, true, false)
                        : b.matmul(b.transpose_last2(A), dy);
    s.dx[1] = b.reshape(b.sum_to(d, sb2), sb);
  }
}

// Y = alpha op(A) op(B) + beta C.
void gemm_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  const float alpha = n.attr_f("alpha", 1.0f), beta = n.attr_f("beta", 1.0f);
  const bool ta = n.attr_i("transA", 0) != 0, tb = n.attr_i("transB", 0) != 0;
  const std::string &A = s.in(0), &B = s.in(1), &dy = s.dy;
  if (s.wants(0))  // d op(A) = alpha dY op(B)^T
    s.dx[0] = ta ? b.gemm(B, dy, alpha, tb, true) : b.gemm(dy, B, alpha, false, !tb);
  if (s.wants(1))  // d op(B) = alpha op(A)^T dY
    s.dx[1] = tb ? b.gemm(dy, A, alpha, true, ta) : b.gemm(A, dy, alpha, !ta, false);
  if (s.wants(2)) s.dx[2] = b.sum_to(beta == 1.0f ? dy : b.mul(dy, b.scalar(beta)), b.shape(s.in(2)));
}

// The explicit geometry of a Conv / MaxPool / AveragePool node (1 or 2 spatial dims) for the backward ops of
// models/ops_backward.cpp: auto_pad resolved against the output's actual extent (which ceil_mode decided).
std::map<std::string, AttrValue> window_attrs(const Step& s, const Shape& x, const Shape& y,
                                              std::vector<int64_t> kernel) {
  const Node& n = s.node;
  const size_t r = x.rank() - 2;
  if (x.rank() < 3 || r > 2)
    fail("{}: the backward handles 1-D and 2-D windows (input rank 3 or 4), got input shape {}", n.describe(),
         x.str());
  if (n.has("kernel_shape")) kernel = n.attr_ints("kernel_shape");
  auto strides = n.attr_ints("strides", std::vector<int64_t>(r, 1)),
       dilations = n.attr_ints("dilations", std::vector<int64_t>(r, 1)),
       pads = n.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (kernel.size() != r || strides.size() != r || dilations.size() != r || pads.size() != 2 * r)
    fail("{}: kernel_shape, strides, dilations and pads do not match {} spatial dims", n.describe(), r);
  const std::string auto_pad = n.attr_s("auto_pad", "NOTSET");
  if (auto_pad == "VALID") pads.assign(2 * r, 0);
  if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER")
    for (size_t i = 0; i < r; ++i) {
      const int64_t total =
          std::max<int64_t>(0, (y[2 + i] - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - x[2 + i]);
      pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[r + i] = total - pads[i];
    }
  return {{"kernel_shape", kernel}, {"strides", strides}, {"dilations", dilations}, {"pads", pads}};
}

// Conv(X, W, B): dX and dW by the backward ops (ConvGradData, ConvGradFilter: groups, strides, pads, dilations),
// dB = dY summed over batch and space.
void conv_rule(Builder& b, Step& s) {
  const Shape sx = b.shape(s.in(0)), sw = b.shape(s.in(1)), sy = b.shape(s.y());
  auto attrs = window_attrs(s, sx, sy, std::vector<int64_t>(sw.dims.begin() + 2, sw.dims.end()));
  attrs["group"] = s.node.attr_i("group", 1);
  if (s.wants(0)) {
    auto a = attrs;
    a["out_shape"] = sx.dims;
    s.dx[0] = b.emit("ConvGradData", "ConvGradData", {s.dy, s.in(1)}, sx, a);
  }
  if (s.wants(1)) {
    auto a = attrs;
    a["out_shape"] = sw.dims;
    s.dx[1] = b.emit("ConvGradFilter", "ConvGradFilter", {s.dy, s.in(0)}, sw, a);
  }
  if (s.wants(2)) {
    std::vector<int64_t> axes{0};
    for (size_t i = 2; i < sy.rank(); ++i) axes.push_back(int64_t(i));
    s.dx[2] = b.reshape(b.reduce_sum(s.dy, axes), b.shape(s.in(2)));
  }
}

// MaxPool (dy to each window's first largest element, recomputed from x), AveragePool (dy / the window's count).
void pool_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Shape sx = b.shape(s.in(0)), sy = b.shape(s.y());
  if (!s.node.has("kernel_shape")) fail("{}: attribute kernel_shape is missing", s.node.describe());
  auto attrs = window_attrs(s, sx, sy, {});
  attrs["out_shape"] = sx.dims;
  const bool max = s.node.op_type == "MaxPool";
  if (!max) attrs["count_include_pad"] = s.node.attr_i("count_include_pad", 0);
  const char* op = max ? "MaxPoolGrad" : "AveragePoolGrad";
  s.dx[0] = b.emit(op, op, {s.dy, s.in(0)}, sx, attrs);
}

// GlobalAveragePool: dy / (the spatial size), broadcast over the plane.
void global_pool_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Shape sx = b.shape(s.in(0));
  int64_t plane = 1;
  for (size_t i = 2; i < sx.rank(); ++i) plane *= sx[i];
  s.dx[0] = b.expand(plane > 1 ? b.mul(s.dy, b.scalar(1.0 / double(plane))) : s.dy, sx);
}

// LogSoftmax: dx = dy - softmax(x) * sum(dy) over the axes.
void log_softmax_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const auto axes = softmax_axes(s, int64_t(b.shape(s.in(0)).rank()));
  std::string total = axes.empty() ? s.dy : b.reduce_sum(s.dy, axes);
  s.dx[0] = b.sub(s.dy, b.mul(b.emit("Exp", "Exp", {s.y()}, b.shape(s.y())), total));
}

// SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss over [N, C, d...] with targets t [N, d...]: per position the
// scale k = w[t] (1 without weights; 0 where t is ignore_index) times dy (none: dy's element; sum: dy; mean:
// dy / the sum of k). dscores = (softmax(scores) - onehot(t)) * k; dinput (NLL) = -onehot(t) * k. A target out of
// range gets no gradient (its loss term is already NaN).
void loss_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  if (s.wants(2)) fail("{}: the gradient with respect to the class weights is not implemented", n.describe());
  if (!s.wants(0)) return;
  const bool sce = n.op_type == "SoftmaxCrossEntropyLoss";
  const Shape sx = b.shape(s.in(0)), st = b.shape(s.in(1));
  const ValueInfo* ti = b.info(s.in(1));
  if (!ti) fail("{}: target '{}' is not known", n.describe(), s.in(1));
  const DType tt = ti->dtype;
  const std::string reduction = n.attr_s("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean")
    fail("{}: reduction must be none, sum or mean, got '{}'", n.describe(), reduction);
  Shape bcast = st;  // [N, 1, d...]: the targets lined up with the scores' class axis
  bcast.dims.insert(bcast.dims.begin() + 1, 1);
  Shape classes(std::vector<int64_t>(sx.rank(), 1));
  classes[1] = sx[1];
  std::vector<double> ids(static_cast<size_t>(sx[1]));
  for (size_t c = 0; c < ids.size(); ++c) ids[c] = double(c);
  const std::string range = b.constant_tensor(from_doubles(tt, classes, ids));
  // Positions whose target counts; their targets (ignored ones read as class 0).
  std::string t = s.in(1), keep;
  if (n.has("ignore_index")) {
    keep = b.emit("Not", "Not", {b.emit("Equal", "Equal", {t, b.scalar(double(n.attr_i("ignore_index", 0)), tt)}, st)},
                  st);
    t = b.emit("Where", "Where", {keep, t, b.scalar(0.0, tt)}, st);
  }
  std::string k;  // the per-position weight [N, d...]
  if (!n.input(2).empty()) k = b.emit("Gather", "Gather", {n.input(2), t}, st, {{"axis", int64_t(0)}});
  if (!keep.empty()) {
    std::string kf = b.emit("Cast", "Cast", {keep}, st, {{"to", int64_t(1)}});
    k = k.empty() ? kf : b.mul(k, kf);
  }
  if (k.empty()) k = b.fill(1.0, st, DType::f32);
  std::string scale;
  if (reduction != "mean") {
    scale = b.mul(k, s.dy);  // dy [N, d...] (none) or a scalar (sum)
  } else {
    std::vector<int64_t> all(st.rank());
    for (size_t i = 0; i < all.size(); ++i) all[i] = int64_t(i);
    scale = b.mul(k, b.div(s.dy, b.reshape(b.reduce_sum(k, all), Shape{})));
  }
  scale = b.reshape(scale, bcast);
  const std::string onehot =
      b.emit("Cast", "Cast", {b.emit("Equal", "Equal", {b.reshape(t, bcast), range}, sx)}, sx, {{"to", int64_t(1)}});
  if (!sce) {
    s.dx[0] = b.neg(b.mul(onehot, scale));
    return;
  }
  std::string lp = n.outputs.size() > 1 && !n.outputs[1].empty() ? n.outputs[1] : "";
  if (lp.empty()) lp = b.emit("LogSoftmax", "LogSoftmax", {s.in(0)}, sx, {{"axis", int64_t(1)}});
  const std::string p = b.emit("Exp", "Exp", {lp}, sx);
  s.dx[0] = b.mul(b.sub(p, onehot), scale);
}

// LSTM and GRU (and their training forms LSTMTrain / GRUTrain, models/ops_rnn_backward.cpp): backward through time
// by RNNGrad from the states the forward saved (S, the training form's last output; a plain LSTM / GRU, whose
// weights are constants, gets a training forward that recomputes them). dY, dY_h and dY_c as y depends on them.
void rnn_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  const bool lstm = n.op_type == "LSTM" || n.op_type == "LSTMTrain", train = n.op_type.ends_with("Train");
  if (!n.input(4).empty())
    fail("{}: sequence_lens is not differentiated (only full sequences: give no sequence_lens)", n.describe());
  if (lstm && !n.input(7).empty()) fail("{}: peepholes (input P) are not differentiated", n.describe());
  const Shape sx = b.shape(s.in(0)), sw = b.shape(s.in(1)), sr = b.shape(s.in(2));
  if (sx.rank() != 3 || sr.rank() != 3) fail("{}: X {} and R {} must have rank 3", n.describe(), sx.str(), sr.str());
  const int64_t D = sr[0], G = sr[1], H = sr[2], layout = n.attr_i("layout", 0);
  const Shape saved{D, sx[0] * sx[1], G + 2 * H}, state = layout ? Shape{sx[0], D, H} : Shape{D, sx[1], H};
  auto attrs = n.attrs;
  attrs["cell"] = std::string(lstm ? "LSTM" : "GRU");
  std::string S;
  if (train) {
    S = n.outputs.back();
  } else {
    std::vector<std::optional<Shape>> outs(lstm ? 3 : 2);
    outs.push_back(saved);
    std::vector<std::string> in{s.in(0), s.in(1), s.in(2), s.in(3), "", s.in(5)};
    if (lstm) in.push_back(s.in(6));
    S = b.emit_outputs("Recompute", lstm ? "LSTMTrain" : "GRUTrain", in, outs, n.attrs).back();
  }
  auto dys = s.dys;
  dys.resize(3);
  std::vector<std::optional<Shape>> outs(lstm ? 6 : 5);
  if (s.wants(0)) outs[0] = sx;
  if (s.wants(1)) outs[1] = sw;
  if (s.wants(2)) outs[2] = sr;
  if (s.wants(3)) outs[3] = Shape{D, 2 * G};
  if (s.wants(5)) outs[4] = state;
  if (lstm && s.wants(6)) outs[5] = state;
  if (std::none_of(outs.begin(), outs.end(), [](auto& o) { return o.has_value(); })) return;
  const auto d = b.emit_outputs("RNNGrad", "RNNGrad", {s.in(0), s.in(1), s.in(2), S, dys[0], dys[1], lstm ? dys[2] : ""},
                                outs, attrs);
  for (size_t i = 0; i < outs.size(); ++i)
    if (!d[i].empty()) s.dx.at(i < 4 ? i : i + 1) = d[i];  // outputs dX, dW, dR, dB, d initial_h / _c: inputs 0-3, 5, 6
}

// The ops whose rule reads the gradients of several outputs (Step::dys).
const std::set<std::string>& multi_output_ops() {
  static const std::set<std::string> ops = {"LSTM", "GRU", "LSTMTrain", "GRUTrain", "Split"};
  return ops;
}

// BatchNormalization over [N, C, d...]: training_mode 1 normalises with the batch's statistics (mean and population
// variance over N and space; its running_mean / running_var outputs carry no gradient, the mean / var inputs get
// none), inference with the given mean / var. xhat = (x - mean) / sqrt(var + eps), y = scale xhat + B.
//   dB = sum(dy), dscale = sum(dy xhat) (over N and space);
//   training: dx = scale / sqrt(var + eps) * (dy - dB / n - xhat dscale / n), n = N * space;
//   inference: dx = dy scale / sqrt(var + eps), dmean = -dB scale / sqrt(var + eps),
//              dvar = -dscale scale / (2 (var + eps)).
void batch_norm_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  const Shape sx = b.shape(s.in(0));
  if (sx.rank() < 2) fail("{}: input X has shape {}, expected [N, C, ...]", n.describe(), sx.str());
  const int64_t C = sx[1], count = C ? sx.numel() / C : 0;
  Shape cs(std::vector<int64_t>(sx.rank(), 1));
  cs[1] = C;
  std::vector<int64_t> axes{0};
  for (size_t i = 2; i < sx.rank(); ++i) axes.push_back(int64_t(i));
  const bool training = n.attr_i("training_mode", 0) != 0;
  const double eps = n.attr_f("epsilon", 1e-5f);
  if (training && sx.numel() > 0) {  // one kernel (BatchNormGrad) for dx, dscale and dbias
    const auto d = b.emit_outputs("BatchNormGrad", "BatchNormGrad", {s.dy, s.in(0), s.in(1)}, {sx, Shape{C}, Shape{C}},
                                  {{"epsilon", float(eps)}});
    if (s.wants(0)) s.dx[0] = d[0];
    if (s.wants(1)) s.dx[1] = b.reshape(d[1], b.shape(s.in(1)));
    if (s.wants(2)) s.dx[2] = b.reshape(d[2], b.shape(s.in(2)));
    return;
  }
  auto channel = [&](size_t i) { return b.reshape(s.in(i), cs); };
  const std::string& x = s.in(0);
  const double inv_n = 1.0 / double(std::max<int64_t>(count, 1));
  std::string mean = training ? b.mul(b.reduce_sum(x, axes), b.scalar(inv_n)) : channel(3);
  const std::string xc = b.sub(x, mean);
  std::string var = training ? b.mul(b.reduce_sum(b.mul(xc, xc), axes), b.scalar(inv_n)) : channel(4);
  const std::string inv = b.div(b.scalar(1), b.emit("Sqrt", "Sqrt", {b.add(var, b.scalar(eps))}, cs));
  const std::string xhat = b.mul(xc, inv);
  const bool dx = s.wants(0), dmean = !training && s.wants(3), dvar = !training && s.wants(4);
  std::string db, dscale;
  if (s.wants(2) || (training && dx) || dmean) db = b.reduce_sum(s.dy, axes);
  if (s.wants(1) || (training && dx) || dvar) dscale = b.reduce_sum(b.mul(s.dy, xhat), axes);
  if (s.wants(1)) s.dx[1] = b.reshape(dscale, b.shape(s.in(1)));
  if (s.wants(2)) s.dx[2] = b.reshape(db, b.shape(s.in(2)));
  const std::string k = b.mul(channel(1), inv);  // scale / sqrt(var + eps)
  if (dx) {
    if (training) {
      const std::string centred =
          b.sub(b.sub(s.dy, b.mul(db, b.scalar(inv_n))), b.mul(xhat, b.mul(dscale, b.scalar(inv_n))));
      s.dx[0] = b.mul(k, centred);
    } else {
      s.dx[0] = b.mul(s.dy, k);
    }
  }
  if (dmean) s.dx[3] = b.reshape(b.neg(b.mul(db, k)), b.shape(s.in(3)));
  if (dvar) s.dx[4] = b.reshape(b.mul(b.mul(dscale, b.mul(k, inv)), b.scalar(-0.5)), b.shape(s.in(4)));
}

// The elementwise activations whose derivative is a few elementwise nodes (the fusion pass makes one kernel of
// them). Kinks take PyTorch's side: LeakyRelu / Elu / HardSigmoid / HardSwish / Clip as torch's backward does.
void activation_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Node& n = s.node;
  const std::string &op = n.op_type, &x = s.in(0), &y = s.y(), &dy = s.dy;
  const Shape sx = b.shape(x);
  auto cmp = [&](const char* c, const std::string& a, const std::string& v) {
    return b.emit(c, c, {a, v}, b.shape(a));
  };
  auto where = [&](const std::string& c, const std::string& t, const std::string& f) {
    return b.emit("Where", "Where", {c, t, f}, sx);
  };
  auto fn = [&](const char* f, const std::string& a) { return b.emit(f, f, {a}, b.shape(a)); };
  const double alpha = n.attr_f("alpha", op == "LeakyRelu" ? 0.01f : op == "HardSigmoid" ? 0.2f : 1.0f);
  if (op == "LeakyRelu") {  // torch: x > 0 ? dy : alpha dy
    s.dx[0] = where(cmp("Greater", x, b.scalar(0)), dy, b.mul(dy, b.scalar(alpha)));
  } else if (op == "Elu") {  // x > 0 ? dy : dy (y + alpha)
    s.dx[0] = where(cmp("Greater", x, b.scalar(0)), dy, b.mul(dy, b.add(y, b.scalar(alpha))));
  } else if (op == "Softplus") {  // dy sigmoid(x)
    s.dx[0] = b.mul(dy, fn("Sigmoid", x));
  } else if (op == "Erf") {  // dy 2 / sqrt(pi) exp(-x^2)
    s.dx[0] = b.mul(dy, b.mul(fn("Exp", b.neg(b.mul(x, x))), b.scalar(2.0 / std::sqrt(M_PI))));
  } else if (op == "Gelu" && n.attr_s("approximate", "none") == "tanh") {
    // u = sqrt(2 / pi) (x + 0.044715 x^3), t = tanh(u): dy (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2 / pi) (1 + 3 0.044715
    // x^2))
    const double c = std::sqrt(2.0 / M_PI), a = 0.044715;
    const std::string x2 = b.mul(x, x);
    const std::string t = fn("Tanh", b.mul(b.mul(x, b.add(b.scalar(1), b.mul(x2, b.scalar(a)))), b.scalar(c)));
    const std::string left = b.mul(b.add(b.scalar(1), t), b.scalar(0.5));
    const std::string right = b.mul(b.mul(x, b.sub(b.scalar(1), b.mul(t, t))),
                                    b.mul(b.add(b.scalar(1), b.mul(x2, b.scalar(3 * a))), b.scalar(0.5 * c)));
    s.dx[0] = b.mul(dy, b.add(left, right));
  } else if (op == "Gelu") {  // dy (Phi(x) + x phi(x))
    const std::string cdf =
        b.mul(b.add(b.scalar(1), fn("Erf", b.mul(x, b.scalar(1.0 / std::sqrt(2.0))))), b.scalar(0.5));
    const std::string pdf = b.mul(fn("Exp", b.mul(b.mul(x, x), b.scalar(-0.5))), b.scalar(1.0 / std::sqrt(2.0 * M_PI)));
    s.dx[0] = b.mul(dy, b.add(cdf, b.mul(x, pdf)));
  } else if (op == "HardSigmoid") {  // alpha dy where 0 < alpha x + beta < 1 (torch: -3 < x < 3)
    const double beta = n.attr_f("beta", 0.5f);
    const std::string v = b.add(b.mul(x, b.scalar(alpha)), b.scalar(beta));
    const std::string inside = b.emit("And", "And", {cmp("Greater", v, b.scalar(0)), cmp("Less", v, b.scalar(1))}, sx);
    s.dx[0] = where(inside, b.mul(dy, b.scalar(alpha)), b.scalar(0));
  } else if (op == "HardSwish") {  // x < -3: 0; x > 3: dy; else dy (2x + 3) / 6 (torch: x <= 3 is inside)
    const std::string mid = b.mul(dy, b.add(b.mul(x, b.scalar(1.0 / 3.0)), b.scalar(0.5)));
    s.dx[0] = where(cmp("Less", x, b.scalar(-3)), b.scalar(0), where(cmp("Greater", x, b.scalar(3)), dy, mid));
  } else if (op == "Clip") {  // dy where min <= x <= max (torch.clamp), bounds from the inputs or opset 6's attributes
    std::string keep;
    auto bound = [&](size_t i, const char* attr, const char* c) {
      std::string v;
      if (s.opset < 11) {
        if (n.has(attr)) v = b.scalar(n.attr_f(attr, 0.0f));
      } else if (!n.input(i).empty()) {
        v = n.input(i);
      }
      if (v.empty()) return;
      const std::string m = cmp(c, x, v);
      keep = keep.empty() ? m : b.emit("And", "And", {keep, m}, sx);
    };
    bound(1, "min", "GreaterOrEqual");
    bound(2, "max", "LessOrEqual");
    s.dx[0] = keep.empty() ? dy : where(keep, dy, b.scalar(0));
  }
}

// Pow(A, B): dA = dy B A^(B - 1), dB = dy y log(A) (summed to B's shape).
void pow_rule(Builder& b, Step& s) {
  const std::string &A = s.in(0), &B = s.in(1);
  const Shape sa = b.shape(A), sb = b.shape(B);
  const ValueInfo* bi = b.info(B);
  std::string Bf = B;
  if (bi && bi->dtype != b.dtype) Bf = b.emit("Cast", "Cast", {B}, sb, {{"to", int64_t(1)}});
  if (s.wants(0)) {
    const std::string p = b.emit("Pow", "Pow", {A, b.sub(Bf, b.scalar(1))}, broadcast_shapes(sa, sb));
    s.dx[0] = b.sum_to(b.mul(s.dy, b.mul(Bf, p)), sa);
  }
  if (s.wants(1)) s.dx[1] = b.sum_to(b.mul(s.dy, b.mul(s.y(), b.emit("Log", "Log", {A}, sa))), sb);
}

// Max / Min (variadic, broadcasting): dy goes to the first input that holds the result (ties: the first one).
void minmax_rule(Builder& b, Step& s) {
  const std::string& y = s.y();
  const Shape sy = b.shape(y);
  std::string taken;
  for (size_t i = 0; i < s.node.inputs.size(); ++i) {
    const std::string& v = s.in(i);
    if (v.empty()) continue;
    std::string m = b.emit("Equal", "Equal", {v, y}, sy);
    if (!taken.empty()) m = b.emit("And", "And", {m, b.emit("Not", "Not", {taken}, sy)}, sy);
    if (s.wants(i)) s.dx[i] = b.sum_to(b.emit("Where", "Where", {m, s.dy, b.scalar(0)}, sy), b.shape(v));
    if (i + 1 < s.node.inputs.size()) taken = taken.empty() ? m : b.emit("Or", "Or", {taken, m}, sy);
  }
}

// LayerNormalization over the axes from `axis` on: xhat = (x - mean) / sqrt(var + eps) per row, y = scale xhat + B
// (scale and B broadcast over the rows). dB = dy summed to B's shape, dscale = (dy xhat) summed to scale's shape,
// dx = (dxh - mean(dxh) - xhat mean(dxh xhat)) / sqrt(var + eps) with dxh = dy scale (means over the row).
void layer_norm_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  const Shape sx = b.shape(s.in(0));
  const int64_t r = int64_t(sx.rank());
  int64_t axis = n.attr_i("axis", -1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r) fail("{}: axis {} is outside rank {}", n.describe(), n.attr_i("axis", -1), r);
  std::vector<int64_t> axes;
  int64_t count = 1;
  for (int64_t a = axis; a < r; ++a) axes.push_back(a), count *= sx[size_t(a)];
  const double inv_n = 1.0 / double(std::max<int64_t>(count, 1)), eps = n.attr_f("epsilon", 1e-5f);
  const std::string& x = s.in(0);
  const std::string mean = b.mul(b.reduce_sum(x, axes), b.scalar(inv_n));
  const std::string xc = b.sub(x, mean);
  const std::string var = b.mul(b.reduce_sum(b.mul(xc, xc), axes), b.scalar(inv_n));
  const std::string inv = b.div(b.scalar(1), b.emit("Sqrt", "Sqrt", {b.add(var, b.scalar(eps))}, b.shape(var)));
  const std::string xhat = b.mul(xc, inv);
  if (s.wants(1)) s.dx[1] = b.sum_to(b.mul(s.dy, xhat), b.shape(s.in(1)));
  if (s.wants(2)) s.dx[2] = b.sum_to(s.dy, b.shape(s.in(2)));
  if (s.wants(0)) {
    const std::string dxh = b.mul(s.dy, s.in(1));
    const std::string m1 = b.mul(b.reduce_sum(dxh, axes), b.scalar(inv_n));
    const std::string m2 = b.mul(b.reduce_sum(b.mul(dxh, xhat), axes), b.scalar(inv_n));
    s.dx[0] = b.mul(b.sub(b.sub(dxh, m1), b.mul(xhat, m2)), inv);
  }
}

// The constant int64 values of input i (or of attribute `attr` before `since`), nullopt when absent.
std::optional<std::vector<int64_t>> ints_of(Builder& b, const Step& s, size_t i, const char* attr, int64_t since) {
  if (s.opset < since) {
    if (!s.node.has(attr)) return std::nullopt;
    return s.node.attr_ints(attr);
  }
  if (i >= s.node.inputs.size() || s.node.inputs[i].empty()) return std::nullopt;
  const HostTensor* t = b.constant(s.node.inputs[i]);
  if (!t)
    fail("{}: input {} ('{}') is computed from run-time data: the backward needs it known when planning",
         s.node.describe(), i, s.node.inputs[i]);
  return to_ints(*t);
}

// dy's elements put back at positions first, first + step, ... (step > 0) of an axis of length d, zeros elsewhere:
// each element followed by step - 1 zeros (a Pad on a new axis after it, then a Reshape), the tail cut, then a Pad
// to d.
std::string scatter_strided(Builder& b, const std::string& dy, size_t axis, int64_t first, int64_t step, int64_t d) {
  Shape s = b.shape(dy);
  const size_t r = s.rank();
  const int64_t n = s[axis];
  std::string g = dy;
  if (step > 1 && n > 1) {
    std::vector<int64_t> split = s.dims;
    split.insert(split.begin() + int64_t(axis) + 1, 1);
    std::vector<int64_t> pads(2 * (r + 1), 0);
    pads[r + 1 + axis + 1] = step - 1;
    std::vector<int64_t> spread = split;
    spread[axis + 1] = step;
    g = b.emit("Pad", "Pad", {b.reshape(g, Shape{split}), b.ints(pads)}, Shape{spread});
    std::vector<int64_t> flat = s.dims;
    flat[axis] = n * step;
    g = b.reshape(g, Shape{flat});
    flat[axis] = (n - 1) * step + 1;
    g = b.emit("Slice", "Slice", {g, b.ints({0}), b.ints({(n - 1) * step + 1}), b.ints({int64_t(axis)})}, Shape{flat});
    s = Shape{flat};
  }
  const int64_t last = first + s[axis];
  if (first == 0 && last == d) return g;
  std::vector<int64_t> pads(2 * r, 0);
  pads[axis] = first;
  pads[r + axis] = d - last;
  s[axis] = d;
  return b.emit("Pad", "Pad", {g, b.ints(pads)}, s);
}

// x reversed along an axis (a Slice with step -1).
std::string reverse_axis(Builder& b, const std::string& x, size_t axis) {
  return b.emit("Reverse", "Slice",
                {x, b.ints({-1}), b.ints({std::numeric_limits<int64_t>::min()}), b.ints({int64_t(axis)}), b.ints({-1})},
                b.shape(x));
}

// Slice with any steps (either sign) and axes: dy's elements go back to the positions of x they were read from,
// zeros elsewhere; axis by axis (scatter_strided; a negative step reads dy reversed from the last position taken).
void slice_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Node& n = s.node;
  const Shape sx = b.shape(s.in(0));
  const size_t r = sx.rank();
  const auto starts = ints_of(b, s, 1, "starts", 10), ends = ints_of(b, s, 2, "ends", 10);
  if (!starts || !ends || starts->size() != ends->size())
    fail("{}: starts and ends are missing or differ in length", n.describe());
  std::vector<int64_t> axes(starts->size());
  for (size_t k = 0; k < axes.size(); ++k) axes[k] = int64_t(k);
  if (auto a = ints_of(b, s, 3, "axes", 10)) axes = *a;
  std::vector<int64_t> steps(starts->size(), 1);
  if (auto st = ints_of(b, s, 4, "steps", 10)) steps = *st;
  if (axes.size() != starts->size() || steps.size() != starts->size())
    fail("{}: starts, ends, axes and steps differ in length", n.describe());
  if (b.shape(s.dy).numel() == 0) {
    s.dx[0] = b.fill(0, sx, b.dtype);
    return;
  }
  std::string g = s.dy;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + int64_t(r) : axes[k];
    if (a < 0 || a >= int64_t(r)) fail("{}: axis {} is outside rank {}", n.describe(), axes[k], r);
    const int64_t st = steps[k], d = sx[size_t(a)];
    if (st == 0) fail("{}: step 0 on axis {}", n.describe(), a);
    int64_t b0 = (*starts)[k], e0 = (*ends)[k];
    if (b0 < 0) b0 += d;
    if (e0 < 0) e0 += d;
    int64_t count;
    if (st > 0) {
      b0 = std::clamp<int64_t>(b0, 0, d);
      e0 = std::clamp<int64_t>(e0, 0, d);
      count = e0 > b0 ? (e0 - b0 + st - 1) / st : 0;
    } else {
      b0 = std::clamp<int64_t>(b0, 0, d - 1);
      e0 = std::clamp<int64_t>(e0, -1, d - 1);
      count = b0 > e0 ? (b0 - e0 - st - 1) / -st : 0;
    }
    if (count != b.shape(g)[size_t(a)])
      fail("{}: axis {} takes {} elements, dy has {}", n.describe(), a, count, b.shape(g)[size_t(a)]);
    if (st > 0) {
      g = scatter_strided(b, g, size_t(a), b0, st, d);
    } else {  // positions b0, b0 + st, ...: reversed, the positions b0 + (count - 1) st, ... up by -st
      g = scatter_strided(b, reverse_axis(b, g, size_t(a)), size_t(a), b0 + (count - 1) * st, -st, d);
    }
  }
  s.dx[0] = g;
}

// Split: dx is the outputs' gradients concatenated along the axis (zeros for an output y does not depend on).
void split_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Node& n = s.node;
  const Shape sx = b.shape(s.in(0));
  int64_t axis = n.attr_i("axis", 0);
  if (axis < 0) axis += int64_t(sx.rank());
  if (axis < 0 || axis >= int64_t(sx.rank()))
    fail("{}: axis {} is outside rank {}", n.describe(), n.attr_i("axis", 0), sx.rank());
  std::vector<std::string> parts;
  for (size_t k = 0; k < n.outputs.size(); ++k) {
    const std::string dy = k < s.dys.size() ? s.dys[k] : "";
    const Shape so = b.shape(n.outputs[k]);
    if (so.numel() == 0) continue;
    parts.push_back(dy.empty() ? b.fill(0, so, b.dtype) : dy);
  }
  s.dx[0] = parts.size() == 1 ? b.reshape(parts[0], sx) : b.emit("Concat", "Concat", parts, sx, {{"axis", axis}});
}

// Concat: each input's gradient is its slice of dy along the axis.
void concat_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  const Shape sy = b.shape(s.y());
  int64_t axis = n.attr_i("axis", 1);
  if (axis < 0) axis += int64_t(sy.rank());
  if (axis < 0 || axis >= int64_t(sy.rank()))
    fail("{}: axis {} is outside rank {}", n.describe(), n.attr_i("axis", 1), sy.rank());
  int64_t at = 0;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    if (n.inputs[i].empty()) continue;
    const Shape si = b.shape(n.inputs[i]);
    const int64_t size = si[size_t(axis)];
    if (s.wants(i)) s.dx[i] = b.emit("Slice", "Slice", {s.dy, b.ints({at}), b.ints({at + size}), b.ints({axis})}, si);
    at += size;
  }
}

// One axis of a reflect / edge Pad backward: g's extent on `axis` is p0 + d + p1 (x's d from p0 to end); returns
// the middle plus the padded parts summed onto the x elements they copy. reflect: the p0 leading elements are x's
// 1..p0 reversed, the p1 trailing ones x's d-2 down to d-1-p1 (p0, p1 < d); edge: copies of x's first / last.
std::string fold_pad(Builder& b, const std::string& g, size_t axis, int64_t p0, int64_t end, bool reflect,
                     const Node& n) {
  Shape sg = b.shape(g);
  const int64_t total = sg[axis], d = end - p0, p1 = total - end;
  if (p0 == 0 && p1 == 0) return g;
  if (reflect && (p0 >= d || p1 >= d))
    fail("{}: reflect pads {} and {} on axis {} must be smaller than its extent {}", n.describe(), p0, p1, axis, d);
  const size_t r = sg.rank();
  auto part = [&](int64_t from, int64_t to) {
    Shape sp = sg;
    sp[axis] = to - from;
    return b.emit("Slice", "Slice", {g, b.ints({from}), b.ints({to}), b.ints({int64_t(axis)})}, sp);
  };
  auto place = [&](const std::string& v, int64_t before) {  // v along the axis at x positions before..., zeros around
    Shape sv = b.shape(v);
    std::vector<int64_t> pads(2 * r, 0);
    pads[axis] = before;
    pads[r + axis] = d - before - sv[axis];
    sv[axis] = d;
    return b.emit("Pad", "Pad", {v, b.ints(pads)}, sv);
  };
  std::string out = part(p0, end);
  if (p0 > 0) {
    std::string lead = part(0, p0);
    lead = reflect ? reverse_axis(b, lead, axis) : b.reduce_sum(lead, {int64_t(axis)});
    out = b.add(out, place(lead, reflect ? 1 : 0));
  }
  if (p1 > 0) {
    std::string tail = part(end, total);
    tail = reflect ? reverse_axis(b, tail, axis) : b.reduce_sum(tail, {int64_t(axis)});
    out = b.add(out, place(tail, reflect ? d - 1 - p1 : d - 1));
  }
  return out;
}

// Pad (constant, reflect, edge; pads not negative): constant: dx is dy's slice where x sits; reflect / edge
// add the padded parts folded back (fold_pad).
void pad_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Node& n = s.node;
  const Shape sx = b.shape(s.in(0));
  const size_t r = sx.rank();
  const std::string mode = n.attr_s("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    fail("{}: the backward handles modes 'constant', 'reflect' and 'edge', got '{}'", n.describe(), mode);
  auto pads = ints_of(b, s, 1, "pads", 11);
  if (!pads) fail("{}: pads are missing", n.describe());
  std::vector<int64_t> axes(r);
  for (size_t k = 0; k < r; ++k) axes[k] = int64_t(k);
  if (s.opset >= 18)
    if (auto a = ints_of(b, s, 3, "axes", 18)) axes = *a;
  if (pads->size() != 2 * axes.size()) fail("{}: {} pads for {} axes", n.describe(), pads->size(), axes.size());
  std::vector<int64_t> starts, ends, on;
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t a = axes[k] < 0 ? axes[k] + int64_t(r) : axes[k];
    if (a < 0 || a >= int64_t(r)) fail("{}: axis {} is outside rank {}", n.describe(), axes[k], r);
    const int64_t p0 = (*pads)[k], p1 = (*pads)[axes.size() + k];
    if (p0 < 0 || p1 < 0)
      fail("{}: the backward handles pads that are not negative, got {} and {}", n.describe(), p0, p1);
    starts.push_back(p0);
    ends.push_back(p0 + sx[size_t(a)]);
    on.push_back(a);
  }
  if (mode == "constant") {
    s.dx[0] = b.emit("Slice", "Slice", {s.dy, b.ints(starts), b.ints(ends), b.ints(on)}, sx);
    return;
  }
  // reflect / edge: axis by axis, the middle plus the padded parts folded back onto the elements they copy.
  std::string g = s.dy;
  for (size_t k = 0; k < on.size(); ++k)
    g = fold_pad(b, g, size_t(on[k]), starts[k], ends[k], mode == "reflect", n);
  s.dx[0] = g;
}

// Gather: dx (data) sums the rows of dy that each index picks (GatherGrad, deterministic); indices get none.
void gather_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  const Shape sx = b.shape(s.in(0));
  int64_t axis = s.node.attr_i("axis", 0);
  if (axis < 0) axis += int64_t(sx.rank());
  if (axis < 0 || axis >= int64_t(sx.rank()))
    fail("{}: axis {} is outside rank {}", s.node.describe(), s.node.attr_i("axis", 0), sx.rank());
  s.dx[0] = b.emit("GatherGrad", "GatherGrad", {s.dy, s.in(1)}, sx, {{"axis", axis}, {"out_shape", sx.dims}});
}

// Dropout as cldl runs the ONNX op (inference: the identity); TrainingDropout (the training graph's, models/train.cpp):
// dy times its scale output (1 / (1 - ratio) where kept, 0 where dropped).
void dropout_rule(Builder& b, Step& s) {
  if (!s.wants(0)) return;
  if (s.node.op_type == "Dropout") {
    s.dx[0] = s.dy;
    return;
  }
  if (s.node.outputs.size() < 2 || s.node.outputs[1].empty())
    fail("{}: its scale output (the mask the backward reads) is missing", s.node.describe());
  s.dx[0] = b.mul(s.dy, s.node.outputs[1]);
}

// ConvTranspose (1-D / 2-D): dX is the convolution of dY with the same weights, strides, dilations and group
// (ConvDynamic), the begin pads those the forward used (explicit, or from auto_pad / output_shape as the forward
// splits them), the end pad what makes X's extent (a larger output is sliced). W and B are read at load by the
// forward, so they carry no gradient here.
void conv_transpose_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  const bool dynamic = n.op_type == "ConvTransposeDynamic";
  if (!dynamic && (s.wants(1) || s.wants(2)))
    fail("{}: ConvTranspose reads W and B at load; the Trainer trains them (as ConvTransposeDynamic), a Gradient "
         "node of the ONNX op does not differentiate them",
         n.describe());
  if (!s.wants(0) && !s.wants(1)) return;
  const Shape sx = b.shape(s.in(0)), sw = b.shape(s.in(1)), sy = b.shape(s.y());
  const size_t r = sx.rank() - 2;
  if (sx.rank() < 3 || r > 2) fail("{}: the backward handles 1-D and 2-D (input shape {})", n.describe(), sx.str());
  const auto strides = n.attr_ints("strides", std::vector<int64_t>(r, 1)),
             dilations = n.attr_ints("dilations", std::vector<int64_t>(r, 1)),
             out_pad = n.attr_ints("output_padding", std::vector<int64_t>(r, 0));
  auto pads = n.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  const std::string auto_pad = n.attr_s("auto_pad", "NOTSET");
  const bool derived = (auto_pad != "NOTSET" && auto_pad != "VALID") || n.has("output_shape");
  if (strides.size() != r || dilations.size() != r || out_pad.size() != r || pads.size() != 2 * r)
    fail("{}: strides, dilations, output_padding and pads do not match {} spatial dims", n.describe(), r);
  if (auto_pad == "VALID") pads.assign(2 * r, 0);
  std::vector<int64_t> conv_pads(2 * r, 0), kernel(r);
  Shape out = sx;  // the convolution's output before any slice
  bool slice = false;
  for (size_t i = 0; i < r; ++i) {
    kernel[i] = sw[2 + i];
    const int64_t span = (kernel[i] - 1) * dilations[i] + 1, in = sx[2 + i], o = sy[2 + i];
    int64_t begin = pads[i];
    if (derived) {
      const int64_t total = strides[i] * (in - 1) + out_pad[i] + span - o;
      begin = total < 0 ? 0 : auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
    }
    const int64_t end = strides[i] * (in - 1) + span - o - begin;
    conv_pads[i] = begin;
    conv_pads[r + i] = std::max<int64_t>(end, 0);
    out[2 + i] = (o + begin + conv_pads[r + i] - span) / strides[i] + 1;
    slice = slice || out[2 + i] != in;
  }
  out[1] = sw[0];
  std::map<std::string, AttrValue> attrs{{"kernel_shape", kernel},
                                         {"strides", strides},
                                         {"dilations", dilations},
                                         {"pads", conv_pads},
                                         {"group", n.attr_i("group", 1)}};
  if (s.wants(1)) {  // ConvTransposeDynamic: dW = the filter gradient of that convolution, x as its output's gradient
    std::string dout = s.in(0);
    if (slice) {
      std::vector<int64_t> pads(2 * sx.rank(), 0);
      for (size_t i = 0; i < r; ++i) pads[sx.rank() + 2 + i] = out[2 + i] - sx[2 + i];
      dout = b.emit("Pad", "Pad", {dout, b.ints(pads)}, out);
    }
    auto a = attrs;
    a["out_shape"] = sw.dims;
    s.dx[1] = b.emit("ConvGradFilter", "ConvGradFilter", {dout, s.dy}, sw, a);
  }
  if (!s.wants(0)) return;
  std::string d = b.emit("ConvDynamic", "ConvDynamic", {s.dy, s.in(1)}, out, attrs);
  if (slice) {
    std::vector<int64_t> starts(r, 0), ends(sx.dims.begin() + 2, sx.dims.end()), axes(r);
    for (size_t i = 0; i < r; ++i) axes[i] = int64_t(2 + i);
    d = b.emit("Slice", "Slice", {d, b.ints(starts), b.ints(ends), b.ints(axes)}, sx);
  }
  s.dx[0] = d;
}

// Where(cond, X, Y): dy where cond picks X (Y), zeros elsewhere, summed back to X's (Y's) broadcast shape; cond
// (bool) has no gradient. The masked_fill of attention as torch exports it below opset 23.
void where_rule(Builder& b, Step& s) {
  const Shape sy = b.shape(s.y());
  for (size_t i : {size_t(1), size_t(2)}) {
    if (!s.wants(i)) continue;
    std::vector<std::string> in{s.in(0), s.dy, b.scalar(0)};
    if (i == 2) std::swap(in[1], in[2]);
    s.dx[i] = b.sum_to(b.emit("Where", "Where", in, sy), b.shape(s.in(i)));
  }
}

// ONNX Attention (opsets 23/24; models/ops_attention_backward.cpp): a training forward (AttentionTrain) recomputes Y
// and saves each query row's log-sum-exp, then AttentionGrad gives dQ, dK and dV flash-style (probabilities
// recomputed from Q, K and the LSE; layers/attention_backward.hpp). The mask gets no gradient; a KV cache
// (past_key), nonpad_kv_seqlen, softcap and a gradient through present_key / value or qk_matmul_output are refused.
void attention_rule(Builder& b, Step& s) {
  const Node& n = s.node;
  for (size_t i : {size_t(4), size_t(5), size_t(6)})
    if (!n.input(i).empty()) fail("{}: input {} ('{}') is not differentiated: training attends without a KV cache or "
                                  "kv lengths", n.describe(), i, n.input(i));
  if (n.attr_f("softcap", 0.0f) > 0.0f)
    fail("{}: softcap {} is not differentiated (training needs softcap 0)", n.describe(), n.attr_f("softcap", 0.0f));
  if (s.wants(3)) fail("{}: attn_mask '{}' depends on trained values; its gradient is not computed", n.describe(), s.in(3));
  if (!s.wants(0) && !s.wants(1) && !s.wants(2)) return;
  const std::string mask = n.input(3);
  auto attrs = n.attrs;
  attrs.erase("qk_matmul_output_mode");
  const Shape sy = b.shape(s.y()), sq = b.shape(s.in(0)), sk = b.shape(s.in(1)), sv = b.shape(s.in(2));
  const int64_t batch = sq[0], heads = sq.rank() == 4 ? sq[1] : n.attr_i("q_num_heads", 0), len = sq.rank() == 4 ? sq[2] : sq[1];
  const auto fwd = b.emit_outputs("AttentionTrain", "AttentionTrain", {s.in(0), s.in(1), s.in(2), mask},
                                  {sy, Shape{batch, heads, len}}, attrs);
  const auto d = b.emit_outputs("AttentionGrad", "AttentionGrad", {s.in(0), s.in(1), s.in(2), mask, fwd[0], fwd[1], s.dy},
                                {sq, sk, sv}, attrs);
  for (size_t i = 0; i < 3; ++i)
    if (s.wants(i)) s.dx[i] = d[i];
}

using Rule = void (*)(Builder&, Step&);
const std::map<std::string, Rule>& rules() {
  static const std::map<std::string, Rule> r = {
      {"Add", binary_rule},
      {"Sub", binary_rule},
      {"Mul", binary_rule},
      {"Div", binary_rule},
      {"Neg", unary_rule},
      {"Identity", unary_rule},
      {"Relu", unary_rule},
      {"Sigmoid", unary_rule},
      {"Tanh", unary_rule},
      {"Exp", unary_rule},
      {"Log", unary_rule},
      {"Sqrt", unary_rule},
      {"Reshape", view_rule},
      {"Flatten", view_rule},
      {"Squeeze", view_rule},
      {"Unsqueeze", view_rule},
      {"Transpose", transpose_rule},
      {"ReduceSum", reduce_rule},
      {"ReduceMean", reduce_rule},
      {"Softmax", softmax_rule},
      {"MatMul", matmul_rule},
      {"Gemm", gemm_rule},
      {"Conv", conv_rule},
      {"ConvDynamic", conv_rule},
      {"MaxPool", pool_rule},
      {"AveragePool", pool_rule},
      {"GlobalAveragePool", global_pool_rule},
      {"LogSoftmax", log_softmax_rule},
      {"SoftmaxCrossEntropyLoss", loss_rule},
      {"NegativeLogLikelihoodLoss", loss_rule},
      {"BatchNormalization", batch_norm_rule},
      {"LeakyRelu", activation_rule},
      {"Elu", activation_rule},
      {"Softplus", activation_rule},
      {"Erf", activation_rule},
      {"Gelu", activation_rule},
      {"HardSigmoid", activation_rule},
      {"HardSwish", activation_rule},
      {"Clip", activation_rule},
      {"Pow", pow_rule},
      {"Max", minmax_rule},
      {"Min", minmax_rule},
      {"LayerNormalization", layer_norm_rule},
      {"Slice", slice_rule},
      {"Split", split_rule},
      {"Concat", concat_rule},
      {"Pad", pad_rule},
      {"Gather", gather_rule},
      {"Dropout", dropout_rule},
      {"TrainingDropout", dropout_rule},
      {"ConvTranspose", conv_transpose_rule},
      {"ConvTransposeDynamic", conv_transpose_rule},
      {"LSTM", rnn_rule},
      {"GRU", rnn_rule},
      {"LSTMTrain", rnn_rule},
      {"GRUTrain", rnn_rule},
      {"Attention", attention_rule},
      {"Where", where_rule},
  };
  return r;
}

std::string op_list() {
  std::string s;
  for (auto& op : differentiable_ops()) s += (s.empty() ? "" : ", ") + op;
  return s;
}

std::vector<std::string> strings_attr(const Node& n, const char* a, bool required) {
  if (!n.has(a)) {
    if (required) fail("{}: attribute '{}' is missing", n.describe(), a);
    return {};
  }
  const auto* v = std::get_if<std::vector<std::string>>(&n.attrs.at(a));
  if (!v) fail("{}: attribute '{}' should be a list of strings", n.describe(), a);
  return *v;
}

}  // namespace

const std::vector<std::string>& differentiable_ops() {
  static const std::vector<std::string> ops = [] {
    std::vector<std::string> v;
    for (auto& [op, rule] : rules()) v.push_back(op);
    return v;
  }();
  return ops;
}

// ai.onnx, or cldl's own nodes (the newest opset's semantics; ConvDynamic).
bool rule_domain(const Node& n) { return n.domain.empty() || n.domain == kFusedDomain; }

bool has_backward_rule(const Node& n) { return rule_domain(n) && rules().count(n.op_type); }

size_t make_conv_weights_dynamic(Graph& g) {
  size_t count = 0;
  for (auto& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "Conv") continue;
    bool known = true;
    for (size_t i = 1; i < n.inputs.size() && i < 3; ++i) known = known && (n.inputs[i].empty() || g.is_constant(n.inputs[i]));
    if (known) continue;
    n.op_type = "ConvDynamic";
    n.domain = kFusedDomain;
    ++count;
  }
  if (count) log::debug("{} Conv nodes with run-time weights run as ConvDynamic", count);
  return count;
}

size_t make_rnn_weights_dynamic(Graph& g) {
  size_t count = 0;
  for (auto& n : g.nodes) {
    if (!n.domain.empty() || (n.op_type != "LSTM" && n.op_type != "GRU")) continue;
    bool known = true;
    for (size_t i = 1; i < n.inputs.size() && i < 4; ++i) known = known && (n.inputs[i].empty() || g.is_constant(n.inputs[i]));
    if (known) continue;
    if (n.inputs.size() > 4 && !n.inputs[4].empty()) {  // sequence_lens: only full lengths, known at load
      const HostTensor* lens = g.is_constant(n.inputs[4]) && g.initializers.count(n.inputs[4]) ? &g.initializers.at(n.inputs[4]) : nullptr;
      const ValueInfo* x = g.info(n.inputs[0]);
      for (auto& in : g.inputs)
        if (!x && in.name == n.inputs[0]) x = &in;
      const int64_t axis = n.attr_i("layout", 0) ? 1 : 0;
      bool full = lens && x && x->shape.is_static() && x->shape.to_shape().rank() == 3;
      if (full)
        for (int64_t v : to_ints(*lens)) full = full && v == x->shape.to_shape()[size_t(axis)];
      if (!full)
        fail("{}: training needs full sequences: sequence_lens '{}' must be a constant equal to the sequence length "
             "(or be left out)", n.describe(), n.inputs[4]);
      n.inputs[4].clear();
    }
    const size_t states = n.op_type == "LSTM" ? 3 : 2;
    n.outputs.resize(states);
    n.outputs.push_back(g.unique_name(n.name + "/saved_states"));
    n.op_type += "Train";
    n.domain = kFusedDomain;
    ++count;
  }
  if (count) log::debug("{} LSTM / GRU nodes with run-time weights run as LSTMTrain / GRUTrain", count);
  return count;
}

bool is_gradient(const Node& n) { return n.op_type == "Gradient" && n.domain == kTrainingDomain; }

Backward build_backward(Graph& g, const std::vector<Node>& forward, const std::string& y, const std::string& dy,
                        const std::vector<std::string>& wrt, const std::string& base) {
  Builder b(g, base);
  const ValueInfo* yi = g.info(y);
  if (!yi || !yi->shape.is_static()) fail("y '{}' has no static shape", y);
  if (!is_float(yi->dtype))
    fail("y '{}' is {}: gradients are of float16, float and double tensors", y, to_string(yi->dtype));
  b.dtype = yi->dtype;
  b.set_shape(dy, yi->shape.to_shape());
  std::set<std::string> active(wrt.begin(), wrt.end());
  std::vector<bool> differentiated(forward.size(), false);
  for (size_t i = 0; i < forward.size(); ++i) {
    const Node& n = forward[i];
    auto reads = reads_of(n);
    if (no_gradient(n) || std::none_of(reads.begin(), reads.end(), [&](auto& v) { return active.count(v) > 0; }))
      continue;
    differentiated[i] = true;
    for (auto& o : n.outputs)
      if (!o.empty()) active.insert(o);
  }
  std::map<std::string, std::vector<std::string>> parts;  // value -> its gradient's contributions
  parts[y].push_back(dy);
  auto total = [&](const std::string& v) -> std::string {
    auto it = parts.find(v);
    if (it == parts.end() || it->second.empty()) return "";
    if (it->second.size() > 1) it->second = {b.sum(it->second, b.shape(v))};
    return it->second[0];
  };
  for (size_t i = forward.size(); i-- > 0;) {
    if (!differentiated[i]) continue;
    const Node& n = forward[i];
    const bool multi = rule_domain(n) && multi_output_ops().count(n.op_type);
    std::vector<std::string> dys;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      dys.push_back(n.outputs[k].empty() ? "" : total(n.outputs[k]));
      if (k > 0 && !multi && !dys[k].empty())
        fail("{}: y depends on its output {} ('{}'), through which cldl does not differentiate", n.describe(), k,
             n.outputs[k]);
    }
    const std::string d = dys.empty() ? "" : dys[0];
    if (std::all_of(dys.begin(), dys.end(), [](auto& v) { return v.empty(); })) continue;  // y does not depend on it
    auto rule = rules().find(n.op_type);
    if (!rule_domain(n) || rule == rules().end())
      fail("{}: no backward rule for op '{}' (cldl differentiates {})", n.describe(), n.op_type, op_list());
    Step s{n, node_opset(g, n), d, std::vector<bool>(n.inputs.size(), false),
           std::vector<std::string>(n.inputs.size()), dys};
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const ValueInfo* info = n.inputs[k].empty() ? nullptr : g.info(n.inputs[k]);
      s.active[k] = info && active.count(n.inputs[k]) && is_float(info->dtype);
    }
    try {
      rule->second(b, s);
    } catch (const Error& e) {
      fail("{}: backward: {}", n.describe(), e.what());
    }
    for (size_t k = 0; k < n.inputs.size(); ++k)
      if (!s.dx[k].empty()) parts[n.inputs[k]].push_back(s.dx[k]);
  }
  Backward r;
  for (auto& w : wrt) {
    std::string t = total(w);
    if (t.empty()) {
      const ValueInfo* wi = g.info(w);
      if (!wi) fail("value '{}' is not known", w);
      t = b.fill(0.0, b.shape(w), wi->dtype);
    }
    r.grads.push_back(t);
  }
  r.nodes = std::move(b.nodes);
  return r;
}

size_t prepare_gradients(Graph& g) {
  size_t count = 0;
  std::vector<Node> clones;
  const auto producers = g.producers();
  for (auto& n : g.nodes) {
    if (!is_gradient(n) || n.has(kForwardAttr)) continue;
    const auto xs = strings_attr(n, "xs", true), zs = strings_attr(n, "zs", false);
    if (xs.empty()) fail("{}: attribute 'xs' is empty", n.describe());
    if (!n.has("y")) fail("{}: attribute 'y' is missing", n.describe());
    const std::string y = n.attr_s("y", "");
    if (n.input_count() != xs.size() + zs.size())
      fail("{}: {} inputs, expected {} (one per name of xs, then of zs)", n.describe(), n.input_count(),
           xs.size() + zs.size());
    if (n.outputs.size() > xs.size())
      fail("{}: {} outputs, but xs names {} values", n.describe(), n.outputs.size(), xs.size());
    auto exists = [&](const std::string& v) { return g.is_input(v) || g.is_constant(v) || producers.count(v) > 0; };
    // The names of xs and zs -> the node's inputs, the values the forward subgraph computes on.
    std::map<std::string, std::string> bind;
    for (size_t k = 0; k < xs.size() + zs.size(); ++k) {
      const bool x = k < xs.size();
      const std::string& name = x ? xs[k] : zs[k - xs.size()];
      if (!exists(name))
        fail("{}: {} names '{}', which is not a value of the graph", n.describe(), x ? "xs" : "zs", name);
      if (n.inputs[k].empty()) fail("{}: input {} (the value of '{}') is missing", n.describe(), k, name);
      if (!bind.emplace(name, n.inputs[k]).second) fail("{}: '{}' is named twice in xs and zs", n.describe(), name);
    }
    if (!exists(y)) fail("{}: y names '{}', which is not a value of the graph", n.describe(), y);
    // The nodes between xs / zs and y: back from y, stopping at the names of xs and zs.
    std::set<size_t> path;  // indices into the sorted g.nodes: topological order
    std::set<std::string> seen;
    std::vector<std::string> todo{y};
    while (!todo.empty()) {
      std::string v = std::move(todo.back());
      todo.pop_back();
      if (!seen.insert(v).second || bind.count(v)) continue;
      auto p = producers.find(v);
      if (p == producers.end() || !path.insert(p->second).second) continue;
      const Node& f = g.nodes[p->second];
      if (&f == &n) fail("{}: y '{}' is an output of the node itself", n.describe(), y);
      for (auto& in : reads_of(f)) todo.push_back(in);
    }
    // Differentiated: the path's nodes that depend on xs. Cloned: those that depend on a name whose value the
    // node's input replaces (xs / zs given other values than their own).
    std::set<std::string> active(xs.begin(), xs.end()), replaced;
    std::map<std::string, std::string> rename;
    for (auto& [name, v] : bind)
      if (name != v) replaced.insert(name), rename[name] = v;
    std::vector<Node> forward;
    const size_t clones_before = clones.size();
    for (size_t i : path) {
      const Node& f = g.nodes[i];
      const auto reads = reads_of(f);
      auto any_in = [&](const std::set<std::string>& s) {
        return std::any_of(reads.begin(), reads.end(), [&](auto& v) { return s.count(v) > 0; });
      };
      Node c = f;
      if (any_in(replaced)) {
        if (!f.outer_inputs().empty())
          fail("{}: {} would be computed on the node's inputs, but it has subgraphs, which cldl does not clone",
               n.describe(), f.describe());
        c.name = g.unique_name(n.name + "/" + f.name);
        for (auto& in : c.inputs)
          if (auto r = rename.find(in); r != rename.end()) in = r->second;
        for (auto& o : c.outputs) {
          if (o.empty()) continue;
          replaced.insert(o);
          o = rename[o] = g.unique_name(n.name + "/" + o);
        }
        clones.push_back(c);
      }
      if (no_gradient(f) || !any_in(active)) continue;
      if (!has_backward_rule(f))
        fail("{}: y '{}' depends on xs through {}, and op '{}' has no backward rule (cldl differentiates {})",
             n.describe(), y, f.describe(), f.op_type, op_list());
      for (auto& o : f.outputs)
        if (!o.empty()) active.insert(o);
      forward.push_back(std::move(c));
    }
    const std::string y_here = rename.count(y) ? rename[y] : y;
    // Every value the forward nodes read or write (and y) becomes an input too.
    std::vector<std::string> inputs(n.inputs.begin(), n.inputs.begin() + std::ptrdiff_t(xs.size() + zs.size()));
    auto add_input = [&](const std::string& v) {
      if (!v.empty() && std::find(inputs.begin(), inputs.end(), v) == inputs.end()) inputs.push_back(v);
    };
    for (auto& f : forward) {
      for (auto& v : reads_of(f)) add_input(v);
      for (auto& v : f.outputs) add_input(v);
    }
    add_input(y_here);
    auto sub = std::make_shared<Graph>();
    sub->name = n.name + "/forward";
    sub->opsets = g.opsets;
    sub->nodes = std::move(forward);
    ValueInfo out;
    out.name = y_here;
    out.shape.known = false;
    sub->outputs.push_back(std::move(out));
    log::debug("{}: forward subgraph of {} nodes ({} cloned on its inputs)", n.describe(), sub->nodes.size(),
               clones.size() - clones_before);
    n.inputs = std::move(inputs);
    n.attrs[kForwardAttr] = SubGraph(std::move(sub));
    ++count;
  }
  g.nodes.insert(g.nodes.end(), std::make_move_iterator(clones.begin()), std::make_move_iterator(clones.end()));
  return count;
}

std::vector<Node> expand_gradient(Graph& g, const Node& n) {
  const Graph* forward = n.attr_g(kForwardAttr);
  if (!forward || forward->outputs.size() != 1)
    fail("{}: no forward subgraph (prepare_gradients prepares Gradient nodes at load)", n.describe());
  const auto xs = strings_attr(n, "xs", true);
  const std::vector<std::string> wrt(n.inputs.begin(), n.inputs.begin() + std::ptrdiff_t(xs.size()));
  const std::string& y = forward->outputs[0].name;
  std::vector<Node> nodes;
  try {
    for (size_t k = 0; k < wrt.size(); ++k) {
      const ValueInfo* info = g.info(wrt[k]);
      if (!info) fail("input '{}' (xs '{}') is not known", wrt[k], xs[k]);
      if (!is_float(info->dtype))
        fail("input '{}' (xs '{}') is {}: gradients are of float16, float and double tensors", wrt[k], xs[k],
             to_string(info->dtype));
    }
    const ValueInfo* yi = g.info(y);
    if (!yi || !yi->shape.is_static()) fail("y '{}' has no static shape", y);
    if (!is_float(yi->dtype))
      fail("y '{}' is {}: gradients are of float16, float and double tensors", y, to_string(yi->dtype));
    // The seed: ones of y's shape (the gradient of the sum of y's elements).
    const Shape ys = yi->shape.to_shape();
    const std::string one = add_constant(g, n.name + "/one", from_doubles(yi->dtype, Shape{}, {1.0}));
    const std::string shape =
        add_constant(g, n.name + "/y_shape", HostTensor::from<int64_t>(Shape{int64_t(ys.rank())}, ys.dims));
    Node seed = make_node(g, n.name + "/dy", "Expand", {one, shape}, {g.unique_name(n.name + "/dy")});
    seed.domain = kFusedDomain;
    Backward bw = build_backward(g, forward->nodes, y, seed.outputs[0], wrt, n.name);
    nodes.push_back(std::move(seed));
    for (auto& b : bw.nodes) nodes.push_back(std::move(b));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      if (n.outputs[i].empty()) continue;
      nodes.push_back(make_node(g, n.name + "/" + xs[i], "Identity", {bw.grads[i]}, {n.outputs[i]}));
      nodes.back().domain = kFusedDomain;
    }
  } catch (const Error& e) {
    fail("{} (y '{}'): {}", n.describe(), forward->outputs[0].name, e.what());
  }
  log::debug("{}: {} backward nodes", n.describe(), nodes.size());
  return nodes;
}

}  // namespace cldl::graph
