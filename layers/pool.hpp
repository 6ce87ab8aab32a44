// Pooling in ONNX semantics on NCHW (and NCW as H = 1): MaxPool (dilation), AveragePool
// (count_include_pad), both with explicit pads or auto_pad and ceil_mode; GlobalAveragePool and
// GlobalMaxPool over every spatial dim. Kernels: kernels/pool.cl.
#pragma once
#include <array>
#include <memory>
#include <string>

#include "layers/op.hpp"

namespace cldl {

enum class PoolKind { max, average, global_max, global_average };
enum class AutoPad { notset, same_upper, same_lower, valid };

struct PoolConfig {
  PoolKind kind = PoolKind::max;
  Shape input;                        // N, C, H, W (or N, C, W); global pools: N, C, any spatial dims
  std::array<int, 2> kernel{1, 1};    // kh, kw
  std::array<int, 2> strides{1, 1};
  std::array<int, 2> dilations{1, 1};  // MaxPool only (AveragePool accepts 1)
  std::array<int, 4> pads{0, 0, 0, 0};  // ONNX order: top, left, bottom, right
  AutoPad auto_pad = AutoPad::notset;
  bool ceil_mode = false;
  bool count_include_pad = false;     // AveragePool only
};

// Input X, output Y of the shape validate() returns.
class Pool : public Op {
 public:
  static Shape validate(const PoolConfig& cfg);
  static std::unique_ptr<Pool> create(Context& ctx, int device, const PoolConfig& cfg);
  std::string_view type() const override;
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  // Pads after auto_pad is resolved (top, left, bottom, right).
  const std::array<int, 4>& pads() const { return pads_; }

 private:
  PoolConfig cfg_;
  Shape out_;
  std::array<int, 4> pads_{};
  std::string algorithm_;
  cl::Kernel kernel_;
  size_t group_ = 1;
};

}  // namespace cldl
