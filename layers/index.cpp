// Index ops: shape rules, attribute checks and the kernel arguments of kernels/index.cl (ScatterElements,
// ScatterND, GatherND, OneHot, Hardmax, Einsum, MaxUnpool, Trilu, NonZero).
#include "layers/index.hpp"

#include <algorithm>
#include <map>
#include <optional>

#include "layers/strided.hpp"

namespace cldl {

namespace {
const ProgramVariants kIndexVariants("index.cl", {""});

// The build of kernels/index.cl for one element type: storage type, arithmetic type, storage kind
// (0 plain, 1 f16, 2 bf16) and whether the type has arithmetic (reductions, Hardmax, Einsum).
struct IndexType {
  DType dtype;
  const char *storage, *calc;
  int storage_kind;
  bool arith;
};
constexpr IndexType kIndexTypes[] = {
    {DType::f32, "float", "float", 0, true},  {DType::f64, "double", "double", 0, true},
    {DType::f16, "ushort", "float", 1, true}, {DType::bf16, "ushort", "float", 2, true},
    {DType::i8, "char", "char", 0, true},     {DType::i16, "short", "short", 0, true},
    {DType::i32, "int", "int", 0, true},      {DType::i64, "long", "long", 0, true},
    {DType::u8, "uchar", "uchar", 0, true},   {DType::u16, "ushort", "ushort", 0, true},
    {DType::u32, "uint", "uint", 0, true},    {DType::u64, "ulong", "ulong", 0, true},
};

IndexType index_type(DType t) {
  for (const auto& k : kIndexTypes)
    if (k.dtype == t) return k;
  // No arithmetic (bool, float8s, sub-byte types): moved as the unsigned integer of their size.
  switch (dtype_size(t)) {
    case 1:
      return {t, "uchar", "uchar", 0, false};
    case 2:
      return {t, "ushort", "ushort", 0, false};
    case 4:
      return {t, "uint", "uint", 0, false};
    default:
      return {t, "ulong", "ulong", 0, false};
  }
}

bool has_arith(DType t) { return index_type(t).arith; }

// OpenCL type of an index input (OneHot takes any integer or float type).
const char* index_cl_type(DType t) {
  switch (t) {
    case DType::i8:
      return "char";
    case DType::i16:
      return "short";
    case DType::i32:
      return "int";
    case DType::i64:
      return "long";
    case DType::u8:
      return "uchar";
    case DType::u16:
      return "ushort";
    case DType::u32:
      return "uint";
    case DType::u64:
      return "ulong";
    case DType::f32:
      return "float";
    case DType::f64:
      return "double";
    default:
      return nullptr;
  }
}

cl::Kernel index_kernel(Context& ctx, int device, std::string_view op, DType dt, DType idx, const char* name) {
  check_dtype_support(ctx.device(device), dt, op);
  check_dtype_support(ctx.device(device), idx, op);
  const IndexType k = index_type(dt);
  std::string opts = fmt::format("-DT={} -DT_CALC={} -DSTORAGE={} -DIDX={} -DUSE_FP64={}", k.storage, k.calc,
                                 k.storage_kind, index_cl_type(idx), int(dt == DType::f64 || idx == DType::f64));
  return make_kernel(ctx.program("index.cl", opts, device), name);
}

cl_long8 long8_of(const std::vector<int64_t>& v) {
  cl_long8 r{};
  for (size_t i = 0; i < v.size() && i < 8; ++i) r.s[i] = v[i];
  return r;
}

cl_long16 long16_of(const std::vector<int64_t>& v) {
  cl_long16 r{};
  for (size_t i = 0; i < v.size() && i < 16; ++i) r.s[i] = v[i];
  return r;
}

void check_rank(std::string_view op, std::string_view arg, const Shape& s) {
  if (s.rank() > size_t(kMaxRank)) invalid(op, "{} rank {} exceeds the supported {}", arg, s.rank(), kMaxRank);
  for (auto d : s.dims)
    if (d < 0) invalid(op, "{} has a negative dimension in shape {}", arg, s.str());
}

// MaxUnpool's winner workspace holds input positions as int: counts and extents stay below 2^31.
constexpr int64_t kMaxExtent = INT32_MAX;
int64_t bounded_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (auto d : dims)
    if (d < 0 || (d > 0 && n > kMaxExtent / d))
      return -1;
    else
      n *= d;
  return n;
}

void check_index_dtype(std::string_view op, DType t) {
  if (t != DType::i32 && t != DType::i64)
    invalid(op, "indices dtype {} is not supported (expected i32 or i64)", to_string(t));
}

void check_io(std::string_view op, std::span<const Tensor> in, size_t n_in, std::span<const Tensor> out) {
  if (in.size() != n_in || out.size() != 1)
    invalid(op, "expects {} inputs and 1 output, got {} and {}", n_in, in.size(), out.size());
}

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s || t.dtype != dt)
    invalid(op, "{} is {} {}, expected {} {}", arg, to_string(t.dtype), t.shape.str(), to_string(dt), s.str());
}

void check_reduction(std::string_view op, DType dt, ScatterReduction r) {
  if (r != ScatterReduction::none && !has_arith(dt))
    invalid(op, "reduction '{}' needs a numeric dtype, got {}", to_string(r), to_string(dt));
}

