// ONNX selection ops: TopK and ReverseSequence on layers/select.hpp; Compress as a Gather of the indices its
// condition selects (known when planning: uploaded; computed from run-time data: a NonZero of it, a counted
// output, then a Gather; see expand_compress); EyeLike, whose
// output depends only on its input's shape and dtype, always folds at load; Unique folds on the host and
// needs its input known at load (its values decide every output shape). TopK's k and Compress's condition
// are load-time inputs; with all inputs constant, TopK, ReverseSequence, Compress and CumProd (registered
// in ops_reduce.cpp beside CumSum) fold on the host as well.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "layers/data.hpp"
#include "layers/select.hpp"
#include "models/onnx_import.hpp"
#include "models/ops_cnn_common.hpp"
#include "runtime/host_step.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

bool is_float_dtype(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }

// Host-side element keys that order like the values: doubles for float types (NaN above every number and
// equal to NaN, as numpy's sort and unique treat it), the integers themselves otherwise.
struct HostKeys {
  std::vector<double> f;
  std::vector<int64_t> i;
  bool is_float = false, is_unsigned = false;
  explicit HostKeys(const HostTensor& t) : is_float(is_float_dtype(t.dtype())) {
    const DType d = t.dtype();
    is_unsigned = d == DType::u8 || d == DType::u16 || d == DType::u32 || d == DType::u64 || d == DType::boolean;
    if (is_float)
      f = to_doubles(t);
    else
      i = to_ints(t);
  }
  // -1, 0, 1 as element a orders before, with, after element b.
  int cmp(size_t a, size_t b) const {
    if (is_float) {
      const double x = f[a], y = f[b];
      if (std::isnan(x) || std::isnan(y)) return std::isnan(x) == std::isnan(y) ? 0 : std::isnan(x) ? 1 : -1;
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (is_unsigned) {
      const auto x = uint64_t(i[a]), y = uint64_t(i[b]);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    return i[a] < i[b] ? -1 : i[a] > i[b] ? 1 : 0;
  }
};

// The layout of a tensor around one axis: outer x len x inner.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
  AxisSplit(const Shape& s, size_t axis) {
    for (size_t d = 0; d < s.rank(); ++d) (d < axis ? outer : d == axis ? len : inner) *= s[d];
  }
};

// Copies slices `picks` (positions along the axis) of x into a tensor of shape `out`.
HostTensor gather_slices(const HostTensor& x, const AxisSplit& a, const std::vector<int64_t>& picks, Shape out) {
  HostTensor y(x.dtype(), std::move(out));
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const unsigned char*>(x.data());
  auto* dst = static_cast<unsigned char*>(y.data());
  const int64_t k = int64_t(picks.size());
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(dst + size_t((o * k + j) * a.inner) * es, src + size_t((o * a.len + picks[size_t(j)]) * a.inner) * es,
                  size_t(a.inner) * es);
  return y;
}

// ---------------------------------------------------------------- TopK
TopKConfig topk_config(const InferCtx* ic, const Node& n, int64_t opset, Shape s, DType dt, const HostTensor* kt) {
  TopKConfig t{std::move(s), dt, 0, n.attr_i("axis", -1), n.attr_i("largest", 1) != 0};
  if (opset < 10) {
    t.k = n.attr_i("k", -1);
  } else {
    auto k = to_ints(*kt);
    if (k.size() != 1) {
      if (ic) ic->error("input K must hold one value, got {}", k.size());
      fail("{}: input K must hold one value, got {}", n.describe(), k.size());
    }
    t.k = k[0];
  }
  return t;
}

void infer_topk(InferCtx& c) {
  const HostTensor* k = c.opset >= 10 ? &c.constant(1, "K") : nullptr;
  auto cfg = topk_config(&c, c.node, c.opset, c.shape(0), c.input(0).dtype, k);
  Shape out = checked(c, [&] { return TopK::validate(cfg); });
  c.set(0, cfg.dtype, out);
  c.set(1, DType::i64, out);
}

std::unique_ptr<NodeKernel> lower_topk(LowerCtx& c) {
  // K is an input from opset 10 (known at load), the attribute k before.
  const bool k_input = c.in.size() > 1 && !c.in[1].name.empty();
  const HostTensor* k = k_input ? c.value[1] : nullptr;
  if (k_input && !k) c.error("input K must be known at load");
  const int64_t opset = k_input ? 10 : 1;
  auto cfg = topk_config(nullptr, c.node, opset, c.in[0].shape.to_shape(), c.in[0].dtype, k);
  return wrap(TopK::create(c.ctx, c.device, cfg), c, {0});
}

// Host TopK on constant inputs: a stable sort of each line's positions.
std::vector<HostTensor> fold_topk(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "X");
  const HostTensor* kt = c.opset >= 10 ? &c.constant(1, "K") : nullptr;
  auto cfg = topk_config(&c, c.node, c.opset, x.shape(), x.dtype(), kt);
  Shape out = checked(c, [&] { return TopK::validate(cfg); });
  const size_t axis = size_t(cfg.axis < 0 ? cfg.axis + int64_t(x.shape().rank()) : cfg.axis);
  const AxisSplit a(x.shape(), axis);
  const HostKeys keys(x);
  HostTensor y(x.dtype(), out), yi(DType::i64, out);
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const unsigned char*>(x.data());
  auto* dst = static_cast<unsigned char*>(y.data());
  auto* idx = yi.as<int64_t>();
  std::vector<int64_t> order(size_t(a.len));
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t i = 0; i < a.inner; ++i) {
      auto at = [&](int64_t j) { return size_t((o * a.len + j) * a.inner + i); };
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
        const int r = keys.cmp(at(p), at(q));
        return cfg.largest ? r > 0 : r < 0;
      });
      for (int64_t r = 0; r < cfg.k; ++r) {
        const size_t d = size_t((o * cfg.k + r) * a.inner + i);
        std::memcpy(dst + d * es, src + at(order[size_t(r)]) * es, es);
        idx[d] = order[size_t(r)];
      }
    }
  return {y, yi};
}

