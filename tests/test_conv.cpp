// Conv / ConvTranspose / BatchNorm folding against tests/reference/conv_ref.cpp (double accumulation).
//
// Tolerances (|got - want| <= atol + rtol * |want|), inputs and weights uniform in [-1, 1]:
//  - direct, depthwise, im2col + GEMM, 1x1 GEMM, ConvTranspose: rtol 1e-4, atol 1e-4 (fp32 accumulation
//    of at most a few hundred products; differences are summation-order rounding only).
//  - Winograd F(2x2,3x3) and F(4x4,3x3): rtol 1e-3, atol 1e-3: the transforms add and subtract up to 16
//    (F(4x4): 36, with weights up to 25 and 64) input values per tile before the products and as many products
//    after, so rounding grows by about that factor (F(4x4,3x3) measured within about 1e-5 here).
//  - FFT: rtol 1e-3, atol 2e-3: the error of a float FFT is relative to the whole plane's energy
//    (about log2(FH*FW) * eps * norm), not to each output, so small outputs get an absolute bound.
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "layers/conv.hpp"
#include "tests/reference/conv_ref.hpp"
#include <limits>

#include "support/test_util.hpp"

using namespace cldl;
using cldl::test::ctx;

namespace {

struct Problem {
  const char* name;
  int64_t N, C, H, W, K, KH, KW;
  int64_t SH = 1, SW = 1, DH = 1, DW = 1, PT = 0, PL = 0, PB = 0, PR = 0, groups = 1;
  bool bias = false;
  Activation act{};
  bool one_d = false;  // H and KH must be 1; pads/strides/dilations given as 1-D attributes
};

ConvConfig make_config(const Problem& p, uint32_t seed) {
  ConvConfig c;
  c.input = p.one_d ? Shape{p.N, p.C, p.W} : Shape{p.N, p.C, p.H, p.W};
  Shape ws = p.one_d ? Shape{p.K, p.C / p.groups, p.KW} : Shape{p.K, p.C / p.groups, p.KH, p.KW};
  c.weight = test::random_tensor(ws, seed);
  if (p.bias) c.bias = test::random_tensor(Shape{p.K}, seed + 1);
  if (p.one_d) {
    c.strides = {p.SW}, c.dilations = {p.DW}, c.pads = {p.PL, p.PR};
  } else {
    c.strides = {p.SH, p.SW}, c.dilations = {p.DH, p.DW}, c.pads = {p.PT, p.PL, p.PB, p.PR};
  }
  c.groups = p.groups;
  c.act = p.act;
  return c;
}

ref::ConvParams ref_params(const Problem& p) {
  ref::ConvParams r;
  r.N = p.N, r.C = p.C, r.H = p.H, r.W = p.W, r.K = p.K, r.KH = p.KH, r.KW = p.KW;
  r.SH = p.SH, r.SW = p.SW, r.DH = p.DH, r.DW = p.DW, r.PT = p.PT, r.PL = p.PL, r.PB = p.PB, r.PR = p.PR;
  r.groups = p.groups;
  return r;
}

// Runs `op` on host input x (with a fresh workspace) and returns the output.
template <typename OpT>
std::vector<float> run(OpT& op, const HostTensor& x) {
  Tensor dx = ctx().upload(x);
  Tensor dy = ctx().alloc(op.output_shape(), DType::f32);
  Tensor ws;
  if (op.workspace_bytes()) ws = ctx().alloc(Shape{int64_t(op.workspace_bytes())}, DType::u8);
  auto ec = ctx().exec();
  Tensor in[1] = {dx}, out[1] = {dy};
  op.enqueue(in, out, op.workspace_bytes() ? &ws : nullptr, ec);
  HostTensor h = ctx().download(dy);
  return std::vector<float>(h.as<float>(), h.as<float>() + h.numel());
}

void tolerance(ConvAlgo a, double& rtol, double& atol) {
  rtol = 1e-4, atol = 1e-4;
  if (a == ConvAlgo::winograd) rtol = 1e-3, atol = 1e-3;
  if (a == ConvAlgo::fft) rtol = 1e-3, atol = 2e-3;
}

const ConvAlgo kAlgos[] = {ConvAlgo::direct,   ConvAlgo::im2col_gemm, ConvAlgo::gemm_1x1,
                           ConvAlgo::depthwise, ConvAlgo::winograd,    ConvAlgo::fft};

// Every applicable algorithm against the reference (FFT only when `fft`: clFFT compiles kernels for each
// plan, ~seconds each on PoCL); returns how many ran.
int check_all_algorithms(const Problem& p, uint32_t seed, bool fft) {
  ConvConfig cfg = make_config(p, seed);
  HostTensor x = test::random_tensor(cfg.input, seed + 7);
  int64_t OH = 0, OW = 0;
  auto want = ref::conv2d(ref_params(p), x.as<float>(), cfg.weight.as<float>(),
                          cfg.bias ? cfg.bias->as<float>() : nullptr, p.act, OH, OW);
  CHECK(ConvOp::validate(cfg) == (p.one_d ? Shape{p.N, p.K, OW} : Shape{p.N, p.K, OH, OW}));
  int ran = 0;
  for (ConvAlgo a : kAlgos) {
    if (!ConvOp::applies(cfg, a) || (a == ConvAlgo::fft && !fft)) continue;
    cfg.algo = a;
    // Depthwise: both kernels (1 and 8 outputs per work-item); im2col: both (per pixel, per row).
    // Winograd: both transforms (a tile per work-item, strips of 8 tiles).
    // Depthwise: the plane kernel too, where its padded copy fits.
    std::vector<int> blocks{0};
    // Direct: both kernels (a pixel per work-item, rows in strips of 8; 2-D only).
    if (a == ConvAlgo::depthwise || a == ConvAlgo::im2col_gemm || a == ConvAlgo::winograd) blocks = {1, 8};
    // Direct, group 1: the small-plane kernel too (8 pixels x 16 channels per work-item).
    if (a == ConvAlgo::direct && !p.one_d) blocks = {1, 8};
    if (a == ConvAlgo::direct && !p.one_d && p.groups == 1) blocks.push_back(3);
    // Direct, grouped: the band kernel (conv_grouped_band) where it applies.
    if (a == ConvAlgo::direct && !p.one_d && p.groups > 1 && grouped_band_geometry(ConvOp::geometry(cfg), 0).fits)
      blocks.push_back(4);
    const bool plane = (p.SW == 1 || p.SW == 2) &&
                       ((OH - 1) * p.SH + (p.KH - 1) * p.DH + 1) *
                               (((OW + 7) / 8 * 8 - 8) * p.SW + (p.KW - 1) * p.DW + (p.SW == 1 ? 8 : 16)) <=
                           2304;
    if (a == ConvAlgo::depthwise && plane) blocks.push_back(64);
    // Depthwise: the flattened-plane kernel (conv_dw_flat) where the output plane is the input's (stride 1).
    const bool same = p.SH == 1 && p.SW == 1 && OH == p.H && OW == p.W;
    if (a == ConvAlgo::depthwise && same) blocks.push_back(16);
    // Depthwise: the split-rows kernel (conv_dw_s2) at stride 2, undilated.
    if (a == ConvAlgo::depthwise && p.SH == 2 && p.SW == 2 && p.DH == 1 && p.DW == 1 && p.PL < p.KW)
      blocks.push_back(32);
    // Depthwise: conv_grouped_band's depthwise form where it applies.
    if (a == ConvAlgo::depthwise && grouped_band_geometry(ConvOp::geometry(cfg), 0, nullptr, true).fits)
      blocks.push_back(128);
    // Winograd: F(2x2,3x3) and F(4x4,3x3), each with both transforms.
    std::vector<int> tiles{0};
    if (a == ConvAlgo::winograd) tiles = {2, 4};
    for (int tile : tiles) {
      for (int block : blocks) {
        cfg.winograd_tile = tile;
        cfg.depthwise_block = a == ConvAlgo::depthwise ? block : 0;
        cfg.im2col_kernel = a == ConvAlgo::im2col_gemm ? (block == 1 ? 1 : 2) : 0;
        cfg.winograd_kernel = a == ConvAlgo::winograd ? (block == 1 ? 1 : 2) : 0;
        cfg.direct_kernel = a == ConvAlgo::direct ? (block == 1 ? 1 : block == 3 || block == 4 ? block : 2) : 0;
        auto op = ConvOp::create(ctx(), 0, cfg);
        CHECK(op->algorithm() == to_string(a));
        auto got = run(*op, x);
        REQUIRE(got.size() == want.size());
        double rtol, atol;
        tolerance(a, rtol, atol);
        INFO(std::string(p.name) << " with " << to_string(a) << " block " << block << " tile " << tile);
        CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), rtol, atol);
      }
    }
    ++ran;
  }
  return ran;
}

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_SUITE("conv") {

TEST_CASE("every applicable algorithm matches the reference on the same problem") {
  // relu and silu: activations epilogues apply to whole vectors; leaky: element by element.
  const Activation relu(Act::relu), leaky(Act::leaky_relu, 0.1f), silu(Act::silu), hswish(Act::hard_swish);
  // name, N, C, H, W, K, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR, groups, bias, act, one_d
  const Problem problems[] = {
      {"3x3 pad 1 bias relu", 3, 5, 7, 13, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, relu},
      {"3x3 unpadded K 11", 1, 3, 7, 13, 11, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, {}},
      {"3x3 stride 2 asymmetric pads", 1, 3, 7, 13, 5, 3, 3, 2, 2, 1, 1, 0, 1, 2, 1, 1, false, {}},
      {"3x3 dilation 2", 3, 5, 7, 13, 3, 3, 3, 1, 1, 2, 2, 2, 1, 0, 2, 1, true, {}},
      {"2x3 groups 3 stride 2x1 dilation 1x2", 3, 6, 7, 13, 9, 2, 3, 2, 1, 1, 2, 1, 0, 0, 2, 3, true, leaky},
      {"depthwise 3x3", 3, 5, 7, 13, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, true, relu},
      {"depthwise 5x5 stride 2 dilation 2", 1, 3, 7, 13, 3, 5, 5, 2, 2, 2, 2, 2, 2, 2, 2, 3, false, {}},
      // Rows wide enough for the vector strips of the 8-output kernel, and their edges.
      {"depthwise 3x3 wide", 2, 4, 9, 45, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, true, leaky},
      {"depthwise 3x3 stride 2 wide", 1, 3, 8, 67, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, true, relu},
      {"depthwise 5x5 stride 3 dilation 2 wide", 1, 2, 11, 70, 2, 5, 5, 3, 3, 2, 2, 3, 1, 0, 2, 2, false, {}},
      {"depthwise 5x5 stride 2 pad 2 (EfficientNet)", 2, 6, 14, 15, 6, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 6, true, leaky},
      {"depthwise 1x7 unpadded", 1, 3, 1, 41, 3, 1, 7, 1, 1, 1, 1, 0, 0, 0, 0, 3, true, {}},
      // The plane kernel built for its kernel size and stride: 7x7 (ConvNeXt) at batch 1, and pads wider than
      // a 3x2 map on one side and none on the other (its padded copy row by row).
      {"depthwise 7x7 pad 3 batch 1", 1, 5, 9, 11, 5, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 5, true, relu},
      {"depthwise 3x3 asymmetric pads on 3x2", 2, 3, 3, 2, 3, 3, 3, 1, 1, 1, 1, 2, 0, 1, 3, 3, false, hswish},
      // Rows of tiles wide enough for the Winograd strips of 8 tiles: a full strip read in place, strips at
      // the padding edges, a partial last strip, an odd last tile column and row; an activation done per
      // element (leaky) and one in vectors (ReLU).
      {"3x3 pad 1 wide", 2, 3, 9, 37, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, leaky},
      {"3x3 unpadded wide", 1, 2, 6, 40, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, relu},
      {"3x3 pad 1 wide silu", 1, 17, 11, 38, 18, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, silu},
      // F(4x4,3x3)'s strips of 8 tiles read 34 columns: the middle strip here reads them in place, the first
      // and the partial last one (3 tiles) at the edges; a partial last row of tiles (13 = 3 * 4 + 1).
      {"3x3 pad 1 wider relu", 1, 3, 13, 75, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, relu},
      {"depthwise 3x3 wide hard-swish", 1, 3, 6, 70, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, true, hswish},
      {"1x1 bias relu", 3, 5, 7, 13, 7, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, true, relu},
      {"1x1 groups 2", 1, 6, 7, 13, 4, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 2, true, {}},
      {"1x1 stride 2", 1, 5, 7, 13, 3, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0, 1, false, {}},
      // GEMMs whose columns (the output plane) leave a tail past whole 64-column strips: 14x14 = 196 (4 left),
      // 10x10 = 100 (36 left).
      {"1x1 on 14x14 bias relu", 1, 24, 14, 14, 13, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, true, relu},
      {"3x3 pad 1 on 10x10 bias leaky", 2, 5, 10, 10, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, leaky},
      {"7x7 pad 3", 3, 3, 7, 13, 4, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 1, true, {}},
      {"5x4 asymmetric pads", 1, 3, 7, 13, 5, 5, 4, 1, 1, 1, 1, 2, 0, 1, 3, 1, true, relu},
      // Grouped, not depthwise (RegNet's groups of 8): the rows kernel's 8-channel blocks with a partial last
      // block (12 per group), strips read in place and at the edges, an overlapping last strip, rows
      // shorter than a strip, stride 2 and dilation.
      {"3x3 groups 4 pad 1 wide", 2, 20, 9, 37, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, true, relu},
      {"3x3 groups 3 stride 2 wide silu", 1, 24, 8, 45, 24, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, true, silu},
      {"3x3 groups 2 narrow leaky", 3, 6, 5, 6, 10, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, leaky},
      {"3x3 groups 2 dilation 2 stride 2", 1, 16, 11, 29, 16, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, false, {}},
      // Small output planes (conv_small_plane, the automatic choice on CPUs up to 64 pixels): the digits CNN's
      // 16 -> 32 on 4x4 with a partial channel block (37), a 4x3 plane whose last tile overlaps, a 2x1 plane
      // shorter than a tile, a 7x7 plane (49 = 6 tiles + 1) dilated, batch 1.
      {"3x3 pad 1 on 4x4 K 37 relu", 5, 16, 4, 4, 37, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, relu},
      {"3x3 stride 2 asymmetric pads on 7x7 batch 1", 1, 6, 7, 7, 20, 3, 3, 2, 2, 1, 1, 1, 0, 1, 1, 1, true, leaky},
      {"2x2 on a 3x2 image", 1, 3, 3, 2, 17, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, {}},
      {"3x3 dilation 2 pad 2 on 7x7 silu", 2, 4, 7, 7, 16, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 1, true, silu},
      {"1-D k5 stride 2 dilation 2", 3, 5, 1, 29, 4, 1, 5, 1, 2, 1, 2, 0, 3, 0, 1, 1, true, {}, true},
      {"1-D k7 stride 1", 1, 3, 1, 31, 5, 1, 7, 1, 1, 1, 1, 0, 2, 0, 4, 1, false, relu, true},
  };
  int total = 0;
  uint32_t seed = 100;
  for (const auto& p : problems) {
    const bool fft = p.KH * p.KW >= 49 || (p.one_d && p.KW == 7);  // one 2-D and one 1-D FFT problem
    int ran = check_all_algorithms(p, seed += 10, fft);
    CHECK_MESSAGE(ran >= 2, p.name);  // every problem is checked by at least two algorithms
    total += ran;
  }
  CHECK(total >= 35);
}

// Each problem through the depthwise kernel `block` (ConvConfig::depthwise_block) against the reference.
template <size_t N>
void check_depthwise_block(const Problem (&problems)[N], int block, uint32_t seed) {
  for (const auto& p : problems) {
    INFO(std::string(p.name) << " depthwise_block " << block);
    ConvConfig cfg = make_config(p, seed += 10);
    HostTensor x = test::random_tensor(cfg.input, seed + 7);
    int64_t OH = 0, OW = 0;
    auto want = ref::conv2d(ref_params(p), x.as<float>(), cfg.weight.as<float>(),
                            cfg.bias ? cfg.bias->as<float>() : nullptr, p.act, OH, OW);
    cfg.algo = ConvAlgo::depthwise;
    cfg.depthwise_block = block;
    auto op = ConvOp::create(ctx(), 0, cfg);
    auto got = run(*op, x);
    REQUIRE(got.size() == want.size());
    CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), 1e-4, 1e-4);
  }
}

