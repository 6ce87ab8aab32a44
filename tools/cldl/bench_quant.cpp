// `cldl bench quant`: QuantizeLinear / DequantizeLinear per axis on [8,64,56,56] (GB/s, bytes read +
// written), MatMulInteger and QLinearMatMul 512x512x512 u8 (GOP/s, 2·M·N·K), ConvInteger 3x3 64 -> 64 on
// 56x56 (GOP/s), and LRN / LpPool next to them (GB/s).
#include <fmt/format.h>

#include "layers/norm.hpp"
#include "layers/pool.hpp"
#include "layers/quant.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
Tensor scalar(Context& ctx, float v) { return ctx.upload(HostTensor::from<float>(Shape{}, std::vector<float>{v})); }

void run(Context& ctx, const Options& opts, Reporter& rep) {
  const Shape s{8, 64, 56, 56}, pc{64};
  {
    QuantizeConfig c;
    c.x = s;
    c.scale = pc;
    c.has_zero_point = true;
    auto op = QuantizeLinear::create(ctx, 0, c);
    Tensor x = filled(ctx, s), sc = filled(ctx, pc), zp = filled(ctx, pc, DType::u8), y = ctx.alloc(s, DType::u8);
    time_op(ctx, opts, rep, "quant", "quantize f32 -> u8 per axis [8,64,56,56]", *op, {x, sc, zp}, {y}, 5.0 * s.numel(),
            "GB/s");
    c.dequantize = true;
    c.x_dtype = DType::u8;
    c.y_dtype = DType::f32;
    auto dq = QuantizeLinear::create(ctx, 0, c);
    Tensor z = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "quant", "dequantize u8 -> f32 per axis [8,64,56,56]", *dq, {y, sc, zp}, {z},
            5.0 * s.numel(), "GB/s");
  }
  for (bool ql : {false, true}) {
    const int64_t n = 512;
    IntegerMatMulConfig c{ql, Shape{n, n}, Shape{n, n}, DType::u8, DType::u8, 1, 1};
    auto op = IntegerMatMul::create(ctx, 0, c);
    Tensor a = filled(ctx, c.a, DType::u8), b = filled(ctx, c.b, DType::u8), z = filled(ctx, Shape{}, DType::u8);
    Tensor y = ctx.alloc(IntegerMatMul::validate(c), ql ? DType::u8 : DType::i32);
    std::vector<Tensor> in =
        ql ? std::vector<Tensor>{a, scalar(ctx, 0.01f), z, b, scalar(ctx, 0.02f), z, scalar(ctx, 3.0f), z}
           : std::vector<Tensor>{a, b, z, z};
    time_op(ctx, opts, rep, "quant", fmt::format("{} 512x512x512 u8", ql ? "qlinearmatmul" : "matmulinteger"), *op, in,
            {y}, 2.0 * n * n * n, "GOP/s");
  }
  {
    IntegerConvConfig c;
    c.x = Shape{1, 64, 56, 56};
    c.w = Shape{64, 64, 3, 3};
    c.pads = {1, 1, 1, 1};
    c.has_x_zero_point = true;
    c.w_zero_points = 1;
    auto op = IntegerConv::create(ctx, 0, c);
    Shape so = IntegerConv::validate(c);
    Tensor x = filled(ctx, c.x, DType::u8), w = filled(ctx, c.w, DType::u8), z = filled(ctx, Shape{}, DType::u8);
    Tensor y = ctx.alloc(so, DType::i32);
    time_op(ctx, opts, rep, "quant", "convinteger 3x3 64->64 56x56 u8", *op, {x, w, z, z}, {y},
            2.0 * so.numel() * 64 * 9, "GOP/s");
  }
  {
    auto op = Lrn::create(ctx, 0, {s, 5, 1e-4f, 0.75f, 1.0f});
    Tensor x = filled(ctx, s), y = ctx.alloc(s, DType::f32);
    time_op(ctx, opts, rep, "quant", "lrn size 5 [8,64,56,56]", *op, {x}, {y}, 2.0 * s.numel() * 4, "GB/s");
  }
  {
    PoolConfig c;
    c.kind = PoolKind::lp;
    c.input = s;
    c.kernel = {3, 3};
    c.strides = {2, 2};
    c.pads = {1, 1, 1, 1};
    auto op = Pool::create(ctx, 0, c);
    Shape so = Pool::validate(c);
    Tensor x = filled(ctx, s), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "quant", "lppool p2 3x3/2 [8,64,56,56]", *op, {x}, {y}, double(s.numel() + so.numel()) * 4,
            "GB/s");
  }
}

const Registration kQuant("quant",
                          "quantization ops: Quantize / DequantizeLinear (GB/s), MatMulInteger, QLinearMatMul and "
                          "ConvInteger (GOP/s); LRN and LpPool (GB/s)",
                          run);
}  // namespace

}  // namespace cldl::bench
