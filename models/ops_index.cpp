// ONNX index ops mapped onto layers/index.hpp: ScatterElements, ScatterND, GatherND, OneHot, Hardmax,
// Einsum, MaxUnpool, Trilu, NonZero (whose output shape is its data's values: a counted output, see below).
// Other inputs that decide an output shape must be known at load (OneHot's depth, MaxUnpool's output_shape);
// indices and updates are ordinary data. Indices known at load are range-checked then, so an
// out-of-range one is an error naming the node rather than the kernels' skip / zero.
#include "layers/index.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

void check_index_input(const InferCtx& c, size_t i) {
  DType t = c.input(i).dtype;
  if (t != DType::i32 && t != DType::i64)
    c.error("input '{}' (indices) must be int32 or int64, got {}", c.input(i).name, to_string(t));
}

void check_same_dtype(const InferCtx& c, size_t a, size_t b) {
  if (c.input(a).dtype != c.input(b).dtype)
    c.error("input '{}' is {} but input '{}' is {}", c.input(b).name, to_string(c.input(b).dtype), c.input(a).name,
            to_string(c.input(a).dtype));
}

// Load-time range check of constant indices against per-entry extents (extent_of(position) -> n):
// valid are [-n, n).
template <typename ExtentOf>
void check_constant_indices(const InferCtx& c, size_t i, ExtentOf extent_of) {
  if (i >= c.value.size() || !c.value[i]) return;
  auto idx = to_ints(*c.value[i]);
  for (size_t p = 0; p < idx.size(); ++p) {
    const int64_t n = extent_of(p);
    if (idx[p] < -n || idx[p] >= n)
      c.error("input '{}' (indices) holds {} at flat position {}, outside [-{}, {})", c.input(i).name, idx[p], p, n, n);
  }
}

ScatterReduction reduction_of(const Node& n) {
  std::string r = n.attr_s("reduction", "none");
  try {
    return scatter_reduction(n.op_type, r);
  } catch (const Error&) {
    fail("{}: attribute reduction = '{}' is not one of none, add, mul, max, min", n.describe(), r);
  }
}

// ---------------------------------------------------------------- ScatterElements
ScatterElementsConfig scatter_elements_cfg(const Node& n, const Shape& data, DType dt, const Shape& idx, DType it) {
  return {data, dt, idx, it, n.attr_i("axis", 0), reduction_of(n)};
}
void infer_scatter_elements(InferCtx& c) {
  check_index_input(c, 1);
  check_same_dtype(c, 0, 2);
  if (c.shape(2) != c.shape(1))
    c.error("updates shape {} differs from indices shape {}", c.shape(2).str(), c.shape(1).str());
  auto k = checked(
      c, [&] { return scatter_elements_cfg(c.node, c.shape(0), c.input(0).dtype, c.shape(1), c.input(1).dtype); });
  Shape o = checked(c, [&] { return ScatterElements::validate(k); });
  const int64_t ax = norm_axis(c, k.axis, int64_t(o.rank()));
  check_constant_indices(c, 1, [&](size_t) { return o[size_t(ax)]; });
  c.set(0, k.dtype, o);
}
std::unique_ptr<NodeKernel> lower_scatter_elements(LowerCtx& c) {
  auto k =
      scatter_elements_cfg(c.node, c.in[0].shape.to_shape(), c.in[0].dtype, c.in[1].shape.to_shape(), c.in[1].dtype);
  return wrap(ScatterElements::create(c.ctx, c.device, k), c);
}

// ---------------------------------------------------------------- ScatterND
ScatterNDConfig scatter_nd_cfg(const Node& n, const Shape& data, DType dt, const Shape& idx, DType it) {
  return {data, dt, idx, it, reduction_of(n)};
}
void infer_scatter_nd(InferCtx& c) {
  check_index_input(c, 1);
  check_same_dtype(c, 0, 2);
  auto k =
      checked(c, [&] { return scatter_nd_cfg(c.node, c.shape(0), c.input(0).dtype, c.shape(1), c.input(1).dtype); });
  Shape o = checked(c, [&] { return ScatterND::validate(k); });
  Shape u = ScatterND::updates_shape(k);
  if (c.shape(2) != u)
    c.error("updates shape {} differs from the expected {} (indices[:-1] + data[k:])", c.shape(2).str(), u.str());
  const size_t kk = size_t(k.indices.dims.back());
  check_constant_indices(c, 1, [&](size_t p) { return o[p % kk]; });
  c.set(0, k.dtype, o);
}
std::unique_ptr<NodeKernel> lower_scatter_nd(LowerCtx& c) {
  auto k = scatter_nd_cfg(c.node, c.in[0].shape.to_shape(), c.in[0].dtype, c.in[1].shape.to_shape(), c.in[1].dtype);
  return wrap(ScatterND::create(c.ctx, c.device, k), c);
}