// A problem the kernel `block` does not take: create() fails naming the setting.
void check_depthwise_refused(const Problem& p, int block) {
  ConvConfig bad = make_config(p, 7);
  bad.algo = ConvAlgo::depthwise;
  bad.depthwise_block = block;
  CHECK(error_of([&] { ConvOp::create(ctx(), 0, bad); }).find(fmt::format("depthwise_block {}", block)) !=
        std::string::npos);
}

// conv_dw_flat (depthwise_block 16, the CPU choice for stride-1 depthwise layers whose output plane is
// the input's): one band (7x7, 13x13, 15x17) and several with a partial last band (56x57: 3 bands of 19
// rows; 112x113: 14 of 8 rows, 9 float16 vectors of 904 outputs with the last one partial); planes
// narrower than a vector (3x5) and shorter than the kernel (2x9 under 5x5); asymmetric pads whose sum
// keeps the plane (pads 0 and 2 for 3x3); dilation 2 (DeepLab's 5x5 pad 4); every epilogue of the
// MobileNets and EfficientNets (none, ReLU, Clip as ReLU6, hard-swish, SiLU) and an element-wise one
// (leaky); batch 1 and 3, odd channel counts. Checked against the reference and against the rows kernel.
TEST_CASE("depthwise flattened-plane kernel (conv_dw_flat) matches the reference") {
  const Activation relu(Act::relu), leaky(Act::leaky_relu, 0.1f), silu(Act::silu), hswish(Act::hard_swish),
      relu6(Act::clip, 0.0f, 1.5f);  // ReLU6's Clip, with a bound the data reaches
  // name, N, C, H, W, K, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR, groups, bias, act
  const Problem problems[] = {
      {"5x5 on 7x7 hard-swish", 1, 13, 7, 7, 13, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 13, true, hswish},
      {"3x3 on 13x13 relu6 batch 3", 3, 7, 13, 13, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 7, true, relu6},
      {"3x3 on 15x17 silu", 1, 5, 15, 17, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, true, silu},
      {"5x5 on 15x17 no bias", 3, 3, 15, 17, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 3, false, {}},
      {"3x3 pads 0 and 2 on 11x9 relu", 1, 3, 11, 9, 3, 3, 3, 1, 1, 1, 1, 0, 2, 2, 0, 3, true, relu},
      {"5x5 dilation 2 pad 4 on 16x16 hard-swish", 1, 9, 16, 16, 9, 5, 5, 1, 1, 2, 2, 4, 4, 4, 4, 9, true, hswish},
      {"3x3 on 56x57 leaky", 1, 3, 56, 57, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, true, leaky},
      {"3x3 on 112x113 relu6", 1, 2, 112, 113, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, relu6},
      {"3x3 on 3x5 batch 3", 3, 5, 3, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, true, silu},
      {"5x5 on 2x9", 1, 3, 2, 9, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 3, true, relu},
      {"1x1 on 7x7", 1, 3, 7, 7, 3, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 3, true, relu},
  };
  check_depthwise_block(problems, 16, 900);
  // Only where the output plane is the input's: stride 2 or a shrinking plane is an error naming the setting.
  check_depthwise_refused({"3x3 stride 2", 1, 3, 9, 9, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, false, {}}, 16);
  check_depthwise_refused({"3x3 unpadded", 1, 3, 9, 9, 3, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0, 3, false, {}}, 16);
}

