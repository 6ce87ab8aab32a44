// ONNX math and bitwise ops on layers/elementwise.hpp that ops_elementwise.cpp does not register: the
// inverse and further trigonometry (Tan, Asin, Acos, Atan, Asinh, Acosh, Atanh) and Shrink on float
// types; BitwiseNot / And / Or / Xor on integer types and BitShift (direction LEFT / RIGHT) on unsigned
// ones, with numpy broadcasting; Det on f32 / f64.
#include "layers/elementwise.hpp"
#include "layers/linalg.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

UnaryConfig math_unary_config(const Node& n, DType dt, Shape s) {
  UnaryConfig u;
  u.op = unary_op_from_onnx(n.op_type);
  u.dtype = dt;
  u.shape = std::move(s);
  if (u.op == UnaryOp::shrink) {
    u.act.alpha = n.attr_f("lambd", 0.5f);
    u.act.beta = n.attr_f("bias", 0.0f);
  }
  return u;
}

void infer_math_unary(InferCtx& c) {
  auto cfg = checked(c, [&] { return math_unary_config(c.node, c.input(0).dtype, c.shape(0)); });
  checked(c, [&] { return Unary::validate(cfg); });
  c.set(0, Unary::output_dtype(cfg), cfg.shape);
}

std::unique_ptr<NodeKernel> lower_math_unary(LowerCtx& c) {
  return wrap(Unary::create(c.ctx, c.device, math_unary_config(c.node, c.in[0].dtype, c.in[0].shape.to_shape())), c);
}

BinaryOp bitwise_op(const Node& n) {
  if (n.op_type != "BitShift") return binary_op_from_onnx(n.op_type);
  const std::string d = n.attr_s("direction", "");
  if (d == "LEFT") return BinaryOp::bit_shl;
  if (d == "RIGHT") return BinaryOp::bit_shr;
  fail("{}: attribute 'direction' must be \"LEFT\" or \"RIGHT\", got \"{}\"", n.describe(), d);
}

BinaryConfig bitwise_config(const Node& n, DType dt, Shape a, Shape b) { return {bitwise_op(n), dt, a, b}; }

void infer_bitwise(InferCtx& c) {
  if (c.input(0).dtype != c.input(1).dtype)
    c.error("input '{}' is {}, input '{}' is {}", c.input(0).name, to_string(c.input(0).dtype), c.input(1).name,
            to_string(c.input(1).dtype));
  auto cfg = bitwise_config(c.node, c.input(0).dtype, c.shape(0), c.shape(1));
  c.set(0, cfg.dtype, checked(c, [&] { return Binary::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_bitwise(LowerCtx& c) {
  auto cfg = bitwise_config(c.node, c.in[0].dtype, c.in[0].shape.to_shape(), c.in[1].shape.to_shape());
  return wrap(Binary::create(c.ctx, c.device, cfg), c);
}

void infer_det(InferCtx& c) {
  DetConfig d{c.shape(0), c.input(0).dtype};
  c.set(0, d.dtype, checked(c, [&] { return Det::validate(d); }));
}

std::unique_ptr<NodeKernel> lower_det(LowerCtx& c) {
  return wrap(Det::create(c.ctx, c.device, DetConfig{c.in[0].shape.to_shape(), c.in[0].dtype}), c);
}

OpDef math(const char* type, int64_t since) {
  return {.type = type, .since = since, .family = "elementwise", .infer = infer_math_unary, .lower = lower_math_unary};
}
OpDef bitwise(const char* type, int64_t since) {
  return {.type = type, .since = since, .family = "elementwise", .infer = infer_bitwise, .lower = lower_bitwise};
}

const OpRegistration kMathOps{
    math("Tan", 7),
    math("Asin", 7),
    math("Acos", 7),
    math("Atan", 7),
    math("Asinh", 9),
    math("Acosh", 9),
    math("Atanh", 9),
    math("Shrink", 9),
    math("BitwiseNot", 18),
    bitwise("BitShift", 11),
    bitwise("BitwiseAnd", 18),
    bitwise("BitwiseOr", 18),
    bitwise("BitwiseXor", 18),
    {.type = "Det", .since = 11, .family = "math", .infer = infer_det, .lower = lower_det},
};

}  // namespace
}  // namespace cldl::graph
