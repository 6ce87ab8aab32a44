// Element-wise ops: validation, broadcasting set-up and enqueue (kernels/elementwise.cl).
#include "layers/elementwise.hpp"

#include <array>
#include <cmath>
#include <limits>

#include "runtime/log.hpp"

namespace cldl {

namespace {
// One build per element type: T_IN storage, T_CALC arithmetic, T_UW the unsigned type integer +, -, *
// wrap in (see kernels/elementwise.cl). f16 and bf16 are stored as such and computed in f32; bool and
// u8 share the uchar build.
struct KernelType {
  DType dtype;
  const char *storage, *calc, *wrap;
  int is_float, is_signed, storage_kind;
};
constexpr KernelType kKernelTypes[] = {
    {DType::f32, "float", "float", "uint", 1, 1, 0},    {DType::f64, "double", "double", "ulong", 1, 1, 0},
    {DType::f16, "half", "float", "uint", 1, 1, 1},     {DType::bf16, "ushort", "float", "uint", 1, 1, 2},
    {DType::i8, "char", "char", "uint", 0, 1, 0},       {DType::i16, "short", "short", "uint", 0, 1, 0},
    {DType::i32, "int", "int", "uint", 0, 1, 0},        {DType::i64, "long", "long", "ulong", 0, 1, 0},
    {DType::u8, "uchar", "uchar", "uint", 0, 0, 0},     {DType::boolean, "uchar", "uchar", "uint", 0, 0, 0},
    {DType::u16, "ushort", "ushort", "uint", 0, 0, 0},  {DType::u32, "uint", "uint", "uint", 0, 0, 0},
    {DType::u64, "ulong", "ulong", "ulong", 0, 0, 0},
};

const KernelType* kernel_type(DType t) {
  for (const auto& k : kKernelTypes)
    if (k.dtype == t) return &k;
  return nullptr;
}

const KernelType& kernel_type(std::string_view op, DType t) {
  const KernelType* k = kernel_type(t);
  if (!k) invalid(op, "dtype {} has no element-wise kernel", to_string(t));
  return *k;
}

bool is_float_type(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16; }
bool is_numeric(DType t) { return kernel_type(t) && t != DType::boolean; }

// Calls f(a, b) with a and b converted to the build's T_CALC scalar (the unary kernel's alpha / beta or
// Clip bounds); integer values are clamped to the type's range, so Clip's +-inf defaults mean "none".
template <typename F>
void with_calc_scalars(DType t, double a, double b, F&& f) {
  auto as = [&]<typename T>(T*) {
    if constexpr (std::is_integral_v<T>) {
      auto clamp = [](double v) {
        if (std::isnan(v)) return T(0);
        if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
        if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
        return T(v);
      };
      f(clamp(a), clamp(b));
    } else {
      f(T(a), T(b));
    }
  };
  switch (t) {
    case DType::f64: return as((cl_double*)nullptr);
    case DType::i8: return as((cl_char*)nullptr);
    case DType::i16: return as((cl_short*)nullptr);
    case DType::i32: return as((cl_int*)nullptr);
    case DType::i64: return as((cl_long*)nullptr);
    case DType::u8: case DType::boolean: return as((cl_uchar*)nullptr);
    case DType::u16: return as((cl_ushort*)nullptr);
    case DType::u32: return as((cl_uint*)nullptr);
    case DType::u64: return as((cl_ulong*)nullptr);
    default: return as((cl_float*)nullptr);  // f32, and f16 / bf16 computed in f32
  }
}

const ProgramVariants kElementwiseVariants("elementwise.cl", {elementwise_options(DType::f32)});

// "IsInf" maps to detecting both infinities; the one-sided forms come from its attributes.
// clang-format off
constexpr std::array<std::pair<const char*, UnaryOp>, 30> kUnaryNames{{
    {"Abs", UnaryOp::abs}, {"Neg", UnaryOp::neg}, {"Exp", UnaryOp::exp}, {"Log", UnaryOp::log},
    {"Sqrt", UnaryOp::sqrt}, {"Reciprocal", UnaryOp::reciprocal}, {"Floor", UnaryOp::floor},
    {"Ceil", UnaryOp::ceil}, {"Round", UnaryOp::round}, {"Sign", UnaryOp::sign}, {"Erf", UnaryOp::erf},
    {"Sin", UnaryOp::sin}, {"Cos", UnaryOp::cos}, {"Not", UnaryOp::not_},
    {"Sinh", UnaryOp::sinh}, {"Cosh", UnaryOp::cosh}, {"IsNaN", UnaryOp::is_nan}, {"IsInf", UnaryOp::is_inf},
    {"IsInf", UnaryOp::is_pos_inf}, {"IsInf", UnaryOp::is_neg_inf}, {"IsInf", UnaryOp::is_inf_none},
    {"Tan", UnaryOp::tan}, {"Asin", UnaryOp::asin}, {"Acos", UnaryOp::acos}, {"Atan", UnaryOp::atan},
    {"Asinh", UnaryOp::asinh}, {"Acosh", UnaryOp::acosh}, {"Atanh", UnaryOp::atanh}, {"Shrink", UnaryOp::shrink},
    {"BitwiseNot", UnaryOp::bitwise_not},
}};
// clang-format on

constexpr std::array<const char*, 23> kBinaryNames{
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Mod", "PRelu", "Equal", "Less", "LessOrEqual",
    "Greater", "GreaterOrEqual", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitShift",
    "BitShift"};

void check_io(std::string_view op, std::span<const Tensor> in, std::span<const Tensor> out, size_t n_in) {
  if (in.size() != n_in || out.size() != 1)
    invalid(op, "expects {} inputs and 1 output, got {} and {}", n_in, in.size(), out.size());
}

void check_tensor(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s, DType dt) {
  if (t.shape != s) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != dt) invalid(op, "{} has dtype {}, expected {}", arg, to_string(t.dtype), to_string(dt));
}

}  // namespace

