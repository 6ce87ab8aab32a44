// ONNX quantization ops mapped onto layers/quant.hpp: QuantizeLinear / DequantizeLinear (axis,
// block_size, saturate, output_dtype), MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.
// Scales, zero points and weights may be runtime inputs; nothing is folded into the ops at load.
#include "layers/quant.hpp"
#include "models/onnx_import.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

// ---------------------------------------------------------------- QuantizeLinear / DequantizeLinear
// `in[i]` null = a left-out optional input; dtype/shape from the (static) input infos.
QuantizeConfig quantize_config(const Node& n, const std::vector<const ValueInfo*>& in) {
  QuantizeConfig q;
  q.dequantize = n.op_type == "DequantizeLinear";
  auto has = [&](size_t i) { return i < in.size() && in[i] && !in[i]->name.empty(); };
  if (!has(0) || !has(1)) fail("{}: inputs x and scale are required", n.describe());
  q.x = in[0]->shape.to_shape();
  q.x_dtype = in[0]->dtype;
  q.scale = in[1]->shape.to_shape();
  q.scale_dtype = in[1]->dtype;
  q.has_zero_point = has(2);
  q.axis = n.attr_i("axis", 1);
  q.block_size = n.attr_i("block_size", 0);
  q.saturate = n.attr_i("saturate", 1) != 0;
  const int64_t out_attr = n.attr_i("output_dtype", 0);
  const int64_t precision = n.attr_i("precision", 0);
  if (q.dequantize) {
    q.y_dtype = out_attr ? dtype_from_onnx(int(out_attr), "DequantizeLinear output_dtype") : q.scale_dtype;
  } else {
    if (precision) {
      DType p = dtype_from_onnx(int(precision), "QuantizeLinear precision");
      if (p != DType::f32 && p != q.x_dtype)
        fail("{}: unsupported: precision {} (cldl divides in f32, or in x's type when x and the scale share it)",
             n.describe(), to_string(p));
    }
    q.y_dtype = DType::u8;
    if (out_attr) q.y_dtype = dtype_from_onnx(int(out_attr), "QuantizeLinear output_dtype");
    if (q.has_zero_point) {
      if (out_attr && in[2]->dtype != q.y_dtype)
        fail("{}: output_dtype {} differs from the zero point's dtype {}", n.describe(), to_string(q.y_dtype),
             to_string(in[2]->dtype));
      q.y_dtype = in[2]->dtype;
    }
  }
  if (q.has_zero_point) {
    DType want = q.dequantize ? q.x_dtype : q.y_dtype;
    if (in[2]->dtype != want)
      fail("{}: zero point has dtype {}, expected {}", n.describe(), to_string(in[2]->dtype), to_string(want));
    const Shape zs = in[2]->shape.to_shape();  // a scalar scale may come with a [1] zero point
    if (zs != q.scale && !(zs.numel() == 1 && q.scale.numel() == 1))
      fail("{}: zero point has shape {}, the scale {}", n.describe(), in[2]->shape.str(), q.scale.str());
  }
  return q;
}

std::vector<const ValueInfo*> infos(const InferCtx& c) {
  std::vector<const ValueInfo*> v;
  for (size_t i = 0; i < c.in.size(); ++i) {
    if (c.has_input(i)) c.shape(i);  // static shapes, or an error naming the node
    v.push_back(c.has_input(i) ? c.in[i] : nullptr);
  }
  return v;
}

std::vector<const ValueInfo*> infos(const LowerCtx& c) {
  std::vector<const ValueInfo*> v;
  for (const auto& i : c.in) v.push_back(i.name.empty() ? nullptr : &i);
  return v;
}

void infer_quantize(InferCtx& c) {
  auto q = checked(c, [&] { return quantize_config(c.node, infos(c)); });
  c.set(0, q.y_dtype, checked(c, [&] { return QuantizeLinear::validate(q); }));
}

std::unique_ptr<NodeKernel> lower_quantize(LowerCtx& c) {
  return wrap(QuantizeLinear::create(c.ctx, c.device, quantize_config(c.node, infos(c))), c);
}

// ---------------------------------------------------------------- MatMulInteger / QLinearMatMul
IntegerMatMulConfig matmul_config(const Node& n, const std::vector<const ValueInfo*>& in) {
  IntegerMatMulConfig m;
  m.qlinear = n.op_type == "QLinearMatMul";
  auto has = [&](size_t i) { return i < in.size() && in[i]; };
  const size_t ia = 0, ib = m.qlinear ? 3 : 1, iaz = 2, ibz = m.qlinear ? 5 : 3;
  for (size_t i : {ia, ib})
    if (!has(i)) fail("{}: input {} is required", n.describe(), i);
  m.a = in[ia]->shape.to_shape();
  m.b = in[ib]->shape.to_shape();
  m.a_dtype = in[ia]->dtype;
  m.b_dtype = in[ib]->dtype;
  auto zp = [&](size_t i, DType want, const char* name) -> int64_t {
    if (!has(i)) return 0;
    if (in[i]->dtype != want)
      fail("{}: {} has dtype {}, expected {} like its operand", n.describe(), name, to_string(in[i]->dtype),
           to_string(want));
    return in[i]->shape.to_shape().numel();
  };
  m.a_zero_points = zp(iaz, m.a_dtype, "a_zero_point");
  m.b_zero_points = zp(ibz, m.b_dtype, "b_zero_point");
  if (m.qlinear) {
    for (size_t i : {1, 4, 6})
      if (!has(i)) fail("{}: input {} (a scale) is required", n.describe(), i);
    m.scale_dtype = in[1]->dtype;
    for (size_t i : {4, 6})
      if (in[i]->dtype != m.scale_dtype)
        fail("{}: scales have dtypes {} and {}; they must agree", n.describe(), to_string(m.scale_dtype),
             to_string(in[i]->dtype));
    m.a_scales = in[1]->shape.to_shape().numel();
    m.b_scales = in[4]->shape.to_shape().numel();
    if (in[6]->shape.to_shape().numel() != 1)
      fail("{}: y_scale must be one value, got {}", n.describe(), in[6]->shape.str());
    m.has_y_zero_point = has(7);
    m.y_dtype = m.has_y_zero_point ? in[7]->dtype : m.a_dtype;
    if (m.has_y_zero_point && in[7]->shape.to_shape().numel() != 1)
      fail("{}: y_zero_point must be one value, got {}", n.describe(), in[7]->shape.str());
  }
  return m;
}