// ---------------------------------------------------------------- ReverseSequence
ReverseSequenceConfig reverse_sequence_config(const Node& n, Shape s, DType dt) {
  return {std::move(s), dt, n.attr_i("time_axis", 0), n.attr_i("batch_axis", 1)};
}

void infer_reverse_sequence(InferCtx& c) {
  auto cfg = reverse_sequence_config(c.node, c.shape(0), c.input(0).dtype);
  checked(c, [&] { return ReverseSequence::validate(cfg); });
  const Shape lens = c.shape(1);
  if (c.input(1).dtype != DType::i64)
    c.error("input '{}' (sequence_lens) must be int64, got {}", c.input(1).name, to_string(c.input(1).dtype));
  const int64_t batch = cfg.input[size_t(cfg.batch_axis)];
  if (lens != Shape{batch})
    c.error("input '{}' (sequence_lens) has shape {}, expected [{}] (the batch axis' extent)", c.input(1).name,
            lens.str(), batch);
  if (c.value[1])
    for (int64_t v : to_ints(*c.value[1]))
      if (v < 0 || v > cfg.input[size_t(cfg.time_axis)])
        c.error("sequence_lens holds {}, outside [0, {}] (the time axis' extent)", v, cfg.input[size_t(cfg.time_axis)]);
  c.set(0, cfg.dtype, cfg.input);
}

std::unique_ptr<NodeKernel> lower_reverse_sequence(LowerCtx& c) {
  auto cfg = reverse_sequence_config(c.node, c.in[0].shape.to_shape(), c.in[0].dtype);
  return wrap(ReverseSequence::create(c.ctx, c.device, cfg), c);
}

