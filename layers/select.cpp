// TopK and ReverseSequence: shape rules, attribute checks and the kernel arguments of kernels/select.cl.
#include "layers/select.hpp"

#include "layers/strided.hpp"

namespace cldl {

namespace {
// The f32 build (what `cldl compile` prepares; other types build on first use).
const ProgramVariants kSelectVariants("select.cl", {"-DT=float -DT_CALC=float -DIS_FLOAT=1 -DSTORAGE=0 -DUSE_FP64=0"});

// The build of kernels/select.cl for one element type: storage, comparison type, float, storage kind.
struct SelectType {
  DType dtype;
  const char *storage, *calc;
  int is_float, storage_kind;
};
constexpr SelectType kSelectTypes[] = {
    {DType::f32, "float", "float", 1, 0},  {DType::f64, "double", "double", 1, 0},
    {DType::f16, "ushort", "float", 1, 1}, {DType::bf16, "ushort", "float", 1, 2},
    {DType::i8, "char", "char", 0, 0},     {DType::i16, "short", "short", 0, 0},
    {DType::i32, "int", "int", 0, 0},      {DType::i64, "long", "long", 0, 0},
    {DType::u8, "uchar", "uchar", 0, 0},   {DType::u16, "ushort", "ushort", 0, 0},
    {DType::u32, "uint", "uint", 0, 0},    {DType::u64, "ulong", "ulong", 0, 0},
};

const SelectType* select_type(DType t) {
  for (const auto& k : kSelectTypes)
    if (k.dtype == t) return &k;
  return nullptr;
}

cl::Program select_program(Context& ctx, int device, std::string_view op, DType t) {
  check_dtype_support(ctx.device(device), t, op);
  const SelectType* k = select_type(t);
  if (!k) {  // moved only: the unsigned integer of the element's size
    const char* u = dtype_size(t) == 1   ? "uchar"
                    : dtype_size(t) == 2 ? "ushort"
                    : dtype_size(t) == 4 ? "uint"
                                         : "ulong";
    return ctx.program("select.cl", fmt::format("-DT={} -DT_CALC={} -DIS_FLOAT=0 -DSTORAGE=0 -DUSE_FP64=0", u, u),
                       device);
  }
  return ctx.program("select.cl",
                     fmt::format("-DT={} -DT_CALC={} -DIS_FLOAT={} -DSTORAGE={} -DUSE_FP64={}", k->storage, k->calc,
                                 k->is_float, k->storage_kind, int(t == DType::f64)),
                     device);
}

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != dt) invalid(op, "{} has dtype {}, expected {}", arg, to_string(t.dtype), to_string(dt));
}
}  // namespace

// ---------------------------------------------------------------- TopK
Shape TopK::validate(const TopKConfig& c) {
  if (!select_type(c.dtype))
    invalid("TopK", "input dtype {} is not supported (f32, f64, f16, bf16, i8 ... i64, u8 ... u64)",
            to_string(c.dtype));
  if (c.input.rank() == 0) invalid("TopK", "input must have rank >= 1, got a scalar");
  const int a = normalize_axis("TopK", "axis", c.axis, c.input.rank());
  if (c.k < 0 || c.k > c.input[a])
    invalid("TopK", "k = {} is out of range: axis {} of input {} has {} elements", c.k, c.axis, c.input.str(),
            c.input[a]);
  Shape out = c.input;
  out.dims[a] = c.k;
  return out;
}

std::unique_ptr<TopK> TopK::create(Context& ctx, int device, const TopKConfig& cfg) {
  std::unique_ptr<TopK> t(new TopK());
  t->cfg_ = cfg;
  t->out_ = validate(cfg);
  const int a = normalize_axis("TopK", "axis", cfg.axis, cfg.input.rank());
  for (int i = 0; i < a; ++i) t->outer_ *= cfg.input[i];
  t->len_ = cfg.input[a];
  for (size_t i = a + 1; i < cfg.input.rank(); ++i) t->inner_ *= cfg.input[i];
  // Counting ranks costs len^2 per line spread over len work-items; insertion at most len * k on one; a
  // merge sort len log len on one. Insertion where k is at most 1/16 of the line (`cldl bench select` on
  // PoCL: [64, 1000] k 5 20x faster, top-50 of a 50k vocabulary in 0.1 ms). Otherwise, on CPUs (a few
  // threads, so len work-items per line buy little), the sort from 32 elements on (SSDlite's top 300 of
  // 3234: 3.2 ms ranked); elsewhere ranks, whose work-items run in parallel.
  if (cfg.kernel < -1 || cfg.kernel > 2) invalid("TopK", "kernel {} is not -1, 0, 1 or 2", cfg.kernel);
  const bool cpu = ctx.device(device).info.type == DeviceType::cpu;
  t->kernel_id_ = cfg.kernel >= 0                ? cfg.kernel
                  : cfg.k * 16 <= t->len_        ? 1
                  : cpu && t->len_ >= 32         ? 2
                                                 : 0;
  if (t->kernel_id_ == 2 && t->len_ >= (int64_t(1) << 31))
    invalid("TopK", "the merge-sort kernel takes lines of up to 2^31 - 1 elements, got {}", t->len_);
  static const char* const names[] = {"topk", "topk_line", "topk_sort"};
  t->kernel_ = make_kernel(select_program(ctx, device, "TopK", cfg.dtype), names[t->kernel_id_]);
  return t;
}