// Reduction none on a GPU or accelerator runs one work-item per update over a winner workspace
// (kernels/index.cl scatter_*_winner) when the ordered walk has fewer work-items than this and positions
// fit an int: there a single walker is a single slow thread. CPUs keep the walk: one core walks 128K
// updates in 0.75 ms where the three winner passes over a 1M output take 9.5 ms (cldl bench index, PoCL).
constexpr int64_t kScatterWalkMin = 64;
bool use_winner(const Context& ctx, int device, int per_update, ScatterReduction r, int64_t walkers, int64_t updates,
                int64_t outputs) {
  if (r != ScatterReduction::none || per_update == 0 || updates > INT32_MAX || outputs > INT32_MAX) return false;
  return per_update == 1 ||
         (ctx.device(device).info.type != DeviceType::cpu && walkers < kScatterWalkMin && updates > walkers);
}

// Fills a winner workspace with -1.
void winner_fill(cl::Kernel& init, const Tensor& ws, int64_t n, ExecutionContext& ec) {
  set_args(init, ws.buffer, cl_long(ws.offset_bytes / sizeof(cl_int)));
  ec.enqueue_kernel(init, cl::NDRange(size_t(n)), cl::NullRange, "winner_init");
}

// data -> output before a scatter, unless the output is the data itself (in place).
void copy_input(cl::Kernel& copy, const Tensor& src, const Tensor& dst, ExecutionContext& ec) {
  if (src.numel() == 0 || (src.buffer() == dst.buffer() && src.offset_bytes == dst.offset_bytes)) return;
  set_args(copy, src.buffer, cl_long(src.offset_elems()), dst.buffer, cl_long(dst.offset_elems()));
  ec.enqueue_kernel(copy, cl::NDRange(size_t(src.numel())), cl::NullRange, "index_copy");
}
}  // namespace

std::string_view to_string(ScatterReduction r) {
  switch (r) {
    case ScatterReduction::add:
      return "add";
    case ScatterReduction::mul:
      return "mul";
    case ScatterReduction::max:
      return "max";
    case ScatterReduction::min:
      return "min";
    default:
      return "none";
  }
}

ScatterReduction scatter_reduction(std::string_view op, std::string_view name) {
  for (auto r : {ScatterReduction::none, ScatterReduction::add, ScatterReduction::mul, ScatterReduction::max,
                 ScatterReduction::min})
    if (to_string(r) == name) return r;
  invalid(op, "reduction '{}' is not one of none, add, mul, max, min", name);
}

// ---------------------------------------------------------------- ScatterElements
Shape ScatterElements::validate(const ScatterElementsConfig& c) {
  const char* op = "ScatterElements";
  check_rank(op, "data", c.input);
  check_rank(op, "indices", c.indices);
  if (c.input.rank() == 0) invalid(op, "data must have rank >= 1, got a scalar");
  if (c.indices.rank() != c.input.rank())
    invalid(op, "indices rank {} differs from data rank {} ({} vs {})", c.indices.rank(), c.input.rank(),
            c.indices.str(), c.input.str());
  check_index_dtype(op, c.index_dtype);
  check_reduction(op, c.dtype, c.reduction);
  if (c.per_update < -1 || c.per_update > 1) invalid(op, "per_update = {} is not -1, 0 or 1", c.per_update);
  const int ax = normalize_axis(op, "axis", c.axis, c.input.rank());
  for (size_t d = 0; d < c.input.rank(); ++d)
    if (int(d) != ax && c.indices[d] > c.input[d])
      invalid(op, "indices / updates shape {} exceeds data shape {} in dim {}", c.indices.str(), c.input.str(), d);
  return c.input;
}

std::unique_ptr<ScatterElements> ScatterElements::create(Context& ctx, int device, const ScatterElementsConfig& cfg) {
  validate(cfg);
  std::unique_ptr<ScatterElements> s(new ScatterElements());
  s->cfg_ = cfg;
  s->copy_ = index_kernel(ctx, device, "ScatterElements", cfg.dtype, cfg.index_dtype, "index_copy");
  s->scatter_ = index_kernel(ctx, device, "ScatterElements", cfg.dtype, cfg.index_dtype, "scatter_elements");
  const int ax = normalize_axis("ScatterElements", "axis", cfg.axis, cfg.input.rank());
  const int64_t n = cfg.indices.numel();
  s->winner_ =
      n > 0 && use_winner(ctx, device, cfg.per_update, cfg.reduction, n / cfg.indices[ax], n, cfg.input.numel());
  if (s->winner_) {
    s->init_ = index_kernel(ctx, device, "ScatterElements", cfg.dtype, cfg.index_dtype, "winner_init");
    s->winner_kernel_ =
        index_kernel(ctx, device, "ScatterElements", cfg.dtype, cfg.index_dtype, "scatter_elements_winner");
  }
  return s;
}

size_t ScatterElements::workspace_bytes() const { return winner_ ? size_t(cfg_.input.numel()) * sizeof(cl_int) : 0; }

std::string ScatterElements::algorithm() const {
  if (winner_)
    return "copy, then one work-item per update claiming its target in a winner workspace (reduction none, the last "
           "wins); without a workspace, one work-item per updates line";
  return fmt::format("copy, then one work-item per updates line along the axis (reduction {}, in index order)",
                     to_string(cfg_.reduction));
}