// Host ReverseSequence on constant inputs: byte moves.
std::vector<HostTensor> fold_reverse_sequence(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "input");
  const HostTensor& lens_t = c.constant(1, "sequence_lens");
  auto cfg = reverse_sequence_config(c.node, x.shape(), x.dtype());
  checked(c, [&] { return ReverseSequence::validate(cfg); });
  const auto lens = to_ints(lens_t);
  const Shape& s = x.shape();
  const int64_t steps = s[size_t(cfg.time_axis)], batch = s[size_t(cfg.batch_axis)];
  if (int64_t(lens.size()) != batch)
    c.error("sequence_lens has {} values, expected {} (the batch axis' extent)", lens.size(), batch);
  int64_t inner = 1;
  for (size_t d = 2; d < s.rank(); ++d) inner *= s[d];
  const int64_t s1 = inner, s0 = s[1] * inner;
  const int64_t ts = cfg.time_axis == 0 ? s0 : s1, bs = cfg.batch_axis == 0 ? s0 : s1;
  const size_t es = dtype_size(x.dtype());
  HostTensor y(x.dtype(), s);
  const auto* src = static_cast<const unsigned char*>(x.data());
  auto* dst = static_cast<unsigned char*>(y.data());
  for (int64_t b = 0; b < batch; ++b) {
    if (lens[size_t(b)] < 0 || lens[size_t(b)] > steps)
      c.error("sequence_lens holds {}, outside [0, {}] (the time axis' extent)", lens[size_t(b)], steps);
    for (int64_t t = 0; t < steps; ++t) {
      const int64_t from = t < lens[size_t(b)] ? lens[size_t(b)] - 1 - t : t;
      std::memcpy(dst + size_t(t * ts + b * bs) * es, src + size_t(from * ts + b * bs) * es, size_t(inner) * es);
    }
  }
  return {y};
}

// Host CumProd on constant inputs: doubles for float types, wrapping 64-bit products for integers.
std::vector<HostTensor> fold_cumprod(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "x");
  const auto ax = to_ints(c.constant(1, "axis"));
  if (ax.size() != 1) c.error("axis must hold one value, got {}", ax.size());
  const DType dt = x.dtype();
  if (!(is_float_dtype(dt) || dt == DType::i32 || dt == DType::i64 || dt == DType::u32 || dt == DType::u64))
    c.error("input dtype {} is not supported (f32, f64, i32, i64, u32, u64)", to_string(dt));
  if (x.shape().rank() == 0) c.error("input must have rank >= 1, got a scalar");
  const AxisSplit a(x.shape(), size_t(norm_axis(c, ax[0], int64_t(x.shape().rank()))));
  const bool exclusive = c.node.attr_i("exclusive", 0) != 0, reverse = c.node.attr_i("reverse", 0) != 0;
  const bool fl = is_float_dtype(dt);
  std::vector<double> d = fl ? to_doubles(x) : std::vector<double>{};
  std::vector<uint64_t> u;
  if (!fl) {  // the stored bits, sign-extended for signed types (wrapping products need no more)
    u.resize(size_t(x.numel()));
    for (size_t i = 0; i < u.size(); ++i)
      u[i] = dt == DType::i32   ? uint64_t(int64_t(x.as<int32_t>()[i]))
             : dt == DType::u32 ? uint64_t(x.as<uint32_t>()[i])
             : dt == DType::i64 ? uint64_t(x.as<int64_t>()[i])
                                : x.as<uint64_t>()[i];
  }
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t i = 0; i < a.inner; ++i) {
      double pd = 1.0;
      uint64_t pu = 1;
      for (int64_t t = 0; t < a.len; ++t) {
        const size_t at = size_t((o * a.len + (reverse ? a.len - 1 - t : t)) * a.inner + i);
        const double vd = fl ? d[at] : 0.0;
        const uint64_t vu = fl ? 0 : u[at];
        if (!exclusive) pd *= vd, pu *= vu;
        if (fl)
          d[at] = pd;
        else
          u[at] = pu;
        if (exclusive) pd *= vd, pu *= vu;
      }
    }
  if (fl) return {from_doubles(dt, x.shape(), d)};
  HostTensor y(dt, x.shape());
  const size_t es = dtype_size(dt);
  for (size_t i = 0; i < u.size(); ++i) std::memcpy(static_cast<unsigned char*>(y.data()) + i * es, &u[i], es);
  return {y};
}

// ---------------------------------------------------------------- Compress
struct CompressPlan {
  bool has_axis = false;
  size_t axis = 0;
  std::vector<int64_t> picks;  // selected positions along the axis (of the flattened input without axis)
  Shape out;
};

