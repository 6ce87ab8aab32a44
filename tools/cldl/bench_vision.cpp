// `cldl bench vision`: the detection and spatial-transformer ops in GB/s (bytes read + written per run, the
// gathers' taps not counted): RoiAlign at a Faster R-CNN head's size, GridSample (linear, cubic) and
// AffineGrid at a spatial transformer's, Col2Im of a 3x3 unfold, DeformConv 3x3 on a DCN layer.
#include <fmt/format.h>

#include "layers/vision.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
void run(Context& ctx, const Options& opts, Reporter& rep) {
  {
    const Shape xs{1, 256, 50, 68};
    const int64_t rois = 1000;
    HostTensor r(DType::f32, Shape{rois, 4}), b(DType::i64, Shape{rois});
    for (int64_t i = 0; i < rois; ++i) {  // boxes spread over the map, 4 to 40 pixels wide
      float* p = r.as<float>() + i * 4;
      p[0] = float((i * 37) % 60), p[1] = float((i * 23) % 44);
      p[2] = p[0] + 4.0f + float(i % 37), p[3] = p[1] + 4.0f + float(i % 29);
      b.as<int64_t>()[i] = 0;
    }
    RoiAlignConfig cfg{xs, rois, 7, 7, 2, 1.0f, true, RoiAlignMode::avg};
    auto op = RoiAlign::create(ctx, 0, cfg);
    const Shape so = RoiAlign::validate(cfg);
    Tensor x = filled(ctx, xs), rt = ctx.upload(r), bt = ctx.upload(b), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "vision", "roi_align [1,256,50,68] 1000 rois 7x7", *op, {x, rt, bt}, {y},
            double(so.numel()) * 4 + double(rois) * 40);
  }
  for (auto mode : {GridSampleMode::linear, GridSampleMode::cubic}) {
    const Shape xs{4, 32, 64, 64}, gs{4, 64, 64, 2};
    GridSampleConfig cfg{xs, gs, mode, GridPadding::zeros, false};
    auto op = GridSample::create(ctx, 0, cfg);
    const Shape so = GridSample::validate(cfg);
    Tensor x = filled(ctx, xs), g = filled(ctx, gs), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "vision",
            fmt::format("grid_sample [4,32,64,64] {}", mode == GridSampleMode::linear ? "linear" : "cubic"), *op,
            {x, g}, {y}, double(xs.numel() + gs.numel() + so.numel()) * 4);
  }
  {
    AffineGridConfig cfg{Shape{8, 2, 3}, {8, 3, 128, 128}, false};
    auto op = AffineGrid::create(ctx, 0, cfg);
    const Shape so = AffineGrid::validate(cfg);
    Tensor t = filled(ctx, cfg.theta), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "vision", "affine_grid [8,128,128,2]", *op, {t}, {y}, double(so.numel()) * 4);
  }
  {
    Col2ImConfig cfg{Shape{2, 64 * 9, 56 * 56}, {56, 56}, {3, 3}, {}, {1, 1, 1, 1}, {}};
    auto op = Col2Im::create(ctx, 0, cfg);
    const Shape so = Col2Im::validate(cfg);
    Tensor x = filled(ctx, cfg.input), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "vision", "col2im [2,576,3136] -> [2,64,56,56]", *op, {x}, {y},
            double(cfg.input.numel() + so.numel()) * 4);
  }
  {
    DeformConvConfig cfg{Shape{1, 64, 32, 32}, Shape{64, 64, 3, 3}, 1, 1, {}, {1, 1, 1, 1}, {}, true, false};
    auto op = DeformConv::create(ctx, 0, cfg);
    const Shape so = DeformConv::validate(cfg);
    Tensor x = filled(ctx, cfg.input), w = filled(ctx, cfg.weight), off = filled(ctx, Shape{1, 18, 32, 32}),
           b = filled(ctx, Shape{64}), y = ctx.alloc(so, DType::f32);
    // 2 flops per weight tap plus the bilinear sample (about 8), per output.
    const double ops = double(so.numel()) * 64 * 9 * 10;
    time_op(ctx, opts, rep, "vision", "deform_conv [1,64,32,32] 3x3 64", *op, {x, w, off, b}, {y}, ops, "GOP/s");
  }
}

const Registration kVisionBench("vision",
                                "detection / spatial-transformer ops: roi_align, grid_sample (linear, cubic), "
                                "affine_grid, col2im in GB/s; deform_conv in GOP/s",
                                run);
}  // namespace

}  // namespace cldl::bench
