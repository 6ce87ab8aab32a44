// Element-wise ops: validation, broadcasting set-up and enqueue (kernels/elementwise.cl).
#include "layers/elementwise.hpp"

#include <array>

#include "runtime/log.hpp"

namespace cldl {

namespace {
// f32 covers every unary, arithmetic op and Where on floats; f32 -> bool the comparisons.
const ProgramVariants kElementwiseVariants("elementwise.cl",
                                           {"-DT_IN=float -DT_OUT=float -DIS_FLOAT=1",
                                            "-DT_IN=float -DT_OUT=uchar -DIS_FLOAT=1"});

const char* cl_type(DType t) {
  switch (t) {
    case DType::f32: return "float";
    case DType::i32: return "int";
    case DType::i64: return "long";
    case DType::u8: case DType::boolean: return "uchar";
    default: fail("elementwise: dtype {} has no kernel type", to_string(t));
  }
}

constexpr std::array<std::pair<const char*, UnaryOp>, 14> kUnaryNames{{
    {"Abs", UnaryOp::abs}, {"Neg", UnaryOp::neg}, {"Exp", UnaryOp::exp}, {"Log", UnaryOp::log},
    {"Sqrt", UnaryOp::sqrt}, {"Reciprocal", UnaryOp::reciprocal}, {"Floor", UnaryOp::floor},
    {"Ceil", UnaryOp::ceil}, {"Round", UnaryOp::round}, {"Sign", UnaryOp::sign}, {"Erf", UnaryOp::erf},
    {"Sin", UnaryOp::sin}, {"Cos", UnaryOp::cos}, {"Not", UnaryOp::not_},
}};

constexpr std::array<const char*, 18> kBinaryNames{
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Mod", "PRelu", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Xor"};

void check_io(std::string_view op, std::span<const Tensor> in, std::span<const Tensor> out, size_t n_in) {
  if (in.size() != n_in || out.size() != 1)
    invalid(op, "expects {} inputs and 1 output, got {} and {}", n_in, in.size(), out.size());
}

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != dt) invalid(op, "{} has dtype {}, expected {}", arg, to_string(t.dtype), to_string(dt));
}

int dtype_code(DType t) {
  switch (t) {
    case DType::f32: return 0;
    case DType::i32: return 1;
    case DType::i64: return 2;
    case DType::u8: return 3;
    case DType::boolean: return 4;
    default: return -1;
  }
}
}  // namespace

std::string elementwise_options(DType in, DType out) {
  return fmt::format("-DT_IN={} -DT_OUT={} -DIS_FLOAT={}", cl_type(in), cl_type(out), int(in == DType::f32));
}

// ---------------------------------------------------------------- Unary
std::string_view to_string(UnaryOp op) {
  for (auto& [n, o] : kUnaryNames)
    if (o == op) return n;
  return "Activation";
}

UnaryOp unary_op_from_onnx(std::string_view name) {
  for (auto& [n, o] : kUnaryNames)
    if (name == n) return o;
  fail("Unary: unknown op '{}'", name);
}

std::string_view Unary::type() const {
  return cfg_.op == UnaryOp::activation ? to_string(cfg_.act.kind) : to_string(cfg_.op);
}

Shape Unary::validate(const UnaryConfig& c) {
  std::string_view name = c.op == UnaryOp::activation ? to_string(c.act.kind) : to_string(c.op);
  for (auto d : c.shape.dims)
    if (d < 0) invalid(name, "shape {} has a negative dimension", c.shape.str());
  bool ok;
  switch (c.dtype) {
    case DType::f32: ok = c.op != UnaryOp::not_; break;
    case DType::i32: case DType::i64:
      ok = c.op == UnaryOp::abs || c.op == UnaryOp::neg || c.op == UnaryOp::sign ||
           (c.op == UnaryOp::activation && (c.act.kind == Act::none || c.act.kind == Act::relu));
      break;
    case DType::boolean: ok = c.op == UnaryOp::not_; break;
    default: ok = false;
  }
  if (!ok) invalid(name, "dtype {} is not supported for this op", to_string(c.dtype));
  if (c.op == UnaryOp::activation && c.act.kind == Act::celu && c.act.alpha == 0.0f)
    invalid(name, "alpha must be non-zero, got 0");
  return c.shape;
}