CompressPlan compress_plan(const InferCtx& c, const Shape& x) {
  CompressPlan p;
  const HostTensor& cond = c.constant(1, "condition: it decides Compress's output shape");
  if (cond.dtype() != DType::boolean)
    c.error("input '{}' (condition) must be bool, got {}", c.input(1).name, to_string(cond.dtype()));
  if (cond.shape().rank() != 1)
    c.error("input '{}' (condition) must be 1-D, got shape {}", c.input(1).name, cond.shape().str());
  p.has_axis = c.node.has("axis");
  if (p.has_axis) p.axis = size_t(norm_axis(c, c.node.attr_i("axis", 0), int64_t(x.rank())));
  const int64_t extent = p.has_axis ? x[p.axis] : x.numel();
  const auto v = to_ints(cond);
  for (int64_t j = 0; j < cond.numel(); ++j)
    if (v[size_t(j)]) {
      if (j >= extent)
        c.error("condition selects position {}, but the {} has {} elements", j,
                p.has_axis ? fmt::format("axis {}", p.axis) : std::string("flattened input"), extent);
      p.picks.push_back(j);
    }
  p.out = p.has_axis ? x : Shape{int64_t(p.picks.size())};
  if (p.has_axis) p.out.dims[p.axis] = int64_t(p.picks.size());
  return p;
}

void infer_compress(InferCtx& c) {
  const Shape x = c.shape(0);
  CompressPlan p = compress_plan(c, x);
  if (c.value[0]) {  // data known too: the result is
    const HostTensor& xv = *c.value[0];
    const AxisSplit a = p.has_axis ? AxisSplit(x, p.axis) : AxisSplit(Shape{x.numel()}, 0);
    return c.fold(0, gather_slices(xv, a, p.picks, p.out));
  }
  c.set(0, c.input(0).dtype, p.out);
}

// A Gather of the data (flattened without axis) by the selected positions, uploaded at compile time.
class CompressKernel : public NodeKernel {
 public:
  std::unique_ptr<Gather> gather;  // null when nothing is selected
  Tensor indices;
  Shape gather_input;
  std::string algorithm() const override { return gather ? "gather of the selected positions" : "empty"; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    if (!gather) return;
    Tensor ins[] = {in[0].reshaped(gather_input), indices};
    gather->enqueue(ins, out.first(1), nullptr, ec);
  }
};

std::unique_ptr<NodeKernel> lower_compress(LowerCtx& c) {
  if (!c.value[1]) c.error("input condition must be known at load");
  const Shape x = c.in[0].shape.to_shape();
  std::vector<int64_t> picks;
  const auto v = to_ints(*c.value[1]);
  for (size_t j = 0; j < v.size(); ++j)
    if (v[j]) picks.push_back(int64_t(j));
  auto k = std::make_unique<CompressKernel>();
  if (picks.empty() || x.numel() == 0) return k;
  const bool has_axis = c.node.has("axis");
  const int64_t axis = has_axis ? c.node.attr_i("axis", 0) : 0;
  k->gather_input = has_axis ? x : Shape{x.numel()};
  const Shape idx{int64_t(picks.size())};
  k->indices = c.ctx.upload(HostTensor::from<int64_t>(idx, picks), c.device);
  k->gather = Gather::create(c.ctx, c.device, GatherConfig{k->gather_input, c.in[0].dtype, idx, DType::i64, axis});
  return k;
}

