// Pooling in ONNX semantics on N, C, spatial... with 1 to 3 spatial dims: MaxPool (dilations, optional
// Indices output) and AveragePool (dilations, count_include_pad), both with explicit pads or auto_pad
// and ceil_mode; LpPool (integer p, the same window attributes); GlobalAveragePool and GlobalMaxPool
// over any spatial dims. Kernels: kernels/pool.cl.
#pragma once
#include "layers/auto_pad.hpp"
#include <memory>
#include <string>
#include <vector>

#include "layers/op.hpp"

namespace cldl {

enum class PoolKind { max, average, global_max, global_average, lp };

// Per-spatial-dim attributes as in ONNX; empty strides / dilations mean 1, empty pads mean 0.
struct PoolConfig {
  PoolKind kind = PoolKind::max;
  Shape input;                     // N, C, spatial (1 to 3 dims; any number for the global pools)
  std::vector<int64_t> kernel;     // kernel_shape, one per spatial dim
  std::vector<int64_t> strides;
  std::vector<int64_t> dilations;
  std::vector<int64_t> pads;       // begins of every spatial dim, then ends
  AutoPad auto_pad = AutoPad::notset;
  bool ceil_mode = false;
  bool count_include_pad = false;  // AveragePool only
  bool indices = false;            // MaxPool only: second output Indices (i64, flat index into X)
  // ONNX storage_order 1: Indices count the spatial position column-major (the first spatial dim
  // fastest), after the N * C planes before it, as ONNX's reference and ONNX Runtime do.
  bool column_major_indices = false;
  int p = 2;  // LpPool only: the norm's (integer) order, >= 1
  // Outputs per work-item of the 2-D kernel: 1 (pool2d), 8 (pool2d_rows: along the last dim) or 64
  // (pool2d_planes: a whole plane, the window's size and stride built into the program); 0 = by device: on
  // CPUs 8 for rows of 16 outputs or more, else 64 for windows of at most 25 taps; 1 elsewhere
  // (neighbouring items coalesce on GPUs). 3: pool2d_3x3, the separable 3x3 stride 1 kernel (MaxPool with
  // pads of at most 1, AveragePool with none; no dilation; an output row per work-item), the CPU choice there.
  // 32: pool2d_3x3_narrow, 3x3 MaxPool of strides 1 or 2 with pads of at most 1 on rows of at most 32 columns
  // (16 outputs of a row per float16 vector, a plane per work-item), the CPU choice there.
  int block = 0;
};

// Input X; outputs Y [, Indices] of the shape validate() returns.
class Pool : public Op {
 public:
  static Shape validate(const PoolConfig& cfg);
  static std::unique_ptr<Pool> create(Context& ctx, int device, const PoolConfig& cfg);
  std::string_view type() const override;
  std::string algorithm() const override { return algorithm_; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  // Pads after auto_pad is resolved, in ONNX order (begins, then ends).
  const std::vector<int64_t>& pads() const { return pads_; }

 private:
  PoolConfig cfg_;
  Shape out_;
  std::vector<int64_t> pads_;
  std::string algorithm_;
  cl::Kernel kernel_;
  size_t group_ = 1;
  bool use_2d_ = false;  // pool2d kernel (fast path) instead of pool3d
  cl::NDRange local_ = cl::NullRange;  // pool2d: whole output planes per work-group
  cl::NDRange global_ = cl::NullRange;  // pool2d_rows: padded to local_
  bool planes_ = false;                 // pool2d_planes: a plane per work-item, the window built in
  bool rows_ = false;                   // pool2d_rows: 8 outputs per work-item; global: a plane per item
  bool sep3_ = false;                   // pool2d_3x3 (global and arguments as pool2d_rows)
  bool narrow_ = false;                 // pool2d_3x3_narrow: rows of <= 32 columns in vectors, a plane per item
};

}  // namespace cldl
