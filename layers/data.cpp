// Data-movement ops: shape rules, attribute checks and the strided views they hand to kernels/data.cl.
#include "layers/data.hpp"

#include <algorithm>
#include <cstring>

#include "layers/launch.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
const ProgramVariants kDataVariants("data.cl", {""});

// Kernel name for an element size: "<base>_<bytes>".
cl::Kernel sized_kernel(Context& ctx, int device, const char* base, DType dt) {
  const size_t sz = dtype_size(dt);
  std::string name = fmt::format("{}_{}", base, sz);
  return make_kernel(ctx.program("data.cl", "", device), name.c_str());
}

cl_long8 long8_of(const std::vector<int64_t>& v) {
  cl_long8 r{};
  for (size_t i = 0; i < v.size() && i < 8; ++i) r.s[i] = v[i];
  return r;
}

void check_rank(std::string_view op, const Shape& s) {
  if (s.rank() > size_t(kMaxRank)) invalid(op, "input rank {} exceeds the supported {}", s.rank(), kMaxRank);
  for (auto d : s.dims)
    if (d < 0) invalid(op, "input has a negative dimension in shape {}", s.str());
}

void check_io(std::string_view op, std::span<const Tensor> in, size_t n_in, std::span<const Tensor> out,
              size_t n_out) {
  if (in.size() != n_in || out.size() != n_out)
    invalid(op, "expects {} inputs and {} outputs, got {} and {}", n_in, n_out, in.size(), out.size());
}

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s || t.dtype != dt)
    invalid(op, "{} is {} {}, expected {} {}", arg, to_string(t.dtype), t.shape.str(), to_string(dt), s.str());
}

Shape scalar_as_1(const Shape& s) { return s.rank() == 0 ? Shape{1} : s; }
}  // namespace

// ---------------------------------------------------------------- StridedCopy
StridedCopy::StridedCopy(Context& ctx, int device, DType dtype)
    : element_(sized_kernel(ctx, device, "copy_strided", dtype)),
      rows_(sized_kernel(ctx, device, "copy_rows", dtype)),
      tiles_(sized_kernel(ctx, device, "copy_tiles", dtype)),
      cpu_(ctx.device(device).info.type == DeviceType::cpu) {}

namespace {
constexpr int64_t kCopyRun = 16, kCopyTile = 16;  // COPY_RUN and COPY_TILE of kernels/data.cl
}  // namespace

std::string CopyPlan::describe() const {
  const char* k = kind == Kind::rows    ? "rows of 16 (contiguous runs)"
                  : kind == Kind::tiles ? "tiles 16x16 (transposed inner dims)"
                                        : "element-wise";
  return fmt::format("strided copy: {}, rank {} after collapsing", k, it.rank);
}

CopyPlan StridedCopy::plan(const Iteration& it, std::optional<CopyPlan::Kind> force) const {
  CopyPlan p;
  p.it = it;
  const int r = it.rank;
  const bool rows = it.inner_stride(0) == 1 && it.inner_stride(1) == 1;
  // A transpose: the destination walks the innermost dim contiguously, the source some other dim j.
  int tile_dim = -1;
  if (it.inner_stride(1) == 1 && it.inner_stride(0) != 1)
    for (int j = r - 2; j >= 0 && tile_dim < 0; --j)
      if (it.strides[0][j] == 1) tile_dim = j;
  using Kind = CopyPlan::Kind;
  p.kind = force ? *force : !cpu_ ? Kind::element : rows ? Kind::rows : tile_dim >= 0 ? Kind::tiles : Kind::element;
  if (p.kind == Kind::rows && !rows)
    invalid("StridedCopy", "the rows kernel needs both operands contiguous along the innermost dim");
  if (p.kind == Kind::tiles && tile_dim < 0)
    invalid("StridedCopy", "the tiles kernel needs a source dim of stride 1 besides the innermost");
  if (p.kind == Kind::tiles && tile_dim != r - 2) {
    // Any order of the outer dims walks the same elements: move j next to the innermost.
    auto move = [&](auto& a) {
      const auto v = a[tile_dim];
      for (int i = tile_dim; i < r - 2; ++i) a[i] = a[i + 1];
      a[r - 2] = v;
    };
    move(p.it.dims);
    for (auto& st : p.it.strides) move(st);
  }
  if (p.kind == Kind::element) {
    p.global = p.it.range3();
    p.local = cl::NullRange;
    return p;
  }
  const int64_t inner = p.it.inner(), mid = p.it.rank >= 2 ? p.it.dims[p.it.rank - 2] : 1;
  const int64_t gx = p.kind == Kind::rows ? (inner + kCopyRun - 1) / kCopyRun : (inner + kCopyTile - 1) / kCopyTile;
  const int64_t gy = p.kind == Kind::rows ? mid : (mid + kCopyTile - 1) / kCopyTile;
  const PaddedLaunch l = padded_launch(gx, gy, p.it.outer() / std::max<int64_t>(mid, 1));
  p.global = l.global;
  p.local = l.local;
  return p;
}