// conv_dw_s2 (depthwise_block 32, the CPU choice for stride-2 depthwise layers whose plane is too large for the
// plane kernel), bands of up to 4 output rows (whole and partial last bands): MobileNet's 3x3 pad 1 and
// EfficientNet's 5x5 pad 2 on even and odd rows, rows of fewer than 16 outputs and ones with a partial last
// vector (112 -> 56: 3 whole + 1 of 8; 37 -> 19), more than 32 input columns (the split's vector loop, its last
// lanes past the row cleared) and fewer; pads 0 (a valid conv: the split row longer than the outputs
// need), asymmetric and one of 2 on a 3x3 (the left tap reading the front zeros); odd heights (the last output
// row's taps below the plane); batch 1 and 3, epilogues, against the reference.
TEST_CASE("depthwise stride-2 kernel (conv_dw_s2) matches the reference") {
  const Activation relu(Act::relu), hswish(Act::hard_swish), relu6(Act::clip, 0.0f, 1.5f), silu(Act::silu);
  // name, N, C, H, W, K, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR, groups, bias, act
  const Problem problems[] = {
      {"3x3 on 112x112 relu6", 1, 3, 112, 112, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 3, true, relu6},
      {"5x5 on 37x37 silu batch 3", 3, 5, 37, 37, 5, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 5, true, silu},
      {"3x3 on 15x9 hard-swish", 1, 7, 15, 9, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 7, true, hswish},
      {"3x3 unpadded on 17x70", 1, 2, 17, 70, 2, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0, 2, false, {}},
      {"3x3 pads 0/1 on 14x14 relu", 3, 4, 14, 14, 4, 3, 3, 2, 2, 1, 1, 0, 0, 1, 1, 4, true, relu},
      {"3x3 pad 2 on 10x33", 1, 3, 10, 33, 3, 3, 3, 2, 2, 1, 1, 2, 2, 2, 2, 3, true, relu},
      {"5x5 on 7x7", 1, 6, 7, 7, 6, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 6, false, silu},
  };
  check_depthwise_block(problems, 32, 950);
  // The CPU choice for stride-2 planes too large for the plane kernel and narrower than 96 (EfficientNet-B0's
  // 5x5 on 56x56, MobileNet v2's 3x3 there); not at stride 1.
  if (ctx().device(0).info.type == DeviceType::cpu) {
    auto chosen = [](int64_t hw, int64_t k, int64_t stride) {
      const int64_t pad = k / 2;
      Problem p{"auto", 1, 16, hw, hw, 16, k, k, stride, stride, 1, 1, pad, pad, pad, pad, 16, true, {}};
      return ConvOp::create(ctx(), 0, make_config(p, 5))->depthwise_s2();
    };
    CHECK(chosen(56, 3, 2));
    CHECK(chosen(56, 5, 2));
    CHECK_FALSE(chosen(56, 3, 1));
  }
  // Stride 1 or dilation is an error naming the setting.
  check_depthwise_refused({"3x3 stride 1", 1, 3, 9, 9, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, false, {}}, 32);
  check_depthwise_refused({"3x3 dilation 2", 1, 3, 19, 19, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 3, false, {}}, 32);
}