void ScatterElements::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                              ExecutionContext& ec) {
  const char* op = "ScatterElements";
  check_io(op, in, 3, out);
  check_tensor(op, "data", in[0], cfg_.input, cfg_.dtype);
  check_tensor(op, "indices", in[1], cfg_.indices, cfg_.index_dtype);
  check_tensor(op, "updates", in[2], cfg_.indices, cfg_.dtype);
  check_tensor(op, "output", out[0], cfg_.input, cfg_.dtype);
  const int ax = normalize_axis(op, "axis", cfg_.axis, cfg_.input.rank());
  std::lock_guard lock(launch_mutex_);
  copy_input(copy_, in[0], out[0], ec);
  const int64_t n = cfg_.indices.numel();
  if (n == 0) return;
  if (winner_ && ws && ws->bytes() >= workspace_bytes()) {
    winner_fill(init_, *ws, cfg_.input.numel(), ec);
    for (int pass = 0; pass < 2; ++pass) {
      set_args(winner_kernel_, cl_int(pass), cl_int(cfg_.input.rank()), cl_int(ax), long8_of(cfg_.indices.dims),
               long8_of(contiguous_strides(cfg_.input)), cl_long(cfg_.input[ax]), in[1].buffer,
               cl_long(in[1].offset_elems()), in[2].buffer, cl_long(in[2].offset_elems()), out[0].buffer,
               cl_long(out[0].offset_elems()), ws->buffer, cl_long(ws->offset_bytes / sizeof(cl_int)));
      ec.enqueue_kernel(winner_kernel_, cl::NDRange(size_t(n)), cl::NullRange, "scatter_elements_winner");
    }
    return;
  }
  set_args(scatter_, cl_int(cfg_.input.rank()), cl_int(ax), long8_of(cfg_.indices.dims),
           long8_of(contiguous_strides(cfg_.input)), cl_long(cfg_.input[ax]), cl_int(cfg_.reduction), in[1].buffer,
           cl_long(in[1].offset_elems()), in[2].buffer, cl_long(in[2].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(scatter_, cl::NDRange(size_t(n / cfg_.indices[ax])), cl::NullRange, "scatter_elements");
}

// ---------------------------------------------------------------- ScatterND
Shape ScatterND::updates_shape(const ScatterNDConfig& c) {
  const char* op = "ScatterND";
  check_rank(op, "data", c.input);
  check_rank(op, "indices", c.indices);
  if (c.input.rank() == 0) invalid(op, "data must have rank >= 1, got a scalar");
  if (c.indices.rank() == 0) invalid(op, "indices must have rank >= 1, got a scalar");
  const int64_t k = c.indices.dims.back();
  if (k < 1 || k > int64_t(c.input.rank()))
    invalid(op, "indices' last dim is {}, expected 1 .. {} (the data rank)", k, c.input.rank());
  Shape u;
  u.dims.assign(c.indices.dims.begin(), c.indices.dims.end() - 1);
  u.dims.insert(u.dims.end(), c.input.dims.begin() + k, c.input.dims.end());
  return u;
}

Shape ScatterND::validate(const ScatterNDConfig& c) {
  updates_shape(c);
  check_index_dtype("ScatterND", c.index_dtype);
  check_reduction("ScatterND", c.dtype, c.reduction);
  if (c.per_update < -1 || c.per_update > 1) invalid("ScatterND", "per_update = {} is not -1, 0 or 1", c.per_update);
  return c.input;
}

std::unique_ptr<ScatterND> ScatterND::create(Context& ctx, int device, const ScatterNDConfig& cfg) {
  validate(cfg);
  std::unique_ptr<ScatterND> s(new ScatterND());
  s->cfg_ = cfg;
  s->copy_ = index_kernel(ctx, device, "ScatterND", cfg.dtype, cfg.index_dtype, "index_copy");
  s->scatter_ = index_kernel(ctx, device, "ScatterND", cfg.dtype, cfg.index_dtype, "scatter_nd");
  const int64_t k = cfg.indices.dims.back(), n = cfg.indices.numel() / k;
  int64_t slice = 1;
  for (size_t d = size_t(k); d < cfg.input.rank(); ++d) slice *= cfg.input[d];
  s->winner_ =
      n > 0 && slice > 0 && use_winner(ctx, device, cfg.per_update, cfg.reduction, slice, n * slice, cfg.input.numel());
  if (s->winner_) {
    s->init_ = index_kernel(ctx, device, "ScatterND", cfg.dtype, cfg.index_dtype, "winner_init");
    s->winner_kernel_ = index_kernel(ctx, device, "ScatterND", cfg.dtype, cfg.index_dtype, "scatter_nd_winner");
  }
  return s;
}

size_t ScatterND::workspace_bytes() const { return winner_ ? size_t(cfg_.input.numel()) * sizeof(cl_int) : 0; }

std::string ScatterND::algorithm() const {
  if (winner_)
    return "copy, then one work-item per updated element claiming its target in a winner workspace (reduction none, "
           "the last wins); without a workspace, one work-item per slice element";
  return fmt::format("copy, then one work-item per slice element walking the index tuples in order (reduction {})",
                     to_string(cfg_.reduction));
}

void ScatterND::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                        ExecutionContext& ec) {
  const char* op = "ScatterND";
  check_io(op, in, 3, out);
  check_tensor(op, "data", in[0], cfg_.input, cfg_.dtype);
  check_tensor(op, "indices", in[1], cfg_.indices, cfg_.index_dtype);
  check_tensor(op, "updates", in[2], updates_shape(cfg_), cfg_.dtype);
  check_tensor(op, "output", out[0], cfg_.input, cfg_.dtype);
  const int64_t k = cfg_.indices.dims.back();
  const int64_t n = cfg_.indices.numel() / k;
  int64_t slice = 1;
  for (size_t d = size_t(k); d < cfg_.input.rank(); ++d) slice *= cfg_.input[d];
  std::lock_guard lock(launch_mutex_);
  copy_input(copy_, in[0], out[0], ec);
  if (n == 0 || slice == 0) return;
  if (winner_ && ws && ws->bytes() >= workspace_bytes()) {
    winner_fill(init_, *ws, cfg_.input.numel(), ec);
    for (int pass = 0; pass < 2; ++pass) {
      set_args(winner_kernel_, cl_int(pass), cl_int(k), long8_of(cfg_.input.dims),
               long8_of(contiguous_strides(cfg_.input)), in[1].buffer, cl_long(in[1].offset_elems()), in[2].buffer,
               cl_long(in[2].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()), ws->buffer,
               cl_long(ws->offset_bytes / sizeof(cl_int)));
      ec.enqueue_kernel(winner_kernel_, cl::NDRange(size_t(slice), size_t(n)), cl::NullRange, "scatter_nd_winner");
    }
    return;
  }
  set_args(scatter_, cl_int(k), cl_long(n), cl_long(slice), long8_of(cfg_.input.dims),
           long8_of(contiguous_strides(cfg_.input)), cl_int(cfg_.reduction), in[1].buffer,
           cl_long(in[1].offset_elems()), in[2].buffer, cl_long(in[2].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(scatter_, cl::NDRange(size_t(slice)), cl::NullRange, "scatter_nd");
}

// ---------------------------------------------------------------- GatherND
Shape GatherND::validate(const GatherNDConfig& c) {
  const char* op = "GatherND";
  check_rank(op, "data", c.input);
  check_rank(op, "indices", c.indices);
  check_index_dtype(op, c.index_dtype);
  const int64_t r = int64_t(c.input.rank()), q = int64_t(c.indices.rank()), b = c.batch_dims;
  if (r == 0 || q == 0)
    invalid(op, "data and indices must have rank >= 1, got {} and {}", c.input.str(), c.indices.str());
  if (b < 0 || b >= std::min(r, q))
    invalid(op, "batch_dims = {} must be in [0, {}) (min of the data and indices ranks)", b, std::min(r, q));
  for (int64_t d = 0; d < b; ++d)
    if (c.input[d] != c.indices[d])
      invalid(op, "batch dim {} differs: data {} vs indices {}", d, c.input.str(), c.indices.str());
  const int64_t k = c.indices.dims.back();
  if (k < 1 || k > r - b) invalid(op, "indices' last dim is {}, expected 1 .. {} (data rank - batch_dims)", k, r - b);
  Shape o;
  o.dims.assign(c.indices.dims.begin(), c.indices.dims.end() - 1);
  o.dims.insert(o.dims.end(), c.input.dims.begin() + b + k, c.input.dims.end());
  if (o.rank() > size_t(kMaxRank)) invalid(op, "output rank {} exceeds the supported {}", o.rank(), kMaxRank);
  return o;
}

std::unique_ptr<GatherND> GatherND::create(Context& ctx, int device, const GatherNDConfig& cfg) {
  validate(cfg);
  std::unique_ptr<GatherND> g(new GatherND());
  g->cfg_ = cfg;
  g->kernel_ = index_kernel(ctx, device, "GatherND", cfg.dtype, cfg.index_dtype, "gather_nd");
  return g;
}

void GatherND::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const char* op = "GatherND";
  check_io(op, in, 2, out);
  const Shape o = validate(cfg_);
  check_tensor(op, "data", in[0], cfg_.input, cfg_.dtype);
  check_tensor(op, "indices", in[1], cfg_.indices, cfg_.index_dtype);
  check_tensor(op, "output", out[0], o, cfg_.dtype);
  if (o.numel() == 0) return;
  const size_t b = size_t(cfg_.batch_dims), k = size_t(cfg_.indices.dims.back());
  int64_t slice = 1, batch_stride = 1, batch_inner = 1;
  for (size_t d = b + k; d < cfg_.input.rank(); ++d) slice *= cfg_.input[d];
  for (size_t d = b; d < cfg_.input.rank(); ++d) batch_stride *= cfg_.input[d];
  for (size_t d = b; d + 1 < cfg_.indices.rank(); ++d) batch_inner *= cfg_.indices[d];
  const auto st = contiguous_strides(cfg_.input);
  std::vector<int64_t> dd(cfg_.input.dims.begin() + b, cfg_.input.dims.begin() + b + k);
  std::vector<int64_t> ds(st.begin() + b, st.begin() + b + k);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(k), cl_long(batch_inner), cl_long(batch_stride), long8_of(dd), long8_of(ds), in[1].buffer,
           cl_long(in[1].offset_elems()), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(slice), size_t(o.numel() / slice)), cl::NullRange, "gather_nd");
}