// ---------------------------------------------------------------- GatherND
void infer_gather_nd(InferCtx& c) {
  check_index_input(c, 1);
  GatherNDConfig k{c.shape(0), c.input(0).dtype, c.shape(1), c.input(1).dtype, c.node.attr_i("batch_dims", 0)};
  Shape o = checked(c, [&] { return GatherND::validate(k); });
  const size_t kk = size_t(k.indices.dims.back()), b = size_t(k.batch_dims);
  check_constant_indices(c, 1, [&](size_t p) { return k.input[b + p % kk]; });
  c.set(0, k.dtype, o);
}
std::unique_ptr<NodeKernel> lower_gather_nd(LowerCtx& c) {
  GatherNDConfig k{c.in[0].shape.to_shape(), c.in[0].dtype, c.in[1].shape.to_shape(), c.in[1].dtype,
                   c.node.attr_i("batch_dims", 0)};
  return wrap(GatherND::create(c.ctx, c.device, k), c);
}

// ---------------------------------------------------------------- OneHot
// Inputs indices, depth (load time: it is the size of the new dim), values [off, on].
OneHotConfig one_hot_cfg(const Node& n, const Shape& idx, DType it, const HostTensor& depth, DType dt) {
  if (depth.numel() != 1) fail("{}: input depth must hold one value, got shape {}", n.describe(), depth.shape().str());
  const double d = to_doubles(depth)[0];
  if (!(d >= 1.0 && d <= double(kMaxHostFoldElements)))  // NaN fails too
    fail("{}: input depth = {} must be in [1, {}]", n.describe(), d, kMaxHostFoldElements);
  // Opsets 9-10 take indices in [0, depth); 11 made negative ones count from the end.
  return {idx, it, int64_t(d), dt, n.attr_i("axis", -1), n.opset >= 11};
}
void infer_one_hot(InferCtx& c) {
  const HostTensor& depth = c.constant(1, "depth");
  if (c.shape(2).numel() != 2)
    c.error("input '{}' (values) must hold 2 values (off, on), got shape {}", c.input(2).name, c.shape(2).str());
  auto k = checked(c, [&] { return one_hot_cfg(c.node, c.shape(0), c.input(0).dtype, depth, c.input(2).dtype); });
  Shape o = checked(c, [&] { return OneHot::validate(k); });
  if (bounded_numel(o.dims, int64_t(1) << 40) < 0) c.error("output shape {} is too large", o.str());
  c.set(0, k.dtype, o);
}
std::unique_ptr<NodeKernel> lower_one_hot(LowerCtx& c) {
  auto k = one_hot_cfg(c.node, c.in[0].shape.to_shape(), c.in[0].dtype, *c.value[1], c.in[2].dtype);
  return wrap(OneHot::create(c.ctx, c.device, k), c, {0, 2});
}

// ---------------------------------------------------------------- Hardmax
// Opsets 1 to 12 coerce the input to 2-D at axis (default 1), as Softmax does.
HardmaxConfig hardmax_cfg(const Node& n, int64_t opset, const Shape& s, DType dt) {
  if (opset < 13) return {coerced_2d(n, s), dt, 1};
  return {s, dt, n.attr_i("axis", -1)};
}
void infer_hardmax(InferCtx& c) {
  HardmaxConfig k = checked(c, [&] { return hardmax_cfg(c.node, c.opset, c.shape(0), c.input(0).dtype); });
  checked(c, [&] { return Hardmax::validate(k); });
  c.set(0, k.dtype, c.shape(0));
}
std::unique_ptr<NodeKernel> lower_hardmax(LowerCtx& c) {
  Shape s = c.in[0].shape.to_shape();
  HardmaxConfig k = hardmax_cfg(c.node, c.node.opset, s, c.in[0].dtype);
  auto kernel = wrap(Hardmax::create(c.ctx, c.device, k), c);
  if (k.input == s) return kernel;
  return std::make_unique<ReshapedKernel>(std::move(kernel), std::vector<std::optional<Shape>>{k.input},
                                          std::vector<std::optional<Shape>>{k.input},
                                          "on the 2-D view " + k.input.str() + " (opset < 13)");
}

