// ONNX MaxPool (optional Indices output), AveragePool, LpPool, GlobalMaxPool and GlobalAveragePool mapped onto
// layers/pool.hpp; attributes follow the ONNX defaults (strides / dilations 1, pads 0, auto_pad NOTSET).
// Versions: later opsets only added attributes (storage_order and Indices 8, ceil_mode and dilations 10,
// count_include_pad 7) whose defaults are the earlier behaviour, so every version from 1 is accepted.
#include "layers/pool.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

PoolConfig pool_config(const Node& n, Shape s, bool indices) {
  PoolConfig p;
  const std::string& t = n.op_type;
  p.kind = t == "MaxPool"         ? PoolKind::max
           : t == "AveragePool"   ? PoolKind::average
           : t == "GlobalMaxPool" ? PoolKind::global_max
           : t == "LpPool"        ? PoolKind::lp
                                  : PoolKind::global_average;
  p.input = std::move(s);
  if (p.kind == PoolKind::lp) {
    // LpPool-1 states p as a float; from opset 2 it is an int.
    int64_t order = n.opset < 2 && n.has("p") ? int64_t(n.attr_f("p", 2.0f)) : n.attr_i("p", 2);
    if (n.opset < 2 && n.has("p") && float(order) != n.attr_f("p", 2.0f))
      fail("{}: attribute p = {} must be an integer", n.describe(), n.attr_f("p", 2.0f));
    if (order < 1 || order > 64) fail("{}: attribute p = {} must be an integer in 1..64", n.describe(), order);
    p.p = int(order);
  }
  if (p.kind == PoolKind::max || p.kind == PoolKind::average || p.kind == PoolKind::lp) {
    p.kernel = n.attr_ints("kernel_shape");
    p.strides = n.attr_ints("strides");
    p.dilations = n.attr_ints("dilations");
    p.pads = n.attr_ints("pads");
    p.auto_pad = auto_pad_of(n);
    p.ceil_mode = n.attr_i("ceil_mode", 0) != 0;
    p.count_include_pad = n.attr_i("count_include_pad", 0) != 0;
    if (p.kind == PoolKind::max) {
      int64_t so = n.attr_i("storage_order", 0);
      if (so != 0 && so != 1)
        fail("{}: attribute storage_order = {} must be 0 (row-major) or 1 (column-major)", n.describe(), so);
      p.column_major_indices = so == 1 && indices;
    }
  }
  p.indices = indices;
  return p;
}

bool wants_indices(const std::vector<ValueInfo>& out) { return out.size() > 1 && !out[1].name.empty(); }

void infer_pool(InferCtx& c) {
  if (c.input(0).dtype != DType::f32)
    c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
  auto cfg = checked(c, [&] { return pool_config(c.node, c.shape(0), wants_indices(c.out)); });
  Shape y = checked(c, [&] { return Pool::validate(cfg); });
  c.set(0, DType::f32, y);
  if (cfg.indices) c.set(1, DType::i64, y);
}

std::unique_ptr<NodeKernel> lower_pool(LowerCtx& c) {
  auto cfg = pool_config(c.node, c.in[0].shape.to_shape(), wants_indices(c.out));
  return wrap(Pool::create(c.ctx, c.device, cfg), c, {0});
}

const OpRegistration kPoolOps{
    {.type = "MaxPool", .since = 1, .family = "pool", .infer = infer_pool, .lower = lower_pool},
    {.type = "AveragePool", .since = 1, .family = "pool", .infer = infer_pool, .lower = lower_pool},
    {.type = "LpPool", .since = 1, .family = "pool", .infer = infer_pool, .lower = lower_pool},
    {.type = "GlobalMaxPool", .since = 1, .family = "pool", .infer = infer_pool, .lower = lower_pool},
    {.type = "GlobalAveragePool", .since = 1, .family = "pool", .infer = infer_pool, .lower = lower_pool},
};

}  // namespace
}  // namespace cldl::graph
