// Quantization ops against tests/reference/quant_ref: QuantizeLinear / DequantizeLinear per tensor, per
// axis and blocked over every integer and float8 / float4 type (ties to even, saturation, NaN and
// infinities), MatMulInteger / ConvInteger (exact int32, zero points per tensor / row / column / channel,
// odd shapes, batch broadcasting, large K) and QLinearMatMul / QLinearConv (requantisation ties and
// saturation, f16 scales). Every result is compared exactly.
#include <cmath>
#include <limits>
#include <random>

#include "layers/quant.hpp"
#include "models/op_registry.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/quant_ref.hpp"
#include "runtime/minifloat.hpp"

using namespace cldl;
using namespace cldl::test;

namespace {
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();

Tensor up_as(DType t, const Shape& s, const std::vector<double>& v) {
  return ctx().upload(graph::from_doubles(t, s, v));
}
template <typename T>
std::vector<double> dbl(const std::vector<T>& v) {
  return {v.begin(), v.end()};
}
std::vector<double> down_dbl(const Tensor& t) { return graph::to_doubles(ctx().download(t)); }

// Runs op on `in` (empty tensors for left-out inputs) into a new output of shape s, dtype t.
Tensor run(Op& op, const std::vector<Tensor>& in, const Shape& s, DType t) {
  Tensor y = ctx().alloc(s, t);
  auto ec = ctx().exec();
  Tensor outs[1] = {y};
  op.enqueue(in, outs, nullptr, ec);
  ctx().finish();
  return y;
}

std::pair<int, int> range_of(DType t) {
  switch (t) {
    case DType::i8:
      return {-128, 127};
    case DType::i16:
      return {-32768, 32767};
    case DType::u16:
      return {0, 65535};
    case DType::i4:
      return {-8, 7};
    case DType::u4:
      return {0, 15};
    case DType::i2:
      return {-2, 1};
    case DType::u2:
      return {0, 3};
    default:
      return {0, 255};
  }
}

// Scales that make some quotients exact halves: powers of two and a few others.
std::vector<float> random_scales(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const float pick[] = {0.5f, 1.0f, 2.0f, 0.25f, 0.1f, 0.37f, 1.7f, 3.0f};
  std::vector<float> v(n);
  for (auto& s : v) s = pick[rng() % 8];
  return v;
}

// x with halves (ties), values beyond the range, NaN and infinities.
std::vector<float> quant_inputs(size_t n, float span, uint32_t seed) {
  auto x = random_floats(n, seed, -span, span);
  const float special[] = {0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 1e9f, -1e9f, kNaN, kInf, -kInf, 0.0f, -0.0f};
  for (size_t i = 0; i < n && i < 13; ++i) x[i * 7 % n] = special[i];
  for (size_t i = 13; i < n; i += 5) x[i] = std::round(x[i] * 2.0f) / 2.0f;  // more halves
  return x;
}

void check_quantize_int(DType t, const ref::Dims& xd, const ref::Dims& sd, int axis, int block, bool zp,
                        uint32_t seed) {
  CAPTURE(to_string(t));
  CAPTURE(axis);
  CAPTURE(block);
  auto [lo, hi] = range_of(t);
  const Shape xs(xd), ss(sd);
  auto x = quant_inputs(size_t(xs.numel()), float(hi - lo) * 0.8f, seed);
  auto sc = random_scales(size_t(ss.numel()), seed + 1);
  std::vector<int> z = zp ? random_ints(size_t(ss.numel()), lo, hi, seed + 2) : std::vector<int>{};
  auto want = ref::quantize_int(x, xd, sc, sd, z, axis, block, lo, hi);
  QuantizeConfig c;
  c.x = xs;
  c.scale = ss;
  c.y_dtype = t;
  c.has_zero_point = zp;
  c.axis = axis;
  c.block_size = block;
  auto op = QuantizeLinear::create(ctx(), 0, c);
  std::vector<Tensor> in{up(x, xs), up(sc, ss)};
  if (zp) in.push_back(up_as(t, ss, dbl(z)));
  CHECK(down_dbl(run(*op, in, xs, t)) == dbl(want));
}
}  // namespace