// conv_grouped_band's depthwise form (depthwise_block 128, the CPU choice at stride 2 on rows of 96 and more):
// blocks of 8 channels with a partial last block (3, 13 and 20 channels), stride 1 and 2, 3x3 and 5x5, rows of
// 16 and more outputs and fewer (7x7), odd heights, batch 1 and 3, epilogues; the choice on 112x112 (and not
// on 56x56); dilation is an error naming the setting.
TEST_CASE("depthwise band kernel (conv_grouped_band, depthwise_block 128) matches the reference") {
  const Activation relu6(Act::clip, 0.0f, 1.5f), silu(Act::silu), leaky(Act::leaky_relu, 0.1f);
  // name, N, C, H, W, K, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR, groups, bias, act
  const Problem problems[] = {
      {"3x3 stride 2 on 112x112 relu6", 1, 13, 112, 112, 13, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 13, true, relu6},
      {"5x5 stride 2 on 37x41 silu batch 3", 3, 20, 37, 41, 20, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 20, true, silu},
      {"3x3 stride 1 on 19x23", 1, 3, 19, 23, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, false, {}},
      {"5x5 stride 1 on 7x7 leaky", 1, 16, 7, 7, 16, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2, 16, true, leaky},
      {"3x3 stride 2 asymmetric pads on 9x30", 1, 9, 9, 30, 9, 3, 3, 2, 2, 1, 1, 0, 1, 1, 0, 9, true, {}},
  };
  check_depthwise_block(problems, 128, 970);
  check_depthwise_refused({"3x3 dilation 2", 1, 8, 19, 19, 8, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 8, false, {}}, 128);
  if (ctx().device(0).info.type == DeviceType::cpu) {
    auto chosen = [](int64_t hw) {
      Problem p{"auto", 1, 16, hw, hw, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 16, true, {}};
      return ConvOp::create(ctx(), 0, make_config(p, 5))->grouped_band();
    };
    CHECK(chosen(112));
    CHECK_FALSE(chosen(56));
  }
}

// conv_grouped_band (direct_kernel 4, the CPU choice for grouped convolutions): RegNet's groups of 8 at stride 1
// and 2 on planes whose rows are wider than a strip (28: an overlapping last strip; 57 at stride 2: a run whose
// last vector span would pass the row's end), narrower (14, 7, 3: partial stores, the fill's 8-, 4- and 1-wide
// copies) and bands with a partial last band and an odd row count (a row paired with itself); a partial block
// of output channels (12 per group), 16 input channels per group (the most), 5x5 and 1x3 kernels, asymmetric
// pads, pads wider than the plane, batch 1 and 3; the vector epilogues (ReLU, SiLU) and an element-wise one
// (leaky). Against the reference and against conv_grouped_rows.
TEST_CASE("grouped band kernel (conv_grouped_band) matches the reference") {
  const Activation relu(Act::relu), leaky(Act::leaky_relu, 0.1f), silu(Act::silu);
  // name, N, C, H, W, K, KH, KW, SH, SW, DH, DW, PT, PL, PB, PR, groups, bias, act
  const Problem problems[] = {
      {"RegNet 8 per group 28x28", 1, 104, 28, 28, 104, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 13, true, relu},
      {"8 per group stride 2 on 33x57", 1, 48, 33, 57, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 6, true, relu},
      {"8 per group stride 2 on 30x56", 2, 16, 30, 56, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 2, false, {}},
      {"8 per group 14x14 batch 3", 3, 32, 14, 14, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, true, silu},
      {"8 per group 7x7 leaky", 1, 40, 7, 7, 40, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 5, true, leaky},
      {"5 in 12 out per group 9x37", 2, 20, 9, 37, 48, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 4, true, relu},
      {"16 per group 5x5 stride 2 pad 2", 1, 32, 13, 19, 32, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2, 2, true, {}},
      {"1x3 asymmetric pads 3x3 plane", 1, 6, 3, 3, 9, 1, 3, 1, 1, 1, 1, 0, 2, 0, 0, 3, false, leaky},
      {"pads wider than a 2x3 plane stride 2", 1, 8, 2, 3, 8, 3, 3, 2, 2, 1, 1, 2, 2, 1, 2, 2, true, relu},
      {"3x3 groups 2 odd rows 11x21", 1, 6, 11, 21, 10, 3, 3, 1, 1, 1, 1, 0, 1, 1, 0, 2, true, silu},
      // Image stems as one group (the CPU choice for at most 4 input channels): ResNet's 7x7 / 2 pad 3 and
      // the MobileNets' 3x3 / 2 with hard-swish, odd sizes.
      {"stem 7x7 stride 2 pad 3", 1, 3, 37, 41, 20, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3, 1, true, relu},
      {"stem 3x3 stride 2 hard-swish", 2, 3, 45, 38, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, true, {Act::hard_swish}},
  };
  uint32_t seed = 900;
  for (const auto& p : problems) {
    INFO(p.name);
    ConvConfig cfg = make_config(p, seed += 10);
    HostTensor x = test::random_tensor(cfg.input, seed + 7);
    int64_t OH = 0, OW = 0;
    auto want = ref::conv2d(ref_params(p), x.as<float>(), cfg.weight.as<float>(),
                            cfg.bias ? cfg.bias->as<float>() : nullptr, p.act, OH, OW);
    REQUIRE(grouped_band_geometry(ConvOp::geometry(cfg), 0).fits);
    cfg.algo = ConvAlgo::direct;
    cfg.direct_kernel = 4;
    auto band = run(*ConvOp::create(ctx(), 0, cfg), x);
    cfg.direct_kernel = 2;
    auto rows = run(*ConvOp::create(ctx(), 0, cfg), x);
    REQUIRE(band.size() == want.size());
    CLDL_CHECK_CLOSE(band.data(), want.data(), band.size(), 1e-4, 1e-4);
    CLDL_CHECK_CLOSE(band.data(), rows.data(), band.size(), 1e-5, 1e-5);
  }
  // Bands: at least 64 work-items (8 per compute unit), rows in pairs, within the private budget.
  const Problem regnet{"", 1, 48, 112, 112, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 6};
  const GroupedBand b = grouped_band_geometry(ConvOp::geometry(make_config(regnet, 1)), 2);
  CHECK(b.fits);
  CHECK(b.pitch == 57);
  CHECK(b.rows == 2);  // 3 fit (8 channels x 4 phase planes x 4 rows x 57 floats: 7,296 of 8,192), an even 2 is taken
  CHECK(b.prow == 3);
  CHECK(b.bands == 28);
  const GroupedBand many = grouped_band_geometry(ConvOp::geometry(make_config(regnet, 1)), 64);
  CHECK(many.rows == 1);  // 512 work-items wanted: a band per row (6 groups x 56 rows) is the most there are
  CHECK(many.bands == 56);
  // Where it does not apply: a requested band kernel is an error naming it, the automatic choice the rows kernel.
  const Problem wide{"", 1, 32, 4, 400, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2};
  ConvConfig cw = make_config(wide, 3);
  std::string why;
  CHECK_FALSE(grouped_band_geometry(ConvOp::geometry(cw), 0, &why).fits);
  CHECK(why.find("private copy") != std::string::npos);
  cw.algo = ConvAlgo::direct;
  cw.direct_kernel = 4;
  CHECK(error_of([&] { ConvOp::create(ctx(), 0, cw); }).find("direct_kernel 4 (conv_grouped_band)") != std::string::npos);
  const Problem dilated{"", 1, 16, 9, 9, 16, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2, 2};
  CHECK_FALSE(grouped_band_geometry(ConvOp::geometry(make_config(dilated, 4)), 0).fits);
}