void StridedCopy::enqueue(const CopyPlan& p, const Tensor& src, int64_t so, const Tensor& dst, int64_t d_o,
                          ExecutionContext& ec) {
  const Iteration& it = p.it;
  if (it.inner() * it.outer() == 0) return;
  const cl_long s_off = int64_t(src.offset_elems()) + so, d_off = int64_t(dst.offset_elems()) + d_o;
  const cl_long inner = it.inner(), mid = it.rank >= 2 ? it.dims[it.rank - 2] : 1;
  switch (p.kind) {
    case CopyPlan::Kind::rows:
      set_args(rows_, cl_int(it.rank), it.dims8(), inner, mid, src.buffer, s_off, it.strides8(0), it.mid_stride(0),
               dst.buffer, d_off, it.strides8(1), it.mid_stride(1));
      ec.enqueue_kernel(rows_, p.global, p.local, "copy_rows");
      break;
    case CopyPlan::Kind::tiles:
      set_args(tiles_, cl_int(it.rank), it.dims8(), inner, mid, src.buffer, s_off, it.strides8(0), it.mid_stride(0),
               it.inner_stride(0), dst.buffer, d_off, it.strides8(1), it.mid_stride(1), it.inner_stride(1));
      ec.enqueue_kernel(tiles_, p.global, p.local, "copy_tiles");
      break;
    case CopyPlan::Kind::element:
      set_args(element_, cl_int(it.rank), it.dims8(), src.buffer, s_off, it.strides8(0), it.mid_stride(0),
               it.inner_stride(0), dst.buffer, d_off, it.strides8(1), it.mid_stride(1), it.inner_stride(1));
      ec.enqueue_kernel(element_, p.global, p.local, "copy_strided");
      break;
  }
}

// ---------------------------------------------------------------- Transpose
Shape Transpose::validate(const TransposeConfig& c) {
  check_rank("Transpose", c.input);
  const size_t r = c.input.rank();
  if (c.perm.empty()) {
    Shape o = c.input;
    std::reverse(o.dims.begin(), o.dims.end());
    return o;
  }
  if (c.perm.size() != r) invalid("Transpose", "perm has {} entries, expected {} (the input rank)", c.perm.size(), r);
  std::vector<bool> seen(r, false);
  Shape o;
  for (size_t i = 0; i < r; ++i) {
    int64_t p = c.perm[i];
    if (p < 0 || p >= int64_t(r) || seen[p])
      invalid("Transpose", "perm[{}] = {} is out of range or repeated (expected a permutation of 0..{})", i, p, r - 1);
    seen[p] = true;
    o.dims.push_back(c.input[p]);
  }
  return o;
}

std::unique_ptr<Transpose> Transpose::create(Context& ctx, int device, const TransposeConfig& cfg) {
  std::unique_ptr<Transpose> t(new Transpose());
  t->cfg_ = cfg;
  t->out_ = validate(cfg);
  const size_t r = cfg.input.rank();
  std::vector<int64_t> perm = cfg.perm;
  if (perm.empty())
    for (size_t i = 0; i < r; ++i) perm.push_back(int64_t(r - 1 - i));
  auto is = contiguous_strides(cfg.input);
  std::vector<int64_t> src(r);
  for (size_t i = 0; i < r; ++i) src[i] = is[perm[i]];
  Shape o = scalar_as_1(t->out_);
  if (r == 0) src = {0};
  t->copy_ = StridedCopy(ctx, device, cfg.dtype);
  t->plan_ = t->copy_.plan(collapse("Transpose", o.dims, {src, contiguous_strides(o)}));
  log::debug("Transpose {} -> {}: {}", cfg.input.str(), t->out_.str(), t->plan_.describe());
  return t;
}

void Transpose::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Transpose", in, 1, out, 1);
  check_tensor("Transpose", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Transpose", "output", out[0], out_, cfg_.dtype);
  std::lock_guard lock(launch_mutex_);
  copy_.enqueue(plan_, in[0], 0, out[0], 0, ec);
}

