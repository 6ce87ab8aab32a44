// `cldl bench training`: the training ops in GB/s (bytes read + written per run): SoftmaxCrossEntropyLoss over a
// classifier's batch and a segmentation map (the log-softmax pass included), NegativeLogLikelihoodLoss on the
// segmentation map (it reads one log-probability per position), and an Adam step over a 4M-parameter tensor.
#include <fmt/format.h>

#include "layers/training.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
void run(Context& ctx, const Options& opts, Reporter& rep) {
  struct LossCase {
    const char* name;
    Shape input;
    bool softmax;
  };
  for (const auto& c : {LossCase{"sce [256,1000] mean", Shape{256, 1000}, true},
                        LossCase{"sce [4,21,256,256] mean", Shape{4, 21, 256, 256}, true},
                        LossCase{"nll [4,21,256,256] mean", Shape{4, 21, 256, 256}, false}}) {
    LossConfig cfg;
    cfg.input = c.input;
    cfg.softmax = c.softmax;
    Shape ts{c.input[0]};
    for (size_t i = 2; i < c.input.rank(); ++i) ts.dims.push_back(c.input[i]);
    auto op = Loss::create(ctx, 0, cfg);
    Tensor x = filled(ctx, c.input), t = spread_indices(ctx, ts, c.input[1]), y = ctx.alloc(Shape{}, DType::f32);
    // The log-softmax reads and writes the input once; the loss reads a target and a log-probability per position.
    const double bytes = (c.softmax ? double(c.input.numel()) * 8 : 0.0) + double(ts.numel()) * 12;
    time_op(ctx, opts, rep, "training", c.name, *op, {x, t}, {y}, bytes);
  }
  {
    const Shape s{4 << 20};
    OptimizerConfig cfg;
    cfg.kind = OptimizerKind::adam;
    cfg.tensors = {s};
    auto op = Optimizer::create(ctx, 0, cfg);
    HostTensor r(DType::f32, Shape{}), step(DType::i64, Shape{});
    r.as<float>()[0] = 1e-3f;
    step.as<int64_t>()[0] = 10;
    // H starts at zeros (a square root of it is taken).
    Tensor rt = ctx.upload(r), tt = ctx.upload(step), x = filled(ctx, s), g = filled(ctx, s), v = filled(ctx, s),
           h = ctx.upload(HostTensor(DType::f32, s)), xn = ctx.alloc(s, DType::f32), vn = ctx.alloc(s, DType::f32),
           hn = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "training", "adam [4M]", *op, {rt, tt, x, g, v, h}, {xn, vn, hn}, double(s.numel()) * 28);
  }
}

const Registration kTrainingBench("training",
                                  "training ops: softmax_cross_entropy / nll loss (classifier, segmentation), "
                                  "an Adam step, in GB/s",
                                  run);
}  // namespace

}  // namespace cldl::bench