void infer_matmul(InferCtx& c) {
  auto m = checked(c, [&] { return matmul_config(c.node, infos(c)); });
  c.set(0, m.qlinear ? m.y_dtype : DType::i32, checked(c, [&] { return IntegerMatMul::validate(m); }));
}

std::unique_ptr<NodeKernel> lower_matmul(LowerCtx& c) {
  return wrap(IntegerMatMul::create(c.ctx, c.device, matmul_config(c.node, infos(c))), c);
}

// ---------------------------------------------------------------- ConvInteger / QLinearConv
IntegerConvConfig conv_config(const Node& n, const std::vector<const ValueInfo*>& in) {
  IntegerConvConfig v;
  v.qlinear = n.op_type == "QLinearConv";
  auto has = [&](size_t i) { return i < in.size() && in[i]; };
  const size_t ix = 0, iw = v.qlinear ? 3 : 1, ixz = 2, iwz = v.qlinear ? 5 : 3;
  for (size_t i : {ix, iw})
    if (!has(i)) fail("{}: input {} is required", n.describe(), i);
  v.x = in[ix]->shape.to_shape();
  v.w = in[iw]->shape.to_shape();
  v.x_dtype = in[ix]->dtype;
  v.w_dtype = in[iw]->dtype;
  v.has_x_zero_point = has(ixz);
  if (v.has_x_zero_point) {
    if (in[ixz]->dtype != v.x_dtype)
      fail("{}: x_zero_point has dtype {}, expected {}", n.describe(), to_string(in[ixz]->dtype), to_string(v.x_dtype));
    if (in[ixz]->shape.to_shape().numel() != 1)
      fail("{}: x_zero_point must be one value (per tensor), got shape {}", n.describe(), in[ixz]->shape.str());
  }
  if (has(iwz)) {
    if (in[iwz]->dtype != v.w_dtype)
      fail("{}: w_zero_point has dtype {}, expected {}", n.describe(), to_string(in[iwz]->dtype), to_string(v.w_dtype));
    v.w_zero_points = in[iwz]->shape.to_shape().numel();
  }
  if (v.qlinear) {
    for (size_t i : {1, 4, 6})
      if (!has(i)) fail("{}: input {} (a scale) is required", n.describe(), i);
    v.scale_dtype = in[1]->dtype;
    for (size_t i : {4, 6})
      if (in[i]->dtype != v.scale_dtype)
        fail("{}: scales have dtypes {} and {}; they must agree", n.describe(), to_string(v.scale_dtype),
             to_string(in[i]->dtype));
    if (in[1]->shape.to_shape().numel() != 1 || in[6]->shape.to_shape().numel() != 1)
      fail("{}: x_scale and y_scale must be one value each, got {} and {}", n.describe(), in[1]->shape.str(),
           in[6]->shape.str());
    v.w_scales = in[4]->shape.to_shape().numel();
    v.y_dtype = has(7) ? in[7]->dtype : v.x_dtype;
    if (has(7) && in[7]->shape.to_shape().numel() != 1)
      fail("{}: y_zero_point must be one value, got {}", n.describe(), in[7]->shape.str());
    v.has_bias = has(8);
    if (v.has_bias && in[8]->dtype != DType::i32)
      fail("{}: bias B has dtype {}, expected i32", n.describe(), to_string(in[8]->dtype));
  }
  v.kernel = n.attr_ints("kernel_shape");
  v.strides = n.attr_ints("strides");
  v.dilations = n.attr_ints("dilations");
  v.pads = n.attr_ints("pads");
  v.auto_pad = auto_pad_of(n);
  v.groups = n.attr_i("group", 1);
  return v;
}

void infer_conv(InferCtx& c) {
  auto v = checked(c, [&] { return conv_config(c.node, infos(c)); });
  c.set(0, v.qlinear ? v.y_dtype : DType::i32, checked(c, [&] { return IntegerConv::validate(v); }));
}

std::unique_ptr<NodeKernel> lower_conv(LowerCtx& c) {
  return wrap(IntegerConv::create(c.ctx, c.device, conv_config(c.node, infos(c))), c);
}

const OpRegistration kQuantOps{
    {.type = "QuantizeLinear", .since = 10, .family = "quant", .infer = infer_quantize, .lower = lower_quantize},
    {.type = "DequantizeLinear", .since = 10, .family = "quant", .infer = infer_quantize, .lower = lower_quantize},
    {.type = "MatMulInteger", .since = 10, .family = "quant", .infer = infer_matmul, .lower = lower_matmul},
    {.type = "QLinearMatMul", .since = 10, .family = "quant", .infer = infer_matmul, .lower = lower_matmul},
    {.type = "ConvInteger", .since = 10, .family = "quant", .infer = infer_conv, .lower = lower_conv},
    {.type = "QLinearConv", .since = 10, .family = "quant", .infer = infer_conv, .lower = lower_conv},
};

}  // namespace
}  // namespace cldl::graph
