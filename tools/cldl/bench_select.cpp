// `cldl bench select`: the selection, scan, quantization and random ops in GB/s (bytes read + written
// per run): TopK by both kernels (rank count per element, insertion per line) on classifier rows and on
// a vocabulary-sized row, ReverseSequence, CumProd, DynamicQuantizeLinear, Bernoulli, and Det on a batch
// of small matrices.
#include <fmt/format.h>

#include "layers/dynamic_quant.hpp"
#include "layers/linalg.hpp"
#include "layers/random.hpp"
#include "layers/reduce.hpp"
#include "layers/select.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
void run(Context& ctx, const Options& opts, Reporter& rep) {
  struct TopKCase {
    Shape s;
    int64_t k;
  };
  // The last: SSDlite's per-class top 300 of 3234 boxes.
  for (const TopKCase& c : {TopKCase{Shape{64, 1000}, 5}, TopKCase{Shape{1, 50257}, 50}, TopKCase{Shape{1, 3234}, 300}}) {
    for (int kernel : {0, 1, 2}) {
      if (kernel == 0 && c.s[1] > 10000) continue;  // len^2 rank counts: minutes on a CPU
      TopKConfig cfg{c.s, DType::f32, c.k, 1, true, kernel};
      auto op = TopK::create(ctx, 0, cfg);
      const Shape so = TopK::validate(cfg);
      Tensor x = filled(ctx, c.s), y = ctx.alloc(so, DType::f32), yi = ctx.alloc(so, DType::i64);
      time_op(ctx, opts, rep, "select", fmt::format("topk {} k {} ({})", c.s.str(), c.k, op->algorithm()), *op, {x},
              {y, yi}, double(c.s.numel()) * 4 + double(so.numel()) * 12);
    }
  }
  {
    Shape s{128, 64, 512};
    auto op = ReverseSequence::create(ctx, 0, {s, DType::f32, 0, 1});
    HostTensor lens(DType::i64, Shape{64});
    for (int64_t b = 0; b < 64; ++b) lens.as<int64_t>()[b] = 1 + (b * 37) % 128;
    Tensor x = filled(ctx, s), l = ctx.upload(lens), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "select", "reverse_sequence [128,64,512]", *op, {x, l}, {y}, 2.0 * s.numel() * 4);
  }
  {
    Shape s{64, 4096};
    auto op = CumSum::create(ctx, 0, {s, DType::f32, 1, false, false, true});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "select", "cumprod [64,4096] axis 1", *op, {x}, {y}, 2.0 * s.numel() * 4);
  }
  {
    Shape s{8, 64, 56, 56};
    auto op = DynamicQuantizeLinear::create(ctx, 0, {s});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::u8), sc = ctx.alloc(Shape{}, DType::f32),
           zp = ctx.alloc(Shape{}, DType::u8);
    time_op(ctx, opts, rep, "select", fmt::format("dynamic_quantize_linear [8,64,56,56] ({})", op->algorithm()), *op,
            {x}, {y, sc, zp}, double(s.numel()) * (4 + 4 + 1));
  }
  {
    Shape s{8, 64, 56, 56};
    auto op = Bernoulli::create(ctx, 0, {s, DType::f32, DType::f32, 1});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "select", "bernoulli [8,64,56,56]", *op, {x}, {y}, 2.0 * s.numel() * 4);
  }
  {
    Shape s{4096, 4, 4};
    auto op = Det::create(ctx, 0, {s, DType::f32});
    Tensor x = filled(ctx, s), y = ctx.alloc(Shape{4096}, DType::f32);
    time_op(ctx, opts, rep, "select", "det [4096,4,4]", *op, {x}, {y}, double(s.numel()) * 4 * 3 + 4096 * 4);
  }
}

const Registration kSelectBench("select",
                                "selection / scan / quantization / random ops in GB/s: topk (both kernels), "
                                "reverse_sequence, cumprod, dynamic_quantize_linear, bernoulli, det",
                                run);
}  // namespace

}  // namespace cldl::bench