std::string elementwise_options(DType t) {
  const KernelType& k = kernel_type("elementwise", t);
  return fmt::format("-DT_IN={} -DT_CALC={} -DT_UW={} -DIS_FLOAT={} -DIS_SIGNED={} -DSTORAGE={} -DUSE_FP64={}",
                     k.storage, k.calc, k.wrap, k.is_float, k.is_signed, k.storage_kind, int(t == DType::f64));
}

cl::Program elementwise_program(Context& ctx, int device, std::string_view op, DType t) {
  check_dtype_support(ctx.device(device), t, op);
  return ctx.program("elementwise.cl", elementwise_options(t), device);
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

bool is_class_test(UnaryOp op) {
  return op == UnaryOp::is_nan || (op >= UnaryOp::is_inf_none && op <= UnaryOp::is_inf);
}

DType Unary::output_dtype(const UnaryConfig& c) { return is_class_test(c.op) ? DType::boolean : c.dtype; }

std::string_view Unary::type() const {
  return cfg_.op == UnaryOp::activation ? to_string(cfg_.act.kind) : to_string(cfg_.op);
}

Shape Unary::validate(const UnaryConfig& c) {
  std::string_view name = c.op == UnaryOp::activation ? to_string(c.act.kind) : to_string(c.op);
  for (auto d : c.shape.dims)
    if (d < 0) invalid(name, "shape {} has a negative dimension", c.shape.str());
  const bool act = c.op == UnaryOp::activation;
  const Act k = c.act.kind;
  // Activations evaluated exactly in T_CALC; the others call the f32 activation code.
  const bool exact_act = act && (k == Act::none || k == Act::relu || k == Act::leaky_relu || k == Act::clip);
  bool ok;
  if (c.op >= UnaryOp::tan && c.op <= UnaryOp::shrink) ok = is_float_type(c.dtype);
  else if (c.op == UnaryOp::bitwise_not) ok = is_numeric(c.dtype) && !is_float_type(c.dtype);
  else if (c.dtype == DType::boolean) ok = c.op == UnaryOp::not_;
  else if (c.dtype == DType::f64) ok = c.op != UnaryOp::not_ && (!act || exact_act);  // no f32 rounding
  else if (is_float_type(c.dtype)) ok = c.op != UnaryOp::not_;
  else if (!kernel_type(c.dtype)) ok = false;
  else if (kernel_type(c.dtype)->is_signed)
    ok = c.op == UnaryOp::abs || c.op == UnaryOp::neg || c.op == UnaryOp::sign ||
         (act && (k == Act::none || k == Act::relu || k == Act::clip));
  else  // unsigned: no Neg
    ok = c.op == UnaryOp::abs || c.op == UnaryOp::sign || (act && (k == Act::none || k == Act::relu || k == Act::clip));
  if (!ok) {
    if (c.dtype == DType::f64 && act)
      invalid(name, "dtype f64 is not supported for this activation (f64 has Relu, LeakyRelu and Clip; the others "
                    "compute in f32)");
    invalid(name, "dtype {} is not supported for this op", to_string(c.dtype));
  }
  if (c.op == UnaryOp::activation && c.act.kind == Act::celu && c.act.alpha == 0.0f)
    invalid(name, "alpha must be non-zero, got 0");
  return c.shape;
}

std::unique_ptr<Unary> Unary::create(Context& ctx, int device, const UnaryConfig& cfg) {
  validate(cfg);
  std::unique_ptr<Unary> u(new Unary());
  u->cfg_ = cfg;
  u->kernel_ = make_kernel(elementwise_program(ctx, device, u->type(), cfg.dtype),
                           is_class_test(cfg.op) ? "unary_test" : "unary");
  return u;
}

void Unary::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  check_io(type(), in, out, 1);
  check_tensor(type(), "input x", in[0], cfg_.shape, cfg_.dtype);
  check_tensor(type(), "output y", out[0], cfg_.shape, output_dtype(cfg_));
  const int64_t n = cfg_.shape.numel();
  if (n == 0) return;
  if (is_class_test(cfg_.op)) {
    std::lock_guard lock(launch_mutex_);
    set_args(kernel_, cl_int(cfg_.op), cl_long(n), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()));
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n)), cl::NullRange, "unary_test");
    return;
  }
  int op = cfg_.op == UnaryOp::activation ? int(cfg_.act.kind) : int(cfg_.op);
  std::lock_guard lock(launch_mutex_);
  const bool bounds = cfg_.op == UnaryOp::activation && cfg_.act.kind == Act::clip && cfg_.clip_bounds;
  const double a = bounds ? cfg_.clip_bounds->first : cfg_.act.alpha, b = bounds ? cfg_.clip_bounds->second : cfg_.act.beta;
  with_calc_scalars(cfg_.dtype, a, b, [&](auto ta, auto tb) {
    set_args(kernel_, cl_int(op), ta, tb, cl_long(n), in[0].buffer, cl_long(in[0].offset_elems()), out[0].buffer,
             cl_long(out[0].offset_elems()));
  });
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(n)), cl::NullRange, "unary");
}

