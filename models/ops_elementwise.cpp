// ONNX element-wise ops mapped onto layers/elementwise.hpp: unary math (Sinh / Cosh too, and the bool
// IsNaN / IsInf class tests) and every activation (ONNX
// attributes as alpha / beta), Clip (min / max: load-time constant inputs, attributes before opset 11),
// binary arithmetic, comparisons and logic with numpy broadcasting (before opset 7: attributes broadcast
// and axis, B onto A), PRelu, Where, Cast / CastLike, and
// the variadic Sum / Mean / Max / Min (Expand of the first input into the output, then one in-place
// Binary per further input; Mean scales by 1/n with the affine activation). Every float and integer
// dtype runs natively (layers/elementwise.hpp); Pow with mixed dtypes runs in f32 between casts.
#include <set>

#include "layers/data.hpp"
#include "layers/elementwise.hpp"
#include "models/onnx_import.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {

std::optional<Shape> legacy_broadcast(const Node& n, int64_t opset, const Shape& a, const Shape& b) {
  static const std::set<std::string> kLegacy = {"Add", "Sub", "Mul",   "Div",  "Pow",    "And",
                                                "Or",  "Xor", "Equal", "Less", "Greater"};
  if (opset >= 7) return std::nullopt;
  if (n.op_type == "PRelu") {
    if (b == a || b.numel() == 1) return b.numel() == 1 ? Shape{} : b;
    if (b.rank() == 1 && a.rank() >= 2 && b[0] == a[1]) {
      Shape s(std::vector<int64_t>(a.rank() - 1, 1));
      s[0] = b[0];
      return s;
    }
    fail("{}: slope {} is neither one value, the shape of X {} nor one value per channel (X's dim 1; opset {})",
         n.describe(), b.str(), a.str(), opset);
  }
  if (!kLegacy.count(n.op_type)) return std::nullopt;
  if (n.attr_i("broadcast", 0) == 0) {
    if (a != b)
      fail(
          "{}: shapes {} and {} differ and attribute broadcast = 0 (before opset 7, B broadcasts only with "
          "broadcast = 1)",
          n.describe(), a.str(), b.str());
    return b;
  }
  if (b.numel() == 1) return Shape{};
  const int64_t ra = int64_t(a.rank()), rb = int64_t(b.rank());
  const int64_t axis = n.has("axis") ? n.attr_i("axis", 0) : ra - rb;
  if (axis < 0 || axis + rb > ra)
    fail("{}: B {} does not fit into A {} from axis {} (opset {} broadcasting)", n.describe(), b.str(), a.str(), axis,
         opset);
  for (int64_t i = 0; i < rb; ++i)
    if (b[size_t(i)] != 1 && b[size_t(i)] != a[size_t(axis + i)])
      fail("{}: B {} does not match A {} from axis {}: dim {} is {}, A has {} (opset {} broadcasting)", n.describe(),
           b.str(), a.str(), axis, i, b[size_t(i)], a[size_t(axis + i)], opset);
  Shape s = b;
  s.dims.resize(size_t(ra - axis), 1);
  return s;
}


// ---------------------------------------------------------------- unary
namespace {
// Activation with the node's ONNX attributes (names per op; defaults from activation_from_onnx).
Activation node_activation(const Node& n) {
  const std::string& t = n.op_type;
  if (t == "Swish") {  // x * sigmoid(alpha * x): the SiLU activation when alpha = 1
    float alpha = n.attr_f("alpha", 1.0f);
    if (alpha != 1.0f) fail("{}: alpha = {} is not supported (Swish runs as SiLU, alpha = 1)", n.describe(), alpha);
    return activation_from_onnx("Silu");
  }
  if (t == "Gelu") return activation_from_onnx(n.attr_s("approximate", "none") == "tanh" ? "GeluTanh" : "Gelu");
  Activation a = activation_from_onnx(t);
  if (t == "LeakyRelu" || t == "Elu" || t == "ThresholdedRelu" || t == "Celu") a.alpha = n.attr_f("alpha", a.alpha);
  if (t == "Selu") {
    a.alpha = n.attr_f("alpha", a.alpha);
    a.beta = n.attr_f("gamma", a.beta);
  }
  if (t == "HardSigmoid") {
    a.alpha = n.attr_f("alpha", a.alpha);
    a.beta = n.attr_f("beta", a.beta);
  }
  return a;
}

}  // namespace