// ---------------------------------------------------------------- Concat
Shape Concat::validate(const ConcatConfig& c) {
  if (c.inputs.empty()) invalid("Concat", "needs at least one input, got 0");
  const Shape& f = c.inputs[0];
  check_rank("Concat", f);
  if (f.rank() == 0) invalid("Concat", "inputs must have rank >= 1, got a scalar");
  const int ax = normalize_axis("Concat", "axis", c.axis, f.rank());
  Shape o = f;
  for (size_t k = 1; k < c.inputs.size(); ++k) {
    const Shape& s = c.inputs[k];
    bool ok = s.rank() == f.rank();
    for (size_t i = 0; ok && i < s.rank(); ++i) ok = int(i) == ax || s[i] == f[i];
    if (!ok)
      invalid("Concat", "input {} has shape {}, which differs from input 0 {} outside axis {}", k, s.str(), f.str(), ax);
    o[ax] += s[ax];
  }
  return o;
}

std::unique_ptr<Concat> Concat::create(Context& ctx, int device, const ConcatConfig& cfg) {
  std::unique_ptr<Concat> c(new Concat());
  c->cfg_ = cfg;
  c->out_ = validate(cfg);
  const int ax = normalize_axis("Concat", "axis", cfg.axis, c->out_.rank());
  auto os = contiguous_strides(c->out_);
  c->copy_ = StridedCopy(ctx, device, cfg.dtype);
  int64_t pos = 0;
  for (const Shape& s : cfg.inputs) {
    c->plans_.push_back(c->copy_.plan(collapse("Concat", s.dims, {contiguous_strides(s), os})));
    c->dst_off_.push_back(pos * os[ax]);
    pos += s[ax];
  }
  return c;
}

void Concat::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Concat", in, cfg_.inputs.size(), out, 1);
  for (size_t k = 0; k < in.size(); ++k)
    check_tensor("Concat", fmt::format("input {}", k), in[k], cfg_.inputs[k], cfg_.dtype);
  check_tensor("Concat", "output", out[0], out_, cfg_.dtype);
  std::lock_guard lock(launch_mutex_);
  for (size_t k = 0; k < in.size(); ++k) copy_.enqueue(plans_[k], in[k], 0, out[0], dst_off_[k], ec);
}

// ---------------------------------------------------------------- Split
std::vector<Shape> Split::validate(const SplitConfig& c) {
  check_rank("Split", c.input);
  if (c.input.rank() == 0) invalid("Split", "input must have rank >= 1, got a scalar");
  const int ax = normalize_axis("Split", "axis", c.axis, c.input.rank());
  const int64_t len = c.input[ax];
  std::vector<int64_t> sizes = c.split;
  if (sizes.empty()) {
    if (c.num_outputs <= 0) invalid("Split", "num_outputs must be positive when split is empty, got {}", c.num_outputs);
    const int64_t part = (len + c.num_outputs - 1) / c.num_outputs;  // ONNX 18: the last part is smaller
    for (int k = 0; k < c.num_outputs; ++k) sizes.push_back(std::max<int64_t>(0, std::min(part, len - k * part)));
  }
  int64_t total = 0;
  for (size_t k = 0; k < sizes.size(); ++k) {
    if (sizes[k] < 0) invalid("Split", "split[{}] = {} is negative", k, sizes[k]);
    total += sizes[k];
  }
  if (total != len) invalid("Split", "split sizes sum to {}, expected {} (input {} along axis {})", total, len, c.input.str(), ax);
  std::vector<Shape> outs;
  for (auto s : sizes) {
    Shape o = c.input;
    o[ax] = s;
    outs.push_back(o);
  }
  return outs;
}

std::unique_ptr<Split> Split::create(Context& ctx, int device, const SplitConfig& cfg) {
  std::unique_ptr<Split> s(new Split());
  s->cfg_ = cfg;
  s->outs_ = validate(cfg);
  const int ax = normalize_axis("Split", "axis", cfg.axis, cfg.input.rank());
  auto is = contiguous_strides(cfg.input);
  s->copy_ = StridedCopy(ctx, device, cfg.dtype);
  int64_t pos = 0;
  for (const Shape& o : s->outs_) {
    s->plans_.push_back(s->copy_.plan(collapse("Split", o.dims, {is, contiguous_strides(o)})));
    s->src_off_.push_back(pos * is[ax]);
    pos += o[ax];
  }
  return s;
}

void Split::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Split", in, 1, out, outs_.size());
  check_tensor("Split", "input", in[0], cfg_.input, cfg_.dtype);
  for (size_t k = 0; k < out.size(); ++k) check_tensor("Split", fmt::format("output {}", k), out[k], outs_[k], cfg_.dtype);
  std::lock_guard lock(launch_mutex_);
  for (size_t k = 0; k < out.size(); ++k) copy_.enqueue(plans_[k], in[0], src_off_[k], out[k], 0, ec);
}