// A condition computed from run-time data: NonZero of the condition (a counted output, on the device),
// flattened to the [count] positions, and a Gather of them along the axis (of the flattened input without
// one). A condition longer than the input's extent is refused when planning: a true past the extent
// could not be reported from the device (a constant condition names the position).
std::vector<Node> expand_compress(Graph& g, const Node& n) {
  const ValueInfo *x = g.info(n.input(0)), *cond = g.info(n.input(1));
  if (x && cond && x->shape.is_static() && cond->shape.is_static() && cond->shape.dims.size() == 1) {
    const Shape xs = x->shape.to_shape();
    int64_t extent = xs.numel();
    if (n.has("axis")) {
      int64_t a = n.attr_i("axis", 0);
      if (a < 0) a += int64_t(xs.rank());
      if (a < 0 || a >= int64_t(xs.rank())) fail("{}: axis {} is outside rank {}", n.describe(), n.attr_i("axis", 0), xs.rank());
      extent = xs[size_t(a)];
    }
    if (cond->shape.dims[0] > extent)
      fail("{}: the condition '{}' (computed at run time) has {} elements, the {} {}; cldl takes a run-time "
           "condition no longer than that",
           n.describe(), n.input(1), cond->shape.dims[0], n.has("axis") ? "axis has" : "flattened input has", extent);
  }
  auto constant = [&](const std::string& base, std::vector<int64_t> v) {
    const std::string name = g.unique_name(base);
    HostTensor t = HostTensor::from<int64_t>(Shape{int64_t(v.size())}, v);
    g.values[name] = ValueInfo{name, DType::i64, t.shape()};
    g.initializers[name] = std::move(t);
    return name;
  };
  const std::string flat_shape = constant(n.name + "/flat", {-1});
  const std::string nz = g.unique_name(n.name + "/nonzero"), idx = g.unique_name(n.name + "/positions");
  std::vector<Node> r;
  auto add = [&](std::string name, std::string op, std::vector<std::string> in, std::string out) {
    Node m;
    m.name = std::move(name);
    m.op_type = std::move(op);
    m.inputs = std::move(in);
    m.outputs = {std::move(out)};
    r.push_back(std::move(m));
  };
  add(n.name + "/nonzero", "NonZero", {n.input(1)}, nz);
  add(n.name + "/positions", "Reshape", {nz, flat_shape}, idx);
  std::string data = n.input(0);
  if (!n.has("axis")) {
    data = g.unique_name(n.name + "/flat_input");
    add(n.name + "/flat_input", "Reshape", {n.input(0), flat_shape}, data);
  }
  add(n.name, "Gather", {data, idx}, n.outputs.at(0));
  r.back().attrs["axis"] = n.attr_i("axis", 0);
  return r;
}

// ---------------------------------------------------------------- EyeLike
void infer_eye_like(InferCtx& c) {
  const Shape s = c.shape(0);
  if (s.rank() != 2) c.error("input '{}' must be 2-D, got shape {}", c.input(0).name, s.str());
  DType dt = c.input(0).dtype;
  if (c.node.has("dtype")) {
    try {
      dt = dtype_from_onnx(int(c.node.attr_i("dtype", 1)), "EyeLike 'dtype'");
    } catch (const Error& e) {
      c.error("{}", e.what());
    }
  }
  const int64_t k = c.node.attr_i("k", 0);
  check_host_fold_size(c, s.dims);
  std::vector<double> v(size_t(s.numel()), 0.0);
  for (int64_t i = 0; i < s[0]; ++i)
    if (i + k >= 0 && i + k < s[1]) v[size_t(i * s[1] + i + k)] = 1.0;
  c.fold(0, from_doubles(dt, s, v));
}

// ---------------------------------------------------------------- Unique
struct UniqueResult {
  HostTensor y;
  std::vector<int64_t> indices, inverse, counts;
};