TEST_CASE("taps that read only padding are dropped under the automatic choice, with the same output") {
  const Activation relu(Act::relu);
  struct Case {
    Problem p;
    const char* algo;  // what the automatic choice runs after the trim
  };
  // DeepLab's ASPP at a small map: dilation beyond the map, only the centre tap reads the image (1x1).
  // Dilation 3 on a 7x2 map: the columns' outer taps read padding only, the rows' do not (a 3x1 kernel).
  // Stride 2 with asymmetric pads; a pad smaller than the dilation keeps a dead tap so pads stay >= 0.
  const Case cases[] = {
      {{"3x3 dilation 24 on 16x16", 1, 19, 16, 16, 8, 3, 3, 1, 1, 24, 24, 24, 24, 24, 24, 1, true, relu}, "gemm_1x1"},
      {{"3x3 dilation 3 on 7x2", 2, 6, 7, 2, 3, 3, 3, 1, 1, 3, 3, 3, 3, 3, 3, 1, true, {}}, "im2col_gemm"},
      {{"5x5 dilation 4 stride 2 on 3x9", 1, 4, 3, 9, 6, 5, 5, 2, 2, 4, 4, 8, 5, 7, 8, 1, false, {}}, ""},
      {{"3x3 dilation 5 pad 4 on 3x3", 1, 3, 3, 3, 2, 3, 3, 1, 1, 5, 5, 4, 4, 4, 4, 1, true, {}}, ""},
  };
  uint32_t seed = 900;
  for (const Case& c : cases) {
    INFO(c.p.name);
    ConvConfig cfg = make_config(c.p, seed);
    HostTensor x = test::random_tensor(cfg.input, seed + 7);
    seed += 10;
    int64_t OH = 0, OW = 0;
    auto want = ref::conv2d(ref_params(c.p), x.as<float>(), cfg.weight.as<float>(),
                            cfg.bias ? cfg.bias->as<float>() : nullptr, c.p.act, OH, OW);
    auto op = ConvOp::create(ctx(), 0, cfg);
    CHECK(op->output_shape() == Shape{c.p.N, c.p.K, OH, OW});
    // On CPUs a short reduction into few outputs runs the direct rows kernel (ConvOp::choose).
    const bool cpu = ctx().device(0).info.type == DeviceType::cpu;
    if (*c.algo) CHECK(op->algorithm() == (cpu && std::string(c.algo) == "im2col_gemm" ? "direct" : c.algo));
    auto got = run(*op, x);
    REQUIRE(got.size() == want.size());
    CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), 1e-4, 1e-4);
  }
  // A non-finite weight on a dead tap keeps it (0 * inf is NaN, as the full convolution computes).
  ConvConfig cfg = make_config(cases[0].p, 950);
  cfg.weight.as<float>()[0] = std::numeric_limits<float>::infinity();
  CHECK(ConvOp::create(ctx(), 0, cfg)->algorithm() != "gemm_1x1");
}

TEST_CASE("tensor views with offsets: input, output and an unaligned workspace") {
  // Same problems as above (no new program or FFT plan builds), run on views into larger buffers.
  const Problem problems[] = {
      {"7x7 pad 3", 3, 3, 7, 13, 4, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3, 1, true, {}},
      {"3x3 pad 1 bias relu", 3, 5, 7, 13, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, Activation(Act::relu)},
  };
  for (const auto& p : problems) {
    ConvConfig cfg = make_config(p, 77);
    HostTensor x = test::random_tensor(cfg.input, 78);
    int64_t OH, OW;
    auto want = ref::conv2d(ref_params(p), x.as<float>(), cfg.weight.as<float>(), cfg.bias->as<float>(), p.act, OH, OW);
    for (ConvAlgo a : {ConvAlgo::fft, ConvAlgo::im2col_gemm, ConvAlgo::winograd, ConvAlgo::direct}) {
      if (!ConvOp::applies(cfg, a)) continue;
      cfg.algo = a;
      auto op = ConvOp::create(ctx(), 0, cfg);
      const int64_t nx = x.numel(), ny = op->output_shape().numel();
      HostTensor xbig(DType::f32, Shape{nx + 5});
      std::fill(xbig.as<float>(), xbig.as<float>() + 5, 1e6f);  // garbage before the view
      std::copy(x.as<float>(), x.as<float>() + nx, xbig.as<float>() + 5);
      Tensor dx = ctx().upload(xbig).slice_elems(5, nx, cfg.input);
      Tensor ybig = ctx().alloc(Shape{ny + 3 + 4}, DType::f32);
      Tensor dy = ybig.slice_elems(3, ny, op->output_shape());
      Tensor wsbig = ctx().alloc(Shape{int64_t(op->workspace_bytes()) + 100}, DType::u8);
      Tensor ws = wsbig.slice_elems(100, int64_t(op->workspace_bytes()), Shape{int64_t(op->workspace_bytes())});
      auto ec = ctx().exec();
      Tensor in[1] = {dx}, out[1] = {dy};
      op->enqueue(in, out, op->workspace_bytes() ? &ws : nullptr, ec);
      HostTensor h = ctx().download(ybig);
      double rtol, atol;
      tolerance(a, rtol, atol);
      INFO(std::string(p.name) << " with " << to_string(a));
      CLDL_CHECK_CLOSE(h.as<float>() + 3, want.data(), size_t(ny), rtol, atol);
    }
  }
}

TEST_CASE("auto_pad SAME_UPPER / SAME_LOWER / VALID") {
  // H 7, kernel 4, stride 2: output 4, total pad (4-1)*2 + 4 - 7 = 3 -> upper 1/2, lower 2/1.
  // W 13, kernel 3, stride 2: output 7, total pad (7-1)*2 + 3 - 13 = 2 -> 1/1 either way.
  struct Mode {
    AutoPad ap;
    int64_t pt, pl, pb, pr;
  };
  const Mode modes[] = {{AutoPad::same_upper, 1, 1, 2, 1}, {AutoPad::same_lower, 2, 1, 1, 1}, {AutoPad::valid, 0, 0, 0, 0}};
  for (const auto& m : modes) {
    Problem p{"auto_pad", 3, 5, 7, 13, 3, 4, 3, 2, 2, 1, 1, m.pt, m.pl, m.pb, m.pr, 1, true, {}};
    ConvConfig cfg = make_config(p, 5);
    cfg.pads.clear();
    cfg.auto_pad = m.ap;
    if (m.ap != AutoPad::valid) CHECK(ConvOp::validate(cfg) == Shape{3, 3, 4, 7});
    HostTensor x = test::random_tensor(cfg.input, 6);
    int64_t OH, OW;
    auto want = ref::conv2d(ref_params(p), x.as<float>(), cfg.weight.as<float>(), cfg.bias->as<float>(), {}, OH, OW);
    for (ConvAlgo a : {ConvAlgo::direct, ConvAlgo::im2col_gemm}) {
      cfg.algo = a;
      auto op = ConvOp::create(ctx(), 0, cfg);
      CHECK(op->output_shape() == Shape{3, 3, OH, OW});
      auto got = run(*op, x);
      CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), 1e-4, 1e-4);
    }
  }
}