// ---------------------------------------------------------------- Slice
namespace {
// Resolved per-dim start, step and length.
struct SliceDims {
  std::vector<int64_t> start, step, len;
};

SliceDims slice_dims(const SliceConfig& c) {
  check_rank("Slice", c.input);
  const size_t r = c.input.rank();
  if (c.starts.size() != c.ends.size())
    invalid("Slice", "starts has {} entries but ends has {}", c.starts.size(), c.ends.size());
  if (!c.axes.empty() && c.axes.size() != c.starts.size())
    invalid("Slice", "axes has {} entries, expected {} (as starts)", c.axes.size(), c.starts.size());
  if (!c.steps.empty() && c.steps.size() != c.starts.size())
    invalid("Slice", "steps has {} entries, expected {} (as starts)", c.steps.size(), c.starts.size());
  SliceDims d{std::vector<int64_t>(r, 0), std::vector<int64_t>(r, 1), c.input.dims};
  std::vector<bool> seen(r, false);
  for (size_t k = 0; k < c.starts.size(); ++k) {
    int64_t axv = c.axes.empty() ? int64_t(k) : c.axes[k];
    const int ax = normalize_axis("Slice", "axes", axv, r);
    if (seen[ax]) invalid("Slice", "axes[{}] = {} repeats an axis", k, axv);
    seen[ax] = true;
    const int64_t n = c.input[ax], step = c.steps.empty() ? 1 : c.steps[k];
    if (step == 0) invalid("Slice", "steps[{}] is 0", k);
    int64_t s = c.starts[k], e = c.ends[k];
    if (s < 0) s += n;
    if (e < 0) e += n;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      d.len[ax] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      d.len[ax] = s > e ? (s - e - step - 1) / -step : 0;
    }
    d.start[ax] = s;
    d.step[ax] = step;
  }
  return d;
}
}  // namespace

Shape Slice::validate(const SliceConfig& c) { return Shape(slice_dims(c).len); }

std::unique_ptr<Slice> Slice::create(Context& ctx, int device, const SliceConfig& cfg) {
  std::unique_ptr<Slice> s(new Slice());
  s->cfg_ = cfg;
  SliceDims d = slice_dims(cfg);
  s->out_ = Shape(d.len);
  auto is = contiguous_strides(cfg.input);
  std::vector<int64_t> src(is.size());
  for (size_t i = 0; i < is.size(); ++i) {
    src[i] = is[i] * d.step[i];
    s->src_off_ += d.start[i] * is[i];
  }
  Shape o = scalar_as_1(s->out_);
  if (is.empty()) src = {0};
  s->copy_ = StridedCopy(ctx, device, cfg.dtype);
  s->plan_ = s->copy_.plan(collapse("Slice", o.dims, {src, contiguous_strides(o)}));
  return s;
}

void Slice::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Slice", in, 1, out, 1);
  check_tensor("Slice", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Slice", "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  copy_.enqueue(plan_, in[0], src_off_, out[0], 0, ec);
}

// ---------------------------------------------------------------- Pad
namespace {
std::vector<int64_t> pad_begin_end(const PadConfig& c, std::vector<int64_t>& end) {
  check_rank("Pad", c.input);
  const size_t r = c.input.rank();
  std::vector<int64_t> axes = c.axes;
  if (axes.empty())
    for (size_t i = 0; i < r; ++i) axes.push_back(int64_t(i));
  if (c.pads.size() != 2 * axes.size())
    invalid("Pad", "pads has {} entries, expected {} (2 per padded axis)", c.pads.size(), 2 * axes.size());
  std::vector<int64_t> begin(r, 0);
  end.assign(r, 0);
  for (size_t k = 0; k < axes.size(); ++k) {
    const int ax = normalize_axis("Pad", "axes", axes[k], r);
    begin[ax] = c.pads[k];
    end[ax] = c.pads[k + axes.size()];
    if (begin[ax] < 0 || end[ax] < 0)
      invalid("Pad", "negative pads ({}, {}) on axis {} are not supported", begin[ax], end[ax], ax);
    if (c.mode == PadMode::reflect && (begin[ax] >= c.input[ax] || end[ax] >= c.input[ax]))
      invalid("Pad", "reflect pads ({}, {}) on axis {} must be smaller than its size {}", begin[ax], end[ax], ax,
              c.input[ax]);
    if ((c.mode == PadMode::edge || c.mode == PadMode::wrap) && c.input[ax] == 0 && begin[ax] + end[ax] > 0)
      invalid("Pad", "{} padding of the empty axis {}", c.mode == PadMode::edge ? "edge" : "wrap", ax);
  }
  return begin;
}
}  // namespace

Shape Pad::validate(const PadConfig& c) {
  std::vector<int64_t> end;
  auto begin = pad_begin_end(c, end);
  Shape o = c.input;
  for (size_t i = 0; i < o.rank(); ++i) o[i] += begin[i] + end[i];
  return o;
}