// ---------------------------------------------------------------- OneHot
Shape OneHot::validate(const OneHotConfig& c) {
  const char* op = "OneHot";
  check_rank(op, "indices", c.indices);
  if (!index_cl_type(c.index_dtype))
    invalid(op, "indices dtype {} is not supported (an integer type, f32 or f64)", to_string(c.index_dtype));
  if (c.depth <= 0) invalid(op, "depth = {} must be positive", c.depth);
  const int ax = normalize_axis(op, "axis", c.axis, c.indices.rank() + 1);
  Shape o = c.indices;
  o.dims.insert(o.dims.begin() + ax, c.depth);
  return o;
}

std::unique_ptr<OneHot> OneHot::create(Context& ctx, int device, const OneHotConfig& cfg) {
  std::unique_ptr<OneHot> h(new OneHot());
  h->out_ = validate(cfg);
  h->cfg_ = cfg;
  h->kernel_ = index_kernel(ctx, device, "OneHot", cfg.dtype, cfg.index_dtype, "one_hot");
  return h;
}

void OneHot::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const char* op = "OneHot";
  check_io(op, in, 2, out);
  check_tensor(op, "indices", in[0], cfg_.indices, cfg_.index_dtype);
  if (in[1].numel() != 2 || in[1].dtype != cfg_.dtype)
    invalid(op, "values is {} {}, expected {} with 2 elements (off, on)", to_string(in[1].dtype), in[1].shape.str(),
            to_string(cfg_.dtype));
  check_tensor(op, "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  const int ax = normalize_axis(op, "axis", cfg_.axis, cfg_.indices.rank() + 1);
  int64_t inner = 1;
  for (size_t d = size_t(ax); d < cfg_.indices.rank(); ++d) inner *= cfg_.indices[d];
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer, cl_long(in[1].offset_elems()),
           out[0].buffer, cl_long(out[0].offset_elems()), cl_int(cfg_.negative_wraps ? 1 : 0));
  const int64_t outer = out_.numel() / (cfg_.depth * inner);
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner), size_t(cfg_.depth), size_t(outer)), cl::NullRange, "one_hot");
}

