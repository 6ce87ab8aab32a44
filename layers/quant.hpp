// Quantization ops in ONNX semantics: QuantizeLinear / DequantizeLinear (per-tensor, per-axis and blocked
// scales and zero points; int8 / uint8 / int16 / uint16 / int4 / uint4 / int2 / uint2 and float8 / float4
// targets), the exact integer products MatMulInteger and ConvInteger, and QLinearMatMul / QLinearConv,
// which requantise the int32 result (rounding to nearest even, saturating). Kernels: kernels/quant.cl.
// Scales, zero points and weights are runtime inputs (tensors), so a model may feed them at run time.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "layers/auto_pad.hpp"
#include "layers/op.hpp"

namespace cldl {

// Where the scale / zero point of each element of x comes from, resolved from the shapes.
struct QuantLayout {
  int64_t inner = 1, axis_len = 1, block = 1;  // x viewed as [outer, axis_len, inner]
  int64_t so = 0, sa = 0, si = 0;              // strides of the scale over (outer, axis / block, inner)
};

struct QuantizeConfig {
  bool dequantize = false;  // DequantizeLinear
  Shape x, scale;           // zero point: the scale's shape when present
  DType x_dtype = DType::f32, scale_dtype = DType::f32;
  DType y_dtype = DType::u8;  // Quantize: the target (the zero point's dtype when given); Dequantize: f32 / f16 / bf16
  bool has_zero_point = false;
  int64_t axis = 1;        // per-axis and blocked; may be negative
  int64_t block_size = 0;  // > 0: blocked along `axis`
  bool saturate = true;    // float8 targets (float4 always saturates)
};

// QuantizeLinear: inputs x (f32 / f16 / bf16), y_scale (f32 / f16 / bf16) [, y_zero_point]; output y.
// DequantizeLinear: inputs x (a quantized type or i32), x_scale [, x_zero_point]; output y.
// Scale shape: scalar / [1] (per tensor), [x.shape[axis]] (per axis) or x's shape with
// ceil(x.shape[axis] / block_size) along axis (blocked).
class QuantizeLinear : public Op {
 public:
  static Shape validate(const QuantizeConfig& cfg);
  static QuantLayout layout(const QuantizeConfig& cfg);  // validates too
  static std::unique_ptr<QuantizeLinear> create(Context& ctx, int device, const QuantizeConfig& cfg);
  std::string_view type() const override { return cfg_.dequantize ? "DequantizeLinear" : "QuantizeLinear"; }
  std::string algorithm() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  QuantizeConfig cfg_;
  QuantLayout lay_;
  cl::Kernel kernel_;
};

// MatMulInteger (inputs A, B [, a_zero_point [, b_zero_point]]; output i32) and QLinearMatMul (inputs a,
// a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale [, y_zero_point]; output of y_zero_point's
// dtype, else a's). numpy matmul shapes (batch broadcasting, 1-D operands promoted). A and B are u8 or
// i8; zero points and scales of A are per tensor or per row (M values), of B per tensor or per column
// (N values); y_scale / y_zero_point per tensor; scales f32, f16 or bf16 (all of one dtype).
struct IntegerMatMulConfig {
  bool qlinear = false;
  Shape a, b;
  DType a_dtype = DType::u8, b_dtype = DType::u8;
  int64_t a_zero_points = 0, b_zero_points = 0;  // element counts; 0 = absent
  int64_t a_scales = 1, b_scales = 1;            // QLinearMatMul
  DType scale_dtype = DType::f32;                // QLinearMatMul
  bool has_y_zero_point = true;                  // QLinearMatMul
  DType y_dtype = DType::u8;                     // QLinearMatMul
};

class IntegerMatMul : public Op {
 public:
  static Shape validate(const IntegerMatMulConfig& cfg);
  static std::unique_ptr<IntegerMatMul> create(Context& ctx, int device, const IntegerMatMulConfig& cfg);
  std::string_view type() const override { return cfg_.qlinear ? "QLinearMatMul" : "MatMulInteger"; }
  std::string algorithm() const override { return fmt::format("tiled integer GEMM ({0}x{0} tiles)", tile_); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  IntegerMatMulConfig cfg_;
  Shape out_;
  int64_t M_ = 0, N_ = 0, K_ = 0, batches_ = 1;
  Tensor batch_offsets_;  // i64 [batches, 2]: element offsets of A and B per output batch
  size_t tile_ = 16;
  cl::Kernel kernel_;
};

// ConvInteger (inputs x, w [, x_zero_point [, w_zero_point]]; output i32) and QLinearConv (inputs x,
// x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point [, B]; output of y_zero_point's
// dtype). N, C, spatial (1 to 3 dims), groups, strides, dilations, pads / auto_pad as Conv. x and w are u8
// or i8; x's zero point and scale per tensor; w's per tensor or per output channel; B i32 [M].
struct IntegerConvConfig {
  bool qlinear = false;
  Shape x, w;
  DType x_dtype = DType::u8, w_dtype = DType::u8;
  bool has_x_zero_point = false;
  int64_t w_zero_points = 0;  // element count; 0 = absent
  int64_t w_scales = 1;       // QLinearConv
  DType scale_dtype = DType::f32;
  DType y_dtype = DType::u8;                              // QLinearConv
  bool has_bias = false;                                  // QLinearConv
  std::vector<int64_t> kernel, strides, dilations, pads;  // ONNX attributes; empty = from w / 1s / 0s
  AutoPad auto_pad = AutoPad::notset;
  int64_t groups = 1;
};

class IntegerConv : public Op {
 public:
  static Shape validate(const IntegerConvConfig& cfg);
  static std::unique_ptr<IntegerConv> create(Context& ctx, int device, const IntegerConvConfig& cfg);
  std::string_view type() const override { return cfg_.qlinear ? "QLinearConv" : "ConvInteger"; }
  std::string algorithm() const override { return "direct integer convolution"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  IntegerConvConfig cfg_;
  Shape out_;
  std::vector<int64_t> pads_;  // resolved: begins, then ends
  cl::Kernel kernel_;
};

}  // namespace cldl