// numpy's unique of `x` (over `axis` when given): the distinct slices sorted or by first occurrence, the
// first index of each, each input slice's output position, and the counts.
UniqueResult unique_of(const HostTensor& x, bool has_axis, size_t axis, bool sorted) {
  const Shape& s = x.shape();
  const AxisSplit a = has_axis ? AxisSplit(s, axis) : AxisSplit(Shape{s.numel()}, 0);
  const HostKeys keys(x);
  // Slices compare element by element in (outer, inner) order: numpy's unique over the axis moved first.
  auto cmp = [&](int64_t p, int64_t q) {
    for (int64_t o = 0; o < a.outer; ++o)
      for (int64_t i = 0; i < a.inner; ++i) {
        const int r = keys.cmp(size_t((o * a.len + p) * a.inner + i), size_t((o * a.len + q) * a.inner + i));
        if (r) return r;
      }
    return 0;
  };
  std::vector<int64_t> order(size_t(a.len));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return cmp(p, q) < 0; });
  // Groups of equal slices in sorted order; a stable sort puts each group's first occurrence first.
  std::vector<int64_t> first, count, group_of(size_t(a.len));
  for (size_t r = 0; r < order.size(); ++r) {
    if (r == 0 || cmp(order[r - 1], order[r]) != 0) {
      first.push_back(order[r]);
      count.push_back(0);
    }
    group_of[size_t(order[r])] = int64_t(first.size()) - 1;
    ++count.back();
  }
  // Output order of the groups: sorted, or by first occurrence.
  std::vector<int64_t> rank(first.size());
  std::iota(rank.begin(), rank.end(), 0);
  if (!sorted)
    std::stable_sort(rank.begin(), rank.end(),
                     [&](int64_t g, int64_t h) { return first[size_t(g)] < first[size_t(h)]; });
  std::vector<int64_t> pos(first.size());  // group -> output position
  for (size_t r = 0; r < rank.size(); ++r) pos[size_t(rank[r])] = int64_t(r);
  const int64_t n = int64_t(first.size());
  UniqueResult u;
  u.indices.resize(size_t(n));
  u.counts.resize(size_t(n));
  u.inverse.resize(size_t(a.len));
  for (int64_t r = 0; r < n; ++r) {
    u.indices[size_t(r)] = first[size_t(rank[size_t(r)])];
    u.counts[size_t(r)] = count[size_t(rank[size_t(r)])];
  }
  for (int64_t j = 0; j < a.len; ++j) u.inverse[size_t(j)] = pos[size_t(group_of[size_t(j)])];
  Shape ys = has_axis ? s : Shape{n};
  if (has_axis) ys.dims[axis] = n;
  u.y = gather_slices(x, a, u.indices, ys);
  return u;
}

// Known input: folded. Run-time input: Y, indices and counts are counted outputs (their extent is the
// number of distinct slices, at most the axis length), inverse_indices has the axis length; a host step
// inside the run (UniqueHostStep) computes them when the node's turn comes.
void infer_unique(InferCtx& c) {
  const Shape s = c.shape(0);
  const bool has_axis = c.node.has("axis");
  const bool sorted = c.node.attr_i("sorted", 1) != 0;
  const size_t axis = has_axis ? size_t(norm_axis(c, c.node.attr_i("axis", 0), int64_t(s.rank()))) : 0;
  if (c.value[0]) {
    UniqueResult u = unique_of(*c.value[0], has_axis, axis, sorted);
    const int64_t n = int64_t(u.indices.size());
    c.fold(0, std::move(u.y));
    if (c.out.size() > 1) c.fold(1, from_ints(Shape{n}, u.indices));
    if (c.out.size() > 2) c.fold(2, from_ints(Shape{int64_t(u.inverse.size())}, u.inverse));
    if (c.out.size() > 3) c.fold(3, from_ints(Shape{n}, u.counts));
    return;
  }
  const int64_t len = has_axis ? s[axis] : s.numel();
  if (s.numel() > kMaxHostFoldElements)
    c.error("input '{}' has {} elements, past the {} a host step reads back", c.input(0).name, s.numel(),
            kMaxHostFoldElements);
  c.set_counted(0, c.input(0).dtype, has_axis ? s : Shape{len}, has_axis ? axis : 0);
  if (c.out.size() > 1 && !c.node.outputs[1].empty()) c.set_counted(1, DType::i64, Shape{len}, 0);
  if (c.out.size() > 2 && !c.node.outputs[2].empty()) c.set(2, DType::i64, Shape{len});
  if (c.out.size() > 3 && !c.node.outputs[3].empty()) c.set_counted(3, DType::i64, Shape{len}, 0);
}