// ---------------------------------------------------------------- Binary
std::string_view to_string(BinaryOp op) { return kBinaryNames[static_cast<int>(op)]; }

BinaryOp binary_op_from_onnx(std::string_view name, bool fmod) {
  if (name == "Mod") return fmod ? BinaryOp::fmod : BinaryOp::mod;
  if (name == "BitShift") fail("Binary: BitShift needs its direction: use BinaryOp::bit_shl or bit_shr");
  for (size_t i = 0; i < kBinaryNames.size(); ++i)
    if (name == kBinaryNames[i]) return static_cast<BinaryOp>(i);
  fail("Binary: unknown op '{}'", name);
}

bool is_comparison(BinaryOp op) { return op >= BinaryOp::equal && op <= BinaryOp::greater_equal; }
bool is_logical(BinaryOp op) { return op >= BinaryOp::and_ && op <= BinaryOp::xor_; }
bool is_bitwise(BinaryOp op) { return op >= BinaryOp::bit_and && op <= BinaryOp::bit_shr; }

DType Binary::output_dtype(const BinaryConfig& c) {
  return is_comparison(c.op) || is_logical(c.op) ? DType::boolean : c.dtype;
}

Shape Binary::validate(const BinaryConfig& c) {
  std::string_view name = to_string(c.op);
  if (is_logical(c.op)) {
    if (c.dtype != DType::boolean) invalid(name, "inputs must be bool, got {}", to_string(c.dtype));
  } else if (c.op == BinaryOp::bit_shl || c.op == BinaryOp::bit_shr) {
    if (!is_numeric(c.dtype) || is_float_type(c.dtype) || kernel_type(c.dtype)->is_signed)
      invalid(name, "dtype {} is not supported (expected an unsigned integer type: u8, u16, u32, u64)",
              to_string(c.dtype));
  } else if (is_bitwise(c.op)) {
    if (!is_numeric(c.dtype) || is_float_type(c.dtype))
      invalid(name, "dtype {} is not supported (expected an integer type: i8, i16, i32, i64, u8, u16, u32, u64)",
              to_string(c.dtype));
  } else if (c.op == BinaryOp::equal) {
    if (!kernel_type(c.dtype)) invalid(name, "dtype {} is not supported", to_string(c.dtype));
  } else if (!is_numeric(c.dtype)) {
    invalid(name, "dtype {} is not supported (expected a float or integer type: f32, f64, f16, bf16, i8, i16, i32, i64, "
                  "u8, u16, u32, u64)", to_string(c.dtype));
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
  b->kernel_ = make_kernel(elementwise_program(ctx, device, to_string(cfg.op), cfg.dtype),
                           output_dtype(cfg) == DType::boolean ? "compare" : "binary");
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
  if (!kernel_type(c.dtype)) invalid("Where", "dtype {} of X and Y is not supported", to_string(c.dtype));
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
  w->kernel_ = make_kernel(elementwise_program(ctx, device, "Where", cfg.dtype), "where_select");
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
// The kernel's DT_* codes are DType's values (kernels/common.cl lists them in the same order).
static_assert(int(DType::f64) == 11 && int(DType::f8e8m0) == 17 && int(DType::u2) == 22 && kDTypeCount == 23,
              "DType changed: update the DT_* codes of kernels/common.cl");

Shape Cast::validate(const CastConfig& c) {
  for (auto [t, what] : {std::pair{c.from, "input dtype"}, std::pair{c.to, "attribute 'to'"}})
    if (int(t) >= kDTypeCount) invalid("Cast", "{} has no type code {}", what, int(t));
  return c.shape;
}

std::unique_ptr<Cast> Cast::create(Context& ctx, int device, const CastConfig& cfg) {
  validate(cfg);
  for (DType t : {cfg.from, cfg.to}) check_dtype_support(ctx.device(device), t, "Cast");
  std::unique_ptr<Cast> c(new Cast());
  c->cfg_ = cfg;
  // Shares the f32 build: the types are runtime arguments.
  c->kernel_ = make_kernel(ctx.program("elementwise.cl", elementwise_options(DType::f32), device), "cast_any");
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