size_t TopK::workspace_bytes() const {
  return kernel_id_ == 2 ? size_t(outer_ * inner_ * 2 * len_) * sizeof(cl_int) : 0;
}

void TopK::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* workspace,
                   ExecutionContext& ec) {
  if (in.size() != 1 || out.size() != 2)
    invalid("TopK", "expects 1 input and 2 outputs, got {} and {}", in.size(), out.size());
  check_tensor("TopK", "input X", in[0], cfg_.input, cfg_.dtype);
  check_tensor("TopK", "output Values", out[0], out_, cfg_.dtype);
  check_tensor("TopK", "output Indices", out[1], out_, DType::i64);
  if (out_.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(len_), cl_long(cfg_.k), cl_int(cfg_.largest ? 1 : 0), in[0].buffer,
           cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()), out[1].buffer,
           cl_long(out[1].offset_elems()));
  if (kernel_id_ == 2) {
    const size_t need = workspace_bytes();
    if (!workspace || workspace->bytes() < need)
      invalid("TopK", "the merge-sort kernel needs a workspace of {} bytes, got {}", need,
              workspace ? workspace->bytes() : 0);
    if (workspace->offset_bytes % sizeof(cl_int) != 0)
      invalid("TopK", "workspace offset {} is not a multiple of 4 bytes", workspace->offset_bytes);
    kernel_.setArg(9, workspace->buffer);
    kernel_.setArg(10, cl_long(workspace->offset_bytes / sizeof(cl_int)));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner_), size_t(outer_)), cl::NullRange, "topk_sort");
  } else if (kernel_id_ == 1)
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner_), size_t(outer_)), cl::NullRange, "topk_line");
  else
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner_), size_t(len_), size_t(outer_)), cl::NullRange, "topk");
}

// ---------------------------------------------------------------- ReverseSequence
Shape ReverseSequence::validate(const ReverseSequenceConfig& c) {
  if (c.input.rank() < 2) invalid("ReverseSequence", "input must have rank >= 2, got shape {}", c.input.str());
  for (auto [v, name] : {std::pair{c.time_axis, "time_axis"}, std::pair{c.batch_axis, "batch_axis"}})
    if (v != 0 && v != 1) invalid("ReverseSequence", "attribute '{}' must be 0 or 1, got {}", name, v);
  if (c.time_axis == c.batch_axis)
    invalid("ReverseSequence", "time_axis and batch_axis must differ, both are {}", c.time_axis);
  return c.input;
}

std::unique_ptr<ReverseSequence> ReverseSequence::create(Context& ctx, int device, const ReverseSequenceConfig& cfg) {
  validate(cfg);
  std::unique_ptr<ReverseSequence> r(new ReverseSequence());
  r->cfg_ = cfg;
  r->steps_ = cfg.input[size_t(cfg.time_axis)];
  r->batch_ = cfg.input[size_t(cfg.batch_axis)];
  for (size_t i = 2; i < cfg.input.rank(); ++i) r->inner_ *= cfg.input[i];
  // Row-major strides of the two leading axes.
  const int64_t s1 = r->inner_, s0 = cfg.input[1] * r->inner_;
  r->ts_ = cfg.time_axis == 0 ? s0 : s1;
  r->bs_ = cfg.batch_axis == 0 ? s0 : s1;
  r->kernel_ = make_kernel(select_program(ctx, device, "ReverseSequence", cfg.dtype), "reverse_sequence");
  return r;
}

void ReverseSequence::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                              ExecutionContext& ec) {
  if (in.size() != 2 || out.size() != 1)
    invalid("ReverseSequence", "expects 2 inputs and 1 output, got {} and {}", in.size(), out.size());
  check_tensor("ReverseSequence", "input", in[0], cfg_.input, cfg_.dtype);
  check_tensor("ReverseSequence", "sequence_lens", in[1], Shape{batch_}, DType::i64);
  check_tensor("ReverseSequence", "output Y", out[0], cfg_.input, cfg_.dtype);
  if (cfg_.input.numel() == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(steps_), cl_long(ts_), cl_long(bs_), in[1].buffer, cl_long(in[1].offset_elems()),
           in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(inner_), size_t(batch_), size_t(steps_)), cl::NullRange,
                    "reverse_sequence");
}

}  // namespace cldl
