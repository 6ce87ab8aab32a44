// A fused element-wise expression: a group of unary / binary / comparison / Where / Cast steps over one
// output shape (inputs broadcast numpy-style) runs as one generated OpenCL kernel, so the intermediate
// values never touch memory. The graph pass that forms the groups is models/fusion_elementwise.cpp.
//
// The kernel is generated per expression and broadcast pattern (which collapsed dims each input walks);
// the sizes are kernel arguments, so a model planned for many shapes builds each program once. The math
// is elementwise.cl's (unary_apply / binary_apply / compare_apply with constant op codes, which the
// compiler reduces to the one case), so a fused step computes exactly what the single op computes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/op.hpp"

namespace cldl {

enum class FusedKind : int {
  unary = 0,     // float -> float: op = UnaryOp or Act code, alpha / beta its parameters
  binary = 1,    // float, float -> float: op = BinaryOp (arithmetic, Max / Min, Mod, PRelu)
  compare = 2,   // float, float -> bool (comparisons), or bool, bool -> bool (And / Or / Xor): op = BinaryOp
  where = 3,     // bool, float, float -> float
  to_float = 4,  // any -> float (Cast)
  to_bool = 5,   // any -> bool (Cast: nonzero)
  not_ = 6,      // bool -> bool
  constant = 7,  // -> float literal alpha (a scalar initializer folded into the code)
};

struct FusedStep {
  FusedKind kind = FusedKind::unary;
  int op = 0;
  float alpha = 0.0f, beta = 0.0f;
  std::vector<int> args;  // value indices: inputs first, then one value per earlier step
};

struct FusedConfig {
  // Inputs: f32 or bool; integer types only where every reader is a to_float / to_bool step (read as
  // float, as Cast converts them).
  std::vector<DType> in_dtypes;
  std::vector<Shape> in_shapes;  // each broadcasts to `shape`
  Shape shape;                   // of every output
  std::vector<FusedStep> steps;
  std::vector<int> outputs;  // value index of each output (f32 for float values, bool for bool ones)
};

class FusedElementwise : public Op {
 public:
  // Checks the program (argument kinds, indices, dtypes, broadcasting); returns each output's dtype.
  static std::vector<DType> validate(const FusedConfig& cfg);
  static std::unique_ptr<FusedElementwise> create(Context& ctx, int device, const FusedConfig& cfg);
  std::string_view type() const override { return "FusedElementwise"; }
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  // The generated OpenCL C (kernel `fused_elementwise`) for cfg, without the library's common and
  // element-wise sources that precede it. For logs and tests.
  static std::string generated_source(const FusedConfig& cfg);
  // One line per step ("v3 = Add(v0, v1)"), for `cldl run --stats` and errors.
  static std::string describe(const FusedConfig& cfg);

 private:
  FusedConfig cfg_;
  std::vector<DType> out_dtypes_;
  std::vector<int64_t> dims_;  // collapsed iteration dims, innermost last
  std::string algorithm_;
  cl::Kernel kernel_;
  size_t items_ = 1;  // work-items per group (launch.hpp): the local size does not follow the shape
};

}  // namespace cldl