// ---------------------------------------------------------------- Hardmax
Shape Hardmax::validate(const HardmaxConfig& c) {
  const char* op = "Hardmax";
  check_rank(op, "input", c.input);
  if (c.dtype != DType::f32 && c.dtype != DType::f64 && c.dtype != DType::f16 && c.dtype != DType::bf16)
    invalid(op, "input dtype {} is not supported (f32, f64, f16, bf16)", to_string(c.dtype));
  if (c.input.rank() == 0) invalid(op, "input must have rank >= 1, got a scalar");
  normalize_axis(op, "axis", c.axis, c.input.rank());
  return c.input;
}

std::unique_ptr<Hardmax> Hardmax::create(Context& ctx, int device, const HardmaxConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Hardmax> h(new Hardmax());
  h->cfg_ = cfg;
  h->kernel_ = index_kernel(ctx, device, "Hardmax", cfg.dtype, DType::i64, "hardmax");
  return h;
}

void Hardmax::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Hardmax", in, 1, out);
  check_tensor("Hardmax", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Hardmax", "output", out[0], cfg_.input, cfg_.dtype);
  if (cfg_.input.numel() == 0) return;
  const int ax = normalize_axis("Hardmax", "axis", cfg_.axis, cfg_.input.rank());
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < ax; ++d) outer *= cfg_.input[d];
  for (size_t d = size_t(ax) + 1; d < cfg_.input.rank(); ++d) inner *= cfg_.input[d];
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(cfg_.input[ax]), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner), size_t(outer)), cl::NullRange, "hardmax");
}

// ---------------------------------------------------------------- Trilu
Shape Trilu::validate(const TriluConfig& c) {
  check_rank("Trilu", "input", c.input);
  if (c.input.rank() < 2) invalid("Trilu", "input must have rank >= 2, got shape {}", c.input.str());
  return c.input;
}

std::unique_ptr<Trilu> Trilu::create(Context& ctx, int device, const TriluConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Trilu> t(new Trilu());
  t->cfg_ = cfg;
  t->kernel_ = index_kernel(ctx, device, "Trilu", cfg.dtype, DType::i64, "trilu");
  return t;
}

void Trilu::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Trilu", in, 1, out);
  check_tensor("Trilu", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("Trilu", "output", out[0], cfg_.input, cfg_.dtype);
  if (cfg_.input.numel() == 0) return;
  const size_t r = cfg_.input.rank();
  const int64_t n = cfg_.input[r - 2], m = cfg_.input[r - 1], batch = cfg_.input.numel() / (n * m);
  // k beyond the matrix keeps all or nothing; clamping keeps j - i in range of any long compare.
  const int64_t k = std::clamp<int64_t>(cfg_.k, -n - 1, m + 1);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(k), cl_int(cfg_.upper ? 1 : 0), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(m), size_t(n), size_t(batch)), cl::NullRange, "trilu");
}

// ---------------------------------------------------------------- Einsum
namespace {
// One term of an equation: its labels, -1 standing for the ellipsis.
std::vector<int> einsum_term(std::string_view eq, std::string_view term) {
  std::vector<int> labels;
  bool ellipsis = false;
  for (size_t i = 0; i < term.size(); ++i) {
    const char ch = term[i];
    if (ch == '.') {
      if (term.substr(i, 3) != "..." || ellipsis)
        invalid("Einsum", "equation '{}': term '{}' has a stray '.' (one '...' at most)", eq, term);
      ellipsis = true;
      labels.push_back(-1);
      i += 2;
    } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
      labels.push_back(ch);
    } else {
      invalid("Einsum", "equation '{}': '{}' is not a label (letters and '...')", eq, ch);
    }
  }
  return labels;
}
}  // namespace

