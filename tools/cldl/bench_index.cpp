// `cldl bench index`: the index ops in GB/s (bytes read + written per run): ScatterElements with add
// (many duplicates per line), ScatterND of rows, GatherND of rows, OneHot, Hardmax, Einsum (a batch matmul,
// which runs as a Gemm, and a three-input contraction on the direct kernel, in GFLOP/s) and MaxUnpool.
#include <fmt/format.h>

#include "layers/index.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
void run(Context& ctx, const Options& opts, Reporter& rep) {
  {  // [256, 1000] data, [256, 4000] updates along axis 1: four updates per element on average
    Shape s{256, 1000}, is{256, 4000};
    auto op = ScatterElements::create(ctx, 0, {s, DType::f32, is, DType::i64, 1, ScatterReduction::add});
    Tensor x = filled(ctx, s), idx = spread_indices(ctx, is, 1000), u = filled(ctx, is), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "index", "scatter_elements add [256,1000] axis 1 by [256,4000]", *op, {x, idx, u}, {y},
            double(s.numel()) * 8 + double(is.numel()) * (8 + 4 + 8));
  }
  {  // 1-D: a single line; a CPU walks it, a GPU runs one work-item per update over a winner workspace
    Shape s{1 << 20}, is{1 << 17};
    auto op = ScatterElements::create(ctx, 0, {s, DType::f32, is, DType::i64, 0, ScatterReduction::none});
    Tensor x = filled(ctx, s), idx = spread_indices(ctx, is, 1 << 20), u = filled(ctx, is),
           y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "index", "scatter_elements none [1M] by [128K]", *op, {x, idx, u}, {y},
            double(s.numel()) * 8 + double(is.numel()) * (8 + 4 + 4));
  }
  {  // rows of 512 into [4096, 512]
    Shape s{4096, 512}, is{2048, 1}, us{2048, 512};
    auto op = ScatterND::create(ctx, 0, {s, DType::f32, is, DType::i64, ScatterReduction::none});
    Tensor x = filled(ctx, s), idx = spread_indices(ctx, is, 4096), u = filled(ctx, us), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "index", "scatter_nd rows [4096,512] by [2048,1]", *op, {x, idx, u}, {y},
            double(s.numel()) * 8 + double(us.numel()) * 8);
  }
  {
    Shape s{4096, 512}, is{2048, 1}, os{2048, 512};
    auto op = GatherND::create(ctx, 0, {s, DType::f32, is, DType::i64, 0});
    Tensor x = filled(ctx, s), idx = spread_indices(ctx, is, 4096), y = ctx.alloc(os, DType::f32);
    time_op(ctx, opts, rep, "index", "gather_nd rows [4096,512] by [2048,1]", *op, {x, idx}, {y},
            double(os.numel()) * 8);
  }
  {
    Shape is{64, 128};
    auto op = OneHot::create(ctx, 0, {is, DType::i64, 1000, DType::f32, -1});
    Tensor idx = spread_indices(ctx, is, 1000), v = filled(ctx, Shape{2}),
           y = ctx.alloc(Shape{64, 128, 1000}, DType::f32);
    time_op(ctx, opts, rep, "index", "one_hot [64,128] depth 1000", *op, {idx, v}, {y}, 64.0 * 128 * 1000 * 4);
  }
  {
    Shape s{128, 1000};
    auto op = Hardmax::create(ctx, 0, {s, DType::f32, -1});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "index", "hardmax 128x1000", *op, {x}, {y}, 2.0 * s.numel() * 4);
  }
  {
    Shape a{8, 128, 64}, b{8, 64, 128};
    auto op = Einsum::create(ctx, 0, {"bij,bjk->bik", {a, b}, DType::f32});
    Tensor ta = filled(ctx, a), tb = filled(ctx, b), y = ctx.alloc(Shape{8, 128, 128}, DType::f32);
    time_op(ctx, opts, rep, "index", "einsum bij,bjk->bik 8x128x64x128", *op, {ta, tb}, {y}, 2.0 * 8 * 128 * 128 * 64,
            "GFLOP/s");
  }
  {  // no matrix product (three inputs): the direct kernel
    Shape a{32, 128}, w{32, 128, 128};
    auto op = Einsum::create(ctx, 0, {"bn,anm,bm->ba", {a, w, a}, DType::f32});
    Tensor ta = filled(ctx, a), tw = filled(ctx, w), y = ctx.alloc(Shape{32, 32}, DType::f32);
    time_op(ctx, opts, rep, "index", "einsum bn,anm,bm->ba 32x128 (direct)", *op, {ta, tw, ta}, {y},
            3.0 * 32 * 32 * 128 * 128, "GFLOP/s");
  }
  {
    MaxUnpoolConfig c{Shape{8, 64, 56, 56}, DType::f32, DType::i64, {2, 2}, {2, 2}, {}, {}};
    Shape so = MaxUnpool::validate(c);
    auto op = MaxUnpool::create(ctx, 0, c);
    Tensor x = filled(ctx, c.input), idx = spread_indices(ctx, c.input, so.numel()), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "index", "max_unpool 2x2/2 [8,64,56,56]", *op, {x, idx}, {y},
            double(c.input.numel()) * 12 + double(so.numel()) * 12);
  }
}

const Registration kIndex("index",
                          "index ops in GB/s: scatter_elements add, scatter_nd, gather_nd, one_hot, hardmax, "
                          "max_unpool; einsum (gemm and direct) in GFLOP/s",
                          run);
}  // namespace

}  // namespace cldl::bench