// ---------------------------------------------------------------- Trilu
// Inputs X and optional k (an int64 scalar, load time: it picks the kernel's mask). A constant X (the
// causal masks PyTorch exports as torch.triu / tril of a constant) folds on the host.
TriluConfig trilu_cfg(const Node& n, const Shape& x, DType dt, const HostTensor* k) {
  TriluConfig t{x, dt, 0, n.attr_i("upper", 1) != 0};
  if (k) {
    if (k->numel() != 1) fail("{}: input k must hold one value, got shape {}", n.describe(), k->shape().str());
    t.k = to_ints(*k)[0];
  }
  return t;
}
void infer_trilu(InferCtx& c) {
  const HostTensor* k = c.has_input(1) ? &c.constant(1, "k") : nullptr;
  if (k && k->dtype() != DType::i64) c.error("input k must be int64, got {}", to_string(k->dtype()));
  auto t = trilu_cfg(c.node, c.shape(0), c.input(0).dtype, k);
  c.set(0, t.dtype, checked(c, [&] { return Trilu::validate(t); }));
}
std::unique_ptr<NodeKernel> lower_trilu(LowerCtx& c) {
  const HostTensor* k = c.value.size() > 1 ? c.value[1] : nullptr;
  return wrap(Trilu::create(c.ctx, c.device, trilu_cfg(c.node, c.in[0].shape.to_shape(), c.in[0].dtype, k)), c, {0});
}
std::vector<HostTensor> fold_trilu(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "input");
  const HostTensor* k = c.has_input(1) ? &c.constant(1, "k") : nullptr;
  const TriluConfig t = trilu_cfg(c.node, x.shape(), x.dtype(), k);
  if (x.shape().rank() < 2) c.error("input must have rank >= 2, got shape {}", x.shape().str());
  const Shape& s = x.shape();
  const int64_t n = s[s.rank() - 2], m = s[s.rank() - 1];
  const size_t es = dtype_size(x.dtype());
  HostTensor y(x.dtype(), s);
  auto* dst = static_cast<unsigned char*>(y.data());
  const auto* src = static_cast<const unsigned char*>(x.data());
  for (int64_t e = 0; e < s.numel(); ++e) {
    const int64_t d = e % m - (e / m) % n;
    const bool keep = t.upper ? d >= t.k : d <= t.k;
    for (size_t b = 0; b < es; ++b) dst[e * es + b] = keep ? src[e * es + b] : 0;
  }
  return {y};
}

// ---------------------------------------------------------------- Einsum
void infer_einsum(InferCtx& c) {
  EinsumConfig k{c.node.attr_s("equation", ""), {}, c.input(0).dtype};
  for (size_t i = 0; i < c.in.size(); ++i) {
    check_same_dtype(c, 0, i);
    k.inputs.push_back(c.shape(i));
  }
  c.set(0, k.dtype, checked(c, [&] { return Einsum::validate(k); }));
}
std::unique_ptr<NodeKernel> lower_einsum(LowerCtx& c) {
  EinsumConfig k{c.node.attr_s("equation", ""), {}, c.in[0].dtype};
  for (auto& v : c.in) k.inputs.push_back(v.shape.to_shape());
  return wrap(Einsum::create(c.ctx, c.device, k), c);
}

// ---------------------------------------------------------------- MaxUnpool
// Inputs X, I, optional output_shape (load time).
MaxUnpoolConfig max_unpool_cfg(const Node& n, const Shape& x, DType dt, DType it, const HostTensor* out_shape) {
  MaxUnpoolConfig k{x, dt, it, n.attr_ints("kernel_shape"), n.attr_ints("strides"), n.attr_ints("pads"), {}};
  if (out_shape && out_shape->numel() > 0) k.output_shape = to_ints(*out_shape);
  return k;
}
void infer_max_unpool(InferCtx& c) {
  check_index_input(c, 1);
  if (c.shape(1) != c.shape(0)) c.error("input I has shape {}, X has {}", c.shape(1).str(), c.shape(0).str());
  const HostTensor* os = c.has_input(2) ? &c.constant(2, "output_shape") : nullptr;
  if (os && os->dtype() != DType::i64) c.error("input output_shape must be int64, got {}", to_string(os->dtype()));
  auto k = max_unpool_cfg(c.node, c.shape(0), c.input(0).dtype, c.input(1).dtype, os);
  Shape o = checked(c, [&] { return MaxUnpool::validate(k); });
  const int64_t n = MaxUnpool::inferred_shape(k).numel();
  check_constant_indices(c, 1, [&](size_t) { return n; });
  c.set(0, k.dtype, o);
}
std::unique_ptr<NodeKernel> lower_max_unpool(LowerCtx& c) {
  const HostTensor* os = c.value.size() > 2 ? c.value[2] : nullptr;
  auto k = max_unpool_cfg(c.node, c.in[0].shape.to_shape(), c.in[0].dtype, c.in[1].dtype, os);
  return wrap(MaxUnpool::create(c.ctx, c.device, k), c, {0, 1});
}

