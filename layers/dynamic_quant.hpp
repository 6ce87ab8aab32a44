// ONNX DynamicQuantizeLinear: u8 quantization with a scale and zero point from the data's own range.
// Kernels: kernels/quant.cl (dynamic_quant_range, dynamic_quant_apply).
#pragma once
#include <memory>

#include "layers/op.hpp"

namespace cldl {

struct DynamicQuantizeConfig {
  Shape input;  // f32
};

// Input x (f32); outputs y (u8, x's shape), y_scale (f32 scalar), y_zero_point (u8 scalar). Exact: the
// quotients are correctly rounded, then rounded half to even and saturated, as ONNX's reference.
class DynamicQuantizeLinear : public Op {
 public:
  static Shape validate(const DynamicQuantizeConfig& cfg);
  static std::unique_ptr<DynamicQuantizeLinear> create(Context& ctx, int device, const DynamicQuantizeConfig& cfg);
  std::string_view type() const override { return "DynamicQuantizeLinear"; }
  std::string algorithm() const override {
    return fmt::format("{} chunk ranges, reduced by one work-group of {}", parts_, group_);
  }
  size_t workspace_bytes() const override { return size_t(2 * parts_) * sizeof(float); }  // chunk ranges
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  DynamicQuantizeConfig cfg_;
  size_t group_ = 64;              // a power of two the range kernel's work-group can have on the device
  int64_t parts_ = 1, chunk_ = 1;  // chunks of the input whose ranges the first kernel finds
  cl::Kernel partial_, range_, apply_;
};

}  // namespace cldl