std::unique_ptr<Pad> Pad::create(Context& ctx, int device, const PadConfig& cfg) {
  std::unique_ptr<Pad> p(new Pad());
  p->cfg_ = cfg;
  p->out_ = validate(cfg);
  std::vector<int64_t> end;
  p->begin_ = pad_begin_end(cfg, end);
  // CPUs: an output row per work-item (pad_rows); elsewhere an element per work-item, neighbours coalescing.
  if (cfg.kernel < 0 || cfg.kernel > 2) invalid("Pad", "kernel {} is not 0, 1 or 2", cfg.kernel);
  p->rows_ = cfg.kernel == 2 || (cfg.kernel == 0 && ctx.device(device).info.type == DeviceType::cpu);
  p->kernel_ = sized_kernel(ctx, device, p->rows_ ? "pad_rows" : "pad", cfg.dtype);
  return p;
}

void Pad::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Pad", in, 1, out, 1);
  check_tensor("Pad", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Pad", "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  const int rank = std::max<int>(1, int(cfg_.input.rank()));
  Shape is = scalar_as_1(cfg_.input), os = scalar_as_1(out_);
  std::vector<int64_t> begin = begin_.empty() ? std::vector<int64_t>{0} : begin_;
  std::lock_guard lock(launch_mutex_);
  // The pad value travels as the dtype's bits.
  auto set = [&](auto value) {
    set_args(kernel_, cl_int(rank), cl_int(cfg_.mode), value, long8_of(os.dims), long8_of(is.dims), long8_of(begin),
             in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  };
  switch (cfg_.dtype) {
    case DType::f32: { float f = float(cfg_.value); cl_uint u; std::memcpy(&u, &f, 4); set(u); break; }
    case DType::i32: set(cl_uint(int32_t(cfg_.value))); break;
    case DType::i64: set(cl_ulong(int64_t(cfg_.value))); break;
    case DType::f16: set(cl_ushort(0)); break;
    default: set(cl_uchar(uint8_t(cfg_.value))); break;
  }
  if (rows_)
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(out_.numel() / os[size_t(rank - 1)])), cl::NullRange, "pad_rows");
  else
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(out_.numel())), cl::NullRange, "pad");
}

// ---------------------------------------------------------------- Expand
Shape Expand::validate(const ExpandConfig& c) {
  check_rank("Expand", c.input);
  Shape o = broadcast_shapes("Expand", {c.input, Shape(c.shape)});
  check_rank("Expand", o);
  return o;
}

std::unique_ptr<Expand> Expand::create(Context& ctx, int device, const ExpandConfig& cfg) {
  std::unique_ptr<Expand> e(new Expand());
  e->cfg_ = cfg;
  e->out_ = validate(cfg);
  Shape o = scalar_as_1(e->out_);
  e->copy_ = StridedCopy(ctx, device, cfg.dtype);
  e->plan_ = e->copy_.plan(collapse("Expand", o.dims, {broadcast_strides(cfg.input, o), contiguous_strides(o)}));
  return e;
}

void Expand::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Expand", in, 1, out, 1);
  check_tensor("Expand", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Expand", "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  copy_.enqueue(plan_, in[0], 0, out[0], 0, ec);
}

// ---------------------------------------------------------------- Tile
Shape Tile::validate(const TileConfig& c) {
  check_rank("Tile", c.input);
  if (c.repeats.size() != c.input.rank())
    invalid("Tile", "repeats has {} entries, expected {} (the input rank)", c.repeats.size(), c.input.rank());
  Shape o = c.input;
  for (size_t i = 0; i < o.rank(); ++i) {
    if (c.repeats[i] < 0) invalid("Tile", "repeats[{}] = {} is negative", i, c.repeats[i]);
    o[i] *= c.repeats[i];
  }
  return o;
}

std::unique_ptr<Tile> Tile::create(Context& ctx, int device, const TileConfig& cfg) {
  std::unique_ptr<Tile> t(new Tile());
  t->cfg_ = cfg;
  t->out_ = validate(cfg);
  t->kernel_ = sized_kernel(ctx, device, "tile", cfg.dtype);
  return t;
}

void Tile::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Tile", in, 1, out, 1);
  check_tensor("Tile", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Tile", "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  Shape is = scalar_as_1(cfg_.input), os = scalar_as_1(out_);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(is.rank()), long8_of(os.dims), long8_of(is.dims), in[0].buffer, cl_long(in[0].offset_elems()),
           out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(out_.numel())), cl::NullRange, "tile");
}