// Unique on run-time data, as a host step inside the run (as NonMaxSuppression's): it waits for its
// input, reads it back, computes on the host as the fold does, writes each counted output's first
// elements and its count. A logged choice; a sort on the device is not built.
class UniqueHostStep : public NodeKernel {
 public:
  Context* ctx = nullptr;
  bool has_axis = false, sorted = true;
  size_t axis = 0;
  std::vector<int> count_of = std::vector<int>(4, -1);  // output i -> the index of its count output
  std::string algorithm() const override { return "host step (input read back, unique on the host)"; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    host_step_wait(ec);
    const HostTensor x = in[0].numel() ? ctx->download(in[0]) : HostTensor(in[0].dtype, in[0].shape);
    UniqueResult u = unique_of(x, has_axis, axis, sorted);
    const int64_t n = int64_t(u.indices.size());
    std::vector<std::pair<const Tensor*, std::vector<std::byte>>> writes;
    auto bytes_of = [](const void* p, size_t size) {
      const auto* b = static_cast<const std::byte*>(p);
      return std::vector<std::byte>(b, b + size);
    };
    auto present = [&](size_t i) { return i < out.size() && out[i].buffer() != nullptr; };
    if (present(0)) writes.emplace_back(&out[0], bytes_of(u.y.data(), u.y.bytes()));
    if (present(1)) writes.emplace_back(&out[1], bytes_of(u.indices.data(), u.indices.size() * 8));
    if (present(2)) writes.emplace_back(&out[2], bytes_of(u.inverse.data(), u.inverse.size() * 8));
    if (present(3)) writes.emplace_back(&out[3], bytes_of(u.counts.data(), u.counts.size() * 8));
    for (int idx : count_of)
      if (idx >= 0 && present(size_t(idx))) writes.emplace_back(&out[size_t(idx)], bytes_of(&n, sizeof n));
    // Each write completes before the next (the host bytes die with `writes`); a marker is the step's event.
    for (auto& [dst, bytes] : writes) {
      if (bytes.empty()) continue;
      ExecutionContext wc(ec.queue);
      cl::Event done;
      wc.signal = &done;
      ctx->write_async(*dst, bytes.data(), bytes.size(), wc);
      check(done.wait(), "clWaitForEvents", ec.label);
    }
    host_step_done(ec, "unique");
  }
};

std::unique_ptr<NodeKernel> lower_unique(LowerCtx& c) {
  if (c.value[0]) c.error("a known input folds when planning");
  auto k = std::make_unique<UniqueHostStep>();
  k->ctx = &c.ctx;
  const Shape s = c.in[0].shape.to_shape();
  k->has_axis = c.node.has("axis");
  k->sorted = c.node.attr_i("sorted", 1) != 0;
  if (k->has_axis) {
    int64_t a = c.node.attr_i("axis", 0);
    k->axis = size_t(a < 0 ? a + int64_t(s.rank()) : a);
  }
  for (size_t i : {size_t(0), size_t(1), size_t(3)}) {
    if (i >= c.node.outputs.size() || c.node.outputs[i].empty()) continue;
    auto it = std::find(c.node.outputs.begin(), c.node.outputs.end(), counted_output_name(c.node.outputs[i]));
    if (it == c.node.outputs.end())
      c.error("output '{}' has a shape decided by run-time data: plan it as a Model", c.node.outputs[i]);
    k->count_of[i] = int(it - c.node.outputs.begin());
  }
  log::info("{}: Unique runs as a host step inside the run (input read back when it runs)", c.node.describe());
  return k;
}

const OpRegistration kSelectOps{
    {.type = "TopK", .since = 1, .family = "select", .const_inputs = {1}, .infer = infer_topk, .lower = lower_topk},
    {.type = "ReverseSequence",
     .since = 10,
     .family = "select",
     .infer = infer_reverse_sequence,
     .lower = lower_reverse_sequence},
    {.type = "Compress",
     .since = 9,  // Compress-9 and -11 differ only in admitting a negative axis (11)
     .family = "select",
     .const_inputs = {1},
     .infer = infer_compress,
     .lower = lower_compress,
     .expand_runtime = expand_compress},
    {.type = "EyeLike", .since = 9, .family = "select", .infer = infer_eye_like},
    {.type = "Unique", .since = 11, .family = "select", .infer = infer_unique, .lower = lower_unique},
};

const FolderRegistration kSelectFolders{
    {"TopK", fold_topk}, {"ReverseSequence", fold_reverse_sequence}, {"CumProd", fold_cumprod}};

}  // namespace
}  // namespace cldl::graph
