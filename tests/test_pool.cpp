// Pooling against the reference: max (dilation) and average (count_include_pad) over odd sizes, pads,
// strides, ceil_mode, auto_pad; global pools. Tolerance: max exact, average 1e-5 relative.
#include "layers/pool.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"

using namespace cldl;
using namespace cldl::test;

TEST_SUITE("pool") {

TEST_CASE("MaxPool and AveragePool over every attribute combination") {
  struct Case { int N, C, H, W, kh, kw, sh, sw, dh, dw, pt, pl, pb, pr; };
  const Case cases[] = {
      {1, 3, 7, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},  {2, 5, 7, 13, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},
      {1, 3, 13, 7, 3, 2, 1, 3, 1, 1, 0, 1, 2, 0},  {3, 2, 9, 11, 3, 3, 2, 2, 2, 2, 1, 2, 1, 0},
      {1, 1, 5, 5, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},   {2, 3, 8, 6, 1, 1, 3, 2, 1, 1, 0, 0, 0, 0},
  };
  for (const auto& c : cases)
    for (bool mx : {true, false})
      for (bool ceil_mode : {false, true})
        for (bool cip : {false, true}) {
          if (mx && cip) continue;
          ref::PoolParams p{mx, c.kh, c.kw, c.sh, c.sw, mx ? c.dh : 1, mx ? c.dw : 1, c.pt, c.pl, c.pb, c.pr, ceil_mode, cip};
          PoolConfig cfg;
          cfg.kind = mx ? PoolKind::max : PoolKind::average;
          cfg.input = Shape{c.N, c.C, c.H, c.W};
          cfg.kernel = {c.kh, c.kw};
          cfg.strides = {c.sh, c.sw};
          cfg.dilations = {p.dh, p.dw};
          cfg.pads = {c.pt, c.pl, c.pb, c.pr};
          cfg.ceil_mode = ceil_mode;
          cfg.count_include_pad = cip;
          CAPTURE(cfg.input.str());
          CAPTURE(c.kh);
          CAPTURE(mx);
          CAPTURE(ceil_mode);
          CAPTURE(cip);
          auto x = random_floats(cfg.input.numel(), 7 + c.H);
          int OH, OW;
          auto want = ref::pool2d(x, c.N, c.C, c.H, c.W, p, OH, OW);
          Shape so = Pool::validate(cfg);
          REQUIRE(so == Shape{c.N, c.C, OH, OW});
          auto op = Pool::create(ctx(), 0, cfg);
          auto got = down<float>(run_op(*op, {up(x, cfg.input)}, so));
          CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), mx ? 0.0 : 1e-5, mx ? 0.0 : 1e-6);
        }
}

TEST_CASE("auto_pad SAME_UPPER / SAME_LOWER / VALID and 1-D pooling") {
  for (AutoPad ap : {AutoPad::same_upper, AutoPad::same_lower, AutoPad::valid}) {
    PoolConfig cfg;
    cfg.kind = PoolKind::max;
    cfg.input = Shape{2, 3, 7, 13};
    cfg.kernel = {3, 4};
    cfg.strides = {2, 3};
    cfg.auto_pad = ap;
    auto op = Pool::create(ctx(), 0, cfg);
    auto pd = op->pads();
    ref::PoolParams p{true, 3, 4, 2, 3, 1, 1, pd[0], pd[1], pd[2], pd[3], false, false};
    auto x = random_floats(cfg.input.numel(), 99);
    int OH, OW;
    auto want = ref::pool2d(x, 2, 3, 7, 13, p, OH, OW);
    Shape so = Pool::validate(cfg);
    if (ap != AutoPad::valid) CHECK(so == Shape{2, 3, 4, 5});  // ceil(in / stride)
    REQUIRE(so == Shape{2, 3, OH, OW});
    if (ap == AutoPad::same_upper) CHECK(pd[2] >= pd[0]);
    if (ap == AutoPad::same_lower) CHECK(pd[0] >= pd[2]);
    auto got = down<float>(run_op(*op, {up(x, cfg.input)}, so));
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 0.0, 0.0);
  }
  PoolConfig cfg;
  cfg.kind = PoolKind::average;
  cfg.input = Shape{2, 5, 13};
  cfg.kernel = {1, 3};
  cfg.strides = {1, 2};
  cfg.pads = {0, 1, 0, 1};
  auto x = random_floats(cfg.input.numel(), 5);
  ref::PoolParams p{false, 1, 3, 1, 2, 1, 1, 0, 1, 0, 1, false, false};
  int OH, OW;
  auto want = ref::pool2d(x, 2, 5, 1, 13, p, OH, OW);
  Shape so = Pool::validate(cfg);
  REQUIRE(so == Shape{2, 5, OW});
  auto got = down<float>(run_op(*Pool::create(ctx(), 0, cfg), {up(x, cfg.input)}, so));
  CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
}

TEST_CASE("global pools over odd planes, batch 1 and larger") {
  for (Shape s : {Shape{1, 3, 7, 13}, Shape{4, 5, 9, 1}, Shape{2, 3, 150}}) {
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
  bad.kind = PoolKind::average;
  bad.dilations = {2, 1};
  expect_invalid([&] { Pool::validate(bad); }, {"AveragePool", "dilations[0]", "2"});
  bad = c;
  bad.kernel = {9, 3};
  expect_invalid([&] { Pool::validate(bad); }, {"MaxPool", "kernel_shape[0]", "9"});
  bad = c;
  bad.input = Shape{3, 7};
  expect_invalid([&] { Pool::validate(bad); }, {"MaxPool", "input X", "[3, 7]"});
}

}  // TEST_SUITE