// ---------------------------------------------------------------- NonZero
// The output's shape [rank, count] is the data's values. Data known when planning folds on the host;
// run-time data runs on the device (layers/index.hpp NonZero) as a counted output: the plan stops after
// the node, the run reads the count back and plans the rest for [rank, count] (docs/dynamic-shapes.md).
// Row-major order.
std::vector<HostTensor> fold_non_zero(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "data: NonZero's output shape is decided by its values");
  const auto v = to_doubles(x);
  const Shape s = x.shape();
  const size_t r = s.rank();
  std::vector<int64_t> hits;
  for (size_t p = 0; p < v.size(); ++p)
    if (v[p] != 0.0) hits.push_back(int64_t(p));  // NaN counts as non-zero
  const size_t n = hits.size();
  std::vector<int64_t> out(std::max<size_t>(r, 1) * n);
  for (size_t j = 0; j < n; ++j) {
    int64_t rem = hits[j];
    for (size_t d = r; d-- > 0;) {
      out[d * n + j] = rem % s[d];
      rem /= s[d];
    }
  }
  // A scalar input: ONNX's reference gives shape [1, count] of zeros (numpy's nonzero of a 1-element view).
  return {from_ints(Shape{int64_t(std::max<size_t>(r, 1)), int64_t(n)}, out)};
}
void infer_non_zero(InferCtx& c) {
  if (c.value[0]) {
    c.fold(0, fold_non_zero(c)[0]);
    return;
  }
  const Shape bound = checked(c, [&] { return NonZero::validate({c.shape(0), c.input(0).dtype}); });
  c.set_counted(0, DType::i64, bound, 1);
}
std::unique_ptr<NodeKernel> lower_non_zero(LowerCtx& c) {
  if (c.out.size() != 2) c.error("output '{}' has a shape decided by run-time data: plan it as a Model", c.out[0].name);
  return wrap(NonZero::create(c.ctx, c.device, {c.in[0].shape.to_shape(), c.in[0].dtype}), c);
}

const OpRegistration kIndexOps{
    {.type = "ScatterElements",
     .since = 11,
     .family = "index",
     .infer = infer_scatter_elements,
     .lower = lower_scatter_elements},
    // Scatter (opsets 9 and 10) is ScatterElements under its old name, deprecated in opset 11.
    {.type = "Scatter",
     .since = 9,
     .until = 10,
     .family = "index",
     .infer = infer_scatter_elements,
     .lower = lower_scatter_elements},
    {.type = "ScatterND", .since = 11, .family = "index", .infer = infer_scatter_nd, .lower = lower_scatter_nd},
    {.type = "GatherND", .since = 11, .family = "index", .infer = infer_gather_nd, .lower = lower_gather_nd},
    {.type = "OneHot",
     .since = 9,
     .family = "index",
     .const_inputs = {1},
     .infer = infer_one_hot,
     .lower = lower_one_hot},
    {.type = "Hardmax", .since = 1, .family = "index", .infer = infer_hardmax, .lower = lower_hardmax},
    {.type = "Einsum", .since = 12, .family = "index", .infer = infer_einsum, .lower = lower_einsum},
    {.type = "MaxUnpool",
     .since = 9,
     .family = "index",
     .const_inputs = {2},
     .infer = infer_max_unpool,
     .lower = lower_max_unpool},
    {.type = "Trilu", .since = 14, .family = "index", .const_inputs = {1}, .infer = infer_trilu, .lower = lower_trilu},
    {.type = "NonZero", .since = 9, .family = "index", .infer = infer_non_zero, .lower = lower_non_zero},
};

const FolderRegistration kIndexFolders{{"NonZero", fold_non_zero}, {"Trilu", fold_trilu}};

}  // namespace
}  // namespace cldl::graph