TEST_CASE("auto_pad SAME_LOWER on a 1-D dilated strided conv") {
  // L 29, kernel 4, dilation 2 (extent 7), stride 3: output 10, total pad 9*3 + 7 - 29 = 5 -> lower 3/2.
  Problem p{"1-D same_lower", 3, 5, 1, 29, 4, 1, 4, 1, 3, 1, 2, 0, 3, 0, 2, 1, true, Activation(Act::relu), true};
  ConvConfig cfg = make_config(p, 9);
  cfg.pads.clear();
  cfg.auto_pad = AutoPad::same_lower;
  CHECK(ConvOp::validate(cfg) == Shape{3, 4, 10});
  HostTensor x = test::random_tensor(cfg.input, 10);
  int64_t OH, OW;
  auto want = ref::conv2d(ref_params(p), x.as<float>(), cfg.weight.as<float>(), cfg.bias->as<float>(), p.act, OH, OW);
  REQUIRE(OW == 10);
  for (ConvAlgo a : {ConvAlgo::direct, ConvAlgo::im2col_gemm}) {
    cfg.algo = a;
    auto op = ConvOp::create(ctx(), 0, cfg);
    auto got = run(*op, x);
    CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), 1e-4, 1e-4);
  }
}

TEST_CASE("automatic choice follows the documented heuristic") {
  auto algo_for = [](int64_t C, int64_t K, int64_t k, int64_t s, int64_t groups, int64_t pad) {
    Problem p{"auto", 1, C, 20, 20, K, k, k, s, s, 1, 1, pad, pad, pad, pad, groups, false, {}};
    return ConvOp::choose(make_config(p, 1));
  };
  CHECK(algo_for(8, 8, 3, 1, 8, 1) == ConvAlgo::depthwise);
  CHECK(algo_for(16, 8, 1, 1, 1, 0) == ConvAlgo::gemm_1x1);
  CHECK(algo_for(16, 16, 3, 1, 1, 1) == ConvAlgo::winograd);
  CHECK(algo_for(8, 16, 3, 1, 1, 1) == ConvAlgo::im2col_gemm);  // too few channels for Winograd
  CHECK(algo_for(3, 4, 7, 1, 1, 3) == ConvAlgo::fft);
  CHECK(algo_for(3, 4, 7, 2, 1, 3) == ConvAlgo::im2col_gemm);
  CHECK(algo_for(16, 8, 1, 2, 1, 0) == ConvAlgo::im2col_gemm);  // strided 1x1
  CHECK(algo_for(1, 4, 3, 1, 1, 1) == ConvAlgo::direct);
  CHECK(algo_for(16, 16, 3, 1, 2, 1) == ConvAlgo::im2col_gemm);  // grouped: im2col + GEMM per group ...
  // ... when the device is not known. On a device, one direct kernel serves 8 channels of a group per
  // work-item (CPUs: of a row, conv_grouped_rows; other devices: of a pixel, while a group has at most 64
  // output channels; wider groups keep a GEMM per group there).
  {
    Problem g{"grouped", 1, 48, 20, 20, 48, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 6, true, {}};
    auto op = ConvOp::create(ctx(), 0, make_config(g, 3));
    CHECK(op->algorithm() == "direct");
    DeviceInfo cpu, gpu;
    cpu.type = DeviceType::cpu;
    gpu.type = DeviceType::gpu;
    std::string why;
    CHECK(ConvOp::choose(make_config(g, 3), gpu, &why) == ConvAlgo::direct);
    CHECK(why.find("grouped") != std::string::npos);
    Problem wide{"wide groups", 1, 32, 20, 20, 256, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 2, true, {}};  // 128 per group
    CHECK(ConvOp::choose(make_config(wide, 3), gpu, &why) == ConvAlgo::im2col_gemm);
    CHECK(ConvOp::choose(make_config(wide, 3), cpu, &why) == ConvAlgo::direct);
  }
  // CPUs: output planes of at most 64 pixels with at most 512 KiB of weights run conv_small_plane (the
  // direct algorithm); larger planes or weights, and GPUs, keep the choice above.
  {
    DeviceInfo cpu, gpu;
    cpu.type = DeviceType::cpu;
    gpu.type = DeviceType::gpu;
    auto choice = [](const DeviceInfo& info, int64_t N, int64_t C, int64_t HW, int64_t K) {
      Problem q{"small plane", N, C, HW, HW, K, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, {}};
      std::string why;
      const ConvAlgo a = ConvOp::choose(make_config(q, 4), info, &why);
      return std::make_pair(a, why);
    };
    auto [digits, why] = choice(cpu, 450, 16, 4, 32);  // digits_cnn's second conv at batch 450
    CHECK(digits == ConvAlgo::direct);
    CHECK(why.find("small output plane") != std::string::npos);
    CHECK(choice(cpu, 1, 64, 8, 64).first == ConvAlgo::direct);
    CHECK(choice(cpu, 1, 512, 7, 512).first == ConvAlgo::winograd);  // 9 MiB of weights
    CHECK(choice(cpu, 1, 16, 9, 16).first == ConvAlgo::winograd);    // 81 pixels
    CHECK(choice(gpu, 450, 16, 4, 32).first == ConvAlgo::winograd);
    // Few outputs from a short reduction: direct at stride 1 (output rows per work-item); image stems of at
    // most 4 input channels (MobileNet v3's 3x3 / 2, ResNet's 7x7 / 2): direct on CPUs (conv_grouped_band),
    // im2col + GEMM elsewhere.
    auto stem = [&](const DeviceInfo& info, int64_t s, int64_t C, int64_t k, std::string* why = nullptr) {
      Problem q{"stem", 1, C, 224, 224, 16, k, k, s, s, 1, 1, k / 2, k / 2, k / 2, k / 2, 1, true, {}};
      return ConvOp::choose(make_config(q, 4), info, why);
    };
    std::string stem_why;
    CHECK(stem(cpu, 1, 3, 3) == ConvAlgo::direct);
    CHECK(stem(cpu, 2, 3, 3, &stem_why) == ConvAlgo::direct);
    CHECK(stem_why.find("image stem") != std::string::npos);
    CHECK(stem(cpu, 2, 3, 7) == ConvAlgo::direct);
    CHECK(stem(cpu, 2, 5, 3) == ConvAlgo::im2col_gemm);  // 5 input channels
    CHECK(stem(gpu, 2, 3, 3) == ConvAlgo::im2col_gemm);
  }
  // create uses the same choice and reports it.
  Problem p{"auto", 1, 16, 9, 11, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, {}};
  auto op = ConvOp::create(ctx(), 0, make_config(p, 2));
  CHECK(op->algorithm() == "winograd");
  // Winograd's tile: F(4x4,3x3) on CPUs from 32 tiles of 4x4 (28x28 at batch 1: 49), F(2x2,3x3) below (14x14:
  // 16) and on other devices; an explicit tile wins; a tile other than 2 or 4 is an error naming it.
  const bool cpu = ctx().device(0).info.type == DeviceType::cpu;
  Problem big{"wino 28x28", 1, 16, 28, 28, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, {}};
  Problem small{"wino 14x14", 1, 16, 14, 14, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, false, {}};
  CHECK(ConvOp::create(ctx(), 0, make_config(big, 3))->winograd_tile() == (cpu ? 4 : 2));
  CHECK(ConvOp::create(ctx(), 0, make_config(small, 3))->winograd_tile() == 2);
  ConvConfig forced = make_config(small, 3);
  forced.winograd_tile = 4;
  CHECK(ConvOp::create(ctx(), 0, forced)->winograd_tile() == 4);
  forced.winograd_tile = 3;
  CHECK(error_of([&] { ConvOp::create(ctx(), 0, forced); }).find("winograd_tile 3") != std::string::npos);
}

