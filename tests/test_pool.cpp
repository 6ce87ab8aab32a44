// Pooling against the reference: max (dilations, Indices row- and column-major) and average (dilations,
// count_include_pad) over 1, 2 and 3 spatial dims, odd sizes, pads, strides, ceil_mode, auto_pad; global pools.
// Tolerance: max exact, average 1e-5 relative + 1e-6 absolute.
#include "layers/pool.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"

using namespace cldl;
using namespace cldl::test;

namespace {
// Runs cfg on x and compares with the reference (and the Indices output for MaxPool).
void check_pool(const PoolConfig& cfg, const std::vector<float>& x, const std::vector<int64_t>& pads) {
  const size_t n = cfg.input.rank() - 2;
  ref::PoolParams p;
  p.max = cfg.kind == PoolKind::max;
  p.lp = cfg.kind == PoolKind::lp ? cfg.p : 0;
  p.ceil_mode = cfg.ceil_mode;
  p.count_include_pad = cfg.count_include_pad;
  p.column_major = cfg.column_major_indices;
  std::array<int, 3> in{1, 1, 1}, out{};
  for (size_t i = 0; i < n; ++i) {
    const size_t a = 3 - n + i;
    in[a] = int(cfg.input[2 + i]);
    p.k[a] = int(cfg.kernel[i]);
    p.s[a] = cfg.strides.empty() ? 1 : int(cfg.strides[i]);
    p.d[a] = cfg.dilations.empty() ? 1 : int(cfg.dilations[i]);
    p.pb[a] = int(pads[i]);
    p.pe[a] = int(pads[i + n]);
  }
  std::vector<int64_t> want_idx;
  auto want = ref::pool3d(x, int(cfg.input[0]), int(cfg.input[1]), in, p, out, &want_idx);
  Shape so = Pool::validate(cfg);
  Shape ws{cfg.input[0], cfg.input[1]};
  for (size_t i = 0; i < n; ++i) ws.dims.push_back(out[3 - n + i]);
  REQUIRE(so == ws);
  auto op = Pool::create(ctx(), 0, cfg);
  Tensor y = ctx().alloc(so, DType::f32), ix = ctx().alloc(so, DType::i64);
  auto ec = ctx().exec();
  std::vector<Tensor> ins{up(x, cfg.input)}, outs{y};
  if (cfg.indices) outs.push_back(ix);
  op->enqueue(ins, outs, nullptr, ec);
  ctx().finish();
  auto got = down<float>(y);
  const bool mx = p.max && !p.lp;
  CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), mx ? 0.0 : 1e-5, mx ? 0.0 : 1e-6);
  if (cfg.indices) CHECK(down<int64_t>(ix) == want_idx);
}
}  // namespace