EinsumPlan Einsum::plan(const EinsumConfig& c) {
  const char* op = "Einsum";
  std::string eq;
  for (char ch : c.equation)
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::vector<int>> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(einsum_term(c.equation, std::string_view(lhs).substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.inputs.size())
    invalid(op, "equation '{}' has {} input terms for {} inputs", c.equation, terms.size(), c.inputs.size());
  if (c.inputs.empty() || c.inputs.size() > size_t(kMaxInputs))
    invalid(op, "{} inputs given, 1 .. {} are supported", c.inputs.size(), kMaxInputs);
  // Extents: letters by character, the ellipsis dims (right-aligned, numpy broadcasting) as 1000 + j.
  size_t ell_rank = 0;
  for (size_t t = 0; t < terms.size(); ++t) {
    check_rank(op, fmt::format("input {}", t), c.inputs[t]);
    const size_t letters = size_t(std::count_if(terms[t].begin(), terms[t].end(), [](int l) { return l >= 0; }));
    const bool ell = letters != terms[t].size();
    if (c.inputs[t].rank() < letters || (!ell && c.inputs[t].rank() != letters))
      invalid(op, "equation '{}': term {} has {} labels{} but input {} has shape {}", c.equation, t, letters,
              ell ? " and '...'" : "", t, c.inputs[t].str());
    if (ell) ell_rank = std::max(ell_rank, c.inputs[t].rank() - letters);
  }
  std::map<int, int64_t> extent;
  std::map<int, int> count;  // occurrences over all inputs (implicit output: the labels seen once)
  std::vector<std::vector<std::pair<int, int64_t>>> dims_of(terms.size());  // per input: (label, dim size)
  for (size_t t = 0; t < terms.size(); ++t) {
    const Shape& s = c.inputs[t];
    const size_t letters = size_t(std::count_if(terms[t].begin(), terms[t].end(), [](int l) { return l >= 0; }));
    const size_t e = s.rank() - letters;
    size_t d = 0;
    for (int l : terms[t]) {
      if (l < 0) {
        for (size_t j = 0; j < e; ++j, ++d) dims_of[t].push_back({int(1000 + ell_rank - e + j), s[d]});
        continue;
      }
      dims_of[t].push_back({l, s[d++]});
      count[l]++;
    }
    for (auto [l, n] : dims_of[t]) {
      auto it = extent.find(l);
      if (it == extent.end() || it->second == 1)
        extent[l] = n;
      else if (n != it->second && n != 1)  // extent 1 broadcasts, as numpy does
        invalid(op, "equation '{}': {} has extent {} in input {} but {} elsewhere", c.equation,
                l >= 1000 ? std::string("an ellipsis dim") : fmt::format("label '{}'", char(l)), n, t, it->second);
    }
  }
  std::vector<int> out;  // output labels in order
  std::vector<int> ell_labels;
  for (size_t j = 0; j < ell_rank; ++j) ell_labels.push_back(int(1000 + j));
  if (arrow == std::string::npos) {
    out = ell_labels;
    for (auto [l, n] : count)
      if (n == 1) out.push_back(l);
  } else {
    for (int l : einsum_term(c.equation, std::string_view(eq).substr(arrow + 2))) {
      if (l < 0) {
        out.insert(out.end(), ell_labels.begin(), ell_labels.end());
        continue;
      }
      if (!extent.count(l)) invalid(op, "equation '{}': output label '{}' is in no input", c.equation, char(l));
      if (std::count(out.begin(), out.end(), l))
        invalid(op, "equation '{}': output label '{}' is repeated", c.equation, char(l));
      out.push_back(l);
    }
  }
  std::vector<int> order = out;
  for (auto& [l, n] : extent)
    if (!std::count(out.begin(), out.end(), l)) order.push_back(l);
  if (order.size() > size_t(kMaxLabels))
    invalid(op, "equation '{}' has {} distinct labels (ellipsis dims included), at most {} are supported", c.equation,
            order.size(), kMaxLabels);
  EinsumPlan p;
  p.n_out = int(out.size());
  p.n_sum = int(order.size() - out.size());
  for (int l : order) p.sizes.push_back(extent[l]);
  for (int l : out) p.output.dims.push_back(extent[l]);
  for (size_t t = 0; t < terms.size(); ++t) {
    std::vector<int64_t> st(order.size(), 0);
    const auto cs = contiguous_strides(c.inputs[t]);
    for (size_t d = 0; d < dims_of[t].size(); ++d) {
      const auto [l, n] = dims_of[t][d];
      if (n == 1 && extent[l] != 1) continue;  // broadcast ellipsis dim
      st[size_t(std::find(order.begin(), order.end(), l) - order.begin())] += cs[d];
    }
    p.strides.push_back(st);
  }
  return p;
}

Shape Einsum::validate(const EinsumConfig& c) {
  if (!has_arith(c.dtype) || c.dtype == DType::boolean)
    invalid("Einsum", "dtype {} is not supported (a float or integer type)", to_string(c.dtype));
  Shape o = plan(c).output;
  if (o.rank() > size_t(kMaxRank)) invalid("Einsum", "output rank {} exceeds the supported {}", o.rank(), kMaxRank);
  return o;
}

namespace {
// The Gemm of an f32 two-input contraction over one label k whose output labels are [batch,] r, c with
// r only in one input (A) and c only in the other (B), each addressed as a plain or transposed matrix
// by the plan's strides; none when the equation is anything else.
std::optional<GemmConfig> einsum_gemm(const EinsumConfig& cfg, const EinsumPlan& p, bool& swap) {
  if (cfg.dtype != DType::f32 || cfg.inputs.size() != 2 || p.n_sum != 1) return std::nullopt;
  const size_t k = size_t(p.n_out), first = p.n_out == 3 ? 1 : 0;
  if (p.n_out != 2 && p.n_out != 3) return std::nullopt;
  const auto &s0 = p.strides[0], &s1 = p.strides[1];
  if (s0[k] == 0 || s1[k] == 0) return std::nullopt;
  if (first && (s0[0] == 0 || s1[0] == 0)) return std::nullopt;  // the batch label is in both inputs
  const size_t r = first, c = first + 1;
  const bool r0 = s0[r] != 0 && s1[r] == 0, r1 = s1[r] != 0 && s0[r] == 0;
  const bool c0 = s0[c] != 0 && s1[c] == 0, c1 = s1[c] != 0 && s0[c] == 0;
  if (!((r0 && c1) || (r1 && c0))) return std::nullopt;
  swap = r1;
  const auto &sa = swap ? s1 : s0, &sb = swap ? s0 : s1;
  GemmConfig g;
  g.M = p.sizes[r], g.N = p.sizes[c], g.K = p.sizes[k];
  if (sa[k] == 1)
    g.trans_a = false, g.lda = sa[r];  // A[m, kk] = m * lda + kk
  else if (sa[r] == 1)
    g.trans_a = true, g.lda = sa[k];
  else
    return std::nullopt;
  if (sb[c] == 1)
    g.trans_b = false, g.ldb = sb[k];  // B[kk, n] = kk * ldb + n
  else if (sb[k] == 1)
    g.trans_b = true, g.ldb = sb[c];
  else
    return std::nullopt;
  g.ldc = g.N;
  g.batch = first ? p.sizes[0] : 1;
  g.stride_a = first ? sa[0] : 0;
  g.stride_b = first ? sb[0] : 0;
  g.stride_c = g.M * g.N;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.lda <= 0 || g.ldb <= 0) return std::nullopt;
  try {
    Gemm::validate(g);
  } catch (const Error&) {
    return std::nullopt;  // a layout Gemm does not take (e.g. a leading dimension below the row length)
  }
  return g;
}
}  // namespace

