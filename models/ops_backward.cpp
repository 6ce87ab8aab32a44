// ConvDynamic (Conv whose weights are computed at run time: a training graph's; Conv itself re-lays its weights out
// at load), and the backward ops that models/autodiff.cpp emits for Conv, MaxPool and AveragePool
// (layers/backward.hpp), in cldl's own domain (kFusedDomain: they are never in a model file). The rule resolves
// auto_pad and ceil_mode from the forward node, so the attributes here are explicit: kernel_shape, strides, dilations,
// pads (begin then end, one or two spatial dims), group (ConvGrad*), count_include_pad (AveragePoolGrad), and
// out_shape, the shape of the gradient made (the forward input's or weights').
//   ConvDynamic(x, w, b?) -> y     (Conv's attributes)
//   ConvGradData(dy, w) -> dx      ConvGradFilter(dy, x) -> dw
//   ConvTransposeDynamic(x, w) -> y (ConvTranspose's attributes; no bias)
//   MaxPoolGrad(dy, x) -> dx       AveragePoolGrad(dy, x) -> dx (x for its shape)
//   BatchNormGrad(dy, x, scale) -> dx, dscale, dbias (epsilon; training mode)
//   GatherGrad(dy, indices) -> dx (axis, out_shape)    TrainingDropout(x, T) -> y, scale (ratio, seed)
#include "layers/backward.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"

