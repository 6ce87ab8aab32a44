// ONNX element-wise ops mapped onto layers/elementwise.hpp: unary math and every activation (ONNX
// attributes as alpha / beta), Clip (min / max inputs must be load-time constants), binary arithmetic,
// comparisons and logic with numpy broadcasting, PRelu, Where, Cast / CastLike, and the variadic
// Sum / Mean / Max / Min (Expand of the first input into the output, then one in-place Binary per
// further input; Mean scales by 1/n with the affine activation). Pow with mixed dtypes runs in f32.
#include <set>

#include "layers/data.hpp"
#include "layers/elementwise.hpp"
#include "models/onnx_import.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

// ---------------------------------------------------------------- unary
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
    if (value.size() > 1 && value[1]) u.act.alpha = float(to_doubles(*value[1]).at(0));
    if (value.size() > 2 && value[2]) u.act.beta = float(to_doubles(*value[2]).at(0));
  } else if (is_activation(n.op_type)) {
    u.act = node_activation(n);
  } else {
    u.op = unary_op_from_onnx(n.op_type);
  }
  return u;
}

void infer_unary(InferCtx& c) {
  if (c.node.op_type == "Clip")  // optional bounds: when given they must be known at load
    for (size_t i = 1; i < 3; ++i)
      if (c.has_input(i)) c.constant(i, i == 1 ? "min" : "max");
  auto cfg = checked(c, [&] { return unary_config(c.node, c.value, c.input(0).dtype, c.shape(0)); });
  checked(c, [&] { return Unary::validate(cfg); });
  c.set(0, cfg.dtype, cfg.shape);
}

std::unique_ptr<NodeKernel> lower_unary(LowerCtx& c) {
  auto cfg = unary_config(c.node, c.value, c.in[0].dtype, c.in[0].shape.to_shape());
  return wrap(Unary::create(c.ctx, c.device, cfg), c, {0});
}

// ---------------------------------------------------------------- binary and variadic
BinaryOp binary_of(const Node& n) {
  const std::string& t = n.op_type;
  if (t == "Sum" || t == "Mean") return BinaryOp::add;
  if (t == "LessOrEqual") return BinaryOp::less_equal;
  if (t == "GreaterOrEqual") return BinaryOp::greater_equal;
  return binary_op_from_onnx(t, n.attr_i("fmod", 0) != 0);
}

// Pow with a base and an exponent of different dtypes (ONNX allows it; the result has the base's dtype):
// computed in f32. An integer exponent is cast to f32; an integer base is cast to f32 and the result
// cast back (truncating, as ONNX does; see PowMixedKernel::nudge).
bool pow_numeric(DType t) { return t == DType::f32 || t == DType::i32 || t == DType::i64; }

void infer_pow_mixed(InferCtx& c) {
  DType a = c.input(0).dtype, e = c.input(1).dtype;
  if (!pow_numeric(a) || !pow_numeric(e) || (a != DType::f32 && e != DType::f32))
    c.error("unsupported: Pow of {} by {} (mixed dtypes need an f32 base or exponent)", to_string(a), to_string(e));
  BinaryConfig b{BinaryOp::pow, DType::f32, c.shape(0), c.shape(1)};
  c.set(0, a, checked(c, [&] { return Binary::validate(b); }));
}

class PowMixedKernel : public NodeKernel {
 public:
  std::unique_ptr<Cast> cast_in, cast_out;  // cast_in: the integer operand to f32; cast_out: f32 result to int
  int int_input = 1;
  std::unique_ptr<Binary> pow;
  // Before cast_out: scales by 1 + 2^-18 so that truncation (ONNX casts pow's result to the base type)
  // does not turn an exact power that the device's pow (16 ulp allowed) returns as 31.999998 into 31.
  std::unique_ptr<Unary> nudge;
  Shape int_shape, out_shape;
  Context* ctx = nullptr;
  int device = 0;
  std::string algorithm() const override { return cast_out ? "cast base to f32, f32 pow, cast back" : "cast exponent to f32, f32 pow"; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    auto& [tin, tout] = scratch();
    Tensor ci[] = {in[size_t(int_input)]}, co[] = {tin};
    cast_in->enqueue(ci, co, nullptr, ec);
    Tensor ab[2] = {in[0], in[1]};
    ab[int_input] = tin;
    if (cast_out) {
      Tensor po[] = {tout};
      pow->enqueue(ab, po, nullptr, ec);
      Tensor ri[] = {tout};
      nudge->enqueue(ri, po, nullptr, ec);
      cast_out->enqueue(ri, out, nullptr, ec);
    } else {
      pow->enqueue(ab, out, nullptr, ec);
    }
  }

 private:
  // Per-thread f32 temporaries (same reasoning as LayerKernel's workspace).
  std::pair<Tensor, Tensor>& scratch() {
    std::lock_guard lock(mutex_);
    auto it = tmp_.find(std::this_thread::get_id());
    if (it == tmp_.end()) {
      Tensor a = ctx->alloc(int_shape, DType::f32, device);
      Tensor b = cast_out ? ctx->alloc(out_shape, DType::f32, device) : Tensor{};
      it = tmp_.emplace(std::this_thread::get_id(), std::make_pair(a, b)).first;
    }
    return it->second;
  }
  std::mutex mutex_;
  std::map<std::thread::id, std::pair<Tensor, Tensor>> tmp_;
};

