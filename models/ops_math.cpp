// ONNX math and bitwise ops on layers/elementwise.hpp that ops_elementwise.cpp does not register: the
// inverse and further trigonometry (Tan, Asin, Acos, Atan, Asinh, Acosh, Atanh) and Shrink on float
// types; BitwiseNot / And / Or / Xor on integer types and BitShift (direction LEFT / RIGHT) on unsigned
// ones, with numpy broadcasting; Det on f32 / f64. With every input known at load they fold on the host
// (math in double, rounded once to the element type; bitwise ops exact on the stored bits).
#include "layers/elementwise.hpp"
#include "layers/linalg.hpp"
#include "layers/strided.hpp"
#include "models/ops_cnn_common.hpp"

#include <cmath>
#include <cstring>

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

// ---------------------------------------------------------------- host folds
// The stored integers, sign- or zero-extended to 64 bits (u64 keeps its bits).
std::vector<int64_t> stored_ints(const HostTensor& t) {
  std::vector<int64_t> v(size_t(t.numel()));
  const auto* p = static_cast<const unsigned char*>(t.data());
  const size_t es = dtype_size(t.dtype());
  const bool sign =
      t.dtype() == DType::i8 || t.dtype() == DType::i16 || t.dtype() == DType::i32 || t.dtype() == DType::i64;
  for (size_t i = 0; i < v.size(); ++i) {
    uint64_t u = 0;
    std::memcpy(&u, p + i * es, es);  // little-endian hosts, as the rest of cldl assumes
    if (sign && es < 8 && (u >> (8 * es - 1)) & 1) u |= ~uint64_t(0) << (8 * es);
    v[i] = int64_t(u);
  }
  return v;
}

// Integers stored in `t`'s type: the low bytes (integer targets wrap).
HostTensor stored_as(DType t, Shape s, const std::vector<int64_t>& v) {
  HostTensor h(t, std::move(s));
  const size_t es = dtype_size(t);
  auto* p = static_cast<unsigned char*>(h.data());
  for (size_t i = 0; i < v.size(); ++i) std::memcpy(p + i * es, &v[i], es);
  return h;
}

std::vector<HostTensor> fold_math_unary(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "X");
  auto cfg = checked(c, [&] { return math_unary_config(c.node, x.dtype(), x.shape()); });
  checked(c, [&] { return Unary::validate(cfg); });
  if (cfg.op == UnaryOp::bitwise_not) {
    auto v = stored_ints(x);
    for (auto& e : v) e = ~e;
    return {stored_as(x.dtype(), x.shape(), v)};
  }
  auto v = to_doubles(x);
  const double a = cfg.act.alpha, b = cfg.act.beta;
  for (auto& e : v) {
    switch (cfg.op) {
      case UnaryOp::tan:
        e = std::tan(e);
        break;
      case UnaryOp::asin:
        e = std::asin(e);
        break;
      case UnaryOp::acos:
        e = std::acos(e);
        break;
      case UnaryOp::atan:
        e = std::atan(e);
        break;
      case UnaryOp::asinh:
        e = std::asinh(e);
        break;
      case UnaryOp::acosh:
        e = std::acosh(e);
        break;
      case UnaryOp::atanh:
        e = std::atanh(e);
        break;
      default:
        e = e < -a ? e + b : e > a ? e - b : 0.0;
        break;  // Shrink
    }
  }
  return {from_doubles(x.dtype(), x.shape(), v)};
}

std::vector<HostTensor> fold_bitwise(const InferCtx& c) {
  const HostTensor &a = c.constant(0, "A"), &b = c.constant(1, "B");
  if (a.dtype() != b.dtype()) c.error("input A is {}, input B is {}", to_string(a.dtype()), to_string(b.dtype()));
  auto cfg = bitwise_config(c.node, a.dtype(), a.shape(), b.shape());
  const Shape out = checked(c, [&] { return Binary::validate(cfg); });
  check_host_fold_size(c, out.dims);
  const auto va = stored_ints(a), vb = stored_ints(b);
  const auto sa = broadcast_strides(a.shape(), out), sb = broadcast_strides(b.shape(), out);
  const uint64_t bits = 8 * dtype_size(a.dtype());
  std::vector<int64_t> r(size_t(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t ia = 0, ib = 0, rem = i;
    for (size_t d = out.rank(); d-- > 0;) {
      const int64_t k = rem % out[d];
      rem /= out[d];
      ia += k * sa[d], ib += k * sb[d];
    }
    const uint64_t x = uint64_t(va[size_t(ia)]), y = uint64_t(vb[size_t(ib)]);
    uint64_t z;
    switch (cfg.op) {
      case BinaryOp::bit_and:
        z = x & y;
        break;
      case BinaryOp::bit_or:
        z = x | y;
        break;
      case BinaryOp::bit_xor:
        z = x ^ y;
        break;
      case BinaryOp::bit_shl:
        z = y >= bits ? 0 : x << y;
        break;
      default:
        z = y >= bits ? 0 : x >> y;
        break;  // unsigned: the stored value is zero-extended
    }
    r[size_t(i)] = int64_t(z);
  }
  return {stored_as(a.dtype(), out, r)};
}

std::vector<HostTensor> fold_det(const InferCtx& c) {
  const HostTensor& x = c.constant(0, "X");
  const Shape out = checked(c, [&] { return Det::validate({x.shape(), x.dtype()}); });
  const int64_t n = x.shape()[x.shape().rank() - 1];
  auto v = to_doubles(x);
  std::vector<double> r(size_t(out.numel()));
  for (int64_t m = 0; m < out.numel(); ++m) {  // elimination with partial pivoting, as the kernel does
    double* a = v.data() + m * n * n;
    double d = 1.0;
    for (int64_t col = 0; col < n && d != 0.0; ++col) {
      int64_t p = col;
      for (int64_t i = col + 1; i < n; ++i)
        if (std::fabs(a[i * n + col]) > std::fabs(a[p * n + col])) p = i;
      if (a[p * n + col] == 0.0) {
        d = 0.0;
        break;
      }
      if (p != col) {
        for (int64_t j = col; j < n; ++j) std::swap(a[p * n + j], a[col * n + j]);
        d = -d;
      }
      d *= a[col * n + col];
      for (int64_t i = col + 1; i < n; ++i) {
        const double f = a[i * n + col] / a[col * n + col];
        for (int64_t j = col + 1; j < n; ++j) a[i * n + j] -= f * a[col * n + j];
      }
    }
    r[size_t(m)] = d;
  }
  return {from_doubles(x.dtype(), out, r)};
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

const FolderRegistration kMathFolders{
    {"Tan", fold_math_unary},     {"Asin", fold_math_unary},   {"Acos", fold_math_unary},
    {"Atan", fold_math_unary},    {"Asinh", fold_math_unary},  {"Acosh", fold_math_unary},
    {"Atanh", fold_math_unary},   {"Shrink", fold_math_unary}, {"BitwiseNot", fold_math_unary},
    {"BitwiseAnd", fold_bitwise}, {"BitwiseOr", fold_bitwise}, {"BitwiseXor", fold_bitwise},
    {"BitShift", fold_bitwise},   {"Det", fold_det},
};

}  // namespace
}  // namespace cldl::graph