namespace cldl::graph {
namespace {

// The geometry of 1 or 2 spatial dims (1-D in the W slot, H = 1): kernel, strides, dilations, pads (begin, end).
WindowGeometry window(const Shape& x, const Shape& y, const std::vector<int64_t>& k, const std::vector<int64_t>& s,
                      const std::vector<int64_t>& d, const std::vector<int64_t>& p) {
  WindowGeometry g;
  g.x = x;
  g.y = y;
  const size_t r = k.size(), at = 2 - r;
  for (size_t i = 0; i < r; ++i) {
    g.kernel[at + i] = int(k[i]);
    g.stride[at + i] = int(s[i]);
    g.dilation[at + i] = int(d[i]);
    g.pad_begin[at + i] = int(p[i]);
    g.pad_end[at + i] = int(p[r + i]);
  }
  return g;
}

bool is_conv(const Node& n) { return n.op_type == "ConvGradData" || n.op_type == "ConvGradFilter"; }

// ConvDynamic: Conv's attributes as the model gives them (auto_pad, kernel_shape optional); the output's extent
// computed as Conv's inference does.
WindowGeometry conv_geometry(const Node& n, const Shape& x, const Shape& w) {
  if (x.rank() < 3 || x.rank() > 4 || w.rank() != x.rank())
    fail("{}: input x {} and weights w {} must both have rank 3 or 4 (1-D or 2-D)", n.describe(), x.str(), w.str());
  const size_t r = x.rank() - 2;
  const auto k = n.attr_ints("kernel_shape", std::vector<int64_t>(w.dims.begin() + 2, w.dims.end()));
  const auto s = n.attr_ints("strides", std::vector<int64_t>(r, 1)), d = n.attr_ints("dilations", std::vector<int64_t>(r, 1));
  auto p = n.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (k.size() != r || s.size() != r || d.size() != r || p.size() != 2 * r)
    fail("{}: kernel_shape, strides, dilations and pads do not match {} spatial dims", n.describe(), r);
  const std::string auto_pad = n.attr_s("auto_pad", "NOTSET");
  Shape y = x;
  y[1] = w[0];
  for (size_t i = 0; i < r; ++i) {
    if (s[i] < 1 || d[i] < 1) fail("{}: strides and dilations must be positive", n.describe());
    const int64_t in = x[2 + i], span = (k[i] - 1) * d[i] + 1;
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      y[2 + i] = (in + s[i] - 1) / s[i];
      const int64_t total = std::max<int64_t>(0, (y[2 + i] - 1) * s[i] + span - in);
      p[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      p[r + i] = total - p[i];
    } else {
      if (auto_pad == "VALID") p.assign(2 * r, 0);
      const int64_t room = in + p[i] + p[r + i] - span;
      if (room < 0) fail("{}: the kernel ({} taps dilated) is wider than the padded input ({})", n.describe(), span, in + p[i] + p[r + i]);
      y[2 + i] = room / s[i] + 1;
    }
  }
  return window(x, y, k, s, d, p);
}

ConvGradConfig conv_dynamic_config(const Node& n, const Shape& x, const Shape& w, bool bias) {
  ConvGradConfig k;
  k.mode = ConvGradMode::forward;
  k.group = int(n.attr_i("group", 1));
  k.geo = conv_geometry(n, x, w);
  k.w = w;
  k.bias = bias;
  return k;
}

void infer_conv_dynamic(InferCtx& c) {
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.has_input(i) && c.input(i).dtype != DType::f32)
      c.error("input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
  const bool bias = c.has_input(2);
  const auto k = checked(c, [&] { return conv_dynamic_config(c.node, c.shape(0), c.shape(1), bias); });
  checked(c, [&] {
    ConvGrad::validate(k);
    return 0;
  });
  if (bias && c.shape(2) != Shape{k.w[0]})
    c.error("input '{}' (B) has shape {}, expected [{}]", c.input(2).name, c.shape(2).str(), k.w[0]);
  c.set(0, DType::f32, k.geo.y);
}

std::unique_ptr<NodeKernel> lower_conv_dynamic(LowerCtx& c) {
  const bool bias = c.in.size() > 2 && !c.in[2].name.empty();
  return wrap(ConvGrad::create(c.ctx, c.device,
                               conv_dynamic_config(c.node, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(), bias)),
              c, bias ? std::vector<int>{0, 1, 2} : std::vector<int>{0, 1});
}

// ConvTransposeDynamic(x, w) -> y: ConvTranspose (no bias: the Trainer adds B after it) whose weights are computed
// at run time, run as the data gradient of the convolution it is the transpose of (ConvGrad's data mode: y's
// extent and the pads from ConvTranspose's strides, pads, output_padding, dilations, auto_pad, output_shape).
// Output positions no input reaches (output_padding) are zeros.
ConvGradConfig conv_transpose_dynamic_config(const Node& n, const Shape& x, const Shape& w) {
  if (x.rank() < 3 || x.rank() > 4 || w.rank() != x.rank())
    fail("{}: input x {} and weights w {} must both have rank 3 or 4 (1-D or 2-D)", n.describe(), x.str(), w.str());
  const size_t r = x.rank() - 2;
  const int64_t group = n.attr_i("group", 1);
  if (group < 1 || x[1] != w[0] || w[0] % group != 0)
    fail("{}: x has {} channels, w {} ({} groups)", n.describe(), x[1], w.str(), group);
  const auto k = n.attr_ints("kernel_shape", std::vector<int64_t>(w.dims.begin() + 2, w.dims.end()));
  const auto s = n.attr_ints("strides", std::vector<int64_t>(r, 1)), d = n.attr_ints("dilations", std::vector<int64_t>(r, 1)),
             op = n.attr_ints("output_padding", std::vector<int64_t>(r, 0));
  auto p = n.attr_ints("pads", std::vector<int64_t>(2 * r, 0));
  if (k.size() != r || s.size() != r || d.size() != r || op.size() != r || p.size() != 2 * r)
    fail("{}: kernel_shape, strides, dilations, output_padding and pads do not match {} spatial dims", n.describe(), r);
  const std::string auto_pad = n.attr_s("auto_pad", "NOTSET");
  const bool derived = (auto_pad != "NOTSET" && auto_pad != "VALID") || n.has("output_shape");
  if (auto_pad == "VALID") p.assign(2 * r, 0);
  std::vector<int64_t> out_shape;
  if (n.has("output_shape")) {
    out_shape = n.attr_ints("output_shape");
    if (out_shape.size() == r + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);
    if (out_shape.size() != r) fail("{}: output_shape has {} values for {} spatial dims", n.describe(), out_shape.size(), r);
  }
  Shape y = x;
  y[1] = w[1] * group;
  std::vector<int64_t> pads(2 * r);
  for (size_t i = 0; i < r; ++i) {
    if (s[i] < 1 || d[i] < 1) fail("{}: strides and dilations must be positive", n.describe());
    const int64_t in = x[2 + i], span = (k[i] - 1) * d[i] + 1;
    int64_t o = 0, begin = p[i];
    if (derived) {
      o = !out_shape.empty() ? out_shape[i] : in * s[i];
      const int64_t total = s[i] * (in - 1) + op[i] + span - o;
      begin = total < 0 ? 0 : auto_pad == "SAME_LOWER" ? total - total / 2 : total / 2;
    } else {
      o = s[i] * (in - 1) + op[i] + span - p[i] - p[r + i];
    }
    if (o < 1) fail("{}: the output's extent {} on spatial axis {} is not positive", n.describe(), o, i);
    pads[i] = begin;
    pads[r + i] = std::max<int64_t>(s[i] * (in - 1) + span - o - begin, 0);
    y[2 + i] = o;
  }
  ConvGradConfig c;
  c.mode = ConvGradMode::data;
  c.group = int(group);
  c.geo = window(y, x, k, s, d, pads);
  c.w = w;
  return c;
}

void infer_conv_transpose_dynamic(InferCtx& c) {
  for (size_t i = 0; i < 2; ++i)
    if (c.input(i).dtype != DType::f32)
      c.error("input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
  if (c.has_input(2)) c.error("takes no bias (input B): the Trainer adds it after the node");
  const auto k = checked(c, [&] { return conv_transpose_dynamic_config(c.node, c.shape(0), c.shape(1)); });
  checked(c, [&] {
    ConvGrad::validate(k);
    return 0;
  });
  c.set(0, DType::f32, k.geo.x);
}

std::unique_ptr<NodeKernel> lower_conv_transpose_dynamic(LowerCtx& c) {
  return wrap(ConvGrad::create(c.ctx, c.device,
                               conv_transpose_dynamic_config(c.node, c.in[0].shape.to_shape(), c.in[1].shape.to_shape())),
              c, std::vector<int>{0, 1});
}

// dy's shape, x's shape (out_shape or input 1), from the node.
WindowGeometry geometry(const Node& n, const Shape& dy, const Shape& x) {
  const auto k = n.attr_ints("kernel_shape"), s = n.attr_ints("strides"), d = n.attr_ints("dilations"),
             p = n.attr_ints("pads");
  const size_t r = k.size();
  if (r < 1 || r > 2 || s.size() != r || d.size() != r || p.size() != 2 * r)
    fail("{}: kernel_shape, strides, dilations (1 or 2 each) and pads (twice as many) disagree", n.describe());
  return window(x, dy, k, s, d, p);
}

void infer_grad(InferCtx& c) {
  for (size_t i = 0; i < 2; ++i)
    if (c.input(i).dtype != DType::f32)
      c.error("input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
  const Shape out(c.node.attr_ints("out_shape"));
  checked(c, [&] {
    if (c.node.op_type == "ConvGradData" || c.node.op_type == "ConvGradFilter") {
      const bool filter = c.node.op_type == "ConvGradFilter";
      ConvGradConfig k;
      k.mode = filter ? ConvGradMode::filter : ConvGradMode::data;
      k.group = int(c.node.attr_i("group", 1));
      k.geo = geometry(c.node, c.shape(0), filter ? c.shape(1) : out);
      k.w = filter ? out : c.shape(1);
      ConvGrad::validate(k);
    } else {
      PoolGradConfig k;
      k.max = c.node.op_type == "MaxPoolGrad";
      k.geo = geometry(c.node, c.shape(0), c.shape(1));
      PoolGrad::validate(k);
      if (c.shape(1) != out) c.error("out_shape {} is not input x's shape {}", out.str(), c.shape(1).str());
    }
    return 0;
  });
  c.set(0, DType::f32, out);
}

std::unique_ptr<NodeKernel> lower_grad(LowerCtx& c) {
  const Node& n = c.node;
  const Shape dy = c.in[0].shape.to_shape(), in1 = c.in[1].shape.to_shape(), out(n.attr_ints("out_shape"));
  if (is_conv(n)) {
    ConvGradConfig k;
    const bool filter = n.op_type == "ConvGradFilter";
    k.mode = filter ? ConvGradMode::filter : ConvGradMode::data;
    k.group = int(n.attr_i("group", 1));
    k.geo = geometry(n, dy, filter ? in1 : out);
    k.w = filter ? out : in1;
    return wrap(ConvGrad::create(c.ctx, c.device, k), c);
  }
  PoolGradConfig k;
  k.max = n.op_type == "MaxPoolGrad";
  k.count_include_pad = n.attr_i("count_include_pad", 0) != 0;
  k.geo = geometry(n, dy, in1);
  return wrap(PoolGrad::create(c.ctx, c.device, k), c);
}

// GatherGrad(dy, indices) -> dx: attributes axis (non-negative) and out_shape (the data's shape).
void infer_gather_grad(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("input '{}' (dy) is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
  GatherGradConfig k{Shape(c.node.attr_ints("out_shape")), c.shape(1), c.node.attr_i("axis", 0), c.input(1).dtype};
  const Shape dy = checked(c, [&] { return GatherGrad::validate(k); });
  if (c.shape(0) != dy)
    c.error("input '{}' (dy) has shape {}, expected {}", c.input(0).name, c.shape(0).str(), dy.str());
  c.set(0, DType::f32, k.out);
}

std::unique_ptr<NodeKernel> lower_gather_grad(LowerCtx& c) {
  GatherGradConfig k{Shape(c.node.attr_ints("out_shape")), c.in[1].shape.to_shape(), c.node.attr_i("axis", 0),
                     c.in[1].dtype};
  return wrap(GatherGrad::create(c.ctx, c.device, k), c);
}

// TrainingDropout(x, T) -> y, scale: attributes ratio and seed (the training graph's Dropout, models/train.cpp).
DropoutConfig dropout_config(const Node& n, Shape s) {
  DropoutConfig k;
  k.shape = std::move(s);
  k.ratio = n.attr_f("ratio", 0.5f);
  k.seed = uint32_t(n.attr_i("seed", 0));
  return k;
}

void infer_training_dropout(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("input '{}' (x) is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
  if (c.input(1).dtype != DType::i64 || c.shape(1).numel() != 1)
    c.error("input '{}' (T) must be one int64, got {} of shape {}", c.input(1).name, to_string(c.input(1).dtype),
            c.shape(1).str());
  checked(c, [&] {
    TrainingDropout::validate(dropout_config(c.node, c.shape(0)));
    return 0;
  });
  c.set(0, DType::f32, c.shape(0));
  if (c.out.size() > 1 && !c.out[1].name.empty()) c.set(1, DType::f32, c.shape(0));
}

std::unique_ptr<NodeKernel> lower_training_dropout(LowerCtx& c) {
  return wrap(TrainingDropout::create(c.ctx, c.device, dropout_config(c.node, c.in[0].shape.to_shape())), c);
}

// BatchNormGrad(dy, x, scale) -> dx, dscale, dbias: attribute epsilon (training mode: the batch's statistics).
void infer_batch_norm_grad(InferCtx& c) {
  for (size_t i = 0; i < 3; ++i)
    if (c.input(i).dtype != DType::f32)
      c.error("input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
  const Shape x = c.shape(1);
  checked(c, [&] {
    BatchNormGrad::validate({x, c.node.attr_f("epsilon", 1e-5f)});
    return 0;
  });
  if (c.shape(0) != x) c.error("input '{}' (dy) has shape {}, x has {}", c.input(0).name, c.shape(0).str(), x.str());
  if (c.shape(2).numel() != x[1])
    c.error("input '{}' (scale) has shape {}, expected [{}]", c.input(2).name, c.shape(2).str(), x[1]);
  c.set(0, DType::f32, x);
  for (size_t i = 1; i < 3 && i < c.out.size(); ++i)
    if (!c.out[i].name.empty()) c.set(i, DType::f32, Shape{x[1]});
}

std::unique_ptr<NodeKernel> lower_batch_norm_grad(LowerCtx& c) {
  return wrap(BatchNormGrad::create(c.ctx, c.device, {c.in[1].shape.to_shape(), c.node.attr_f("epsilon", 1e-5f)}), c);
}

const OpRegistration kBackwardOps{
    {.type = "BatchNormGrad",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_batch_norm_grad,
     .lower = lower_batch_norm_grad},
    {.type = "GatherGrad",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_gather_grad,
     .lower = lower_gather_grad},
    {.type = "TrainingDropout",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_training_dropout,
     .lower = lower_training_dropout},
    {.type = "ConvDynamic",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_conv_dynamic,
     .lower = lower_conv_dynamic},
    {.type = "ConvTransposeDynamic",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_conv_transpose_dynamic,
     .lower = lower_conv_transpose_dynamic},
    {.type = "ConvGradData",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_grad,
     .lower = lower_grad},
    {.type = "ConvGradFilter",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_grad,
     .lower = lower_grad},
    {.type = "MaxPoolGrad",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_grad,
     .lower = lower_grad},
    {.type = "AveragePoolGrad",
     .domain = kFusedDomain,
     .since = 1,
     .family = "training",
     .infer = infer_grad,
     .lower = lower_grad},
};

}  // namespace
}  // namespace cldl::graph