std::unique_ptr<Unary> Unary::create(Context& ctx, int device, const UnaryConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Unary> u(new Unary());
  u->cfg_ = cfg;
  u->kernel_ = make_kernel(ctx.program("elementwise.cl", elementwise_options(cfg.dtype, cfg.dtype), device), "unary");
  return u;
}

void Unary::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io(type(), in, out, 1);
  check_tensor(type(), "input x", in[0], cfg_.shape, cfg_.dtype);
  check_tensor(type(), "output y", out[0], cfg_.shape, cfg_.dtype);
  const int64_t n = cfg_.shape.numel();
  if (n == 0) return;
  int op = cfg_.op == UnaryOp::activation ? int(cfg_.act.kind) : int(cfg_.op);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(op), cfg_.act.alpha, cfg_.act.beta, cl_long(n), in[0].buffer, cl_long(in[0].offset_elems()),
           out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n)), cl::NullRange, "unary");
}

// ---------------------------------------------------------------- Binary
std::string_view to_string(BinaryOp op) { return kBinaryNames[static_cast<int>(op)]; }

BinaryOp binary_op_from_onnx(std::string_view name, bool fmod) {
  if (name == "Mod") return fmod ? BinaryOp::fmod : BinaryOp::mod;
  for (size_t i = 0; i < kBinaryNames.size(); ++i)
    if (name == kBinaryNames[i]) return static_cast<BinaryOp>(i);
  fail("Binary: unknown op '{}'", name);
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::equal && op <= BinaryOp::greater_equal; }
bool is_logical(BinaryOp op) { return op >= BinaryOp::and_; }

DType Binary::output_dtype(const BinaryConfig& c) {
  return is_comparison(c.op) || is_logical(c.op) ? DType::boolean : c.dtype;
}

Shape Binary::validate(const BinaryConfig& c) {
  std::string_view name = to_string(c.op);
  if (is_logical(c.op)) {
    if (c.dtype != DType::boolean) invalid(name, "inputs must be bool, got {}", to_string(c.dtype));
  } else if (c.op == BinaryOp::equal) {
    if (c.dtype == DType::f16) invalid(name, "dtype f16 is not supported");
  } else if (c.dtype != DType::f32 && c.dtype != DType::i32 && c.dtype != DType::i64) {
    invalid(name, "dtype {} is not supported (expected f32, i32 or i64)", to_string(c.dtype));
  }
  return broadcast_shapes(name, {c.a, c.b});
}

std::unique_ptr<Binary> Binary::create(Context& ctx, int device, const BinaryConfig& cfg) {
  std::unique_ptr<Binary> b(new Binary());
  b->cfg_ = cfg;
  b->out_ = validate(cfg);
  std::vector<int64_t> dims = b->out_.dims;
  if (dims.empty()) dims.push_back(1);
  Shape o(dims);
  b->it_ = collapse(to_string(cfg.op), dims,
                    {broadcast_strides(cfg.a, o), broadcast_strides(cfg.b, o), contiguous_strides(o)});
  b->kernel_ = make_kernel(ctx.program("elementwise.cl", elementwise_options(cfg.dtype, output_dtype(cfg)), device),
                           "binary");
  b->group_ = row_group_size(b->kernel_, ctx.device(device), b->it_.inner());
  log::debug("{} {} x {} -> {}: rank {} after collapsing", to_string(cfg.op), cfg.a.str(), cfg.b.str(), b->out_.str(),
             b->it_.rank);
  return b;
}

void Binary::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  std::string_view name = to_string(cfg_.op);
  check_io(name, in, out, 2);
  check_tensor(name, "input A", in[0], cfg_.a, cfg_.dtype);
  check_tensor(name, "input B", in[1], cfg_.b, cfg_.dtype);
  check_tensor(name, "output C", out[0], out_, output_dtype(cfg_));
  if (out_.numel() == 0) return;
  const Iteration& it = it_;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(cfg_.op), cl_int(it.rank), it.dims8(), cl_long(it.inner()), in[0].buffer, cl_long(in[0].offset_elems()),
           it.strides8(0), it.mid_stride(0), it.inner_stride(0), in[1].buffer, cl_long(in[1].offset_elems()),
           it.strides8(1), it.mid_stride(1), it.inner_stride(1), out[0].buffer, cl_long(out[0].offset_elems()),
           it.strides8(2), it.mid_stride(2), it.inner_stride(2));
  ec.enqueue_kernel(kernel_, it.range3(group_), cl::NDRange(group_, 1, 1), "binary");
}