TEST_CASE("an explicitly requested algorithm that does not apply is a clear error") {
  Problem p{"bad algo", 1, 3, 7, 13, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, false, {}};
  ConvConfig cfg = make_config(p, 2);
  cfg.algo = ConvAlgo::winograd;
  std::string msg = error_of([&] { ConvOp::create(ctx(), 0, cfg); });
  CHECK(msg.find("Conv") != std::string::npos);
  CHECK(msg.find("winograd") != std::string::npos);
  CHECK(msg.find("stride 1") != std::string::npos);
  cfg.algo = ConvAlgo::depthwise;
  CHECK(error_of([&] { ConvOp::create(ctx(), 0, cfg); }).find("depthwise") != std::string::npos);
  cfg.algo = ConvAlgo::gemm_1x1;
  CHECK(error_of([&] { ConvOp::create(ctx(), 0, cfg); }).find("1x1") != std::string::npos);
}

TEST_CASE("bad configurations fail validate naming Conv, the argument and the value") {
  Problem p{"bad", 1, 6, 7, 13, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, true, {}};
  auto expect = [](ConvConfig cfg, std::initializer_list<const char*> parts) {
    std::string msg = error_of([&] { ConvOp::validate(cfg); });
    INFO(msg);
    CHECK(msg.rfind("Conv:", 0) == 0);
    for (const char* s : parts) CHECK(msg.find(s) != std::string::npos);
  };
  ConvConfig c = make_config(p, 3);
  c.pads = {1, -2, 1, 1};
  expect(c, {"pads[1]", "-2"});
  c = make_config(p, 3);
  c.groups = 4;
  expect(c, {"group 4", "6"});
  c = make_config(p, 3);
  c.weight = test::random_tensor(Shape{4, 5, 3, 3}, 1);
  expect(c, {"weight shape [4, 5, 3, 3]", "dim 1 is 5"});
  c = make_config(p, 3);
  c.weight = test::random_tensor(Shape{4, 6, 11, 3}, 1);
  expect(c, {"kernel height 11", "padded input height 9"});
  c = make_config(p, 3);
  c.strides = {1, 0};
  expect(c, {"strides[1]", "0"});
  c = make_config(p, 3);
  c.dilations = {-1, 1};
  expect(c, {"dilations[0]", "-1"});
  c = make_config(p, 3);
  c.bias = test::random_tensor(Shape{5}, 1);
  expect(c, {"bias shape [5]", "[4]"});
  c = make_config(p, 3);
  c.input = Shape{1, 6, 7};
  expect(c, {"weight rank 4", "input rank 3"});
  c = make_config(p, 3);
  c.auto_pad = AutoPad::same_upper;
  expect(c, {"pads", "auto_pad"});
}

TEST_CASE("ConvTranspose matches the reference: stride, pads, output_padding, dilation, groups, 1-D") {
  struct TProblem {
    Problem p;
    int64_t oph, opw;
  };
  const TProblem problems[] = {
      {{"stride 2 pads output_padding", 3, 5, 7, 13, 3, 3, 3, 2, 2, 1, 1, 1, 0, 1, 2, 1, true, Activation(Act::relu)}, 1, 0},
      {{"groups 3 dilation 1x2 stride 1x3", 1, 6, 7, 13, 9, 2, 3, 1, 3, 1, 2, 0, 1, 1, 0, 3, true, {}}, 0, 2},
      {{"plain 4x4", 1, 3, 7, 13, 5, 4, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, false, {}}, 0, 0},
      {{"1-D stride 2", 3, 5, 1, 29, 4, 1, 5, 1, 2, 1, 1, 0, 2, 0, 1, 1, true, {}, true}, 0, 1},
      {{"2x2 stride 2 upsampler batch 2", 2, 16, 5, 9, 8, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0, 1, true, Activation(Act::relu)}, 0, 0},
      {{"4x4 stride 2 pad 1 groups 2", 1, 12, 6, 7, 10, 4, 4, 2, 2, 1, 1, 1, 1, 1, 1, 2, true, {}}, 1, 1},
  };
  uint32_t seed = 300;
  for (const auto& tp : problems) {
    const Problem& p = tp.p;
    ConvTransposeConfig c;
    c.input = p.one_d ? Shape{p.N, p.C, p.W} : Shape{p.N, p.C, p.H, p.W};
    c.weight = test::random_tensor(p.one_d ? Shape{p.C, p.K / p.groups, p.KW} : Shape{p.C, p.K / p.groups, p.KH, p.KW},
                                   seed += 3);
    if (p.bias) c.bias = test::random_tensor(Shape{p.K}, seed + 1);
    if (p.one_d) {
      c.strides = {p.SW}, c.dilations = {p.DW}, c.pads = {p.PL, p.PR}, c.output_padding = {tp.opw};
    } else {
      c.strides = {p.SH, p.SW}, c.dilations = {p.DH, p.DW}, c.pads = {p.PT, p.PL, p.PB, p.PR};
      c.output_padding = {tp.oph, tp.opw};
    }
    c.groups = p.groups;
    c.act = p.act;
    HostTensor x = test::random_tensor(c.input, seed + 2);
    ref::ConvParams rp = ref_params(p);
    rp.OPH = tp.oph, rp.OPW = tp.opw;
    int64_t OH, OW;
    auto want = ref::conv_transpose2d(rp, x.as<float>(), c.weight.as<float>(), c.bias ? c.bias->as<float>() : nullptr,
                                      p.act, OH, OW);
    for (ConvTransposeAlgo a : {ConvTransposeAlgo::direct, ConvTransposeAlgo::gemm_col2im}) {
      c.algo = a;
      auto op = ConvTransposeOp::create(ctx(), 0, c);
      CHECK(op->output_shape() == (p.one_d ? Shape{p.N, p.K, OW} : Shape{p.N, p.K, OH, OW}));
      auto got = run(*op, x);
      INFO(std::string(p.name) << " with " << op->algorithm());
      REQUIRE(got.size() == want.size());
      CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), 1e-4, 1e-4);
    }
  }
  // The automatic choice: GEMM + col2im from 8 input channels per group, direct below.
  {
    ConvTransposeConfig c;
    c.input = Shape{1, 16, 5, 6};
    c.weight = test::random_tensor(Shape{16, 4, 2, 2}, 9);
    c.strides = {2, 2};
    CHECK(ConvTransposeOp::create(ctx(), 0, c)->algorithm() == "gemm_col2im");
    c.groups = 4;
    CHECK(ConvTransposeOp::create(ctx(), 0, c)->algorithm() == "direct");
  }
  // Bad configurations.
  ConvTransposeConfig c;
  c.input = Shape{1, 6, 7, 13};
  c.weight = test::random_tensor(Shape{6, 2, 3, 3}, 1);
  c.strides = {2, 2};
  c.output_padding = {2, 0};
  std::string msg = error_of([&] { ConvTransposeOp::validate(c); });
  CHECK(msg.find("ConvTranspose") == 0);
  CHECK(msg.find("output_padding") != std::string::npos);
  c.output_padding = {0, -1};
  msg = error_of([&] { ConvTransposeOp::validate(c); });
  CHECK(msg.find("output_padding[1]") != std::string::npos);
  CHECK(msg.find("-1") != std::string::npos);
  c.output_padding = {};
  c.groups = 4;
  msg = error_of([&] { ConvTransposeOp::validate(c); });
  CHECK(msg.find("group 4") != std::string::npos);
}

