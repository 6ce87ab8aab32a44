// `cldl bench cnnops`: memory-bound CNN / tensor ops in GB/s (bytes read + written per run): broadcast
// add, softmax 128x1000, maxpool 3x3/2 on 64x112x112, NCHW -> NHWC transpose, GatherElements,
// CumSum, bilinear 2x downscale plain and antialiased (same run, so their ratio is the antialias cost),
// BatchNormalization in training mode (batch statistics).
#include <fmt/format.h>

#include "layers/data.hpp"
#include "layers/elementwise.hpp"
#include "layers/norm.hpp"
#include "layers/pool.hpp"
#include "layers/reduce.hpp"
#include "layers/softmax.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
void run(Context& ctx, const Options& opts, Reporter& rep) {
  {
    Shape a{8, 64, 56, 56}, b{64, 1, 1};
    auto op = Binary::create(ctx, 0, {BinaryOp::add, DType::f32, a, b});
    Tensor ta = filled(ctx, a), tb = filled(ctx, b), tc = ctx.alloc(a, DType::f32);
    time_op(ctx, opts, rep, "cnnops", "add [8,64,56,56] + [64,1,1]", *op, {ta, tb}, {tc}, 2.0 * a.numel() * 4);
  }
  {
    Shape s{128, 1000};
    auto op = Softmax::create(ctx, 0, {s, -1, false});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "cnnops", "softmax 128x1000", *op, {x}, {y}, 2.0 * s.numel() * 4);
  }
  {
    PoolConfig c;
    c.kind = PoolKind::max;
    c.input = Shape{1, 64, 112, 112};
    c.kernel = {3, 3};
    c.strides = {2, 2};
    c.pads = {1, 1, 1, 1};
    auto op = Pool::create(ctx, 0, c);
    Shape so = Pool::validate(c);
    Tensor x = filled(ctx, c.input), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "cnnops", "maxpool 3x3/2 64x112x112", *op, {x}, {y},
            double(c.input.numel() + so.numel()) * 4);
  }
  {
    Shape s{8, 64, 56, 56};
    auto op = Transpose::create(ctx, 0, {s, DType::f32, {0, 2, 3, 1}});
    Tensor x = filled(ctx, s), y = ctx.alloc(Transpose::validate({s, DType::f32, {0, 2, 3, 1}}), DType::f32);
    time_op(ctx, opts, rep, "cnnops", "transpose [8,64,56,56] -> NHWC", *op, {x}, {y}, 2.0 * s.numel() * 4);
  }
  {  // a top-k style pick along the last axis: [64, 1000] data, [64, 100] i64 indices
    Shape s{64, 1000}, is{64, 100};
    HostTensor hi(DType::i64, is);
    for (int64_t i = 0; i < is.numel(); ++i) hi.as<int64_t>()[i] = (i * 7919) % 1000;
    auto op = GatherElements::create(ctx, 0, {s, DType::f32, is, DType::i64, 1});
    Tensor x = filled(ctx, s), idx = ctx.upload(hi), y = ctx.alloc(is, DType::f32);
    time_op(ctx, opts, rep, "cnnops", "gather_elements [64,1000] axis 1 by [64,100]", *op, {x, idx}, {y},
            double(is.numel()) * (4 + 8 + 4));
  }
  // Cast f32 -> i32 / f16 / f8e4m3fn / f4e2m1: one cast_any build, the types are run-time arguments.
  for (DType to : {DType::i32, DType::f16, DType::f8e4m3fn, DType::f4e2m1}) {
    Shape s{8, 64, 56, 56};
    auto op = Cast::create(ctx, 0, {DType::f32, to, s});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, to);
    time_op(ctx, opts, rep, "cnnops", fmt::format("cast f32 -> {} [8,64,56,56]", to_string(to)), *op, {x}, {y},
            double(s.numel()) * double(4 + dtype_size(to)));
  }
  {
    Shape s{64, 4096};
    auto op = CumSum::create(ctx, 0, {s, DType::f32, 1, false, false});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "cnnops", "cumsum [64,4096] axis 1", *op, {x}, {y}, 2.0 * s.numel() * 4);
  }
  for (bool aa : {false, true}) {  // antialias widens the 2x2 bilinear taps to 4x4
    ResizeConfig c{Shape{8, 64, 112, 112}, {1, 1, 0.5f, 0.5f}, {}, ResizeMode::linear};
    c.antialias = aa;
    auto op = Resize::create(ctx, 0, c);
    Shape so = Resize::validate(c);
    Tensor x = filled(ctx, c.input), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "cnnops",
            aa ? "resize linear antialias 0.5x [8,64,112,112]" : "resize linear 0.5x [8,64,112,112]", *op, {x}, {y},
            double(c.input.numel() + so.numel()) * 4);
  }
  {  // training mode: per-channel batch mean / variance, then normalise (x read three times)
    Shape s{8, 64, 56, 56}, pc{64};
    NormConfig c{NormKind::batch, s, 1e-5f};
    c.training = true;
    auto op = Norm::create(ctx, 0, c);
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32), rm = ctx.alloc(pc, DType::f32),
           rv = ctx.alloc(pc, DType::f32), p = filled(ctx, pc),
           var = ctx.upload(HostTensor::from<float>(pc, std::vector<float>(64, 1.0f)));
    time_op(ctx, opts, rep, "cnnops", "batchnorm training [8,64,56,56]", *op, {x, p, p, p, var}, {y, rm, rv},
            2.0 * s.numel() * 4);
  }
}

const Registration kCnnOps("cnnops",
                           "memory-bound CNN ops in GB/s: broadcast add, softmax, maxpool, transpose, gather_elements, "
                           "cumsum, resize (antialias), batchnorm training",
                           run);
}  // namespace

}  // namespace cldl::bench