// ---------------------------------------------------------------- Gather
Shape Gather::validate(const GatherConfig& c) {
  check_rank("Gather", c.input);
  if (c.input.rank() == 0) invalid("Gather", "data must have rank >= 1, got a scalar");
  if (c.index_dtype != DType::i32 && c.index_dtype != DType::i64)
    invalid("Gather", "indices dtype {} is not supported (expected i32 or i64)", to_string(c.index_dtype));
  const int ax = normalize_axis("Gather", "axis", c.axis, c.input.rank());
  Shape o;
  o.dims.assign(c.input.dims.begin(), c.input.dims.begin() + ax);
  o.dims.insert(o.dims.end(), c.indices.dims.begin(), c.indices.dims.end());
  o.dims.insert(o.dims.end(), c.input.dims.begin() + ax + 1, c.input.dims.end());
  return o;
}

std::unique_ptr<Gather> Gather::create(Context& ctx, int device, const GatherConfig& cfg) {
  std::unique_ptr<Gather> g(new Gather());
  g->cfg_ = cfg;
  g->out_ = validate(cfg);
  const int ax = normalize_axis("Gather", "axis", cfg.axis, cfg.input.rank());
  for (int i = 0; i < ax; ++i) g->outer_ *= cfg.input[i];
  for (size_t i = ax + 1; i < cfg.input.rank(); ++i) g->inner_ *= cfg.input[i];
  g->kernel_ = sized_kernel(ctx, device, "gather", cfg.dtype);
  g->items_ = fixed_group_items(g->kernel_, ctx.device(device));
  g->max_ly_ = pow2_work_items(ctx.device(device), 1);
  g->max_lz_ = pow2_work_items(ctx.device(device), 2);
  return g;
}

void Gather::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Gather", in, 2, out, 1);
  check_tensor("Gather", "data", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Gather", "indices", in[1], cfg_.indices, cfg_.index_dtype);
  check_tensor("Gather", "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  const int ax = normalize_axis("Gather", "axis", cfg_.axis, cfg_.input.rank());
  std::lock_guard lock(launch_mutex_);
  const int64_t n_idx = cfg_.indices.numel();
  set_args(kernel_, cl_long(cfg_.input[ax]), cl_long(inner_), cl_long(n_idx), cl_long(outer_),
           cl_int(cfg_.index_dtype == DType::i64), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
           cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  // The local size follows the data's inner dims (a table's width), not the number of indices (launch.hpp):
  // the indices and then the outer dim fill the group up to a power of two covering them. Padding the
  // indices all the way to the group (1024 / width) made a one-index Gather of a column of 3,234 rows
  // 3.3 million work-items (SSDlite's per-class score columns: 214 ms of a 250 ms run).
  const size_t lx = pow2_divisor(inner_, 64);
  const size_t ly = pow2_cover(n_idx, std::min(std::max<size_t>(items_ / lx, 1), max_ly_));
  const size_t lz = pow2_cover(outer_, std::min(std::max<size_t>(items_ / (lx * ly), 1), max_lz_));
  const cl::NDRange global(size_t(inner_), round_up(size_t(n_idx), ly), round_up(size_t(outer_), lz));
  ec.enqueue_kernel(kernel_, global, cl::NDRange(lx, ly, lz), "gather");
}

// ---------------------------------------------------------------- GatherElements
Shape GatherElements::validate(const GatherElementsConfig& c) {
  check_rank("GatherElements", c.input);
  check_rank("GatherElements", c.indices);
  if (c.input.rank() == 0) invalid("GatherElements", "data must have rank >= 1, got a scalar");
  if (c.indices.rank() != c.input.rank())
    invalid("GatherElements", "indices rank {} differs from data rank {} ({} vs {})", c.indices.rank(), c.input.rank(),
            c.indices.str(), c.input.str());
  if (c.index_dtype != DType::i32 && c.index_dtype != DType::i64)
    invalid("GatherElements", "indices dtype {} is not supported (expected i32 or i64)", to_string(c.index_dtype));
  const int ax = normalize_axis("GatherElements", "axis", c.axis, c.input.rank());
  for (size_t d = 0; d < c.input.rank(); ++d)
    if (int(d) != ax && c.indices[d] > c.input[d])
      invalid("GatherElements", "indices shape {} exceeds data shape {} in dim {}", c.indices.str(), c.input.str(), d);
  return c.indices;
}

std::unique_ptr<GatherElements> GatherElements::create(Context& ctx, int device, const GatherElementsConfig& cfg) {
  validate(cfg);
  std::unique_ptr<GatherElements> g(new GatherElements());
  g->cfg_ = cfg;
  g->kernel_ = sized_kernel(ctx, device, "gather_elements", cfg.dtype);
  return g;
}

void GatherElements::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                             ExecutionContext& ec) {
  check_io("GatherElements", in, 2, out, 1);
  check_tensor("GatherElements", "data", in[0], cfg_.input, cfg_.dtype);
  check_tensor("GatherElements", "indices", in[1], cfg_.indices, cfg_.index_dtype);
  check_tensor("GatherElements", "output", out[0], cfg_.indices, cfg_.dtype);
  if (cfg_.indices.numel() == 0) return;
  const int ax = normalize_axis("GatherElements", "axis", cfg_.axis, cfg_.input.rank());
  std::vector<int64_t> strides(cfg_.input.rank(), 1);
  for (size_t d = cfg_.input.rank(); d-- > 1;) strides[d - 1] = strides[d] * cfg_.input[d];
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(cfg_.input.rank()), cl_int(ax), cl_long(cfg_.input[ax]), long8_of(cfg_.indices.dims),
           long8_of(strides), cl_int(cfg_.index_dtype == DType::i64), in[0].buffer, cl_long(in[0].offset_elems()),
           in[1].buffer, cl_long(in[1].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(cfg_.indices.numel())), cl::NullRange, "gather_elements");
}