TEST_SUITE("quant") {
  TEST_CASE("QuantizeLinear per tensor: ties to even, saturation, NaN and infinities") {
    for (DType t : {DType::u8, DType::i8})
      for (bool zp : {false, true}) {
        check_quantize_int(t, {3, 7}, {}, 1, 0, zp, 11);
        check_quantize_int(t, {1}, {1}, 1, 0, zp, 12);  // batch 1, scale [1]
      }
  }

  TEST_CASE("QuantizeLinear per axis and blocked over every integer type") {
    for (DType t : {DType::u8, DType::i8, DType::u16, DType::i16, DType::u4, DType::i4, DType::u2, DType::i2}) {
      check_quantize_int(t, {2, 7, 5}, {7}, 1, 0, true, 21);
      check_quantize_int(t, {2, 7, 5}, {5}, -1, 0, true, 22);
      check_quantize_int(t, {2, 7, 5}, {2, 3, 5}, 1, 3, true, 23);  // 7 = 3 + 3 + 1: a short last block
      check_quantize_int(t, {2, 7, 5}, {2, 7, 3}, -1, 2, false, 24);
      check_quantize_int(t, {3, 4}, {3, 2}, 1, 2, true, 25);
    }
  }

  TEST_CASE("QuantizeLinear to float8 and float4: saturate on and off, NaN, infinities, -0") {
    const ref::Dims xd{3, 11}, sd{3};
    auto x = quant_inputs(33, 600.0f, 31);
    x[5] = 1e6f;
    x[6] = -0.0f;
    auto sc = std::vector<float>{0.5f, 2.0f, 0.03125f};
    for (DType t : {DType::f8e4m3fn, DType::f8e4m3fnuz, DType::f8e5m2, DType::f8e5m2fnuz, DType::f4e2m1})
      for (bool sat : {true, false}) {
        CAPTURE(to_string(t));
        CAPTURE(sat);
        auto want = ref::quantize_minifloat(x, xd, sc, sd, t, sat, 0, 0);
        QuantizeConfig c;
        c.x = Shape(xd);
        c.scale = Shape(sd);
        c.axis = 0;
        c.y_dtype = t;
        c.saturate = sat;
        auto op = QuantizeLinear::create(ctx(), 0, c);
        HostTensor got = ctx().download(run(*op, {up(x, c.x), up(sc, c.scale)}, c.x, t));
        const auto* p = static_cast<const uint8_t*>(got.data());
        std::vector<uint8_t> g(p, p + got.numel());
        CHECK(g == want);
      }
  }

  TEST_CASE("DequantizeLinear over every quantized type, per tensor / axis / blocked, f32 / f16 output") {
    const ref::Dims xd{2, 5, 3};
    struct Layout {
      ref::Dims sd;
      int axis, block;
    };
    const Layout layouts[] = {{{1}, 1, 0}, {{5}, 1, 0}, {{3}, -1, 0}, {{2, 2, 3}, 1, 3}};
    for (DType t :
         {DType::u8, DType::i8, DType::u16, DType::i16, DType::u4, DType::i4, DType::u2, DType::i2, DType::i32})
      for (const auto& l : layouts)
        for (DType out : {DType::f32, DType::f16}) {
          CAPTURE(to_string(t));
          CAPTURE(l.axis);
          auto [lo, hi] = t == DType::i32 ? std::pair{-2000000000, 2000000000} : range_of(t);
          auto x = dbl(random_ints(30, lo, hi, 41));
          const Shape ss(l.sd);
          auto sc = random_scales(size_t(ss.numel()), 42);
          // i32 (biases of quantized models) comes with a zero zero point, or none.
          std::vector<double> z = t == DType::i32 ? std::vector<double>(size_t(ss.numel()), 0.0)
                                                  : dbl(random_ints(size_t(ss.numel()), lo, hi, 43));
          if (t == DType::i32 && l.axis == -1) z.clear();
          auto want = ref::dequantize(x, xd, sc, l.sd, z, l.axis, l.block);
          QuantizeConfig c;
          c.dequantize = true;
          c.x = Shape(xd);
          c.x_dtype = t;
          c.scale = ss;
          c.y_dtype = out;
          c.has_zero_point = !z.empty();
          c.axis = l.axis;
          c.block_size = l.block;
          auto op = QuantizeLinear::create(ctx(), 0, c);
          std::vector<Tensor> in{up_as(t, c.x, x), up(sc, ss)};
          if (!z.empty()) in.push_back(up_as(t, ss, z));
          auto got = down_dbl(run(*op, in, c.x, out));
          if (out == DType::f16)
            for (auto& w : want) w = graph::half_to_float(graph::float_to_half(w));
          CHECK(got == dbl(want));
        }
    // float8 / float4 sources: the codes' values times the scale.
    for (DType t : {DType::f8e4m3fn, DType::f8e5m2, DType::f4e2m1}) {
      std::vector<double> x{0.0, 0.5, -1.0, 448.0, -96.0, 6.0, -0.0};
      if (t == DType::f4e2m1) x = {0.0, 0.5, -1.0, 6.0, -4.0, 1.5, -0.0};
      QuantizeConfig c;
      c.dequantize = true;
      c.x = Shape{7};
      c.x_dtype = t;
      c.scale = Shape{};
      c.y_dtype = DType::f32;
      auto op = QuantizeLinear::create(ctx(), 0, c);
      auto got = down_dbl(run(*op, {up_as(t, c.x, x), up(std::vector<float>{2.0f}, c.scale)}, c.x, DType::f32));
      for (auto& v : x) v *= 2.0;
      CHECK(got == x);
    }
  }

  TEST_CASE("MatMulInteger is exact: odd shapes, large K, zero points per tensor / row / column, batch broadcasting") {
    struct Case {
      ref::Dims a, b;
      DType ta, tb;
      int za, zb;
    };  // za / zb: 0 none, 1 per tensor, 2 per row / column
    const Case cases[] = {
        {{1, 1}, {1, 1}, DType::u8, DType::u8, 1, 1},
        {{5, 300}, {300, 7}, DType::u8, DType::i8, 2, 2},
        {{37, 129}, {129, 19}, DType::i8, DType::i8, 1, 2},
        {{17, 4099}, {4099, 3}, DType::u8, DType::u8, 0, 0},
        {{2, 1, 5, 33}, {3, 33, 6}, DType::i8, DType::u8, 2, 1},
        {{33}, {2, 33, 5}, DType::u8, DType::u8, 1, 2},
        {{3, 4, 9}, {9}, DType::i8, DType::i8, 2, 0},
    };
    uint32_t seed = 50;
    for (const auto& k : cases) {
      auto [alo, ahi] = range_of(k.ta);
      auto [blo, bhi] = range_of(k.tb);
      const Shape as(k.a), bs(k.b);
      auto a = random_ints(size_t(as.numel()), alo, ahi, ++seed), b = random_ints(size_t(bs.numel()), blo, bhi, ++seed);
      const int64_t M = k.a.size() == 1 ? 1 : k.a[k.a.size() - 2], N = k.b.size() == 1 ? 1 : k.b.back();
      auto zps = [&](int mode, int64_t per, int lo, int hi) {
        return mode == 0 ? std::vector<int>{} : random_ints(size_t(mode == 1 ? 1 : per), lo, hi, ++seed);
      };
      auto za = zps(k.za, M, alo, ahi), zb = zps(k.zb, N, blo, bhi);
      ref::Dims od;
      auto want = ref::matmul_integer(a, k.a, b, k.b, za, zb, od);
      IntegerMatMulConfig c{false, as, bs, k.ta, k.tb, int64_t(za.size()), int64_t(zb.size())};
      Shape out = IntegerMatMul::validate(c);
      REQUIRE(out == Shape(od));
      auto op = IntegerMatMul::create(ctx(), 0, c);
      std::vector<Tensor> in{up_as(k.ta, as, dbl(a)), up_as(k.tb, bs, dbl(b)), Tensor{}, Tensor{}};
      if (!za.empty()) in[2] = up_as(k.ta, Shape{int64_t(za.size())}, dbl(za));
      if (!zb.empty()) in[3] = up_as(k.tb, Shape{int64_t(zb.size())}, dbl(zb));
      CAPTURE(as.str());
      CHECK(down<int32_t>(run(*op, in, out, DType::i32)) == want);
    }
  }

  TEST_CASE("QLinearMatMul requantises with ties to even and saturation; f16 scales round like numpy") {
    // Ties: m = 0.5 and odd products.
    {
      IntegerMatMulConfig c{true, Shape{1, 1}, Shape{1, 7}, DType::i8,  DType::i8, 1,
                            1,    1,           1,           DType::f32, true,      DType::i8};
      auto op = IntegerMatMul::create(ctx(), 0, c);
      std::vector<Tensor> in{
          up_as(DType::i8, Shape{1, 1}, {1}),     up(std::vector<float>{1.0f}, Shape{}),
          up_as(DType::i8, Shape{}, {0}),         up_as(DType::i8, Shape{1, 7}, {1, 3, 5, -1, -3, 127, -128}),
          up(std::vector<float>{0.5f}, Shape{}),  up_as(DType::i8, Shape{}, {0}),
          up(std::vector<float>{0.25f}, Shape{}), up_as(DType::i8, Shape{}, {1})};
      // acc * 0.5 / 0.25 = 2 * acc: no ties; then ties with y_scale 1.
      CHECK(down_dbl(run(*op, in, Shape{1, 7}, DType::i8)) == std::vector<double>{3, 7, 11, -1, -5, 127, -128});
      in[6] = up(std::vector<float>{1.0f}, Shape{});
      CHECK(down_dbl(run(*op, in, Shape{1, 7}, DType::i8)) == std::vector<double>{1, 3, 3, 1, -1, 65, -63});
    }
    // Random: u8 / i8, f32 / f16 scales, per-row / per-column scales and zero points.
    uint32_t seed = 70;
    for (DType t : {DType::u8, DType::i8})
      for (DType st : {DType::f32, DType::f16})
        for (bool per : {false, true}) {
          CAPTURE(to_string(t));
          CAPTURE(to_string(st));
          auto [lo, hi] = range_of(t);
          const int64_t M = 9, K = 131, N = 13;
          auto a = random_ints(size_t(M * K), lo, hi, ++seed), b = random_ints(size_t(K * N), lo, hi, ++seed);
          const int64_t na = per ? M : 1, nb = per ? N : 1;
          auto za = random_ints(size_t(na), lo, hi, ++seed), zb = random_ints(size_t(nb), lo, hi, ++seed);
          auto sa = random_floats(size_t(na), ++seed, 0.001f, 0.01f),
               sb = random_floats(size_t(nb), ++seed, 0.001f, 0.01f);
          std::vector<float> sy{0.37f}, zy{float(lo + 100)};
          auto rnd = [&](float v) { return st == DType::f16 ? graph::half_to_float(graph::float_to_half(v)) : v; };
          for (auto* v : {&sa, &sb, &sy})
            for (auto& s : *v) s = rnd(s);
          ref::Dims od;
          auto acc = ref::matmul_integer(a, {M, K}, b, {K, N}, za, zb, od);
          std::vector<double> want(acc.size());
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              const float mul = rnd(rnd(sa[size_t(per ? m : 0)] * sb[size_t(per ? n : 0)]) / sy[0]);
              want[size_t(m * N + n)] = ref::requantize(acc[size_t(m * N + n)], mul, int(zy[0]), lo, hi);
            }
          IntegerMatMulConfig c{true, Shape{M, K}, Shape{K, N}, t, t, na, nb, na, nb, st, true, t};
          auto op = IntegerMatMul::create(ctx(), 0, c);
          std::vector<Tensor> in{up_as(t, Shape{M, K}, dbl(a)), up_as(st, Shape{na}, dbl(sa)),
                                 up_as(t, Shape{na}, dbl(za)),  up_as(t, Shape{K, N}, dbl(b)),
                                 up_as(st, Shape{nb}, dbl(sb)), up_as(t, Shape{nb}, dbl(zb)),
                                 up_as(st, Shape{}, dbl(sy)),   up_as(t, Shape{}, dbl(zy))};
          CHECK(down_dbl(run(*op, in, Shape{M, N}, t)) == want);
        }
  }

  TEST_CASE("ConvInteger and QLinearConv over 1 to 3 spatial dims, groups, strides, dilations, pads") {
    struct Case {
      ref::Dims x, w;
      ref::Dims s, d, p;
      int group;
      int wzp;
    };  // wzp: 0 none, 1 tensor, 2 channel
    const Case cases[] = {
        {{1, 1, 3, 3}, {2, 1, 2, 2}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, 2},
        {{2, 3, 7, 9}, {5, 3, 3, 2}, {2, 1}, {1, 2}, {1, 0, 2, 1}, 1, 1},
        {{1, 4, 6, 5}, {6, 2, 3, 3}, {1, 2}, {1, 1}, {1, 1, 1, 1}, 2, 2},
        {{1, 3, 5, 5}, {3, 1, 3, 3}, {1, 1}, {2, 2}, {2, 2, 2, 2}, 3, 0},
        {{2, 2, 17}, {3, 2, 4}, {3}, {1}, {2, 1}, 1, 1},
        {{1, 2, 4, 5, 3}, {3, 2, 2, 3, 2}, {1, 2, 1}, {1, 1, 2}, {0, 1, 1, 1, 0, 0}, 1, 2},
    };
    uint32_t seed = 90;
    for (const auto& k : cases)
      for (DType t : {DType::u8, DType::i8}) {
        CAPTURE(Shape(k.x).str());
        CAPTURE(to_string(t));
        auto [lo, hi] = range_of(t);
        const Shape xs(k.x), ws(k.w);
        const int64_t M = k.w[0];
        auto x = random_ints(size_t(xs.numel()), lo, hi, ++seed), w = random_ints(size_t(ws.numel()), lo, hi, ++seed);
        const int xz = random_ints(1, lo, hi, ++seed)[0];
        auto wz = k.wzp == 0 ? std::vector<int>{} : random_ints(size_t(k.wzp == 1 ? 1 : M), lo, hi, ++seed);
        ref::Dims od;
        auto acc = ref::conv_integer(x, k.x, w, k.w, xz, wz, k.s, k.d, k.p, k.group, od);
        IntegerConvConfig c;
        c.x = xs;
        c.w = ws;
        c.x_dtype = c.w_dtype = t;
        c.has_x_zero_point = true;
        c.w_zero_points = int64_t(wz.size());
        c.strides = k.s;
        c.dilations = k.d;
        c.pads = k.p;
        c.groups = k.group;
        Shape out = IntegerConv::validate(c);
        REQUIRE(out == Shape(od));
        Tensor wzt = wz.empty() ? Tensor{} : up_as(t, Shape{int64_t(wz.size())}, dbl(wz));
        {
          auto op = IntegerConv::create(ctx(), 0, c);
          std::vector<Tensor> in{up_as(t, xs, dbl(x)), up_as(t, ws, dbl(w)), up_as(t, Shape{}, {double(xz)}), wzt};
          CHECK(down<int32_t>(run(*op, in, out, DType::i32)) == acc);
        }
        // QLinearConv: bias, per-channel w_scale, output of the other byte type.
        c.qlinear = true;
        c.has_bias = true;
        c.w_scales = M;
        c.y_dtype = t == DType::u8 ? DType::i8 : DType::u8;
        auto [ylo, yhi] = range_of(c.y_dtype);
        auto bias = random_ints(size_t(M), -5000, 5000, ++seed);
        auto wsc = random_floats(size_t(M), ++seed, 0.001f, 0.02f);
        const float xsc = 0.011f, ysc = 0.093f;
        const int yz = ylo + 77;
        const int64_t plane = Shape(od).numel() / (od[0] * M);
        std::vector<double> want(acc.size());
        for (size_t i = 0; i < acc.size(); ++i) {
          const size_t m = size_t(int64_t(i) / plane % M);
          want[i] = ref::requantize(int32_t(uint32_t(acc[i]) + uint32_t(bias[m])), xsc * wsc[m] / ysc, yz, ylo, yhi);
        }
        auto op = IntegerConv::create(ctx(), 0, c);
        std::vector<Tensor> in{up_as(t, xs, dbl(x)),
                               up(std::vector<float>{xsc}, Shape{}),
                               up_as(t, Shape{}, {double(xz)}),
                               up_as(t, ws, dbl(w)),
                               up(wsc, Shape{M}),
                               wzt,
                               up(std::vector<float>{ysc}, Shape{}),
                               up_as(c.y_dtype, Shape{}, {double(yz)}),
                               up_as(DType::i32, Shape{M}, dbl(bias))};
        CHECK(down_dbl(run(*op, in, out, c.y_dtype)) == want);
      }
  }

  TEST_CASE("bad quantization configurations name the op, the argument and the value") {
    QuantizeConfig q;
    q.x = Shape{2, 7};
    q.scale = Shape{5};
    expect_invalid([&] { QuantizeLinear::validate(q); }, {"QuantizeLinear", "scale", "[5]", "[7]"});
    q.scale = Shape{2, 2};
    q.block_size = 3;
    expect_invalid([&] { QuantizeLinear::validate(q); }, {"QuantizeLinear", "block_size 3", "[2, 3]"});
    q.scale = Shape{1};
    q.y_dtype = DType::f32;
    expect_invalid([&] { QuantizeLinear::validate(q); }, {"QuantizeLinear", "output dtype f32"});
    q.dequantize = true;
    q.x_dtype = DType::f32;
    expect_invalid([&] { QuantizeLinear::validate(q); }, {"DequantizeLinear", "input x", "f32"});
    IntegerMatMulConfig m{false, Shape{3, 4}, Shape{5, 2}};
    expect_invalid([&] { IntegerMatMul::validate(m); }, {"MatMulInteger", "K", "4", "5"});
    m.b = Shape{4, 2};
    m.a_zero_points = 2;
    expect_invalid([&] { IntegerMatMul::validate(m); }, {"MatMulInteger", "a_zero_point", "2 elements", "3"});
    m.a_zero_points = 0;
    m.a_dtype = DType::i16;
    expect_invalid([&] { IntegerMatMul::validate(m); }, {"MatMulInteger", "input A", "i16"});
    IntegerConvConfig v;
    v.x = Shape{1, 4, 5, 5};
    v.w = Shape{2, 3, 3, 3};
    expect_invalid([&] { IntegerConv::validate(v); }, {"ConvInteger", "weight w", "3 input channels"});
    v.w = Shape{2, 4, 3, 3};
    v.w_zero_points = 3;
    expect_invalid([&] { IntegerConv::validate(v); }, {"ConvInteger", "w_zero_point", "3 elements"});
  }

}  // TEST_SUITE