BinaryOp binary_of(const Node& n) {
  const std::string& t = n.op_type;
  if (t == "Sum" || t == "Mean") return BinaryOp::add;
  if (t == "LessOrEqual") return BinaryOp::less_equal;
  if (t == "GreaterOrEqual") return BinaryOp::greater_equal;
  return binary_op_from_onnx(t, n.attr_i("fmod", 0) != 0);
}

bool is_activation(const std::string& t) {
  static const std::set<std::string> k = {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Elu", "Selu", "Gelu",
                                          "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish",
                                          "ThresholdedRelu", "Celu", "Clip", "Swish"};
  return k.count(t) != 0;
}

UnaryConfig unary_config(const Node& n, const std::vector<const HostTensor*>& value, DType dt, Shape s) {
  UnaryConfig u;
  u.dtype = dt;
  u.shape = std::move(s);
  if (n.op_type == "Clip") {
    u.act = activation_from_onnx("Clip");
    u.act.alpha = n.attr_f("min", u.act.alpha);  // Clip-6 .. 10: attributes; from 11: inputs
    u.act.beta = n.attr_f("max", u.act.beta);
    double lo = u.act.alpha, hi = u.act.beta;
    if (value.size() > 1 && value[1]) lo = to_doubles(*value[1]).at(0);
    if (value.size() > 2 && value[2]) hi = to_doubles(*value[2]).at(0);
    u.act.alpha = float(lo);
    u.act.beta = float(hi);
    u.clip_bounds = std::pair{lo, hi};
  } else if (is_activation(n.op_type)) {
    u.act = node_activation(n);
  } else {
    u.op = unary_op_from_onnx(n.op_type);
    if (n.op_type == "IsInf")  // which infinities count: U_ISINF_NONE + 1 positive + 2 negative
      u.op = UnaryOp(int(UnaryOp::is_inf_none) + (n.attr_i("detect_positive", 1) != 0 ? 1 : 0) +
                     (n.attr_i("detect_negative", 1) != 0 ? 2 : 0));
  }
  return u;
}

namespace {

void infer_unary(InferCtx& c) {
  if (c.node.op_type == "Clip")  // optional bounds: when given they must be known at load
    for (size_t i = 1; i < 3; ++i)
      if (c.has_input(i)) c.constant(i, i == 1 ? "min" : "max");
  auto cfg = checked(c, [&] { return unary_config(c.node, c.value, c.input(0).dtype, c.shape(0)); });
  checked(c, [&] { return Unary::validate(cfg); });
  c.set(0, Unary::output_dtype(cfg), cfg.shape);
}

std::unique_ptr<NodeKernel> lower_unary(LowerCtx& c) {
  auto cfg = unary_config(c.node, c.value, c.in[0].dtype, c.in[0].shape.to_shape());
  return wrap(Unary::create(c.ctx, c.device, cfg), c, {0});
}

// ---------------------------------------------------------------- binary and variadic

// Pow with a base and an exponent of different dtypes (ONNX allows it; the result has the base's dtype)
// has no single kernel type: it is computed in f32 between casts; an integer result is cast back
// truncating, as ONNX does (see nudge).
bool pow_numeric(DType t) {
  return t == DType::f32 || t == DType::i32 || t == DType::i64 || t == DType::i8 || t == DType::i16 ||
         t == DType::u8 || t == DType::u16 || t == DType::u32 || t == DType::u64;
}

bool needs_cast_binary(const Node& n, DType a, DType b) { return n.op_type == "Pow" && a != b; }

void infer_cast_binary(InferCtx& c) {
  DType a = c.input(0).dtype, e = c.input(1).dtype;
  BinaryOp op = binary_of(c.node);
  const DType compute = DType::f32;
  if (!pow_numeric(a) || !pow_numeric(e) || (a != DType::f32 && e != DType::f32))
    c.error("unsupported: Pow of {} by {} (mixed dtypes need an f32 base or exponent)", to_string(a), to_string(e));
  for (DType t : {a, e})
    if (t != compute) checked(c, [&] { return Cast::validate({t, compute, c.shape(0)}); });
  BinaryConfig b{op, compute, c.shape(0), c.shape(1)};
  Shape out = checked(c, [&] { return Binary::validate(b); });
  c.set(0, is_comparison(op) ? DType::boolean : a, out);
}

class CastBinaryKernel : public NodeKernel {
 public:
  std::unique_ptr<Cast> cast_in[2];  // null: the input is used as it is
  std::unique_ptr<Binary> op;
  // Before cast_out: scales by 1 + 2^-18 so that truncation does not turn an exact power that the
  // device's pow (16 ulp allowed) returns as 31.999998 into 31. Pow only.
  std::unique_ptr<Unary> nudge;
  std::unique_ptr<Cast> cast_out;
  Shape shape[2], out_shape;
  DType compute = DType::f32;
  Context* ctx = nullptr;
  int device = 0;
  std::string algo;
  std::string algorithm() const override { return algo; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    auto& t = scratch();
    Tensor ab[2] = {in[0], in[1]};
    for (int i = 0; i < 2; ++i)
      if (cast_in[i]) {
        Tensor ci[] = {in[size_t(i)]}, co[] = {t[size_t(i)]};
        cast_in[i]->enqueue(ci, co, nullptr, ec);
        ab[i] = t[size_t(i)];
      }
    if (!cast_out) return op->enqueue(ab, out, nullptr, ec);
    Tensor r[] = {t[2]};
    op->enqueue(ab, r, nullptr, ec);
    if (nudge) nudge->enqueue(r, r, nullptr, ec);
    cast_out->enqueue(r, out, nullptr, ec);
  }