// ---------------------------------------------------------------- Resize
namespace {
// The kernel arguments of one resized dim (see resize2d in kernels/data.cl).
struct ResizeDim {
  cl_float4 geo{};     // scale, in * scale (before rounding), crop a, crop b
  int lo = 0, hi = 0;  // tf_crop_and_resize: the outputs whose source lies inside the input
};

// Output shape and the kernel arguments of the last two dims.
Shape resize_plan(const ResizeConfig& c, ResizeDim* dims = nullptr) {
  const size_t r = c.input.rank();
  if (r < 2) invalid("Resize", "input must have rank >= 2, got shape {}", c.input.str());
  check_rank("Resize", c.input);
  if (c.scales.empty() == c.sizes.empty())
    invalid("Resize", "exactly one of scales ({} entries) and sizes ({} entries) must be given", c.scales.size(),
            c.sizes.size());
  Shape o = c.input;
  std::vector<double> sc(r, 1.0);
  if (!c.scales.empty()) {
    if (c.scales.size() != r) invalid("Resize", "scales has {} entries, expected {} (the input rank)", c.scales.size(), r);
    for (size_t i = 0; i < r; ++i) {
      if (!(c.scales[i] > 0.0f)) invalid("Resize", "scales[{}] = {} must be positive", i, c.scales[i]);
      o[i] = int64_t(std::floor(double(c.input[i]) * c.scales[i]));
      sc[i] = c.scales[i];
    }
  } else {
    if (c.sizes.size() != r) invalid("Resize", "sizes has {} entries, expected {} (the input rank)", c.sizes.size(), r);
    for (size_t i = 0; i < r; ++i) {
      if (c.sizes[i] <= 0) invalid("Resize", "sizes[{}] = {} must be positive", i, c.sizes[i]);
      o[i] = c.sizes[i];
      sc[i] = double(o[i]) / double(c.input[i]);
    }
  }
  for (size_t i = 0; i + 2 < r; ++i)
    if (o[i] != c.input[i])
      invalid("Resize", "only the last two dims may be resized; dim {} goes from {} to {}", i, c.input[i], o[i]);
  for (auto d : o.dims)
    if (d <= 0) invalid("Resize", "output shape {} is empty", o.str());
  const bool crop = c.coord == ResizeCoord::tf_crop_and_resize;
  if (crop) {
    if (c.roi.size() != 2 * r)
      invalid("Resize", "tf_crop_and_resize needs roi with {} entries (starts then ends of every dim), got {}", 2 * r,
              c.roi.size());
    for (size_t i = 0; i + 2 < r; ++i)
      if (c.input[i] > 1 && (c.roi[i] != 0.0f || c.roi[i + r] != 1.0f))
        invalid("Resize", "roi of dim {} is [{}, {}]; only the last two dims may be cropped (others need [0, 1])", i,
                c.roi[i], c.roi[i + r]);
  }
  if (dims)
    for (size_t k = 0; k < 2; ++k) {
      const size_t i = r - 2 + k;
      const double len = double(c.input[i]) * sc[i], last = double(c.input[i] - 1);
      ResizeDim& d = dims[k];
      d.geo = {{float(sc[i]), float(len), 0.0f, 0.0f}};
      if (!crop) continue;
      // In double from the f32 roi. The outputs inside [0, in - 1] form one run (the map is affine); a
      // source within rounding (1e-9) of an edge counts as inside, as it is in exact arithmetic.
      const double r0 = c.roi[i], span = double(c.roi[i + r]) - r0;
      const double a = len == 1.0 ? 0.0 : span * last / (len - 1.0);
      const double b = r0 * last + (len == 1.0 ? span * last / 2.0 : 0.0);
      d.geo.s[2] = float(a);
      d.geo.s[3] = float(b);
      d.lo = int(o[i]);
      d.hi = -1;
      for (int64_t x = 0; x < o[i]; ++x) {
        const double xo = a * double(x) + b;
        if (xo >= -1e-9 && xo <= last + 1e-9) d.lo = std::min(d.lo, int(x)), d.hi = std::max(d.hi, int(x));
      }
    }
  return o;
}
}  // namespace

