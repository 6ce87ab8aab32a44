// Shape ops evaluated on the host at load: Shape, Size and Constant (always folded), and host folders for
// the ops that shape subgraphs of exported models use on constants (ConstantOfShape, Range, Gather,
// Slice, Concat, Cast and integer arithmetic). Device kernels for these ops belong to their families.
#include <cstring>
#include <algorithm>
#include <cmath>
#include <mutex>

#include "layers/data.hpp"
#include "models/onnx_import.hpp"
#include "models/op_registry.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

void infer_shape(InferCtx& c) {
  Shape s = c.shape(0);
  int64_t r = int64_t(s.rank());
  int64_t start = c.node.attr_i("start", 0), end = c.node.attr_i("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> d;
  for (int64_t i = start; i < end; ++i) d.push_back(s[i]);
  c.fold(0, from_ints(Shape{int64_t(d.size())}, d));
}

void infer_size(InferCtx& c) { c.fold(0, from_ints(Shape{}, {c.shape(0).numel()})); }

void infer_constant(InferCtx& c) {
  const Node& n = c.node;
  if (auto* t = n.attr_t("value")) return c.fold(0, *t);
  if (n.has("value_float")) return c.fold(0, from_doubles(DType::f32, Shape{}, {n.attr_f("value_float", 0)}));
  if (n.has("value_int")) return c.fold(0, from_ints(Shape{}, {n.attr_i("value_int", 0)}));
  if (n.has("value_ints")) {
    auto v = n.attr_ints("value_ints");
    return c.fold(0, from_ints(Shape{int64_t(v.size())}, v));
  }
  if (n.has("value_floats")) {
    auto* vp = std::get_if<std::vector<float>>(&n.attrs.at("value_floats"));
    if (!vp) c.error("attribute 'value_floats' should be a list of floats");
    auto& v = *vp;
    return c.fold(0, from_doubles(DType::f32, Shape{int64_t(v.size())}, {v.begin(), v.end()}));
  }
  c.error("unsupported: needs a 'value', 'value_float(s)' or 'value_int(s)' attribute (strings and sparse "
          "tensors are not supported)");
}


// Row-major strides of a shape.
std::vector<int64_t> strides(const Shape& s) {
  std::vector<int64_t> st(s.rank(), 1);
  for (int64_t i = int64_t(s.rank()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// Gathers `n` elements of `src` by element indices into a new tensor of `dt`/`shape`.
HostTensor pick(const HostTensor& src, Shape shape, const std::vector<int64_t>& idx) {
  HostTensor t(src.dtype(), std::move(shape));
  const size_t es = dtype_size(src.dtype());
  auto* dst = static_cast<std::byte*>(t.data());  // once: data() checks for shared bytes on each call
  const auto* from = static_cast<const std::byte*>(src.data());
  for (size_t i = 0; i < idx.size(); ++i) std::memcpy(dst + i * es, from + idx[i] * es, es);
  return t;
}

std::vector<HostTensor> fold_constant_of_shape(const InferCtx& c) {
  auto dims = to_ints(c.constant(0, "folded input"));
  for (auto d : dims)
    if (d < 0) c.error("shape {} has a negative dimension", Shape(dims).str());
  const HostTensor* v = c.node.attr_t("value");
  DType dt = v ? v->dtype() : DType::f32;
  if (v && v->numel() != 1) c.error("attribute 'value' must hold one element, got shape {}", v->shape().str());
  double fill = v ? to_doubles(*v)[0] : 0.0;
  Shape s(dims);
  return {from_doubles(dt, s, std::vector<double>(size_t(check_host_fold_size(c, dims)), fill))};
}

// ConstantOfShape: folded on the host up to kDeviceFillElements (the small values that decide shapes);
// a larger one (a zero weight of an old classifier, [4096, 9216]) is filled on the device at run time,
// as an Expand of its one value, instead of being held (or refused) on the host.
constexpr int64_t kDeviceFillElements = int64_t(1) << 20;

std::pair<DType, HostTensor> constant_of_shape_value(const Node& n) {
  const HostTensor* v = n.attr_t("value");
  if (v && v->numel() != 1) fail("{}: attribute 'value' must hold one element, got shape {}", n.describe(), v->shape().str());
  HostTensor one(v ? v->dtype() : DType::f32, Shape{1});
  if (v) std::memcpy(one.data(), v->data(), v->bytes());
  return {one.dtype(), one};
}

void infer_constant_of_shape(InferCtx& c) {
  auto dims = to_ints(c.constant(0, "shape"));
  for (auto d : dims)
    if (d < 0) c.error("shape {} has a negative dimension", Shape(dims).str());
  const int64_t n = bounded_numel(dims, int64_t(1) << 40);
  if (n >= 0 && n <= kDeviceFillElements) {
    c.fold(0, fold_constant_of_shape(c)[0]);
    return;
  }
  if (n < 0) c.error("shape {} has too many elements", Shape(dims).str());
  c.set(0, constant_of_shape_value(c.node).first, Shape(dims));
}

class FillKernel : public NodeKernel {
 public:
  Tensor value;
  std::unique_ptr<Expand> expand;
  std::string algorithm() const override { return "device fill (Expand of the value)"; }
  void enqueue(std::span<const Tensor>, std::span<const Tensor> out, ExecutionContext& ec) override {
    Tensor in[] = {value};
    expand->enqueue(in, out, nullptr, ec);
  }
};

std::unique_ptr<NodeKernel> lower_constant_of_shape(LowerCtx& c) {
  auto [dt, one] = constant_of_shape_value(c.node);
  auto k = std::make_unique<FillKernel>();
  k->value = c.ctx.upload(one, c.device);
  k->expand = Expand::create(c.ctx, c.device, ExpandConfig{Shape{1}, dt, c.out[0].shape.to_shape().dims});
  return k;
}

// Range's element count ceil((limit - start) / delta), at least 0; errors name a zero delta or no finite count.
int64_t range_count(const InferCtx& c, double& start, double& delta) {
  for (int i = 0; i < 3; ++i)
    if (c.constant(i, "folded input").numel() != 1) c.error("input {} must be a scalar, got shape {}", i, c.constant(i, "folded input").shape().str());
  start = to_doubles(c.constant(0, "folded input"))[0];
  const double limit = to_doubles(c.constant(1, "folded input"))[0];
  delta = to_doubles(c.constant(2, "folded input"))[0];
  if (delta == 0) c.error("delta is 0");
  const double count = std::ceil((limit - start) / delta);
  if (!std::isfinite(count)) c.error("start {}, limit {}, delta {} give no finite element count", start, limit, delta);
  if (count > double(int64_t(1) << 40)) c.error("{} elements are too many", count);
  return count <= 0 ? 0 : int64_t(count);
}

// Range with known start / limit / delta: folded on the host up to kMaxHostFoldElements, else made on the
// device when the plan runs (f32, i32, i64: a long position-wise, `start + i * delta`).
void infer_range(InferCtx& c) {
  double start = 0, delta = 0;
  const int64_t n = range_count(c, start, delta);
  const DType dt = c.constant(0, "start").dtype();
  if (n <= kMaxHostFoldElements) {
    std::vector<double> v(static_cast<size_t>(n), 0.0);
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = start + double(i) * delta;
    return c.fold(0, from_doubles(dt, Shape{n}, v));
  }
  if (dt != DType::f32 && dt != DType::i32 && dt != DType::i64)
    c.error("{} elements of {} are too many to fold on the host, and the device fill takes f32, i32 and i64", n,
            to_string(dt));
  c.set(0, dt, Shape{n});
}

class RangeKernel : public NodeKernel {
 public:
  cl::Kernel kernel;
  DType dtype = DType::f32;
  double start = 0, delta = 0;
  int64_t n = 0;
  std::mutex mu;  // sessions on other threads share the kernel object
  std::string algorithm() const override { return "device fill (start + i * delta)"; }
  void enqueue(std::span<const Tensor>, std::span<const Tensor> out, ExecutionContext& ec) override {
    std::lock_guard lock(mu);
    if (dtype == DType::f32)
      set_args(kernel, float(start), float(delta), out[0].buffer, cl_long(out[0].offset_elems()));
    else if (dtype == DType::i32)
      set_args(kernel, cl_int(start), cl_int(delta), out[0].buffer, cl_long(out[0].offset_elems()));
    else
      set_args(kernel, cl_long(start), cl_long(delta), out[0].buffer, cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel, cl::NDRange(size_t(n)), cl::NullRange, "range_fill");
  }
};

std::unique_ptr<NodeKernel> lower_range(LowerCtx& c) {
  auto k = std::make_unique<RangeKernel>();
  k->dtype = c.out[0].dtype;
  k->n = c.out[0].shape.to_shape().numel();
  k->start = to_doubles(*c.value[0])[0];
  k->delta = to_doubles(*c.value[2])[0];
  const char* name = k->dtype == DType::f32 ? "range_f32" : k->dtype == DType::i32 ? "range_i32" : "range_i64";
  k->kernel = make_kernel(c.ctx.program("data.cl", "", c.device), name);
  return k;
}

std::vector<HostTensor> fold_gather(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "folded input");
  Shape xs = x.shape();
  int64_t axis = norm_axis(c, c.node.attr_i("axis", 0), int64_t(xs.rank()));
  auto ind = to_ints(c.constant(1, "folded input"));
  Shape out;
  for (int64_t i = 0; i < axis; ++i) out.dims.push_back(xs[i]);
  for (auto d : c.constant(1, "folded input").shape().dims) out.dims.push_back(d);
  for (size_t i = size_t(axis) + 1; i < xs.rank(); ++i) out.dims.push_back(xs[i]);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= xs[i];
  for (size_t i = size_t(axis) + 1; i < xs.rank(); ++i) inner *= xs[i];
  for (auto& j : ind) {
    if (j < -xs[axis] || j >= xs[axis]) c.error("index {} is out of range for axis {} of size {}", j, axis, xs[axis]);
    if (j < 0) j += xs[axis];
  }
  // Rows of `inner` elements copied whole (a plan folds the position rows of its sequence length here:
  // an element-by-element copy of them was a tenth of shape inference).
  HostTensor t(x.dtype(), std::move(out));
  const size_t row = size_t(inner) * dtype_size(x.dtype());
  auto* dst = static_cast<std::byte*>(t.data());
  const auto* src = static_cast<const std::byte*>(x.data());
  for (int64_t o = 0; o < outer; ++o)
    for (auto j : ind) {
      if (row) std::memcpy(dst, src + size_t(o * xs[axis] + j) * row, row);
      dst += row;
    }
  return {std::move(t)};
}

std::vector<HostTensor> fold_slice(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "folded input");
  Shape xs = x.shape();
  int64_t r = int64_t(xs.rank());
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset < 10) {  // starts / ends / axes are attributes before opset 10
    if (!c.node.has("starts") || !c.node.has("ends"))
      c.error("attributes starts and ends are required (opset {})", c.opset);
    starts = c.node.attr_ints("starts"), ends = c.node.attr_ints("ends"), axes = c.node.attr_ints("axes");
  } else {
    starts = to_ints(c.constant(1, "folded input")), ends = to_ints(c.constant(2, "folded input"));
    if (c.has_input(3)) axes = to_ints(c.constant(3, "folded input"));
    if (c.has_input(4)) steps = to_ints(c.constant(4, "folded input"));
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    c.error("starts, ends, axes and steps have {}, {}, {} and {} values", starts.size(), ends.size(), axes.size(),
            steps.size());
  std::vector<int64_t> st(r, 0), step(r, 1), cnt(xs.dims);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = norm_axis(c, axes[i], r), d = xs[a], s = steps[i];
    if (s == 0) c.error("step 0 on axis {}", a);
    int64_t b = starts[i] < 0 ? starts[i] + d : starts[i], e = ends[i] < 0 ? ends[i] + d : ends[i];
    if (s > 0) { b = std::clamp<int64_t>(b, 0, d); e = std::clamp<int64_t>(e, 0, d); }
    else { b = std::clamp<int64_t>(b, 0, d - 1); e = std::clamp<int64_t>(e, -1, d - 1); }
    st[a] = b;
    step[a] = s;
    cnt[a] = s > 0 ? std::max<int64_t>(0, (e - b + s - 1) / s) : std::max<int64_t>(0, (b - e - s - 1) / -s);
  }
  Shape out(cnt);
  auto xst = strides(xs), ost = strides(out);
  std::vector<int64_t> idx(size_t(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t src = 0;
    for (int64_t a = 0; a < r; ++a) src += (st[a] + (i / ost[a] % cnt[a]) * step[a]) * xst[a];
    idx[i] = src;
  }
  return {pick(x, out, idx)};
}

std::vector<HostTensor> fold_concat(const InferCtx& c) {
  const HostTensor& x0 = c.constant(0, "folded input");
  int64_t r = int64_t(x0.shape().rank());
  if (c.opset >= 4 && !c.node.has("axis")) c.error("attribute axis is required (from opset 4)");
  int64_t axis = norm_axis(c, c.node.attr_i("axis", 1), r);  // Concat-1's default axis is 1
  Shape out = x0.shape();
  out[axis] = 0;
  for (auto* v : c.value) {
    if (v->dtype() != x0.dtype() || int64_t(v->shape().rank()) != r) c.error("inputs differ in dtype or rank");
    out[axis] += v->shape()[axis];
  }
  HostTensor t(x0.dtype(), out);
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= out[i];
  size_t es = dtype_size(x0.dtype());
  auto* dst = static_cast<std::byte*>(t.data());
  for (int64_t o = 0; o < outer; ++o)
    for (auto* v : c.value) {
      size_t chunk = size_t(v->numel() / std::max<int64_t>(outer, 1)) * es;
      std::memcpy(dst, static_cast<const std::byte*>(v->data()) + o * chunk, chunk);
      dst += chunk;
    }
  return {t};
}

// ReduceMin / ReduceMax / ReduceSum / ReduceProd of values known when planning: shape arithmetic such as
// torchvision's k = min(topk_candidates, count) over the count of a data-dependent output, or a numel.
enum class HostReduce { min, max, sum, prod };
HostFold fold_reduce(HostReduce kind) {
  return [kind](const InferCtx& c) -> std::vector<HostTensor> {
    const HostTensor& x = c.constant(0, "folded input");
    const Shape s = x.shape();
    const int64_t r = int64_t(s.rank());
    std::vector<int64_t> axes =
        c.opset >= (kind == HostReduce::sum ? 13 : 18) ? (c.has_input(1) ? to_ints(c.constant(1, "axes")) : std::vector<int64_t>{}) : c.node.attr_ints("axes");
    if (axes.empty() && c.node.attr_i("noop_with_empty_axes", 0)) return {x};
    const bool keep = c.node.attr_i("keepdims", 1) != 0;
    std::vector<bool> reduced(size_t(r), axes.empty());
    for (int64_t a : axes) reduced[size_t(norm_axis(c, a, r))] = true;
    Shape out;
    std::vector<int64_t> out_stride(size_t(r), 0);  // per input axis: its stride in the output (0 if reduced)
    for (int64_t i = 0; i < r; ++i)
      if (!reduced[size_t(i)] || keep) out.dims.push_back(reduced[size_t(i)] ? 1 : s[i]);
    for (int64_t i = r - 1, st = 1; i >= 0; --i)
      if (!reduced[size_t(i)]) out_stride[size_t(i)] = st, st *= s[i];
    if (x.numel() == 0 && (kind == HostReduce::min || kind == HostReduce::max))
      c.error("cannot fold a {} of the empty tensor '{}'", kind == HostReduce::min ? "minimum" : "maximum",
              c.input(0).name);
    const auto v = to_doubles(x);
    std::vector<double> y(size_t(out.numel()), std::nan(""));
    std::vector<bool> seen(y.size(), false);
    for (int64_t p = 0; p < x.numel(); ++p) {
      int64_t rem = p, o = 0;
      for (int64_t i = r - 1; i >= 0; --i) {
        o += (rem % s[i]) * out_stride[size_t(i)];
        rem /= s[i];
      }
      double& t = y[size_t(o)];
      const double e = v[size_t(p)];
      if (!seen[size_t(o)]) t = e;
      else if (kind == HostReduce::sum) t += e;
      else if (kind == HostReduce::prod) t *= e;
      else if (std::isnan(e)) t = e;
      else if (!std::isnan(t)) t = kind == HostReduce::max ? std::max(t, e) : std::min(t, e);
      seen[size_t(o)] = true;
    }
    if (kind == HostReduce::sum || kind == HostReduce::prod)
      for (size_t o = 0; o < y.size(); ++o)
        if (!seen[o]) y[o] = kind == HostReduce::sum ? 0.0 : 1.0;
    return {from_doubles(x.dtype(), out, y)};
  };
}

std::vector<HostTensor> fold_cast(const InferCtx& c) {
  DType to;
  E8M0Rounding rounding;
  try {
    to = dtype_from_onnx(int(c.node.attr_i("to", 1)), "Cast 'to'");
    rounding = parse_e8m0_rounding(c.node.attr_s("round_mode", "up"));
  } catch (const Error& e) {
    c.error("{}", e.what());
  }
  const HostTensor& x = c.constant(0, "folded input");
  return {cast_host(x, to, c.node.attr_i("saturate", 1) != 0, rounding)};
}

// Numpy-style broadcast of two shapes; errors name the node.
Shape broadcast(const InferCtx& c, const Shape& a, const Shape& b) {
  size_t r = std::max(a.rank(), b.rank());
  Shape o;
  o.dims.resize(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.rank() ? 1 : a[i - (r - a.rank())], db = i < r - b.rank() ? 1 : b[i - (r - b.rank())];
    if (da != db && da != 1 && db != 1) c.error("shapes {} and {} do not broadcast", a.str(), b.str());
    o[i] = da == 1 ? db : da;
  }
  return o;
}

int64_t bcast_index(const Shape& out, const Shape& in, int64_t i) {
  int64_t idx = 0, mul = 1;
  for (int64_t a = int64_t(out.rank()) - 1, b = int64_t(in.rank()) - 1; b >= 0; --a, --b) {
    int64_t coord = i % out[a];
    i /= out[a];
    if (in[b] != 1) idx += coord * mul;
    mul *= in[b];
  }
  return idx;
}

template <typename F>
HostFold binary(F f, bool to_bool) {
  return [f, to_bool](const InferCtx& c) {
    const HostTensor& a = c.constant(0, "folded input");
    HostTensor b = c.constant(1, "folded input");
    if (auto lb = legacy_broadcast(c.node, c.opset, a.shape(), b.shape())) b.reshape(*lb);  // before opset 7
    Shape o = broadcast(c, a.shape(), b.shape());
    auto va = to_doubles(a), vb = to_doubles(b);
    std::vector<double> r(size_t(o.numel()));
    bool integer = a.dtype() == DType::i32 || a.dtype() == DType::i64;
    for (int64_t i = 0; i < o.numel(); ++i) {
      double x = va[bcast_index(o, a.shape(), i)], y = vb[bcast_index(o, b.shape(), i)];
      r[i] = f(x, y, integer);
    }
    return std::vector<HostTensor>{from_doubles(to_bool ? DType::boolean : a.dtype(), o, r)};
  };
}

// Not on the host: the negated conditions of If nodes (an OptionalHasElement, a shape test).
std::vector<HostTensor> fold_not(const InferCtx& c) {
  HostTensor r = c.constant(0, "folded input");
  if (r.dtype() != DType::boolean) c.error("input has dtype {}, expected bool", to_string(r.dtype()));
  for (auto& v : r.span<bool>()) v = !v;
  return {r};
}

// Where on the host, byte for byte (int64 shape values such as INT64_MAX slice ends survive exactly):
// torch's exports pick shape values with Where(Equal(shape, -1), ...).
std::vector<HostTensor> fold_where(const InferCtx& c) {
  const HostTensor& cond = c.constant(0, "folded input");
  const HostTensor &x = c.constant(1, "folded input"), &y = c.constant(2, "folded input");
  if (cond.dtype() != DType::boolean) c.error("condition has dtype {}, expected bool", to_string(cond.dtype()));
  if (x.dtype() != y.dtype()) c.error("X ({}) and Y ({}) differ in dtype", to_string(x.dtype()), to_string(y.dtype()));
  Shape o = broadcast(c, broadcast(c, cond.shape(), x.shape()), y.shape());
  if (bounded_numel(o.dims, kMaxHostFoldElements) < 0) c.error("output {} is too large to fold", o.str());
  HostTensor r(x.dtype(), o);
  const size_t es = dtype_size(x.dtype());
  const auto* px = static_cast<const std::byte*>(x.data());
  const auto* py = static_cast<const std::byte*>(y.data());
  auto* pr = static_cast<std::byte*>(r.data());
  for (int64_t i = 0; i < o.numel(); ++i) {
    bool take_x = cond.as<bool>()[bcast_index(o, cond.shape(), i)];
    const std::byte* src = take_x ? px + size_t(bcast_index(o, x.shape(), i)) * es : py + size_t(bcast_index(o, y.shape(), i)) * es;
    std::memcpy(pr + size_t(i) * es, src, es);
  }
  return {std::move(r)};
}

 const OpRegistration kShapeOps{
    {.type = "Shape", .since = 1, .family = "shape", .infer = infer_shape},
    {.type = "Size", .since = 1, .family = "shape", .infer = infer_size},
    {.type = "Constant", .since = 1, .family = "shape", .infer = infer_constant},
    // Their output shape depends on input values, so the inputs must be known at load; they fold.
    {.type = "ConstantOfShape", .since = 9, .family = "shape", .const_inputs = {0}, .infer = infer_constant_of_shape,
     .lower = lower_constant_of_shape},
    {.type = "Range", .since = 11, .family = "shape", .const_inputs = {0, 1, 2}, .infer = infer_range,
     .lower = lower_range},
};

const FolderRegistration kFolders{
    {"Gather", fold_gather},
    {"Slice", fold_slice},
    {"Concat", fold_concat},
    {"Cast", fold_cast},
    {"Add", binary([](double x, double y, bool) { return x + y; }, false)},
    {"Sub", binary([](double x, double y, bool) { return x - y; }, false)},
    {"Mul", binary([](double x, double y, bool) { return x * y; }, false)},
    {"Div", binary([](double x, double y, bool i) { return i ? std::trunc(x / y) : x / y; }, false)},
    {"Equal", binary([](double x, double y, bool) { return double(x == y); }, true)},
    // Comparisons and logic on shape values: the conditions of If nodes that branch on a shape.
    {"Greater", binary([](double x, double y, bool) { return double(x > y); }, true)},
    {"Less", binary([](double x, double y, bool) { return double(x < y); }, true)},
    {"GreaterOrEqual", binary([](double x, double y, bool) { return double(x >= y); }, true)},
    {"LessOrEqual", binary([](double x, double y, bool) { return double(x <= y); }, true)},
    {"And", binary([](double x, double y, bool) { return double(x != 0 && y != 0); }, true)},
    {"Or", binary([](double x, double y, bool) { return double(x != 0 || y != 0); }, true)},
    {"Xor", binary([](double x, double y, bool) { return double((x != 0) != (y != 0)); }, true)},
    {"Not", fold_not},
    {"Where", fold_where},
    {"ReduceMin", fold_reduce(HostReduce::min)},
    {"ReduceMax", fold_reduce(HostReduce::max)},
    {"ReduceSum", fold_reduce(HostReduce::sum)},
    {"ReduceProd", fold_reduce(HostReduce::prod)},
};

}  // namespace
}  // namespace cldl::graph
