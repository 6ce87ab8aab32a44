// Element-wise ops in ONNX semantics: Unary (every Activation plus Abs, Neg, Exp, ... Not), Binary with
// numpy broadcasting (arithmetic, comparisons -> bool, logic on bool, PRelu with a broadcast slope),
// Where (three-way broadcast) and Cast. Kernels: kernels/elementwise.cl.
#pragma once
#include <memory>
#include <optional>
#include <string>

#include "layers/activation.hpp"
#include "layers/op.hpp"
#include "layers/strided.hpp"
#include "runtime/minifloat.hpp"

namespace cldl {

// Values 0..31 are reserved for activations (Act); the rest match U_* in kernels/elementwise.cl.
enum class UnaryOp : int {
  // clang-format off
  activation = -1, abs = 32, neg, exp, log, sqrt, reciprocal, floor, ceil, round, sign, erf, sin, cos, not_,
  sinh, cosh,
  // Float class tests with a bool output: IsNaN, and IsInf by which infinities it detects.
  is_nan = 48, is_inf_none = 52, is_pos_inf, is_neg_inf, is_inf,
  // Inverse and further trigonometry (float types), Shrink (act.alpha = lambd, act.beta = bias; float
  // types) and BitwiseNot (integer types).
  tan = 56, asin, acos, atan, asinh, acosh, atanh, shrink, bitwise_not,
  // clang-format on
};
bool is_class_test(UnaryOp op);  // IsNaN / IsInf: bool output
std::string_view to_string(UnaryOp op);
UnaryOp unary_op_from_onnx(std::string_view name);  // "Abs", "Neg", ... "Not"; throws on unknown

struct UnaryConfig {
  UnaryOp op = UnaryOp::activation;
  Activation act{};  // when op == activation
  DType dtype = DType::f32;
  Shape shape;
  // Clip's min / max at full precision for f64 and integer types (act.alpha / beta are f32); when unset,
  // act.alpha / beta. Integer bounds are clamped to the type's range.
  std::optional<std::pair<double, double>> clip_bounds = std::nullopt;
};

// Input x, output y (same shape and dtype; bool for IsNaN / IsInf). f32, f16 and bf16 (stored as such,
// computed in f32) for every op but Not; f64 for the math ops, Relu, LeakyRelu and Clip; signed
// integers for Abs, Neg, Sign, Relu, Clip and Identity, unsigned ones the same but Neg; bool for Not.
class Unary : public Op {
 public:
  static Shape validate(const UnaryConfig& cfg);
  static DType output_dtype(const UnaryConfig& cfg);
  static std::unique_ptr<Unary> create(Context& ctx, int device, const UnaryConfig& cfg);
  std::string_view type() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  UnaryConfig cfg_;
  cl::Kernel kernel_;
};

// Values match B_* in kernels/elementwise.cl. mod = ONNX Mod fmod=0 (sign of the divisor), fmod = Mod
// fmod=1 (sign of the dividend).
enum class BinaryOp : int {
  add = 0, sub, mul, div, pow, max, min, mod, fmod, prelu, equal, less, less_equal, greater, greater_equal,
  and_, or_, xor_,
  // Bitwise ops on integer types (bit_shl / bit_shr: BitShift, unsigned types; a shift by the bit width
  // or more gives 0).
  bit_and, bit_or, bit_xor, bit_shl, bit_shr,
};
std::string_view to_string(BinaryOp op);
BinaryOp binary_op_from_onnx(std::string_view name, bool fmod = false);  // "Add", "Mod", "PRelu", ...
bool is_comparison(BinaryOp op);
bool is_logical(BinaryOp op);  // And / Or / Xor on bool
bool is_bitwise(BinaryOp op);  // BitwiseAnd / Or / Xor, BitShift on integers

struct BinaryConfig {
  BinaryOp op = BinaryOp::add;
  DType dtype = DType::f32;  // of both inputs
  Shape a, b;
};

// Inputs a, b (numpy broadcasting); output c of the broadcast shape; dtype bool for comparisons and
// logic, else the input dtype. Arithmetic, Max / Min and ordering on every float (f32, f64, f16 and bf16
// computed in f32) and integer type (i8 ... u64: +, -, * wrap, Div truncates, Mod follows the divisor's
// sign, Pow is exact integer power); Equal also on bool; And / Or / Xor on bool only; BitwiseAnd / Or / Xor
// on integer types, BitShift on unsigned ones. f64 needs a device with cl_khr_fp64.
class Binary : public Op {
 public:
  static Shape validate(const BinaryConfig& cfg);
  static DType output_dtype(const BinaryConfig& cfg);
  static std::unique_ptr<Binary> create(Context& ctx, int device, const BinaryConfig& cfg);
  std::string_view type() const override { return to_string(cfg_.op); }
  std::string algorithm() const override { return fmt::format("strided, rank {} after collapsing", it_.rank); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  BinaryConfig cfg_;
  Shape out_;
  Iteration it_;
  size_t group_ = 1;  // work-group size along the innermost dim
  cl::Kernel kernel_;
};

struct WhereConfig {
  DType dtype = DType::f32;  // of x and y
  Shape cond, x, y;
};

// Inputs cond (bool), x, y; output of the three-way broadcast shape and x's dtype.
class Where : public Op {
 public:
  static Shape validate(const WhereConfig& cfg);
  static std::unique_ptr<Where> create(Context& ctx, int device, const WhereConfig& cfg);
  std::string_view type() const override { return "Where"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  WhereConfig cfg_;
  Iteration it_;
  size_t group_ = 1;  // work-group size along the innermost dim
  cl::Kernel kernel_;
};

struct CastConfig {
  DType from = DType::f32, to = DType::f32;
  Shape shape;
  bool saturate = true;                      // float8 targets: out of range gives the largest finite value
  E8M0Rounding rounding = E8M0Rounding::up;  // float8e8m0 targets
};

// Any pair of storage types with ONNX Cast semantics (runtime/minifloat.hpp has the float8 / float4 rules):
// float targets round to nearest even, float to integer truncates toward zero, integer targets wrap.
// f64 needs a device with cl_khr_fp64.
class Cast : public Op {
 public:
  static Shape validate(const CastConfig& cfg);
  static std::unique_ptr<Cast> create(Context& ctx, int device, const CastConfig& cfg);
  std::string_view type() const override { return "Cast"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  CastConfig cfg_;
  cl::Kernel kernel_;
};

// Build options of elementwise.cl for an element type (one build per type serves every op on it).
std::string elementwise_options(DType t);
// That build for `device`, after checking that the device can compute in `t` (errors name `op`).
cl::Program elementwise_program(Context& ctx, int device, std::string_view op, DType t);

}  // namespace cldl