TEST_SUITE("pool") {

TEST_CASE("MaxPool and AveragePool 2-D over every attribute combination") {
  struct Case { int N, C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr; };
  const Case cases[] = {
      {1, 3, 7, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},  {2, 5, 7, 13, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},
      {1, 3, 13, 7, 3, 2, 1, 3, 1, 1, 0, 1, 2, 0},  {3, 2, 9, 11, 3, 3, 2, 2, 2, 2, 1, 2, 1, 0},
      {1, 1, 5, 5, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},   {2, 3, 8, 6, 1, 1, 3, 2, 1, 1, 0, 0, 0, 0},
      // Rows wide enough for the vector strips of the 8-output kernel (stride 1 and 2), and their edges.
      {2, 3, 6, 53, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},  {1, 2, 7, 61, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {1, 2, 5, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  {1, 2, 5, 47, 3, 2, 1, 1, 2, 2, 1, 0, 0, 1},
      // Small planes (the plane-per-work-item kernel, the CPU choice below 16 outputs a row): the digits
      // CNN's 2x2/2 on 8x8 and 4x4 maps, over more planes than a work-group, and a 3x1 plane.
      {9, 16, 8, 8, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},  {5, 32, 4, 4, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},
      {1, 3, 3, 1, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0},
  };
  for (const auto& c : cases)
    for (bool mx : {true, false})
      for (bool ceil_mode : {false, true})
        for (bool cip : {false, true}) {
          if (mx && cip) continue;
          for (int block : {1, 8, 64}) {
            PoolConfig cfg;
            cfg.kind = mx ? PoolKind::max : PoolKind::average;
            cfg.input = Shape{c.N, c.C, c.H, c.W};
            cfg.kernel = {c.kh, c.kw};
            cfg.strides = {c.sh, c.sw};
            cfg.dilations = {c.dh, c.dw};
            cfg.pads = {c.pt, c.pl, c.pb, c.pr};
            cfg.ceil_mode = ceil_mode;
            cfg.count_include_pad = cip;
            cfg.indices = mx && ceil_mode;  // with Indices: pool3d kernel; without: the 2-D fast path
            cfg.block = block;              // pool2d, pool2d_rows or pool2d_planes
            CAPTURE(cfg.input.str());
            CAPTURE(block);
            CAPTURE(c.kh);
            CAPTURE(mx);
            CAPTURE(ceil_mode);
            CAPTURE(cip);
            check_pool(cfg, random_floats(cfg.input.numel(), 7 + c.H), cfg.pads);
          }
        }
}

TEST_CASE("1-D and 3-D pools, dilations with count_include_pad") {
  for (bool mx : {true, false})
    for (bool cip : {false, true})
      for (bool ceil_mode : {false, true}) {
        if (mx && cip) continue;
        PoolConfig c1;
        c1.kind = mx ? PoolKind::max : PoolKind::average;
        c1.input = Shape{2, 5, 13};
        c1.kernel = {3};
        c1.strides = {2};
        c1.pads = {1, 1};
        c1.count_include_pad = cip;
        c1.ceil_mode = ceil_mode;
        check_pool(c1, random_floats(c1.input.numel(), 5), c1.pads);
        PoolConfig c3 = c1;
        c3.input = Shape{1, 3, 5, 7, 6};
        c3.kernel = {2, 3, 2};
        c3.strides = {1, 2, 2};
        c3.dilations = {2, 1, 2};
        c3.pads = {1, 0, 1, 0, 1, 1};
        check_pool(c3, random_floats(c3.input.numel(), 6), c3.pads);
      }
}

TEST_CASE("MaxPool Indices column-major (storage_order 1) over 1, 2 and 3 spatial dims") {
  struct Case {
    Shape in;
    std::vector<int64_t> k, s, d, pads;
  };
  const Case cases[] = {
      {Shape{2, 3, 13}, {3}, {2}, {1}, {1, 1}},
      {Shape{1, 2, 7, 5}, {3, 2}, {2, 2}, {1, 2}, {1, 0, 1, 1}},
      {Shape{3, 1, 9, 11}, {2, 3}, {1, 3}, {1, 1}, {0, 1, 0, 2}},
      {Shape{1, 3, 5, 7, 6}, {2, 3, 2}, {1, 2, 2}, {2, 1, 2}, {1, 0, 1, 0, 1, 1}},
  };
  for (const auto& c : cases) {
    PoolConfig cfg;
    cfg.kind = PoolKind::max;
    cfg.input = c.in;
    cfg.kernel = c.k;
    cfg.strides = c.s;
    cfg.dilations = c.d;
    cfg.pads = c.pads;
    cfg.indices = true;
    cfg.column_major_indices = true;
    CAPTURE(c.in.str());
    check_pool(cfg, random_floats(cfg.input.numel(), 21), cfg.pads);
  }
}

TEST_CASE("auto_pad SAME_UPPER / SAME_LOWER / VALID") {
  for (AutoPad ap : {AutoPad::same_upper, AutoPad::same_lower, AutoPad::valid}) {
    PoolConfig cfg;
    cfg.kind = PoolKind::max;
    cfg.input = Shape{2, 3, 7, 13};
    cfg.kernel = {3, 4};
    cfg.strides = {2, 3};
    cfg.auto_pad = ap;
    auto op = Pool::create(ctx(), 0, cfg);
    auto pd = op->pads();
    if (ap != AutoPad::valid) CHECK(Pool::validate(cfg) == Shape{2, 3, 4, 5});  // ceil(in / stride)
    if (ap == AutoPad::same_upper) CHECK(pd[2] >= pd[0]);
    if (ap == AutoPad::same_lower) CHECK(pd[0] >= pd[2]);
    check_pool(cfg, random_floats(cfg.input.numel(), 99), pd);
  }
}

TEST_CASE("global pools over odd planes, batch 1 and larger (a plane per work-item on CPUs from 16 planes)") {
  for (Shape s : {Shape{1, 3, 7, 13}, Shape{4, 5, 9, 1}, Shape{2, 3, 150}, Shape{1, 2, 3, 4, 5}, Shape{1, 37, 7, 7}, Shape{3, 17, 11, 5},
                  Shape{1, 16, 37, 29}, Shape{2, 9, 41, 23}}) {  // planes of many float16 vectors and a tail
    auto x = random_floats(s.numel(), 3);
    int64_t plane = s.numel() / (s[0] * s[1]);
    for (bool mx : {true, false}) {
      PoolConfig cfg;
      cfg.kind = mx ? PoolKind::global_max : PoolKind::global_average;
      cfg.input = s;
      Shape so = Pool::validate(cfg);
      CHECK(so.numel() == s[0] * s[1]);
      CHECK(so.rank() == s.rank());
      auto got = down<float>(run_op(*Pool::create(ctx(), 0, cfg), {up(x, s)}, so));
      std::vector<float> want(so.numel());
      for (int64_t i = 0; i < so.numel(); ++i) {
        double acc = mx ? -1e30 : 0;
        for (int64_t k = 0; k < plane; ++k) acc = mx ? std::max<double>(acc, x[i * plane + k]) : acc + x[i * plane + k];
        want[i] = float(mx ? acc : acc / plane);
      }
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
    }
  }
}

TEST_CASE("LpPool over 1, 2 and 3 spatial dims: p 1 to 4, pads, strides, dilations, ceil_mode, auto_pad") {
  struct Case {
    Shape in;
    std::vector<int64_t> k, s, d, pads;
    int p;
    bool ceil;
    AutoPad ap;
  };
  const Case cases[] = {
      {Shape{1, 3, 31}, {2}, {1}, {}, {0, 0}, 3, false, AutoPad::notset},
      {Shape{2, 3, 9, 11}, {3, 3}, {2, 2}, {}, {1, 0, 2, 1}, 2, false, AutoPad::notset},
      {Shape{1, 1, 4, 4}, {2, 2}, {1, 1}, {2, 2}, {0, 0, 0, 0}, 2, false, AutoPad::notset},
      {Shape{1, 2, 7, 5}, {2, 2}, {1, 1}, {}, {}, 4, false, AutoPad::same_lower},
      {Shape{1, 2, 7, 5}, {3, 2}, {2, 2}, {}, {0, 0, 0, 0}, 1, true, AutoPad::notset},
      {Shape{1, 2, 5, 6, 7}, {2, 2, 2}, {1, 2, 1}, {}, {0, 1, 0, 1, 0, 1}, 3, false, AutoPad::notset},
  };
  for (const auto& c : cases) {
    CAPTURE(c.in.str());
    PoolConfig cfg;
    cfg.kind = PoolKind::lp;
    cfg.input = c.in;
    cfg.kernel = c.k;
    cfg.strides = c.s;
    cfg.dilations = c.d;
    cfg.pads = c.pads;
    cfg.p = c.p;
    cfg.ceil_mode = c.ceil;
    cfg.auto_pad = c.ap;
    auto op = Pool::create(ctx(), 0, cfg);
    check_pool(cfg, random_floats(size_t(c.in.numel()), 17, -2.0f, 2.0f), op->pads());
  }
  PoolConfig bad;
  bad.kind = PoolKind::lp;
  bad.input = Shape{1, 1, 4};
  bad.kernel = {2};
  bad.p = 0;
  expect_invalid([&] { Pool::validate(bad); }, {"LpPool", "p", "0"});
}

// MaxPool 3x3 of the given stride; pad_bits: bit 0 top, 1 left, 2 bottom, 3 right pad of 1.
static PoolConfig max3x3(const Shape& in, int64_t stride, int pad_bits, bool ceil_mode, int block) {
  PoolConfig cfg;
  cfg.input = in;
  cfg.kernel = {3, 3};
  cfg.strides = {stride, stride};
  cfg.pads = {pad_bits & 1, pad_bits >> 1 & 1, pad_bits >> 2 & 1, pad_bits >> 3 & 1};
  cfg.ceil_mode = ceil_mode;
  cfg.block = block;
  return cfg;
}

// Checks cfg against the reference on random data with repeated negative values (ties, and the padding must
// never win: it is not a zero); with `separable`, that CPUs choose a 3x3 kernel (pool2d_3x3 or, on rows of
// at most 32 columns, pool2d_3x3_narrow). Returns the input.
static std::vector<float> check_max3x3(const PoolConfig& cfg, int pad_bits, bool separable) {
  CAPTURE(cfg.input.str());
  CAPTURE(pad_bits);
  auto x = random_floats(cfg.input.numel(), 11 + int(cfg.input.numel()) + pad_bits);
  for (size_t i = 0; i < x.size(); i += 7) x[i] = -5.0f;
  check_pool(cfg, x, cfg.pads);
  if (separable && ctx().device().info.type == DeviceType::cpu)
    CHECK(Pool::create(ctx(), 0, cfg)->algorithm().find("3x3") != std::string::npos);
  return x;
}

TEST_CASE("3x3 stride 1 pools (separable kernel): max over every pad combination, average unpadded, batch 1 and 3") {
  // pool2d_3x3 against the reference: rows narrower than one vector strip (all sliding), rows with one
  // strip, with overlapping last strips and long rows; googlenet's 14x14 and 7x7; pads 0 / 1 on each side.
  const int sizes[][2] = {{1, 1}, {2, 3}, {3, 9}, {7, 7}, {5, 10}, {6, 11}, {14, 14}, {9, 17}, {4, 28}, {3, 45}};
  for (auto [h, w] : sizes)
    for (int pads = 0; pads < 16; ++pads)
      for (int batch : {1, 3})
        for (int block : {0, 3}) {
          auto cfg = max3x3(Shape{batch, 5, h, w}, 1, pads, pads % 3 == 0, block);
          if (h + cfg.pads[0] + cfg.pads[2] < 3 || w + cfg.pads[1] + cfg.pads[3] < 3) continue;
          CAPTURE(block);
          auto x = check_max3x3(cfg, pads, block == 0);
          // AveragePool 3x3/1 without padding (inception_v3's): sums, divided by 9.
          if (pads == 0)
            for (bool cip : {false, true}) {
              auto avg = cfg;
              avg.kind = PoolKind::average;
              avg.count_include_pad = cip;
              CAPTURE(cip);
              check_pool(avg, x, avg.pads);
            }
        }
  // MaxPool 3x3/2 (the stem pools) with rows of 16 outputs or more: strips of 8 by vload16, the edges one by
  // one, ceil_mode windows past the end.
  const int wide[][2] = {{5, 33}, {4, 34}, {3, 35}, {7, 50}, {2, 57}, {9, 113}};
  for (auto [h, w] : wide)
    for (int pads = 0; pads < 16; ++pads)
      for (bool ceil_mode : {false, true}) {
        auto cfg = max3x3(Shape{pads % 5 == 0 ? 3 : 1, 4, h, w}, 2, pads, ceil_mode, 0);
        if (h + cfg.pads[0] + cfg.pads[2] < 3) continue;
        CAPTURE(ceil_mode);
        check_max3x3(cfg, pads, true);
      }
  // Not these kernels: pads of 2, strides 2 x 1 on rows of more than 32, dilation 2, average with pads or at
  // stride 2, a 3x2 window; block 3 on them is an error.
  PoolConfig c;
  c.input = Shape{1, 2, 9, 40};
  c.kernel = {3, 3};
  auto not3 = [&](PoolConfig b, const char* what) {
    CAPTURE(what);
    check_pool(b, random_floats(b.input.numel(), 3), b.pads.empty() ? std::vector<int64_t>(4, 0) : b.pads);
    CHECK(Pool::create(ctx(), 0, b)->algorithm().find("3x3") == std::string::npos);
    b.block = 3;
    expect_invalid([&] { Pool::create(ctx(), 0, b); }, {b.kind == PoolKind::max ? "MaxPool" : "AveragePool",
                                                         "block 3", "[1, 2, 9, 40]"});
  };
  auto b = c;
  b.pads = {2, 1, 1, 1};
  not3(b, "pads 2");
  b = c;
  b.strides = {2, 1};
  not3(b, "stride 2");
  b = c;
  b.dilations = {1, 2};
  not3(b, "dilation 2");
  b = c;
  b.kind = PoolKind::average;
  b.pads = {1, 1, 1, 1};
  not3(b, "average with pads");
  b = c;
  b.kind = PoolKind::average;
  b.input = Shape{1, 2, 9, 40};
  b.strides = {2, 2};
  b.block = 0;
  check_pool(b, random_floats(b.input.numel(), 3), std::vector<int64_t>(4, 0));
  CHECK(Pool::create(ctx(), 0, b)->algorithm().find("3x3") == std::string::npos);
  b = c;
  b.kernel = {3, 2};
  not3(b, "3x2");
}

TEST_CASE("3x3 max pools on rows of at most 32 columns (narrow kernel): strides 1 and 2, every pad, ceil_mode") {
  // pool2d_3x3_narrow against the reference: rows in one vector (1..16 columns) and two (17..32), strides 1
  // and 2 on each axis, pads 0 / 1 on each side, ceil_mode windows past the end, planes fewer and more than a
  // work-group (5 and 15), the last plane's rows read element by element; googlenet's 28 -> 14 at stride 2.
  const int sizes[][2] = {{1, 1}, {3, 2}, {7, 7}, {5, 14}, {2, 16}, {6, 17}, {28, 28}, {4, 31}, {3, 32}};
  for (auto [h, w] : sizes)
    for (int sh : {1, 2})
      for (int sw : {1, 2})
        for (int pads = 0; pads < 16; ++pads)
          for (int batch : {1, 3}) {
            auto cfg = max3x3(Shape{batch, 5, h, w}, 1, pads, (pads + sh + sw) % 2 == 0, pads % 5 == 0 ? 32 : 0);
            cfg.strides = {sh, sw};
            if (h + cfg.pads[0] + cfg.pads[2] < 3 || w + cfg.pads[1] + cfg.pads[3] < 3) continue;
            CAPTURE(sh);
            CAPTURE(sw);
            CAPTURE(cfg.block);
            check_max3x3(cfg, pads, true);
            if (ctx().device().info.type == DeviceType::cpu)
              CHECK(Pool::create(ctx(), 0, cfg)->algorithm().find("float16 vectors") != std::string::npos);
          }
  // NaN inputs are skipped, as by the other max kernels (fmax): a window of NaNs and one value gives the value.
  {
    auto cfg = max3x3(Shape{1, 1, 3, 3}, 1, 15, false, 32);
    std::vector<float> x(9, std::nanf(""));
    x[4] = 2.5f;  // the centre, inside every window of the padded 3x3
    auto op = Pool::create(ctx(), 0, cfg);
    Tensor y = ctx().alloc(Shape{1, 1, 3, 3}, DType::f32);
    auto ec = ctx().exec();
    std::vector<Tensor> ins{up(x, cfg.input)}, outs{y};
    op->enqueue(ins, outs, nullptr, ec);
    ctx().finish();
    CHECK(down<float>(y) == std::vector<float>(9, 2.5f));
  }
  // Rows of 33 columns, pads of 2, average: not this kernel; block 32 on them is an error naming the input.
  for (auto [in, pad, kind] : {std::tuple{Shape{1, 2, 5, 33}, int64_t(1), PoolKind::max},
                               std::tuple{Shape{1, 2, 5, 20}, int64_t(2), PoolKind::max},
                               std::tuple{Shape{1, 2, 5, 20}, int64_t(1), PoolKind::average}}) {
    PoolConfig b;
    b.kind = kind;
    b.input = in;
    b.kernel = {3, 3};
    b.pads = {pad, pad, pad, pad};
    CHECK(Pool::create(ctx(), 0, b)->algorithm().find("float16 vectors") == std::string::npos);
    b.block = 32;
    expect_invalid([&] { Pool::create(ctx(), 0, b); }, {"block 32", in.str()});
  }
}

TEST_CASE("bad pool configurations name the op, the argument and the value") {
  PoolConfig c;
  c.input = Shape{1, 3, 7, 13};
  c.kernel = {3, 3};
  auto bad = c;
  bad.strides = {0, 1};
  expect_invalid([&] { Pool::validate(bad); }, {"MaxPool", "strides[0]", "0"});
  bad = c;
  bad.pads = {0, -1, 0, 0};
  expect_invalid([&] { Pool::validate(bad); }, {"MaxPool", "pads[1]", "-1"});
  bad = c;
  bad.kernel = {3};
  expect_invalid([&] { Pool::validate(bad); }, {"MaxPool", "kernel_shape", "1 entries", "2"});
  bad = c;
  bad.kernel = {9, 3};
  expect_invalid([&] { Pool::validate(bad); }, {"MaxPool", "kernel_shape[0]", "9"});
  bad = c;
  bad.input = Shape{3, 7};
  expect_invalid([&] { Pool::validate(bad); }, {"MaxPool", "input X", "[3, 7]"});
  bad = c;
  bad.kind = PoolKind::average;
  bad.indices = true;
  expect_invalid([&] { Pool::validate(bad); }, {"AveragePool", "Indices"});
}

}  // TEST_SUITE
