// Reductions in ONNX semantics: ReduceSum/Mean/Max/Min/Prod/SumSquare/L1/L2/LogSum/LogSumExp over any
// set of axes with keepdims and noop_with_empty_axes; ArgMax / ArgMin along one axis (i64 output,
// keepdims, select_last_index). f32 or f64 (cl_khr_fp64, f64 accumulation) input (ArgMax / ArgMin f32);
// ReduceMax / ReduceMin also bool and u8 (exact, output of the input dtype). Reducing an empty axis gives
// the identity of the op (0 for sums, 1 for Prod, -inf / +inf for Max / Min, -inf for LogSum /
// LogSumExp). Kernels: kernels/reduce.cl.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/op.hpp"
#include "layers/strided.hpp"

namespace cldl {

// Values match R_* in kernels/reduce.cl.
enum class ReduceOp : int { sum = 0, mean, max, min, prod, sum_square, l2, l1, log_sum, log_sum_exp };
std::string_view to_string(ReduceOp op);  // "ReduceSum", ...
ReduceOp reduce_op_from_onnx(std::string_view name);

struct ReduceConfig {
  ReduceOp op = ReduceOp::sum;
  Shape input;
  std::vector<int64_t> axes;  // empty: all axes, or none with noop_with_empty_axes
  bool keepdims = true;
  bool noop_with_empty_axes = false;
  DType dtype = DType::f32;  // of input and output: f32, f64; bool / u8 for max and min
};

class Reduce : public Op {
 public:
  static Shape validate(const ReduceConfig& cfg);
  static std::unique_ptr<Reduce> create(Context& ctx, int device, const ReduceConfig& cfg);
  std::string_view type() const override { return to_string(cfg_.op); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ReduceConfig cfg_;
  Shape out_;
  Iteration keep_, red_;
  int64_t count_ = 1, n_out_ = 1;
  cl::Kernel kernel_;
};

struct ArgReduceConfig {
  bool is_min = false;  // ArgMin, else ArgMax
  Shape input;
  int64_t axis = 0;
  bool keepdims = true;
  bool select_last_index = false;
};

// Input f32; output i64 indices.
class ArgReduce : public Op {
 public:
  static Shape validate(const ArgReduceConfig& cfg);
  static std::unique_ptr<ArgReduce> create(Context& ctx, int device, const ArgReduceConfig& cfg);
  std::string_view type() const override { return cfg_.is_min ? "ArgMin" : "ArgMax"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  ArgReduceConfig cfg_;
  Shape out_;
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
  cl::Kernel kernel_;
};

struct CumSumConfig {
  Shape input;
  DType dtype = DType::f32;  // f32, f64 (cl_khr_fp64), i32, i64, u32 or u64
  int64_t axis = 0;
  bool exclusive = false, reverse = false;
  bool product = false;  // CumProd: running products (identity 1)
};

// ONNX CumSum (CumProd with `product`): running sums (products) along `axis`; output shape and dtype =
// input's.
class CumSum : public Op {
 public:
  static Shape validate(const CumSumConfig& cfg);
  static std::unique_ptr<CumSum> create(Context& ctx, int device, const CumSumConfig& cfg);
  std::string_view type() const override { return cfg_.product ? "CumProd" : "CumSum"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  CumSumConfig cfg_;
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
  cl::Kernel kernel_;
};

}  // namespace cldl