std::unique_ptr<Einsum> Einsum::create(Context& ctx, int device, const EinsumConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Einsum> e(new Einsum());
  e->cfg_ = cfg;
  e->plan_ = plan(cfg);
  if (auto g = einsum_gemm(cfg, e->plan_, e->gemm_swap_))
    e->gemm_ = Gemm::create(ctx, device, *g);
  else
    e->kernel_ = index_kernel(ctx, device, "Einsum", cfg.dtype, DType::i64, "einsum");
  return e;
}

std::string Einsum::algorithm() const {
  if (gemm_) return "batched gemm, " + gemm_->algorithm();
  return fmt::format("direct: one work-item per output element, {} output and {} summed labels", plan_.n_out,
                     plan_.n_sum);
}

void Einsum::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* workspace,
                     ExecutionContext& ec) {
  check_io("Einsum", in, cfg_.inputs.size(), out);
  for (size_t t = 0; t < in.size(); ++t)
    check_tensor("Einsum", fmt::format("input {}", t), in[t], cfg_.inputs[t], cfg_.dtype);
  check_tensor("Einsum", "output", out[0], plan_.output, cfg_.dtype);
  if (plan_.output.numel() == 0) return;
  if (gemm_) {
    Tensor ab[] = {in[gemm_swap_ ? 1 : 0], in[gemm_swap_ ? 0 : 1]};
    gemm_->enqueue(ab, out, workspace, ec);
    return;
  }
  int64_t sum_total = 1;
  for (int l = plan_.n_out; l < plan_.n_out + plan_.n_sum; ++l) sum_total *= plan_.sizes[size_t(l)];
  cl_long16 st[kMaxInputs]{};
  cl::Buffer buf[kMaxInputs];
  cl_long off[kMaxInputs]{};
  for (size_t t = 0; t < size_t(kMaxInputs); ++t) {
    const size_t s = t < in.size() ? t : 0;  // absent inputs: input 0 again, never read
    buf[t] = in[s].buffer;
    off[t] = cl_long(in[s].offset_elems());
    if (t < in.size()) st[t] = long16_of(plan_.strides[t]);
  }
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(in.size()), cl_int(plan_.n_out), cl_int(plan_.n_sum), cl_long(sum_total),
           long16_of(plan_.sizes), st[0], st[1], st[2], st[3], buf[0], off[0], buf[1], off[1], buf[2], off[2], buf[3],
           off[3], out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(plan_.output.numel())), cl::NullRange, "einsum");
}

// ---------------------------------------------------------------- MaxUnpool
Shape MaxUnpool::inferred_shape(const MaxUnpoolConfig& c) {
  const char* op = "MaxUnpool";
  check_rank(op, "X", c.input);
  check_index_dtype(op, c.index_dtype);
  const size_t r = c.input.rank();
  if (r < 3 || r > 5) invalid(op, "X must be N, C and 1 to 3 spatial dims, got shape {}", c.input.str());
  const size_t n = r - 2;
  if (c.kernel_shape.size() != n)
    invalid(op, "kernel_shape has {} entries, expected {} (the spatial dims)", c.kernel_shape.size(), n);
  if (!c.strides.empty() && c.strides.size() != n)
    invalid(op, "strides has {} entries, expected {}", c.strides.size(), n);
  if (!c.pads.empty() && c.pads.size() != 2 * n) invalid(op, "pads has {} entries, expected {}", c.pads.size(), 2 * n);
  Shape s = c.input;
  for (size_t i = 0; i < n; ++i) {
    const int64_t k = c.kernel_shape[i], st = c.strides.empty() ? 1 : c.strides[i];
    const int64_t pb = c.pads.empty() ? 0 : c.pads[i], pe = c.pads.empty() ? 0 : c.pads[i + n];
    if (k < 1 || st < 1 || pb < 0 || pe < 0)
      invalid(op, "spatial dim {}: kernel {}, stride {}, pads {} / {} (kernel and stride >= 1, pads >= 0)", i, k, st,
              pb, pe);
    if (k > kMaxExtent || st > kMaxExtent || pb > kMaxExtent || pe > kMaxExtent || c.input[i + 2] > kMaxExtent)
      invalid(op, "spatial dim {}: kernel {}, stride {}, pads {} / {} or input {} exceeds {}", i, k, st, pb, pe,
              c.input[i + 2], kMaxExtent);
    s[i + 2] = (c.input[i + 2] - 1) * st - pb - pe + k;
    if (s[i + 2] < 0) invalid(op, "spatial dim {}: unpooled extent {} is negative", i, s[i + 2]);
  }
  return s;
}

