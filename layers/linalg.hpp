// Linear algebra on batches of small matrices in ONNX semantics: Det. Kernels: kernels/linalg.cl.
#pragma once
#include <memory>

#include "layers/op.hpp"

namespace cldl {

struct DetConfig {
  Shape input;               // [..., n, n]
  DType dtype = DType::f32;  // f32 (f32 arithmetic) or f64 (cl_khr_fp64)
};

// Input x [..., n, n]; output [...] (a scalar for one matrix), x's dtype. Partial pivoting; a singular
// matrix gives 0.
class Det : public Op {
 public:
  static Shape validate(const DetConfig& cfg);
  static std::unique_ptr<Det> create(Context& ctx, int device, const DetConfig& cfg);
  std::string_view type() const override { return "Det"; }
  std::string algorithm() const override { return "LU with partial pivoting, one work-item per matrix"; }
  size_t workspace_bytes() const override;  // a copy of the input, eliminated in place
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  DetConfig cfg_;
  Shape out_;
  cl::Kernel kernel_;
};

}  // namespace cldl