std::unique_ptr<NodeKernel> lower_pow_mixed(LowerCtx& c) {
  auto k = std::make_unique<PowMixedKernel>();
  k->ctx = &c.ctx;
  k->device = c.device;
  k->int_input = c.in[0].dtype == DType::f32 ? 1 : 0;
  k->int_shape = c.in[size_t(k->int_input)].shape.to_shape();
  k->out_shape = c.out[0].shape.to_shape();
  k->cast_in = Cast::create(c.ctx, c.device, CastConfig{c.in[size_t(k->int_input)].dtype, DType::f32, k->int_shape});
  k->pow = Binary::create(c.ctx, c.device, BinaryConfig{BinaryOp::pow, DType::f32, c.in[0].shape.to_shape(), c.in[1].shape.to_shape()});
  if (k->int_input == 0) {
    k->cast_out = Cast::create(c.ctx, c.device, CastConfig{DType::f32, c.out[0].dtype, k->out_shape});
    UnaryConfig r;
    r.act = Activation(Act::affine, 1.0f + 1.0f / 262144.0f, 0.0f);
    r.shape = k->out_shape;
    k->nudge = Unary::create(c.ctx, c.device, r);
  }
  return k;
}

void infer_binary(InferCtx& c) {
  size_t n = c.in.size();
  if (n == 0) c.error("needs at least one input");
  BinaryConfig b;
  b.op = binary_of(c.node);
  b.dtype = c.input(0).dtype;
  Shape s = c.shape(0);
  if (c.node.op_type == "Pow" && n == 2 && c.input(1).dtype != b.dtype) return infer_pow_mixed(c);
  for (size_t i = 1; i < n; ++i) {
    if (c.input(i).dtype != b.dtype)
      c.error("input '{}' is {}, input 0 is {}", c.input(i).name, to_string(c.input(i).dtype), to_string(b.dtype));
    b.a = s;
    b.b = c.shape(i);
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
  if (op == BinaryOp::pow && n == 2 && c.in[1].dtype != dt) return lower_pow_mixed(c);
  if (n == 2 && c.node.op_type != "Mean") {
    BinaryConfig b{op, dt, c.in[0].shape.to_shape(), c.in[1].shape.to_shape()};
    return wrap(Binary::create(c.ctx, c.device, b), c);
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

void infer_cast(InferCtx& c) {
  if (c.node.attr_i("saturate", 1) != 1) c.error("saturate = 0 (float8 targets) is not supported");
  CastConfig k{c.input(0).dtype, cast_target(&c, c.node, c.has_input(1) ? c.input(1).dtype : DType::f32), c.shape(0)};
  c.set(0, k.to, checked(c, [&] { return Cast::validate(k); }));
}

std::unique_ptr<NodeKernel> lower_cast(LowerCtx& c) {
  CastConfig k{c.in[0].dtype, c.out[0].dtype, c.in[0].shape.to_shape()};
  return wrap(Cast::create(c.ctx, c.device, k), c, {0});
}

OpDef unary(const char* type, int64_t since) {
  return {.type = type, .since = since, .family = "elementwise", .infer = infer_unary, .lower = lower_unary};
}
OpDef binary(const char* type, int64_t since) {
  return {.type = type, .since = since, .family = "elementwise", .infer = infer_binary, .lower = lower_binary};
}

const OpRegistration kElementwiseOps{
    unary("Relu", 14), unary("LeakyRelu", 16), unary("Sigmoid", 13), unary("Tanh", 13), unary("Elu", 6),
    unary("Selu", 6), unary("Gelu", 20), unary("HardSigmoid", 6), unary("HardSwish", 14), unary("Softplus", 1),
    unary("Softsign", 1), unary("Mish", 18), unary("ThresholdedRelu", 10), unary("Celu", 12), unary("Swish", 24),
    {.type = "Clip", .since = 13, .family = "elementwise", .const_inputs = {1, 2}, .infer = infer_unary,
     .lower = lower_unary},
    unary("Abs", 13), unary("Neg", 13), unary("Exp", 13), unary("Log", 13), unary("Sqrt", 13),
    unary("Reciprocal", 13), unary("Floor", 13), unary("Ceil", 13), unary("Round", 11), unary("Sign", 13),
    unary("Erf", 13), unary("Sin", 7), unary("Cos", 7), unary("Not", 1),
    binary("Add", 14), binary("Sub", 14), binary("Mul", 14), binary("Div", 14), binary("Pow", 15),
    binary("Mod", 13), binary("PRelu", 16), binary("Equal", 13), binary("Less", 13), binary("LessOrEqual", 16),
    binary("Greater", 13), binary("GreaterOrEqual", 16), binary("And", 7), binary("Or", 7), binary("Xor", 7),
    binary("Max", 13), binary("Min", 13), binary("Sum", 13), binary("Mean", 13),
    {.type = "Where", .since = 16, .family = "elementwise", .infer = infer_where, .lower = lower_where},
    {.type = "Cast", .since = 13, .family = "elementwise", .infer = infer_cast, .lower = lower_cast},
    {.type = "CastLike", .since = 15, .family = "elementwise", .infer = infer_cast, .lower = lower_cast},
};

}  // namespace
}  // namespace cldl::graph