Shape MaxUnpool::validate(const MaxUnpoolConfig& c) {
  const Shape s = inferred_shape(c);
  if (!c.output_shape.empty()) {
    if (c.output_shape.size() != s.rank())
      invalid("MaxUnpool", "output_shape has {} entries, expected {}", c.output_shape.size(), s.rank());
    for (size_t d = 0; d < s.rank(); ++d)
      if (c.output_shape[d] < s[d] || (d < 2 && c.output_shape[d] != s[d]))
        invalid("MaxUnpool", "output_shape {} is smaller than the unpooled shape {} (or changes N / C) in dim {}",
                Shape(c.output_shape).str(), s.str(), d);
  }
  const Shape o = c.output_shape.empty() ? s : Shape(c.output_shape);
  if (bounded_count(o.dims) < 0 || bounded_count(c.input.dims) < 0)
    invalid("MaxUnpool", "output {} or input {} has more than 2^31 - 1 elements", o.str(), c.input.str());
  return o;
}

std::unique_ptr<MaxUnpool> MaxUnpool::create(Context& ctx, int device, const MaxUnpoolConfig& cfg) {
  std::unique_ptr<MaxUnpool> u(new MaxUnpool());
  u->out_ = validate(cfg);
  u->unpooled_ = inferred_shape(cfg);
  u->cfg_ = cfg;
  u->init_ = index_kernel(ctx, device, "MaxUnpool", cfg.dtype, cfg.index_dtype, "winner_init");
  u->claim_ = index_kernel(ctx, device, "MaxUnpool", cfg.dtype, cfg.index_dtype, "unpool_claim");
  u->write_ = index_kernel(ctx, device, "MaxUnpool", cfg.dtype, cfg.index_dtype, "unpool_write");
  return u;
}

size_t MaxUnpool::workspace_bytes() const { return size_t(out_.numel()) * sizeof(cl_int); }

void MaxUnpool::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                        ExecutionContext& ec) {
  const char* op = "MaxUnpool";
  check_io(op, in, 2, out);
  check_tensor(op, "X", in[0], cfg_.input, cfg_.dtype);
  check_tensor(op, "I", in[1], cfg_.input, cfg_.index_dtype);
  check_tensor(op, "output", out[0], out_, cfg_.dtype);
  if (out_.numel() == 0) return;
  if (!ws || ws->bytes() < workspace_bytes())
    invalid(op, "needs a workspace of {} bytes, got {}", workspace_bytes(), ws ? ws->bytes() : 0);
  std::lock_guard lock(launch_mutex_);
  const cl_long ws_off = cl_long(ws->offset_bytes / sizeof(cl_int));
  set_args(init_, ws->buffer, ws_off);
  ec.enqueue_kernel(init_, cl::NDRange(size_t(out_.numel())), cl::NullRange, "winner_init");
  if (cfg_.input.numel() > 0) {
    set_args(claim_, cl_int(out_ == unpooled_ ? 0 : out_.rank()), cl_long(unpooled_.numel()), long8_of(unpooled_.dims),
             long8_of(out_.dims), in[1].buffer, cl_long(in[1].offset_elems()), ws->buffer, ws_off);
    ec.enqueue_kernel(claim_, cl::NDRange(size_t(cfg_.input.numel())), cl::NullRange, "unpool_claim");
  }
  set_args(write_, ws->buffer, ws_off, in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(write_, cl::NDRange(size_t(out_.numel())), cl::NullRange, "unpool_write");
}

// ---------------------------------------------------------------- NonZero
namespace {
constexpr size_t kNonZeroLocal = 256;  // kernels/index.cl NZ_LOCAL
}

Shape NonZero::validate(const NonZeroConfig& c) {
  check_rank("NonZero", "input", c.input);
  return Shape{int64_t(std::max<size_t>(c.input.rank(), 1)), c.input.numel()};
}

std::unique_ptr<NonZero> NonZero::create(Context& ctx, int device, const NonZeroConfig& cfg) {
  validate(cfg);
  std::unique_ptr<NonZero> t(new NonZero());
  t->cfg_ = cfg;
  t->kernel_ = index_kernel(ctx, device, "NonZero", cfg.dtype, DType::i64, "nonzero");
  const Device& dev = ctx.device(device);
  size_t most = std::min(kNonZeroLocal, dev.info.max_work_group_size ? dev.info.max_work_group_size : 1);
  most = std::min(most, t->kernel_.getWorkGroupInfo<CL_KERNEL_WORK_GROUP_SIZE>(dev.device));
  t->local_ = std::max<size_t>(1, most);
  return t;
}

std::string NonZero::algorithm() const { return fmt::format("one work-group of {}, segment prefix sum", local_); }

void NonZero::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  if (in.size() != 1 || out.size() != 2)
    invalid("NonZero", "expects 1 input and 2 outputs (coordinates, count), got {} and {}", in.size(), out.size());
  const Shape bound = validate(cfg_);
  check_tensor("NonZero", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("NonZero", "output", out[0], bound, DType::i64);
  check_tensor("NonZero", "count", out[1], Shape{1}, DType::i64);
  std::vector<int64_t> dims = cfg_.input.dims;
  if (dims.empty()) dims = {1};
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(cfg_.input.numel()), cl_int(dims.size()), long8_of(dims), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()), out[1].buffer,
           cl_long(out[1].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(local_), cl::NDRange(local_), "nonzero");
}

}  // namespace cldl
