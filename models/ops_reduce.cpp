// ONNX Reduce* (axes as the "axes" attribute before opset 18 / ReduceSum 13, as a load-time input
// after; keepdims, noop_with_empty_axes) and ArgMax / ArgMin mapped onto layers/reduce.hpp. f32 input (Reduce*
// also f64, needing cl_khr_fp64; i32 / i64 for Sum, Mean, Max, Min, Prod, SumSquare, L1); ReduceMax /
// ReduceMin also bool and u8.
// CumSum and CumProd (axis a load-time input, exclusive, reverse) on f32 / f64 / i32 / i64 / u32 / u64.
#include "layers/reduce.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

ReduceConfig reduce_config(const Node& n, Shape s, DType dt, const std::vector<const HostTensor*>& v) {
  ReduceConfig r;
  r.dtype = dt;
  r.op = reduce_op_from_onnx(n.op_type);
  r.input = std::move(s);
  if (n.has("axes")) r.axes = n.attr_ints("axes");
  else if (v.size() > 1 && v[1]) r.axes = to_ints(*v[1]);
  r.keepdims = n.attr_i("keepdims", 1) != 0;
  r.noop_with_empty_axes = n.attr_i("noop_with_empty_axes", 0) != 0;
  return r;
}

void need_f32(const InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
}

void infer_reduce(InferCtx& c) {
  const DType dt = c.input(0).dtype;
  const bool small = dt == DType::boolean || dt == DType::u8;
  const bool integer = dt == DType::i32 || dt == DType::i64;  // Reduce::validate names the ops they take
  if (!(small && (c.node.op_type == "ReduceMax" || c.node.op_type == "ReduceMin")) && dt != DType::f64 && !integer)
    need_f32(c);
  if (c.has_input(1)) c.constant(1, "axes");
  auto cfg = reduce_config(c.node, c.shape(0), dt, c.value);
  c.set(0, dt, checked(c, [&] { return Reduce::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_reduce(LowerCtx& c) {
  auto cfg = reduce_config(c.node, c.in[0].shape.to_shape(), c.in[0].dtype, c.value);
  return wrap(Reduce::create(c.ctx, c.device, cfg), c, {0});
}

ArgReduceConfig arg_config(const Node& n, Shape s) {
  return {n.op_type == "ArgMin", std::move(s), n.attr_i("axis", 0), n.attr_i("keepdims", 1) != 0,
          n.attr_i("select_last_index", 0) != 0};
}

void infer_arg(InferCtx& c) {
  need_f32(c);
  auto cfg = arg_config(c.node, c.shape(0));
  c.set(0, DType::i64, checked(c, [&] { return ArgReduce::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_arg(LowerCtx& c) {
  return wrap(ArgReduce::create(c.ctx, c.device, arg_config(c.node, c.in[0].shape.to_shape())), c);
}

CumSumConfig cumsum_config(const Node& n, Shape s, DType dt, const HostTensor& axis) {
  auto a = to_ints(axis);
  if (a.size() != 1) fail("{}: axis must hold one value, got {}", n.describe(), a.size());
  return {std::move(s), dt, a[0], n.attr_i("exclusive", 0) != 0, n.attr_i("reverse", 0) != 0, n.op_type == "CumProd"};
}

void infer_cumsum(InferCtx& c) {
  auto cfg = cumsum_config(c.node, c.shape(0), c.input(0).dtype, c.constant(1, "axis"));
  c.set(0, cfg.dtype, checked(c, [&] { return CumSum::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_cumsum(LowerCtx& c) {
  if (!c.value[1]) c.error("axis must be known at load");
  auto cfg = cumsum_config(c.node, c.in[0].shape.to_shape(), c.in[0].dtype, *c.value[1]);
  return wrap(CumSum::create(c.ctx, c.device, cfg), c, {0});
}

OpDef reduce(const char* type) {
  return {.type = type, .since = 1, .family = "reduce", .const_inputs = {1}, .infer = infer_reduce, .lower = lower_reduce};
}

const OpRegistration kReduceOps{
    reduce("ReduceSum"), reduce("ReduceMean"), reduce("ReduceMax"), reduce("ReduceMin"), reduce("ReduceProd"),
    reduce("ReduceSumSquare"), reduce("ReduceL1"), reduce("ReduceL2"), reduce("ReduceLogSum"),
    reduce("ReduceLogSumExp"),
    {.type = "ArgMax", .since = 1, .family = "reduce", .infer = infer_arg, .lower = lower_arg},
    {.type = "ArgMin", .since = 1, .family = "reduce", .infer = infer_arg, .lower = lower_arg},
    {.type = "CumSum", .since = 11, .family = "reduce", .const_inputs = {1}, .infer = infer_cumsum,
     .lower = lower_cumsum},
};

const OpRegistration kCumProdOps{
    {.type = "CumProd", .since = 26, .family = "reduce", .const_inputs = {1}, .infer = infer_cumsum,
     .lower = lower_cumsum},
};

}  // namespace
}  // namespace cldl::graph