TEST_CASE("3-D ConvTranspose matches the reference: strides, pads, output_padding, dilations, groups, batch 1") {
  struct P3 {
    int64_t N, C, K, groups;
    Shape in, k;
    std::vector<int64_t> strides, dilations, pads, output_padding;
    bool bias;
  };
  const P3 problems[] = {
      {1, 1, 2, 1, Shape{3, 4, 5}, Shape{3, 3, 3}, {}, {}, {}, {}, false},  // the ONNX conformance shape
      {2, 3, 4, 1, Shape{3, 5, 4}, Shape{2, 3, 2}, {2, 1, 3}, {1, 2, 1}, {1, 0, 1, 0, 2, 1}, {1, 0, 2}, true},
      {1, 4, 6, 2, Shape{2, 3, 7}, Shape{3, 1, 2}, {1, 2, 2}, {2, 1, 1}, {0, 0, 1, 1, 0, 0}, {0, 1, 0}, true},
      {3, 2, 3, 1, Shape{1, 1, 5}, Shape{1, 1, 3}, {3, 1, 1}, {}, {}, {2, 0, 0}, false},
  };
  uint32_t seed = 700;
  for (const auto& p : problems) {
    ConvTransposeConfig c;
    c.input = Shape{p.N, p.C, p.in[0], p.in[1], p.in[2]};
    c.weight = test::random_tensor(Shape{p.C, p.K / p.groups, p.k[0], p.k[1], p.k[2]}, seed += 3);
    if (p.bias) c.bias = test::random_tensor(Shape{p.K}, seed + 1);
    c.strides = p.strides, c.dilations = p.dilations, c.pads = p.pads, c.output_padding = p.output_padding;
    c.groups = p.groups;
    HostTensor x = test::random_tensor(c.input, seed + 2);
    ref::ConvParams rp;
    rp.N = p.N, rp.C = p.C, rp.K = p.K, rp.groups = p.groups;
    rp.D = p.in[0], rp.H = p.in[1], rp.W = p.in[2], rp.KD = p.k[0], rp.KH = p.k[1], rp.KW = p.k[2];
    auto at = [](const std::vector<int64_t>& v, size_t i, int64_t d) { return v.empty() ? d : v[i]; };
    rp.SD = at(p.strides, 0, 1), rp.SH = at(p.strides, 1, 1), rp.SW = at(p.strides, 2, 1);
    rp.DD = at(p.dilations, 0, 1), rp.DH = at(p.dilations, 1, 1), rp.DW = at(p.dilations, 2, 1);
    rp.PF = at(p.pads, 0, 0), rp.PT = at(p.pads, 1, 0), rp.PL = at(p.pads, 2, 0);
    rp.PBK = at(p.pads, 3, 0), rp.PB = at(p.pads, 4, 0), rp.PR = at(p.pads, 5, 0);
    rp.OPD = at(p.output_padding, 0, 0), rp.OPH = at(p.output_padding, 1, 0), rp.OPW = at(p.output_padding, 2, 0);
    int64_t OD, OH, OW;
    auto want = ref::conv_transpose3d(rp, x.as<float>(), c.weight.as<float>(), c.bias ? c.bias->as<float>() : nullptr,
                                      Activation{}, OD, OH, OW);
    auto op = ConvTransposeOp::create(ctx(), 0, c);
    CAPTURE(c.input.str());
    REQUIRE(op->output_shape() == Shape{p.N, p.K, OD, OH, OW});
    auto got = run(*op, x);
    REQUIRE(got.size() == want.size());
    CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), 1e-4, 1e-4);
  }
  ConvTransposeConfig c;
  c.input = Shape{1, 2, 3, 4, 5};
  c.weight = test::random_tensor(Shape{2, 1, 2, 2, 2}, 1);
  c.strides = {2, 2};
  std::string msg = error_of([&] { ConvTransposeOp::validate(c); });
  CHECK(msg.find("strides has 2 values, expected 3") != std::string::npos);
  c.strides = {2, 1, 1};
  c.output_padding = {2, 0, 0};
  msg = error_of([&] { ConvTransposeOp::validate(c); });
  CHECK(msg.find("output_padding[0] = 2") != std::string::npos);
}

TEST_CASE("BatchNorm folded into conv weight and bias equals conv then BatchNorm") {
  for (bool with_bias : {false, true}) {
    Problem p{"bn fold", 3, 5, 7, 13, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, with_bias, {}};
    ConvConfig cfg = make_config(p, 40);
    HostTensor x = test::random_tensor(cfg.input, 41);
    HostTensor scale = test::random_tensor(Shape{3}, 42, 0.5f, 2.0f), b = test::random_tensor(Shape{3}, 43),
               mean = test::random_tensor(Shape{3}, 44), var = test::random_tensor(Shape{3}, 45, 0.1f, 3.0f);
    const float eps = 1e-3f;
    int64_t OH, OW;
    auto conv = ref::conv2d(ref_params(p), x.as<float>(), cfg.weight.as<float>(),
                            with_bias ? cfg.bias->as<float>() : nullptr, {}, OH, OW);
    auto want = ref::batch_norm(conv, p.N, p.K, OH * OW, scale.as<float>(), b.as<float>(), mean.as<float>(),
                                var.as<float>(), eps);
    fold_batch_norm(cfg.weight, cfg.bias, scale, b, mean, var, eps);
    REQUIRE(cfg.bias.has_value());
    cfg.algo = ConvAlgo::im2col_gemm;
    auto op = ConvOp::create(ctx(), 0, cfg);
    auto got = run(*op, x);
    CLDL_CHECK_CLOSE(got.data(), want.data(), got.size(), 1e-4, 1e-4);
  }
  HostTensor w = test::random_tensor(Shape{3, 2, 1, 1}, 1);
  std::optional<HostTensor> bias;
  HostTensor ok = test::random_tensor(Shape{3}, 2, 0.5f, 1.0f), bad = test::random_tensor(Shape{4}, 2);
  std::string msg = error_of([&] { fold_batch_norm(w, bias, ok, ok, bad, ok, 1e-5f); });
  CHECK(msg.find("BatchNorm") == 0);
  CHECK(msg.find("mean shape [4]") != std::string::npos);
}

}  // TEST_SUITE