 private:
  // Per-thread temporaries (same reasoning as LayerKernel's workspace).
  std::vector<Tensor>& scratch() {
    std::lock_guard lock(mutex_);
    auto it = tmp_.find(std::this_thread::get_id());
    if (it == tmp_.end()) {
      std::vector<Tensor> v(3);
      for (int i = 0; i < 2; ++i)
        if (cast_in[i]) v[size_t(i)] = ctx->alloc(shape[i], compute, device);
      if (cast_out) v[2] = ctx->alloc(out_shape, compute, device);
      it = tmp_.emplace(std::this_thread::get_id(), std::move(v)).first;
    }
    return it->second;
  }
  std::mutex mutex_;
  std::map<std::thread::id, std::vector<Tensor>> tmp_;
};

std::unique_ptr<NodeKernel> lower_cast_binary(LowerCtx& c) {
  auto k = std::make_unique<CastBinaryKernel>();
  k->ctx = &c.ctx;
  k->device = c.device;
  BinaryOp op = binary_of(c.node);
  k->compute = DType::f32;
  k->out_shape = c.out[0].shape.to_shape();
  for (int i = 0; i < 2; ++i) {
    k->shape[i] = c.in[size_t(i)].shape.to_shape();
    if (c.in[size_t(i)].dtype != k->compute)
      k->cast_in[i] = Cast::create(c.ctx, c.device, CastConfig{c.in[size_t(i)].dtype, k->compute, k->shape[i]});
  }
  k->op = Binary::create(c.ctx, c.device, BinaryConfig{op, k->compute, k->shape[0], k->shape[1]});
  if (c.out[0].dtype != k->compute && c.out[0].dtype != DType::boolean) {
    k->cast_out = Cast::create(c.ctx, c.device, CastConfig{k->compute, c.out[0].dtype, k->out_shape});
    if (op == BinaryOp::pow) {
      UnaryConfig r;
      r.act = Activation(Act::affine, 1.0f + 1.0f / 262144.0f, 0.0f);
      r.shape = k->out_shape;
      k->nudge = Unary::create(c.ctx, c.device, r);
    }
  }
  k->algo = fmt::format("{} in {} between casts, {}", to_string(op), to_string(k->compute), k->op->algorithm());
  return k;
}

void infer_binary(InferCtx& c) {
  size_t n = c.in.size();
  if (n == 0) c.error("needs at least one input");
  BinaryConfig b;
  b.op = binary_of(c.node);
  b.dtype = c.input(0).dtype;
  Shape s = c.shape(0);
  if (n == 2 && needs_cast_binary(c.node, b.dtype, c.input(1).dtype)) return infer_cast_binary(c);
  for (size_t i = 1; i < n; ++i) {
    if (c.input(i).dtype != b.dtype)
      c.error("input '{}' is {}, input 0 is {}", c.input(i).name, to_string(c.input(i).dtype), to_string(b.dtype));
    b.a = s;
    b.b = c.shape(i);
    if (n == 2)
      if (auto lb = checked(c, [&] { return legacy_broadcast(c.node, c.opset, b.a, b.b); })) b.b = *lb;
    s = checked(c, [&] { return Binary::validate(b); });
  }
  if (n == 1) {  // single-input Sum/Max/...: a copy, validated as op(x, x)
    b.a = b.b = s;
    checked(c, [&] { return Binary::validate(b); });
  }
  c.set(0, Binary::output_dtype(b), s);
}

class VariadicKernel : public NodeKernel {
 public:
  std::unique_ptr<Expand> expand;  // first input into the output (when it needs broadcasting / n == 1)
  std::vector<std::unique_ptr<Binary>> steps;
  std::unique_ptr<Unary> scale;  // Mean
  bool first_pair = false;       // steps[0] reads inputs 0 and 1 (no expand)
  std::string algo;
  std::string algorithm() const override { return algo; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    const Tensor& y = out[0];
    size_t next = 1;
    if (expand) {
      Tensor x[] = {in[0]};
      expand->enqueue(x, out, nullptr, ec);
    }
    for (size_t s = 0; s < steps.size(); ++s) {
      Tensor ab[2];
      if (s == 0 && first_pair) {
        ab[0] = in[0];
        ab[1] = in[1];
        next = 2;
      } else {
        ab[0] = y;
        ab[1] = in[next++];
      }
      steps[s]->enqueue(ab, out, nullptr, ec);
    }
    if (scale) {
      Tensor x[] = {y};
      scale->enqueue(x, out, nullptr, ec);
    }
  }
};

std::unique_ptr<NodeKernel> lower_binary(LowerCtx& c) {
  size_t n = c.in.size();
  Shape ys = c.out[0].shape.to_shape();
  DType dt = c.in[0].dtype;
  BinaryOp op = binary_of(c.node);
  if (n == 2 && needs_cast_binary(c.node, dt, c.in[1].dtype)) return lower_cast_binary(c);
  if (n == 2 && c.node.op_type != "Mean") {
    BinaryConfig b{op, dt, c.in[0].shape.to_shape(), c.in[1].shape.to_shape()};
    auto lb = legacy_broadcast(c.node, c.node.opset, b.a, b.b);
    if (!lb || *lb == b.b) return wrap(Binary::create(c.ctx, c.device, b), c);
    b.b = *lb;
    return std::make_unique<ReshapedKernel>(
        wrap(Binary::create(c.ctx, c.device, b), c), std::vector<std::optional<Shape>>{std::nullopt, b.b},
        std::vector<std::optional<Shape>>{},
        fmt::format("B read as {} (opset {} broadcasting)", b.b.str(), c.node.opset));
  }
  auto k = std::make_unique<VariadicKernel>();
  Shape s0 = c.in[0].shape.to_shape();
  BinaryConfig first{op, dt, s0, n > 1 ? c.in[1].shape.to_shape() : s0};
  if (n > 1 && Binary::validate(first) == ys) {
    k->first_pair = true;
    k->steps.push_back(Binary::create(c.ctx, c.device, first));
  } else {
    k->expand = Expand::create(c.ctx, c.device, ExpandConfig{s0, dt, ys.dims});
  }
  for (size_t i = k->first_pair ? 2 : 1; i < n; ++i)
    k->steps.push_back(Binary::create(c.ctx, c.device, BinaryConfig{op, dt, ys, c.in[i].shape.to_shape()}));
  if (c.node.op_type == "Mean") {
    UnaryConfig u;
    u.act = Activation(Act::affine, 1.0f / float(n), 0.0f);
    u.dtype = dt;
    u.shape = ys;
    k->scale = Unary::create(c.ctx, c.device, u);
  }
  k->algo = fmt::format("{}{} in-place {}{}", k->expand ? "expand + " : "", k->steps.size(), to_string(op),
                        k->scale ? " + scale 1/n" : "");
  return k;
}

// ---------------------------------------------------------------- Where, Cast
void infer_where(InferCtx& c) {
  if (c.input(0).dtype != DType::boolean) c.error("condition must be bool, got {}", to_string(c.input(0).dtype));
  if (c.input(1).dtype != c.input(2).dtype)
    c.error("X is {} and Y is {}", to_string(c.input(1).dtype), to_string(c.input(2).dtype));
  WhereConfig w{c.input(1).dtype, c.shape(0), c.shape(1), c.shape(2)};
  c.set(0, w.dtype, checked(c, [&] { return Where::validate(w); }));
}

std::unique_ptr<NodeKernel> lower_where(LowerCtx& c) {
  WhereConfig w{c.in[1].dtype, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(), c.in[2].shape.to_shape()};
  return wrap(Where::create(c.ctx, c.device, w), c);
}

DType cast_target(const InferCtx* ic, const Node& n, DType like) {
  if (n.op_type == "CastLike") return like;
  try {
    return dtype_from_onnx(int(n.attr_i("to", 1)), "Cast 'to'");
  } catch (const Error& e) {
    if (ic) ic->error("{}", e.what());
    throw;
  }
}

// The saturate (float8 targets) and round_mode (e8m0 targets) attributes of Cast / CastLike.
void cast_attributes(const Node& n, CastConfig& k) {
  k.saturate = n.attr_i("saturate", 1) != 0;
  k.rounding = parse_e8m0_rounding(n.attr_s("round_mode", "up"));
}

void infer_cast(InferCtx& c) {
  CastConfig k{c.input(0).dtype, cast_target(&c, c.node, c.has_input(1) ? c.input(1).dtype : DType::f32), c.shape(0)};
  checked(c, [&] { cast_attributes(c.node, k); return 0; });
  c.set(0, k.to, checked(c, [&] { return Cast::validate(k); }));
}

std::unique_ptr<NodeKernel> lower_cast(LowerCtx& c) {
  CastConfig k{c.in[0].dtype, c.out[0].dtype, c.in[0].shape.to_shape()};
  cast_attributes(c.node, k);
  const auto& dev = c.ctx.device(c.device).info;
  for (DType t : {k.from, k.to})
    if (!supports_dtype(dev, t))
      c.error("casting {} to {} needs double precision (cl_khr_fp64); device '{}' has none", to_string(k.from),
              to_string(k.to), dev.name);
  return wrap(Cast::create(c.ctx, c.device, k), c, {0});
}

OpDef unary(const char* type, int64_t since) {
  return {.type = type, .since = since, .family = "elementwise", .infer = infer_unary, .lower = lower_unary};
}
OpDef binary(const char* type, int64_t since) {
  return {.type = type, .since = since, .family = "elementwise", .infer = infer_binary, .lower = lower_binary};
}

// clang-format off
const OpRegistration kElementwiseOps{
    unary("Relu", 6), unary("LeakyRelu", 6), unary("Sigmoid", 6), unary("Tanh", 6), unary("Elu", 6),
    unary("Selu", 6), unary("Gelu", 20), unary("HardSigmoid", 6), unary("HardSwish", 14), unary("Softplus", 1),
    unary("Softsign", 1), unary("Mish", 18), unary("ThresholdedRelu", 10), unary("Celu", 12), unary("Swish", 24),
    {.type = "Clip", .since = 6, .family = "elementwise", .const_inputs = {1, 2}, .infer = infer_unary,
     .lower = lower_unary},
    unary("Abs", 6), unary("Neg", 6), unary("Exp", 6), unary("Log", 6), unary("Sqrt", 6),
    unary("Reciprocal", 6), unary("Floor", 6), unary("Ceil", 6), unary("Round", 11), unary("Sign", 9),
    unary("Erf", 9), unary("Sin", 7), unary("Cos", 7), unary("Not", 1),
    unary("Sinh", 9), unary("Cosh", 9), unary("IsNaN", 9), unary("IsInf", 10),
    binary("Add", 6), binary("Sub", 6), binary("Mul", 6), binary("Div", 6), binary("Pow", 1),
    binary("Mod", 10), binary("PRelu", 6), binary("Equal", 1), binary("Less", 1), binary("LessOrEqual", 12),
    binary("Greater", 1), binary("GreaterOrEqual", 12), binary("And", 1), binary("Or", 1), binary("Xor", 1),
    binary("Max", 6), binary("Min", 6), binary("Sum", 6), binary("Mean", 6),
    {.type = "Where", .since = 9, .family = "elementwise", .infer = infer_where, .lower = lower_where},
    {.type = "Cast", .since = 6, .family = "elementwise", .infer = infer_cast, .lower = lower_cast},
    {.type = "CastLike", .since = 15, .family = "elementwise", .infer = infer_cast, .lower = lower_cast},
};
// clang-format on

}  // namespace
}  // namespace cldl::graph
