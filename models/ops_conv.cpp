// ONNX Conv (1-D / 2-D, algorithm picked by ConvOp::choose; 3-D direct) and ConvTranspose (1-D to 3-D) mapped onto
// layers/conv.hpp. Weights and bias must be load-time constants (initializers): the op prepares them once
// (Winograd / FFT transforms). The activation-fusion pass of models/fusion.cpp folds an activation that is a
// Conv's only reader into the Conv (attributes _cldl_act*); it runs in the conv epilogue. The residual-add pass
// (models/fusion_residual.cpp) folds an Add of a same-shaped tensor into it (attribute _cldl_residual, the
// tensor as input 3), added in the GEMM epilogue before the activation.

#include <optional>
#include <set>

#include "layers/conv.hpp"
#include "models/ops_cnn_common.hpp"
#include "models/passes.hpp"  // fused_activation

namespace cldl::graph {
namespace {

void need_f32(const InferCtx& c) {
  for (size_t i = 0; i < c.in.size(); ++i)
    if (c.has_input(i) && c.input(i).dtype != DType::f32)
      c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(i).name, to_string(c.input(i).dtype));
}

ConvConfig conv_config(const Node& n, Shape x, const std::vector<const HostTensor*>& v) {
  ConvConfig cfg;
  cfg.input = std::move(x);
  cfg.weight = *v.at(1);
  if (v.size() > 2 && v[2]) cfg.bias = *v[2];
  cfg.strides = n.attr_ints("strides");
  cfg.dilations = n.attr_ints("dilations");
  cfg.pads = n.attr_ints("pads");
  cfg.auto_pad = auto_pad_of(n);
  cfg.groups = n.attr_i("group", 1);
  cfg.act = fused_activation(n);
  cfg.residual = n.attr_i("_cldl_residual", 0) != 0;
  cfg.max_pool_2x2 = n.attr_i("_cldl_pool", 0) != 0;
  return cfg;
}

void infer_conv(InferCtx& c) {
  need_f32(c);
  c.constant(1, "W");
  if (c.has_input(2)) c.constant(2, "B");
  if (c.shape(0).rank() > 5)
    c.error("unsupported: {}-D convolution (1-D to 3-D are implemented)", c.shape(0).rank() - 2);
  auto cfg = checked(c, [&] { return conv_config(c.node, c.shape(0), c.value); });
  const Shape y = checked(c, [&] { return ConvOp::validate(cfg); });
  if (cfg.residual && (!c.has_input(3) || c.shape(3) != y))
    c.error("residual (input 3) is {}, expected the output's shape {}", c.has_input(3) ? c.shape(3).str() : "absent",
            y.str());
  c.set(0, DType::f32, y);
}

std::unique_ptr<NodeKernel> lower_conv(LowerCtx& c) {
  auto op = ConvOp::create(c.ctx, c.device, conv_config(c.node, c.in[0].shape.to_shape(), c.value));
  const bool residual = c.node.attr_i("_cldl_residual", 0) != 0;
  std::string note = residual ? "residual Add fused" : "";
  if (c.node.has("_cldl_act"))
    note += fmt::format("{}{} fused", note.empty() ? "" : ", ", c.node.attr_s("_cldl_act", ""));
  return wrap(std::move(op), c, residual ? std::vector<int>{0, 3} : std::vector<int>{0}, note);
}

ConvTransposeConfig convt_config(const Node& n, Shape x, const std::vector<const HostTensor*>& v) {
  ConvTransposeConfig cfg;
  cfg.input = std::move(x);
  cfg.weight = *v.at(1);
  if (v.size() > 2 && v[2]) cfg.bias = *v[2];
  cfg.strides = n.attr_ints("strides");
  cfg.dilations = n.attr_ints("dilations");
  cfg.pads = n.attr_ints("pads");
  cfg.output_padding = n.attr_ints("output_padding");
  cfg.groups = n.attr_i("group", 1);
  cfg.act = fused_activation(n);
  // output_shape / auto_pad SAME_*: turn the requested output size into explicit pads (ONNX: total =
  // stride * (in - 1) + output_padding + effective kernel - out, split as auto_pad says; SAME_UPPER
  // is the default split). A negative total grows the output at the end, as output_padding does.
  AutoPad ap = auto_pad_of(n);
  auto out_shape = n.attr_ints("output_shape");
  if (ap == AutoPad::valid) ap = AutoPad::notset;
  if (ap != AutoPad::notset || !out_shape.empty()) {
    size_t sp = cfg.input.rank() - 2;
    const Shape& w = cfg.weight.shape();
    if (w.rank() != sp + 2) fail("{}: weight {} does not match input {}", n.describe(), w.str(), cfg.input.str());
    cfg.pads.assign(2 * sp, 0);
    if (cfg.output_padding.empty()) cfg.output_padding.assign(sp, 0);
    for (size_t i = 0; i < sp; ++i) {
      int64_t st = cfg.strides.empty() ? 1 : cfg.strides.at(i), dl = cfg.dilations.empty() ? 1 : cfg.dilations.at(i);
      int64_t in = cfg.input[2 + i];
      int64_t want = out_shape.empty() ? in * st : out_shape.at(out_shape.size() - sp + i);
      int64_t total = st * (in - 1) + cfg.output_padding.at(i) + (w[2 + i] - 1) * dl + 1 - want;
      if (total < 0) {
        cfg.output_padding[i] -= total;
        continue;
      }
      bool lower = ap == AutoPad::same_lower;
      cfg.pads[i] = lower ? total - total / 2 : total / 2;
      cfg.pads[i + sp] = lower ? total / 2 : total - total / 2;
    }
  }
  return cfg;
}

void infer_convt(InferCtx& c) {
  need_f32(c);
  c.constant(1, "W");
  if (c.has_input(2)) c.constant(2, "B");
  if (c.shape(0).rank() > 5)
    c.error("unsupported: {}-D transposed convolution (1-D to 3-D are implemented)", c.shape(0).rank() - 2);
  auto cfg = checked(c, [&] { return convt_config(c.node, c.shape(0), c.value); });
  c.set(0, DType::f32, checked(c, [&] { return ConvTransposeOp::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_convt(LowerCtx& c) {
  return wrap(ConvTransposeOp::create(c.ctx, c.device, convt_config(c.node, c.in[0].shape.to_shape(), c.value)), c, {0});
}

// Residual Add into the conv epilogue (typed: it needs shapes). A Conv whose output is read only by an Add whose
// other input r has exactly that output's shape and dtype (no broadcasting), is not a constant and is produced
// before the Conv (so the schedule stays as it was) becomes one Conv with r as input 3 (attribute _cldl_residual):
// Y = act(conv(X) + bias + r). A Conv that already applies an activation is left alone (the Add comes after it),
// and so is one whose algorithm, chosen as create() would without a device, is depthwise or fft (they take no
// residual, and moving them to another algorithm would trade a fast kernel for one launch); the GEMM, Winograd
// and direct kernels add it in their epilogues, so a device's own choice among those keeps. The structure passes
// run again after a typed rewrite, so a Relu after the Add then joins as well:
// Conv + Add + Relu is one command. Downsample blocks (a Conv on both sides) fuse the later Conv.
size_t fuse_residual_adds(Graph& g) {
  if (!has_op(g, {"Conv"})) return 0;
  return fold_residual_adds(g, [&](Node& conv, const std::string& r) {
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.has("_cldl_act") || conv.has("_cldl_residual") ||
        conv.has("_cldl_pool"))
      return false;
    auto xi = g.values.find(conv.input(0));
    if (xi == g.values.end() || !xi->second.shape.is_static()) return false;
    const Shape xs = xi->second.shape.to_shape();
    if (xs.rank() != 3 && xs.rank() != 4) return false;
    auto w = g.initializers.find(conv.input(1));
    if (w == g.initializers.end() || w->second.dtype() != DType::f32) return false;
    const HostTensor* b = nullptr;
    if (conv.input_count() > 2 && !conv.input(2).empty()) {
      auto bi = g.initializers.find(conv.input(2));
      if (bi == g.initializers.end()) return false;
      b = &bi->second;
    }
    ConvAlgo algo;
    try {
      algo = ConvOp::choose(conv_config(conv, xs, {nullptr, &w->second, b}));
    } catch (const std::exception&) {
      return false;  // inference reports what is wrong with the Conv
    }
    if (algo == ConvAlgo::depthwise || algo == ConvAlgo::fft) return false;
    conv.inputs.resize(3);
    conv.inputs.push_back(r);
    conv.attrs["_cldl_residual"] = int64_t(1);
    return true;
  });
}

// MaxPool 2x2 / 2 into the Conv before it (typed): a 2-D Conv (already with its activation, if any) whose output
// only a MaxPool reads, of kernel_shape 2x2, strides 2x2, no pads (auto_pad NOTSET or VALID), no dilation,
// ceil_mode 0 and no Indices output, becomes one Conv with attribute _cldl_pool writing the MaxPool's output.
// conv_small_plane (small planes on CPUs: the zoo's digits CNN) pools in its epilogue; elsewhere the Conv
// runs the Pool op after its kernel (layers/conv.hpp: max_pool_2x2). An activation after the pool is not folded
// into such a Conv afterwards (the epilogue applies it before the pool).
size_t fuse_conv_max_pools(Graph& g) {
  if (!has_op(g, {"MaxPool"}) || !has_op(g, {"Conv"})) return 0;
  auto rd = value_readers(g);
  auto pr = g.producers();
  size_t n = 0;
  std::set<size_t> drop;
  auto ints_are = [](const Node& nd, const char* name, std::vector<int64_t> want, bool absent_ok) {
    if (!nd.has(name)) return absent_ok;
    return nd.attr_ints(name) == want;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& mp = g.nodes[i];
    if (mp.op_type != "MaxPool" || !mp.domain.empty() || mp.input_count() != 1) continue;
    if (mp.outputs.size() > 1 && !mp.outputs[1].empty()) continue;  // Indices
    if (!ints_are(mp, "kernel_shape", {2, 2}, false) || !ints_are(mp, "strides", {2, 2}, false) ||
        !ints_are(mp, "pads", {0, 0, 0, 0}, true) || !ints_are(mp, "dilations", {1, 1}, true) ||
        mp.attr_i("ceil_mode", 0) != 0)
      continue;
    if (const std::string ap = mp.attr_s("auto_pad", "NOTSET"); ap != "NOTSET" && ap != "VALID") continue;
    const std::string& y = mp.input(0);
    auto p = pr.find(y);
    if (p == pr.end() || rd[y] != std::vector<int>{int(i)}) continue;
    Node& conv = g.nodes[p->second];
    if (conv.op_type != "Conv" || !conv.domain.empty() || conv.outputs.empty() || conv.outputs[0] != y ||
        conv.has("_cldl_residual") || conv.has("_cldl_pool"))
      continue;
    auto yi = g.values.find(y);
    if (yi == g.values.end() || yi->second.dtype != DType::f32 || !yi->second.shape.is_static()) continue;
    const Shape ys = yi->second.shape.to_shape();
    if (ys.rank() != 4 || ys[2] < 2 || ys[3] < 2) continue;
    conv.attrs["_cldl_pool"] = int64_t(1);
    conv.outputs[0] = mp.outputs[0];
    drop.insert(i);
    ++n;
  }
  erase_nodes(g, drop);
  return n;
}

struct RegisterResidual {
  RegisterResidual() {
    register_fusion_pass("residual-add", fuse_residual_adds, FusionStage::typed);
    register_fusion_pass("conv-maxpool", fuse_conv_max_pools, FusionStage::typed);
  }
} const kRegisterResidual;

const OpRegistration kConvOps{
    {.type = "Conv", .since = 1, .family = "conv", .const_inputs = {1, 2}, .infer = infer_conv, .lower = lower_conv},
    {.type = "ConvTranspose", .since = 1, .family = "conv", .const_inputs = {1, 2}, .infer = infer_convt,
     .lower = lower_convt},
};

}  // namespace
}  // namespace cldl::graph