Shape Resize::validate(const ResizeConfig& c) { return resize_plan(c); }

std::unique_ptr<Resize> Resize::create(Context& ctx, int device, const ResizeConfig& cfg) {
  std::unique_ptr<Resize> r(new Resize());
  r->cfg_ = cfg;
  ResizeDim d[2];
  r->out_ = resize_plan(cfg, d);
  r->geo_h_ = d[0].geo;
  r->geo_w_ = d[1].geo;
  r->valid_ = {{d[0].lo, d[0].hi, d[1].lo, d[1].hi}};
  cl::Program prog = ctx.program("data.cl", "", device);
  // CPUs: per-pixel coordinates cost several divisions per output (PoCL, nearest 2x of [1,96,40,60]:
  // ~6 ms); the row and column tables are computed once per run with the same functions.
  const bool table_mode = cfg.mode == ResizeMode::nearest || (cfg.mode == ResizeMode::linear && !cfg.antialias);
  r->table_ = table_mode && cfg.coord != ResizeCoord::tf_crop_and_resize &&
              (cfg.table == ResizeTable::on ||
               (cfg.table == ResizeTable::automatic && ctx.device(device).info.type == DeviceType::cpu));
  if (cfg.table == ResizeTable::on && !r->table_)
    invalid("Resize", "the table kernels need nearest or linear (no antialias) without tf_crop_and_resize");
  const size_t rk = r->out_.rank();
  const int64_t OH = r->out_[rk - 2], OW = r->out_[rk - 1];
  if (r->table_) {
    r->kernel_ = make_kernel(prog, "resize2d_table");
    r->table_kernel_ = make_kernel(prog, "resize_axis_table");
    const PaddedLaunch l = padded_launch((OW + 7) / 8, OH, r->out_.numel() / std::max<int64_t>(OH * OW, 1));
    r->global_ = l.global;
    r->local_ = l.local;
  } else {
    r->kernel_ = make_kernel(prog, "resize2d");
  }
  log::debug("Resize {} -> {}: {}", cfg.input.str(), r->out_.str(), r->algorithm());
  return r;
}

size_t Resize::workspace_bytes() const {
  const size_t r = out_.rank();
  return table_ ? 3 * size_t(out_[r - 2] + out_[r - 1]) * 4 : 0;
}

void Resize::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws, ExecutionContext& ec) {
  check_io("Resize", in, 1, out, 1);
  check_tensor("Resize", "input X", in[0], cfg_.input, DType::f32);
  check_tensor("Resize", "output Y", out[0], out_, DType::f32);
  const size_t r = out_.rank();
  const int H = int(cfg_.input[r - 2]), W = int(cfg_.input[r - 1]);
  const int OH = int(out_[r - 2]), OW = int(out_[r - 1]);
  if (out_.numel() == 0) return;
  const int64_t planes = cfg_.input.numel() / (int64_t(H) * W);
  std::lock_guard lock(launch_mutex_);
  if (table_) {
    if (!ws || ws->bytes() < workspace_bytes())
      invalid("Resize", "the table kernels need a workspace of {} bytes, got {}", workspace_bytes(),
              ws ? ws->bytes() : 0);
    if (ws->offset_bytes % 4) invalid("Resize", "workspace offset {} is not a multiple of 4 bytes", ws->offset_bytes);
    const cl_long t_off = cl_long(ws->offset_bytes / 4);
    const cl_int linear = cfg_.mode == ResizeMode::linear;
    set_args(table_kernel_, linear, cl_int(cfg_.coord), cl_int(cfg_.nearest), cl_int(H), cl_int(W), cl_int(OH),
             cl_int(OW), geo_h_, geo_w_, ws->buffer, ws->buffer, t_off);
    ec.enqueue_kernel(table_kernel_, cl::NDRange(size_t(OH + OW)), cl::NullRange, "resize_axis_table");
    set_args(kernel_, linear, cl_int(H), cl_int(W), cl_int(OH), cl_int(OW), ws->buffer, ws->buffer, t_off, in[0].buffer,
             cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel_, global_, local_, "resize2d_table");
    return;
  }
  set_args(kernel_, cl_int(cfg_.mode), cl_int(cfg_.coord), cl_int(cfg_.nearest), cl_int(H), cl_int(W), cl_int(OH),
           cl_int(OW), geo_h_, geo_w_, valid_, cfg_.extrapolation_value, cl_int(cfg_.antialias), cfg_.cubic_coeff_a,
           cl_int(cfg_.exclude_outside), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(OW, OH, planes), cl::NullRange, "resize2d");
}

}  // namespace cldl