// ---------------------------------------------------------------- Where
Shape Where::validate(const WhereConfig& c) {
  if (dtype_code(c.dtype) < 0) invalid("Where", "dtype {} of X and Y is not supported", to_string(c.dtype));
  return broadcast_shapes("Where", {c.cond, c.x, c.y});
}

std::unique_ptr<Where> Where::create(Context& ctx, int device, const WhereConfig& cfg) {
  std::unique_ptr<Where> w(new Where());
  w->cfg_ = cfg;
  Shape out = validate(cfg);
  if (out.rank() == 0) out = Shape{1};
  w->it_ = collapse("Where", out.dims,
                    {broadcast_strides(cfg.cond, out), broadcast_strides(cfg.x, out), broadcast_strides(cfg.y, out),
                     contiguous_strides(out)});
  w->kernel_ =
      make_kernel(ctx.program("elementwise.cl", elementwise_options(cfg.dtype, cfg.dtype), device), "where_select");
  w->group_ = row_group_size(w->kernel_, ctx.device(device), w->it_.inner());
  return w;
}

void Where::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Where", in, out, 3);
  check_tensor("Where", "input condition", in[0], cfg_.cond, DType::boolean);
  check_tensor("Where", "input X", in[1], cfg_.x, cfg_.dtype);
  check_tensor("Where", "input Y", in[2], cfg_.y, cfg_.dtype);
  check_tensor("Where", "output", out[0], validate(cfg_), cfg_.dtype);
  if (out[0].numel() == 0) return;
  const Iteration& it = it_;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(it.rank), it.dims8(), cl_long(it.inner()), in[0].buffer, cl_long(in[0].offset_elems()), it.strides8(0),
           it.mid_stride(0), it.inner_stride(0), in[1].buffer, cl_long(in[1].offset_elems()), it.strides8(1),
           it.mid_stride(1), it.inner_stride(1), in[2].buffer, cl_long(in[2].offset_elems()), it.strides8(2),
           it.mid_stride(2), it.inner_stride(2), out[0].buffer, cl_long(out[0].offset_elems()), it.strides8(3),
           it.mid_stride(3), it.inner_stride(3));
  ec.enqueue_kernel(kernel_, it.range3(group_), cl::NDRange(group_, 1, 1), "where");
}

// ---------------------------------------------------------------- Cast
// The kernel's DT_* codes are DType's values (kernels/elementwise.cl lists them in the same order).
static_assert(int(DType::f64) == 11 && int(DType::f8e8m0) == 17 && int(DType::u2) == 22 && kDTypeCount == 23,
              "DType changed: update the DT_* codes of kernels/elementwise.cl");

Shape Cast::validate(const CastConfig& c) {
  for (auto [t, what] : {std::pair{c.from, "input dtype"}, std::pair{c.to, "attribute 'to'"}})
    if (int(t) >= kDTypeCount) invalid("Cast", "{} has no type code {}", what, int(t));
  return c.shape;
}

std::unique_ptr<Cast> Cast::create(Context& ctx, int device, const CastConfig& cfg) {
  validate(cfg);
  if ((cfg.from == DType::f64 || cfg.to == DType::f64) && !ctx.device(device).info.fp64)
    invalid("Cast", "{} -> {} needs f64, and device '{}' has no cl_khr_fp64", to_string(cfg.from),
            to_string(cfg.to), ctx.device(device).info.name);
  std::unique_ptr<Cast> c(new Cast());
  c->cfg_ = cfg;
  // Shares the f32 build: the types are runtime arguments.
  c->kernel_ = make_kernel(ctx.program("elementwise.cl", elementwise_options(DType::f32, DType::f32), device), "cast_any");
  return c;
}

void Cast::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io("Cast", in, out, 1);
  check_tensor("Cast", "input", in[0], cfg_.shape, cfg_.from);
  check_tensor("Cast", "output", out[0], cfg_.shape, cfg_.to);
  const int64_t n = cfg_.shape.numel();
  if (n == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(cfg_.from), cl_int(cfg_.to), cl_int(cfg_.saturate ? 1 : 0), cl_int(cfg_.rounding),
           cl_long(n), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer, cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n)), cl::NullRange, "cast");
}

}  // namespace cldl
