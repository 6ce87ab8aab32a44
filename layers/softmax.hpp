// Softmax and LogSoftmax (ONNX opset 13 semantics: along one axis, default -1), numerically stable.
// Kernels: kernels/softmax.cl.
#pragma once
#include <memory>
#include <string>

#include "layers/op.hpp"

namespace cldl {

// Kernel for the last axis (inner == 1). automatic: serial on CPUs, work_group elsewhere (see create).
enum class SoftmaxRows { automatic, serial, work_group };

struct SoftmaxConfig {
  Shape input;
  int64_t axis = -1;
  bool log = false;  // LogSoftmax
  SoftmaxRows rows = SoftmaxRows::automatic;
};

// Input X (f32), output Y (shape of X).
class Softmax : public Op {
 public:
  static Shape validate(const SoftmaxConfig& cfg);
  static std::unique_ptr<Softmax> create(Context& ctx, int device, const SoftmaxConfig& cfg);
  std::string_view type() const override { return cfg_.log ? "LogSoftmax" : "Softmax"; }
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  SoftmaxConfig cfg_;
  int64_t outer_ = 1, len_ = 1, inner_ = 1;
  std::string algorithm_;
  cl::Kernel kernel_;
  size_t group_ = 1;
  bool serial_ = false;  // softmax_rows_serial: rows_per_item_ whole rows per work-item, items_ work-items
  int64_t rows_per_item_ = 1, items_ = 1;
};

}  // namespace cldl
