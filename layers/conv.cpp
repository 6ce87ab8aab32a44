// Conv op: validation (ONNX attributes, auto_pad), the algorithm heuristic, weight preparation and
// enqueue for direct, depthwise, im2col + GEMM, 1x1-as-GEMM and Winograd F(2x2,3x3). FFT lives in
// layers/conv_fft.cpp, ConvTranspose and BatchNorm folding in layers/conv_transpose.cpp.
#include "layers/conv.hpp"
#include "layers/strided.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "layers/conv_internal.hpp"
#include "layers/pool.hpp"
#include "layers/tuning_ops.hpp"
#include "runtime/log.hpp"
#include "runtime/program_cache.hpp"

namespace cldl {

namespace {
// The program variants the library uses most: no activation and ReLU (conv.cl has runtime geometry).
const ProgramVariants kConvVariants("conv.cl", {"-DACT=0", "-DACT=1"});

int64_t attr(const std::vector<int64_t>& v, size_t i, int64_t def) { return v.empty() ? def : v[i]; }

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// conv_small_plane's tiles per image: 8 output pixels, or (pooling) the 2x2 windows of 2 pooled outputs.
int64_t small_plane_tiles(const ConvGeometry& g, bool pool) {
  return pool ? ceil_div((g.OH / 2) * (g.OW / 2), 2) : ceil_div(g.OH * g.OW, 8);
}

// conv_small_plane's work-items: its tiles x 16 * kv output channels, per image.
int64_t small_plane_items(const ConvGeometry& g, int64_t kpad, int kv, bool pool) {
  return g.N * small_plane_tiles(g, pool) * (kpad / (16 * kv));
}

// The reason choose() gives for conv_small_plane; create() keys the kernel on it.
constexpr std::string_view kSmallPlaneWhy = "small output plane, CPU: 8 pixels x 16 or 32 channels per work-item";
// ... and for conv_grouped_band on a dense convolution of few input channels (an image stem).
constexpr std::string_view kStemWhy = "at most 4 input channels (an image stem), CPU: conv_grouped_band";
}  // namespace

std::string_view to_string(ConvAlgo a) {
  switch (a) {
    case ConvAlgo::automatic: return "automatic";
    case ConvAlgo::im2col_gemm: return "im2col_gemm";
    case ConvAlgo::gemm_1x1: return "gemm_1x1";
    case ConvAlgo::direct: return "direct";
    case ConvAlgo::depthwise: return "depthwise";
    case ConvAlgo::winograd: return "winograd";
    case ConvAlgo::fft: return "fft";
  }
  return "?";
}

namespace detail {

cl_int16 geometry_arg(const ConvGeometry& g) {
  cl_int16 v;
  const int64_t vals[16] = {g.C,  g.H,  g.W,  g.K,  g.OH, g.OW, g.KH,           g.KW,
                            g.SH, g.SW, g.PT, g.PL, g.DH, g.DW, g.C / g.groups, g.K / g.groups};
  for (int i = 0; i < 16; ++i) v.s[i] = static_cast<cl_int>(vals[i]);
  return v;
}

Tensor view(const Tensor& t, int64_t start_elems) {
  Tensor v = t;
  v.offset_bytes += static_cast<size_t>(start_elems) * dtype_size(t.dtype);
  v.shape = Shape{t.numel() - start_elems};
  return v;
}

// Shared by Conv and ConvTranspose: rank, strides, dilations, pads. `op` names the op in errors.
void parse_spatial(std::string_view op, const Shape& in, const Shape& w, const std::vector<int64_t>& strides,
                   const std::vector<int64_t>& dilations, const std::vector<int64_t>& pads, ConvGeometry& g) {
  if (in.rank() != 4 && in.rank() != 3)
    invalid(op, "input must be [N, C, H, W] or [N, C, L], got shape {}", in.str());
  for (size_t i = 0; i < in.rank(); ++i)
    if (in[i] <= 0) invalid(op, "input dimension {} must be positive, got {} (shape {})", i, in[i], in.str());
  if (w.rank() != in.rank())
    invalid(op, "weight rank {} does not match input rank {} (weight shape {})", w.rank(), in.rank(), w.str());
  for (size_t i = 0; i < w.rank(); ++i)
    if (w[i] <= 0) invalid(op, "weight dimension {} must be positive, got {} (shape {})", i, w[i], w.str());
  const size_t sp = in.rank() - 2;
  g.one_d = sp == 1;
  if (!strides.empty() && strides.size() != sp) invalid(op, "strides has {} values, expected {}", strides.size(), sp);
  if (!dilations.empty() && dilations.size() != sp)
    invalid(op, "dilations has {} values, expected {}", dilations.size(), sp);
  if (!pads.empty() && pads.size() != 2 * sp) invalid(op, "pads has {} values, expected {}", pads.size(), 2 * sp);
  for (size_t i = 0; i < strides.size(); ++i)
    if (strides[i] <= 0) invalid(op, "strides[{}] must be positive, got {}", i, strides[i]);
  for (size_t i = 0; i < dilations.size(); ++i)
    if (dilations[i] <= 0) invalid(op, "dilations[{}] must be positive, got {}", i, dilations[i]);
  for (size_t i = 0; i < pads.size(); ++i)
    if (pads[i] < 0) invalid(op, "pads[{}] must be >= 0, got {}", i, pads[i]);
  g.N = in[0];
  g.C = in[1];
  if (g.one_d) {
    g.H = 1, g.W = in[2], g.KH = 1, g.KW = w[2];
    g.SW = attr(strides, 0, 1), g.DW = attr(dilations, 0, 1);
    g.PL = attr(pads, 0, 0), g.PR = attr(pads, 1, 0);
  } else {
    g.H = in[2], g.W = in[3], g.KH = w[2], g.KW = w[3];
    g.SH = attr(strides, 0, 1), g.SW = attr(strides, 1, 1);
    g.DH = attr(dilations, 0, 1), g.DW = attr(dilations, 1, 1);
    g.PT = attr(pads, 0, 0), g.PL = attr(pads, 1, 0), g.PB = attr(pads, 2, 0), g.PR = attr(pads, 3, 0);
  }
}

void check_tensor(std::string_view op, std::string_view what, const HostTensor& t, const Shape& want) {
  if (t.dtype() != DType::f32) invalid(op, "{} must be f32, got {}", what, to_string(t.dtype()));
  if (t.shape() != want) invalid(op, "{} shape {} does not match the expected {}", what, t.shape().str(), want.str());
}

}  // namespace detail

using detail::geometry_arg;
using detail::view;

ConvGeometry ConvOp::geometry(const ConvConfig& c) {
  ConvGeometry g;
  const Shape& ws = c.weight.shape();
  // A 3-D problem is its depth dim plus a 2-D problem over H and W, which parse_spatial checks.
  Shape in = c.input, w = ws;
  std::vector<int64_t> strides = c.strides, dilations = c.dilations, pads = c.pads;
  if (c.input.rank() == 5) {
    if (ws.rank() != 5)
      invalid("Conv", "weight rank {} does not match input rank 5 (weight shape {})", ws.rank(), ws.str());
    auto take = [](std::vector<int64_t>& v, size_t n, size_t at, const char* what) {
      if (v.empty()) return int64_t(-1);
      if (v.size() != n) invalid("Conv", "{} has {} values, expected {}", what, v.size(), n);
      int64_t x = v[at];
      v.erase(v.begin() + int64_t(at));
      return x;
    };
    g.three_d = true;
    g.D = c.input[2], g.KD = ws[2];
    if (int64_t st = take(strides, 3, 0, "strides"); st >= 0) g.SD = st;
    if (int64_t dl = take(dilations, 3, 0, "dilations"); dl >= 0) g.DD = dl;
    if (!pads.empty()) {
      g.PF = take(pads, 6, 0, "pads");
      g.PK = pads.at(2);
      pads.erase(pads.begin() + 2);
    }
    if (g.D <= 0 || g.KD <= 0) invalid("Conv", "depth {} and kernel depth {} must be positive", g.D, g.KD);
    if (g.SD <= 0 || g.DD <= 0) invalid("Conv", "depth stride {} and dilation {} must be positive", g.SD, g.DD);
    if (g.PF < 0 || g.PK < 0) invalid("Conv", "depth pads ({}, {}) must be >= 0", g.PF, g.PK);
    in = Shape{c.input[0], c.input[1], c.input[3], c.input[4]};
    w = Shape{ws[0], ws[1], ws[3], ws[4]};
  }
  detail::parse_spatial("Conv", in, w, strides, dilations, pads, g);
  if (c.weight.dtype() != DType::f32) invalid("Conv", "weight must be f32, got {}", to_string(c.weight.dtype()));
  g.K = ws[0];
  g.groups = c.groups;
  if (c.groups <= 0) invalid("Conv", "group must be positive, got {}", c.groups);
  if (g.C % c.groups) invalid("Conv", "input channels {} are not divisible by group {}", g.C, c.groups);
  if (g.K % c.groups) invalid("Conv", "output channels (weight dim 0) {} are not divisible by group {}", g.K, c.groups);
  if (ws[1] != g.C / c.groups)
    invalid("Conv", "weight shape {}: dim 1 is {}, expected input channels / group = {} / {} = {}", ws.str(), ws[1],
            g.C, c.groups, g.C / c.groups);
  if (c.bias) detail::check_tensor("Conv", "bias", *c.bias, Shape{g.K});
  const int64_t eh = (g.KH - 1) * g.DH + 1, ew = (g.KW - 1) * g.DW + 1;  // dilated kernel extent
  if (c.auto_pad != AutoPad::notset) {
    bool nonzero = std::any_of(c.pads.begin(), c.pads.end(), [](int64_t p) { return p != 0; });
    if (nonzero) invalid("Conv", "pads must not be set together with auto_pad");
    auto same = [&](int64_t in, int64_t s, int64_t e, int64_t& lo, int64_t& hi) {
      int64_t total = std::max<int64_t>(0, (ceil_div(in, s) - 1) * s + e - in);
      lo = c.auto_pad == AutoPad::same_upper ? total / 2 : total - total / 2;
      hi = total - lo;
    };
    if (c.auto_pad == AutoPad::valid) {
      g.PT = g.PL = g.PB = g.PR = g.PF = g.PK = 0;
    } else {
      if (!g.one_d) same(g.H, g.SH, eh, g.PT, g.PB);
      same(g.W, g.SW, ew, g.PL, g.PR);
      if (g.three_d) same(g.D, g.SD, (g.KD - 1) * g.DD + 1, g.PF, g.PK);
    }
  }
  if (g.three_d) {
    const int64_t ed = (g.KD - 1) * g.DD + 1;
    if (g.D + g.PF + g.PK < ed)
      invalid("Conv", "kernel depth {} (dilated extent {}) is larger than the padded input depth {}", g.KD, ed,
              g.D + g.PF + g.PK);
    g.OD = (g.D + g.PF + g.PK - ed) / g.SD + 1;
  }
  if (g.H + g.PT + g.PB < eh)
    invalid("Conv", "kernel height {} (dilated extent {}) is larger than the padded input height {}", g.KH, eh,
            g.H + g.PT + g.PB);
  if (g.W + g.PL + g.PR < ew)
    invalid("Conv", "kernel width {} (dilated extent {}) is larger than the padded input width {}", g.KW, ew,
            g.W + g.PL + g.PR);
  g.OH = (g.H + g.PT + g.PB - eh) / g.SH + 1;
  g.OW = (g.W + g.PL + g.PR - ew) / g.SW + 1;
  const int64_t lim = int64_t(1) << 31;
  if (g.N * g.C * g.D * g.H * g.W >= lim || g.N * g.K * g.OD * g.OH * g.OW >= lim)
    invalid("Conv", "tensors of 2^31 elements or more are not supported (input {})", c.input.str());
  return g;
}

Shape ConvOp::validate(const ConvConfig& c) {
  ConvGeometry g = geometry(c);
  if (c.residual && g.three_d)
    invalid("Conv", "residual: a fused residual add needs a 1-D or 2-D convolution (3-D runs the direct "
                    "algorithm only), got input {}", c.input.str());
  if (c.max_pool_2x2) {
    if (g.three_d || g.one_d || c.residual)
      invalid("Conv", "max_pool_2x2: a fused 2x2 max pool needs a 2-D convolution without a residual, got input {}{}",
              c.input.str(), c.residual ? " with a residual" : "");
    if (g.OH < 2 || g.OW < 2)
      invalid("Conv", "max_pool_2x2: the output plane {}x{} is smaller than the 2x2 window", g.OH, g.OW);
    return Shape{g.N, g.K, g.OH / 2, g.OW / 2};
  }
  if (g.three_d) return Shape{g.N, g.K, g.OD, g.OH, g.OW};
  return g.one_d ? Shape{g.N, g.K, g.OW} : Shape{g.N, g.K, g.OH, g.OW};
}

bool ConvOp::applies(const ConvConfig& cfg, ConvAlgo a, std::string* why) {
  const ConvGeometry g = geometry(cfg);
  auto no = [&](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  const bool unit = g.SH == 1 && g.SW == 1 && g.DH == 1 && g.DW == 1;
  if (g.three_d && a != ConvAlgo::automatic && a != ConvAlgo::direct)
    return no("3-D convolution runs the direct algorithm only");
  if (cfg.residual && (a == ConvAlgo::depthwise || a == ConvAlgo::fft))
    return no("a fused residual add runs in the epilogues of gemm_1x1, im2col_gemm, winograd and direct only");
  switch (a) {
    case ConvAlgo::automatic:
    case ConvAlgo::im2col_gemm:
    case ConvAlgo::direct: return true;
    case ConvAlgo::depthwise:
      return g.groups == g.C && g.K == g.C ? true : no("needs group == input channels == output channels");
    case ConvAlgo::gemm_1x1:
      if (g.KH != 1 || g.KW != 1) return no("needs a 1x1 kernel");
      if (g.SH != 1 || g.SW != 1) return no("needs stride 1");
      if (g.PT || g.PL || g.PB || g.PR) return no("needs zero padding");
      return true;
    case ConvAlgo::winograd:
      if (g.KH != 3 || g.KW != 3) return no("needs a 3x3 kernel");
      if (!unit) return no("needs stride 1 and dilation 1");
      if (g.groups != 1) return no("needs group 1");
      return true;
    case ConvAlgo::fft:
      if (!unit) return no("needs stride 1 and dilation 1");
      if (g.groups != 1) return no("needs group 1");
      if (ProgramCache::global().binaries_only())  // clFFT compiles its kernels from source at run time
        return no("clFFT builds kernels from source, which an offline program bundle (--binaries) cannot hold");
      return true;
  }
  return no("unknown algorithm");
}

ConvAlgo ConvOp::choose(const ConvConfig& cfg, std::string* why_out) {
  const ConvGeometry g = geometry(cfg);
  std::string why;
  ConvAlgo a;
  if (cfg.algo != ConvAlgo::automatic) {
    if (!applies(cfg, cfg.algo, &why))
      invalid("Conv", "algorithm {} does not apply to input {} weight {} stride {}x{} dilation {}x{} group {}: {}",
              to_string(cfg.algo), cfg.input.str(), cfg.weight.shape().str(), g.SH, g.SW, g.DH, g.DW, g.groups, why);
    a = cfg.algo, why = "requested";
  } else if (g.three_d) {
    a = ConvAlgo::direct, why = "3-D";
  } else if (applies(cfg, ConvAlgo::depthwise)) {
    a = ConvAlgo::depthwise, why = "depthwise shape";
  } else if (applies(cfg, ConvAlgo::gemm_1x1)) {
    a = ConvAlgo::gemm_1x1, why = "1x1 stride 1 unpadded";
  } else if (applies(cfg, ConvAlgo::winograd) && g.C >= 16 && g.K >= 16) {
    a = ConvAlgo::winograd, why = "3x3 stride 1, >= 16 channels";
  } else if (applies(cfg, ConvAlgo::fft) && std::min(g.KH, g.KW) >= 7) {
    a = ConvAlgo::fft, why = "kernel >= 7x7, stride 1";
  } else if (g.C / g.groups * g.KH * g.KW >= 16) {
    a = ConvAlgo::im2col_gemm, why = "reduction C/group*KH*KW >= 16";
  } else {
    a = ConvAlgo::direct, why = "small reduction";
  }
  if (why_out) *why_out = why;
  return a;
}

ConvAlgo ConvOp::choose(const ConvConfig& cfg, const DeviceInfo& info, std::string* why) {
  if (cfg.algo == ConvAlgo::automatic && cfg.input.rank() != 5)  // the tuning database keys 2-D problems
    if (auto t = tuning::find(info, "conv", tuning::conv_problem(geometry(cfg)))) {
      auto it = t->params.find("algo");
      const int64_t a = it == t->params.end() ? -1 : it->second;
      if (a > int64_t(ConvAlgo::automatic) && a <= int64_t(ConvAlgo::fft) && applies(cfg, ConvAlgo(a))) {
        if (why) *why = "tuning database";
        return ConvAlgo(a);
      }
      log::warn("Conv input {} weight {}: ignoring tuning entry algo={} (not an applicable algorithm)",
                cfg.input.str(), cfg.weight.shape().str(), a);
    }
  const ConvAlgo a = choose(cfg, why);
  // CPUs, output planes of at most 64 pixels (the digits CNN's 8x8 and 4x4 maps; late stages of small
  // models) with at most 512 KiB of weights: conv_small_plane, one command and no workspace. Winograd there
  // made 2x2 tiles per 4x4 image in three commands (digits_cnn at batch 450, 16 -> 32 on 4x4: 4.9 ms of
  // transforms and GEMM, 0.7-1.0 ms now), im2col + GEMM a GEMM of 16 columns per image.
  if (cfg.algo == ConvAlgo::automatic && info.type == DeviceType::cpu && cfg.input.rank() == 4 &&
      a != ConvAlgo::depthwise && a != ConvAlgo::gemm_1x1 && applies(cfg, ConvAlgo::direct)) {
    // Up to 512 KiB of weights (each tile reads all of them; Winograd does 2.25x fewer FLOPs): batch 1, 3x3,
    // median ms conv_small_plane vs Winograd: 64 -> 64 on 8x8 (144 KiB) 0.061 vs 0.265; 128 -> 128 on 8x8
    // (576 KiB) 0.195 vs 0.182; 192 -> 192 on 7x7 0.54 vs 0.41; 512 -> 512 on 7x7 5.1 vs 2.8 (cldl bench conv
    // --set shape=1,C,H,W,C,3,1,1 --set algos=winograd,im2col_gemm --tuning compare).
    const ConvGeometry g = geometry(cfg);
    if (g.groups == 1 && g.OH * g.OW <= 64 && g.C * g.KH * g.KW * g.K * 4 <= (int64_t(512) << 10)) {
      if (why) *why = std::string(kSmallPlaneWhy);
      return ConvAlgo::direct;
    }
  }
  // Image stems on CPUs (3 input channels: 3x3 / 2 in the MobileNets, EfficientNets, ShuffleNet and RegNet,
  // 7x7 / 2 in ResNet): conv_grouped_band as one group, no im2col matrix (27 or 147 rows of the whole output
  // plane: 1.4 or 7.4 MB at 224x224) and no GEMM over it.
  if (cfg.algo == ConvAlgo::automatic && a == ConvAlgo::im2col_gemm && info.type == DeviceType::cpu &&
      cfg.input.rank() == 4) {
    const ConvGeometry g = geometry(cfg);
    if (g.groups == 1 && g.C <= 4 && grouped_band_geometry(g, info.compute_units).fits) {
      if (why) *why = std::string(kStemWhy);
      return ConvAlgo::direct;
    }
  }
  // A grouped convolution that is not depthwise (RegNet, ResNeXt) runs one direct kernel, 8 output channels
  // per work-item (CPUs: of a row, conv_grouped_rows; GPUs: of a pixel, conv_direct), instead of im2col and
  // a GEMM of KG rows per group: a command per group (two with CLBlast's epilogue), 1,202 commands and
  // 22.6 ms for RegNet-Y 400MF at batch 1 on an H200.
  if (cfg.algo == ConvAlgo::automatic && a == ConvAlgo::im2col_gemm && cfg.input.rank() == 4) {
    const ConvGeometry g = geometry(cfg);
    const bool narrow = info.type == DeviceType::cpu || g.K / g.groups <= 64;
    if (g.groups > 1 && g.SW <= 2 && narrow && applies(cfg, ConvAlgo::direct)) {
      if (why) *why = info.type == DeviceType::cpu ? "grouped, CPU: output rows per work-item"
                                                   : "grouped: 8 output channels of a pixel per work-item";
      return ConvAlgo::direct;
    }
  }
  if (cfg.algo == ConvAlgo::automatic && a == ConvAlgo::im2col_gemm && info.type == DeviceType::cpu) {
    const ConvGeometry g = geometry(cfg);
    // Few outputs from a short reduction, stride 1. The rule was made for MobileNet v3's 3 -> 16 stem at
    // stride 2 against an older GEMM (0.71 -> 0.29 ms); with today's GEMM im2col + GEMM wins there: on PoCL /
    // Skylake-AVX512 alone 0.24 against 0.50 ms (`cldl bench conv --set shape=1,3,224,224,16,3,2,1 --set
    // algos=direct,im2col_gemm`), MobileNet v3 small's minimum 2.55-2.97 -> 2.44-2.52 ms in 4 alternating
    // rounds; on Zen 4 alone 0.23 against 0.32 ms, inside the model within the noise. Stride 1 keeps it.
    if (g.groups == 1 && !g.three_d && g.SH == 1 && g.SW == 1 && g.K <= 16 && g.C * g.KH * g.KW < 64 &&
        applies(cfg, ConvAlgo::direct)) {
      if (why) *why = "at most 16 outputs, reduction < 64, stride 1, CPU: output rows per work-item";
      return ConvAlgo::direct;
    }
  }
  return a;
}

int ConvOp::winograd_tile_for(const ConvConfig& cfg, const DeviceInfo& info) {
  if (cfg.winograd_tile) return cfg.winograd_tile;
  const ConvGeometry g = geometry(cfg);
  const int64_t tiles4 = g.N * ceil_div(g.OH, 4) * ceil_div(g.OW, 4);
  return info.type == DeviceType::cpu && tiles4 >= 32 ? 4 : 2;
}

namespace {
// conv_dw_flat (kernels/conv_dw.cl): stride 1, undilated or dilated, the output plane the input's size, so
// each tap is one offset over the flattened plane. Bands of `rows` output rows per work-item, about 1,024
// outputs each (a 7x7 to 28x28 plane is one band; 56x56 four of 14 rows, 112x112 13 of 9); `vectors` float16
// outputs per band; `len` floats of the band's zero-padded private copy (the rows above and below included).
struct DwFlat {
  bool fits = false;
  int64_t rows = 0, bands = 0, vectors = 0, len = 0;
};
DwFlat dw_flat_geometry(const ConvGeometry& g) {
  DwFlat f;
  if (g.three_d || g.SH != 1 || g.SW != 1 || g.OH != g.H || g.OW != g.W) return f;
  const int64_t pieces = ceil_div(g.H * g.W, int64_t(1024));
  f.rows = ceil_div(g.H, pieces);
  f.bands = ceil_div(g.H, f.rows);
  f.vectors = ceil_div(f.rows * g.W, int64_t(16));
  f.len = ceil_div(f.vectors * 16 + (g.KH - 1) * g.DH * g.W + (g.KW - 1) * g.DW, int64_t(16)) * 16;
  f.fits = f.len <= 4096;  // 16 KiB of private memory per work-item
  return f;
}

// conv_dw_s2 (kernels/conv_dw.cl): stride 2, undilated; bands of `rows` output rows per work-item, each of the
// band's 2 rows + KH - 2 input rows split once into its even and its odd columns, `front` zeros before them
// (ceil(PL / 2): the leftmost tap's offset), `len` floats each (a multiple of 16 that holds the split row in whole
// float16 vectors and the float16 loads of `vectors` output vectors at every tap's offset); at most 16 KiB of
// them per work-item. Up to 4 rows a band: each input row is then split once instead of KH / 2 times, and the
// work-items still number OH / 4 per channel (7 x 144 for EfficientNet-B0's 5x5 on 56x56).
struct DwS2 {
  bool fits = false;
  int64_t front = 0, vectors = 0, len = 0, rows = 0, bands = 0;
};
DwS2 dw_s2_geometry(const ConvGeometry& g) {
  DwS2 f;
  if (g.three_d || g.SH != 2 || g.SW != 2 || g.DH != 1 || g.DW != 1 || g.PL >= g.KW) return f;
  f.front = (g.PL + 1) / 2;
  f.vectors = ceil_div(g.OW, int64_t(16));
  const int64_t emax = std::max<int64_t>(0, (g.KW - 1 - g.PL) / 2);
  f.len = ceil_div(std::max(f.front + f.vectors * 16 + emax, f.front + ceil_div((g.W + 1) / 2, int64_t(16)) * 16),
                   int64_t(16)) * 16;
  auto floats = [&](int64_t rows) { return 2 * (2 * rows + g.KH - 2) * f.len; };
  f.rows = std::min<int64_t>(4, g.OH);
  while (f.rows > 1 && floats(f.rows) > 4096) --f.rows;
  f.bands = ceil_div(g.OH, f.rows);
  f.fits = floats(f.rows) <= 4096;
  return f;
}

}  // namespace

GroupedBand grouped_band_geometry(const ConvGeometry& g, uint32_t compute_units, std::string* why, bool depthwise) {
  GroupedBand b;
  b.depthwise = depthwise;
  auto no = [&](std::string reason) {
    if (why) *why = std::move(reason);
    return b;
  };
  // Depthwise: blocks of 8 channels, each its own group (8 input planes copied per work-item).
  const int64_t CG = depthwise ? 8 : g.C / g.groups, KG = depthwise ? 8 : g.K / g.groups;
  if (depthwise && (g.groups != g.C || g.K != g.C)) return no("depthwise needs group == input == output channels");
  if (g.three_d) return no("3-D");
  if (CG > 16) return no(fmt::format("{} input channels per group (at most 16)", CG));
  if (g.DH != 1 || g.DW != 1) return no("dilated");
  if (g.SH != g.SW || (g.SH != 1 && g.SH != 2)) return no("needs the same stride, 1 or 2, in both axes");
  if (g.KH > 7 || g.KW > 7) return no("a kernel of more than 7x7");
  const int64_t S = g.SH;
  b.pitch = std::max<int64_t>(g.OW, 16) + (g.KW - 1) / S;
  const int64_t extra = (g.KH - 1) / S, per_row = CG * S * S * b.pitch;
  const int64_t cap = kGroupedBandPrivate / per_row - extra;
  if (cap < 1)
    return no(fmt::format("a row band's private copy ({} floats) exceeds {}", per_row * (1 + extra),
                          kGroupedBandPrivate));
  // Bands so that the launch has at least 64 work-items (8 per compute unit on larger devices), rows in pairs
  // (each broadcast weight feeds two rows' FMAs).
  const int64_t blocks = depthwise ? g.N * ceil_div(g.C, int64_t(8)) : g.N * g.groups * ceil_div(KG, int64_t(8));
  const int64_t want = std::max<int64_t>(64, int64_t(compute_units) * 8);
  int64_t rows = std::clamp<int64_t>(ceil_div(g.OH, ceil_div(want, blocks)), 1, cap);
  if (rows % 2 && rows < g.OH) {  // an even band (an odd one computes its last row twice)
    if (rows + 1 <= cap && blocks * ceil_div(g.OH, rows + 1) >= want)
      ++rows;
    else if (rows > 1)
      --rows;
  }
  b.rows = rows;
  b.bands = ceil_div(g.OH, rows);
  b.prow = rows + extra;
  b.fits = true;
  return b;
}

HostTensor grouped_band_weights(const HostTensor& w, const ConvGeometry& g, bool depthwise) {
  const int64_t groups = depthwise ? ceil_div(g.C, int64_t(8)) : g.groups;
  const int64_t KG = depthwise ? std::min<int64_t>(8, g.C) : g.K / g.groups;
  const int64_t blocks = depthwise ? 1 : ceil_div(KG, int64_t(8));
  const int64_t wk = (depthwise ? 1 : g.C / g.groups) * g.KH * g.KW;
  HostTensor out(DType::f32, Shape{groups * blocks * 8 * wk});
  float* o = out.as<float>();
  std::fill(o, o + out.numel(), 0.0f);
  const float* src = w.as<float>();
  for (int64_t k = 0; k < g.K; ++k) {
    // Output channel k: its group and its place in the group (depthwise: blocks of 8 channels).
    const int64_t grp = depthwise ? k / 8 : k / KG, kk = depthwise ? k % 8 : k % KG;
    std::copy(src + k * wk, src + (k + 1) * wk, o + ((grp * blocks + kk / 8) * 8 + kk % 8) * wk);
  }
  return out;
}

int64_t grouped_band_items(const ConvGeometry& g, const GroupedBand& b) {
  if (b.depthwise) return g.N * ceil_div(g.C, int64_t(8)) * b.bands;
  return g.N * g.groups * ceil_div(g.K / g.groups, int64_t(8)) * b.bands;
}

namespace {
// im2col_rows: output rows per work-item, about 256 outputs each: one row of a small map was too little
// work per item (DeepLab's dilated 3x3 on 16x16 x 960 channels: 138K items, 15 ms on PoCL).
int64_t im2col_rows_per_item(const ConvGeometry& g) { return std::clamp<int64_t>(256 / std::max<int64_t>(g.OW, 1), 1, g.OH); }

// Taps that read only padding, for every output position, multiply zeros: a 3x3 convolution dilated by 24
// or 36 on a 16x16 map (DeepLab's ASPP at 256x256) reads the image through its centre tap alone. The
// convolution without them, its pads reduced by what they spanned, gives the same output (there a 1x1
// convolution: no im2col, 1/9 of the work). Only where the algorithm is the automatic choice, for 2-D
// problems, and where the dropped weights are finite (0 * inf would have been NaN). Pads stay >= 0: a
// dead tap whose removal would need a negative pad stays.
ConvConfig trim_dead_taps(const ConvConfig& c) {
  if (c.algo != ConvAlgo::automatic || c.input.rank() != 4 || c.weight.dtype() != DType::f32) return c;
  const ConvGeometry g = ConvOp::geometry(c);
  struct Axis {
    int64_t in, out, k, s, d, pb, pe, k0, k1;
  };
  Axis ax[2] = {{g.H, g.OH, g.KH, g.SH, g.DH, g.PT, g.PB, 0, 0}, {g.W, g.OW, g.KW, g.SW, g.DW, g.PL, g.PR, 0, 0}};
  for (Axis& a : ax) {
    int64_t lo = -1, hi = -1;
    for (int64_t k = 0; k < a.k; ++k) {
      // Input positions of tap k run from k*d - pb (first output) to (out-1)*s - pb + k*d (last output).
      if (k * a.d - a.pb <= a.in - 1 && (a.out - 1) * a.s - a.pb + k * a.d >= 0) {
        if (lo < 0) lo = k;
        hi = k;
      }
    }
    if (lo < 0) return c;  // no tap reads the image at all: left as it is
    a.k0 = std::min(lo, a.pb / a.d);
    a.k1 = std::max(hi, a.k - 1 - a.pe / a.d);
  }
  const Axis &h = ax[0], &w = ax[1];
  if (h.k0 == 0 && h.k1 == h.k - 1 && w.k0 == 0 && w.k1 == w.k - 1) return c;
  const int64_t K = g.K, CG = g.C / g.groups, KH2 = h.k1 - h.k0 + 1, KW2 = w.k1 - w.k0 + 1;
  const float* src = c.weight.as<float>();
  for (int64_t i = 0; i < c.weight.numel(); ++i) {
    const int64_t kh = (i / g.KW) % g.KH, kw = i % g.KW;
    const bool kept = kh >= h.k0 && kh <= h.k1 && kw >= w.k0 && kw <= w.k1;
    if (!kept && !std::isfinite(src[i])) return c;
  }
  ConvConfig t = c;
  t.weight = HostTensor(DType::f32, Shape{K, CG, KH2, KW2});
  float* dst = t.weight.as<float>();
  for (int64_t kc = 0; kc < K * CG; ++kc)
    for (int64_t kh = 0; kh < KH2; ++kh)
      for (int64_t kw = 0; kw < KW2; ++kw)
        dst[(kc * KH2 + kh) * KW2 + kw] = src[(kc * g.KH + kh + h.k0) * g.KW + kw + w.k0];
  t.pads = {h.pb - h.k0 * h.d, w.pb - w.k0 * w.d, h.pe - (h.k - 1 - h.k1) * h.d, w.pe - (w.k - 1 - w.k1) * w.d};
  t.auto_pad = AutoPad::notset;
  log::debug("Conv input {} weight {}: taps outside the image for every output dropped, weight {} pads [{}]",
             c.input.str(), c.weight.shape().str(), t.weight.shape().str(), fmt::join(t.pads, ", "));
  return t;
}
}  // namespace

std::unique_ptr<ConvOp> ConvOp::create(Context& ctx, int device, const ConvConfig& cfg_in) {
  const ConvConfig cfg = trim_dead_taps(cfg_in);
  std::unique_ptr<ConvOp> op(new ConvOp());
  op->g_ = geometry(cfg);
  op->out_shape_ = validate(cfg);
  if (cfg.max_pool_2x2) {
    op->pool_shape_ = op->out_shape_;
    op->out_shape_ = Shape{op->g_.N, op->g_.K, op->g_.OH, op->g_.OW};
  }
  if (!op->g_.three_d) tuning::record(cfg);
  op->ctx_ = &ctx;
  op->device_ = device;
  op->act_ = cfg.act;
  op->residual_ = cfg.residual;
  const ConvGeometry& g = op->g_;
  std::string why;
  op->algo_ = choose(cfg, ctx.device(device).info, &why);
  if (std::string no; !applies(cfg, op->algo_, &no))  // every choice above checks; a new one must too
    invalid("Conv", "algorithm {} ({}) does not apply to input {} weight {}: {}", to_string(op->algo_), why,
            cfg.input.str(), cfg.weight.shape().str(), no);
  log::debug("Conv input {} weight {} -> {}: algorithm {} ({})", cfg.input.str(), cfg.weight.shape().str(),
             op->out_shape_.str(), to_string(op->algo_), why);

  op->has_bias_ = cfg.bias.has_value();
  if (op->has_bias_) op->bias_ = ctx.upload(*cfg.bias, device);
  cl::Program prog = ctx.program("conv.cl", fmt::format("-DACT={}", int(cfg.act.kind)), device);
  const int64_t P = g.OH * g.OW, KG = g.K / g.groups, CG = g.C / g.groups, R = CG * g.KH * g.KW;
  switch (op->algo_) {
    case ConvAlgo::direct:
      if (cfg.direct_kernel < 0 || cfg.direct_kernel > 4)
        invalid("Conv", "direct_kernel {} is not 0, 1, 2, 3 or 4", cfg.direct_kernel);
      if (cfg.direct_kernel == 3 && (g.three_d || g.groups != 1))
        invalid("Conv",
                "direct_kernel 3 (conv_small_plane) needs a 2-D convolution of group 1; input {} weight {} group {}",
                cfg.input.str(), cfg.weight.shape().str(), g.groups);
      op->direct_plane_ = cfg.direct_kernel == 3 || (cfg.direct_kernel == 0 && why == kSmallPlaneWhy);
      if (op->direct_plane_) {
        // [C*KH*KW][kpad]: a tap's 16 output channels are one vector load; channels past K are zeros.
        // 32 channels per work-item where K > 16: each broadcast input feeds two FMAs (digits_cnn's 16 -> 32
        // on 4x4 at batch 450, median of 3 alternated runs: 1.01-1.33 ms with 16, 0.73-0.85 ms with 32).
        op->sp_kv_ = g.K > 16 ? 2 : 1;
        op->kpad_ = ceil_div(g.K, 16 * op->sp_kv_) * 16 * op->sp_kv_;
        HostTensor wt(DType::f32, Shape{R, op->kpad_});
        std::memset(wt.data(), 0, wt.bytes());
        const float* w = cfg.weight.as<float>();
        float* d = wt.as<float>();
        for (int64_t k = 0; k < g.K; ++k)
          for (int64_t r = 0; r < R; ++r) d[r * op->kpad_ + k] = w[k * R + r];
        op->weight_ = ctx.upload(wt, device);
        // Each tile's input offsets per tap (conv_small_plane's table): -1 in the padding or past the plane.
        // Pooling, a tile's pixels are the 2x2 windows of pooled outputs 2t and 2t + 1 (pixel j: output 2t + j / 4,
        // its window's pixel j % 4, row-major); a tile past the last pooled output reads nothing.
        const bool pool = cfg.max_pool_2x2;
        const int64_t tiles = small_plane_tiles(g, pool), taps = g.KH * g.KW, PQ = (g.OH / 2) * (g.OW / 2);
        HostTensor ot(DType::i32, Shape{tiles * taps * 8});
        int32_t* o = ot.as<int32_t>();
        for (int64_t t = 0; t < tiles; ++t) {
          const int64_t p0 = P >= 8 ? std::min(t * 8, P - 8) : 0;
          for (int64_t tap = 0; tap < taps; ++tap)
            for (int64_t j = 0; j < 8; ++j) {
              int64_t oy = (p0 + j) / g.OW, ox = (p0 + j) % g.OW;
              bool live = p0 + j < P;
              if (pool) {
                const int64_t q = 2 * t + j / 4;
                live = q < PQ;
                oy = q / (g.OW / 2) * 2 + (j % 4) / 2, ox = q % (g.OW / 2) * 2 + j % 2;
              }
              const int64_t kh = tap / g.KW, kw = tap % g.KW;
              const int64_t ih = oy * g.SH - g.PT + kh * g.DH, iw = ox * g.SW - g.PL + kw * g.DW;
              const bool in = live && ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
              o[(t * taps + tap) * 8 + j] = in ? int32_t(ih * g.W + iw) : -1;
            }
        }
        op->offsets_ = ctx.upload(ot, device);
        op->main_ = make_kernel(ctx.program("conv.cl",
                                            fmt::format("-DACT={} -DSP_KV={} -DSP_POOL={}", int(cfg.act.kind),
                                                        op->sp_kv_, int(pool)),
                                            device),
                                "conv_small_plane");
        break;
      }
      if (cfg.direct_kernel == 4 || (cfg.direct_kernel == 0 && ctx.device(device).info.type == DeviceType::cpu &&
                                     (g.groups > 1 || why == kStemWhy))) {
        std::string no;
        const GroupedBand b = grouped_band_geometry(g, ctx.device(device).info.compute_units, &no);
        if (b.fits) {
          op->band_ = b;
          op->weight_ = ctx.upload(grouped_band_weights(cfg.weight, g, false), device);
          op->main_ = make_kernel(ctx.program("conv.cl",
                                              fmt::format("-DACT={} -DGB_CG={} -DGB_KH={} -DGB_KW={} -DGB_S={}",
                                                          int(cfg.act.kind), CG, g.KH, g.KW, g.SH),
                                              device),
                                  "conv_grouped_band");
          break;
        }
        if (cfg.direct_kernel == 4)
          invalid("Conv", "direct_kernel 4 (conv_grouped_band) does not apply to input {} weight {}: {}",
                  cfg.input.str(), cfg.weight.shape().str(), no);
      }
      op->weight_ = ctx.upload(cfg.weight, device);
      op->direct_rows_ = !g.three_d && (cfg.direct_kernel == 2 || (cfg.direct_kernel == 0 &&
                                                                    ctx.device(device).info.type == DeviceType::cpu));
      op->main_ = make_kernel(prog, g.three_d ? "conv_direct3d" : op->direct_rows_ ? "conv_grouped_rows" : "conv_direct");
      break;
    case ConvAlgo::depthwise: {
      if (cfg.depthwise_block != 0 && cfg.depthwise_block != 1 && cfg.depthwise_block != 8 &&
          cfg.depthwise_block != 16 && cfg.depthwise_block != 32 && cfg.depthwise_block != 64 &&
          cfg.depthwise_block != 128)
        invalid("Conv", "depthwise_block {} is not 0, 1, 8, 16, 32, 64 or 128", cfg.depthwise_block);
      // The plane kernel's padded private copy: the rows the outputs read, and the columns of round_up(OW, 8)
      // outputs (float16 loads at stride 2); DW_PLANE_MAX in conv.cl bounds it.
      const int64_t owr = ceil_div(g.OW, 8) * 8;
      const int64_t pr = (g.OH - 1) * g.SH + (g.KH - 1) * g.DH + 1;
      const int64_t pc = (owr - 8) * g.SW + (g.KW - 1) * g.DW + (g.SW == 1 ? 8 : 16);
      const bool plane_fits = (g.SW == 1 || g.SW == 2) && pr * pc <= 2304;
      if (cfg.depthwise_block == 64 && !plane_fits)
        invalid("Conv", "depthwise_block 64 needs stride 1 or 2 and a padded plane of at most 2,304 floats; "
                "input {} weight {} needs {} x {}", cfg.input.str(), cfg.weight.shape().str(), pr, pc);
      const DwFlat flat = dw_flat_geometry(g);
      const DwS2 s2 = dw_s2_geometry(g);
      if (cfg.depthwise_block == 32 && !s2.fits)
        invalid("Conv", "depthwise_block 32 needs stride 2, no dilation, a left pad under the kernel width and "
                "split rows of at most 4,096 floats (input {} weight {} stride {}x{} dilation {}x{})",
                cfg.input.str(), cfg.weight.shape().str(), g.SH, g.SW, g.DH, g.DW);
      if (cfg.depthwise_block == 16 && !flat.fits)
        invalid("Conv", "depthwise_block 16 needs stride 1 and an output plane of the input's size (input {} "
                "weight {} stride {}x{} output {}x{})", cfg.input.str(), cfg.weight.shape().str(), g.SH, g.SW,
                g.OH, g.OW);
      // CPUs: stride-1 "same" layers (every stride-1 depthwise layer of the MobileNets, EfficientNets and
      // ShuffleNet) along the flattened plane (conv_dw_flat); other small planes (the stride-2 layers) a
      // plane per work-item with no bounds checks; larger ones an output row per work-item in strips of 8
      // outputs, each tap's inputs loaded as one vector (PoCL, 96x80x120 3x3: see `cldl bench kernels`);
      // GPUs: one output per work-item, neighbours coalesce.
      // Except 5x5 (and larger) on planes narrower than 8 (MobileNet v3's and EfficientNet's last stage,
      // 7x7): the plane kernel's float8 rows waste 1 lane of 8 where the flat kernel's float16 vectors waste
      // 15 of 64, with 25 taps each (bench kernels, 3 alternating runs, min ms, 5x5 576x7x7: 0.11-0.14 plane,
      // 0.12-0.19 flat; 3x3 960x7x7: 0.09-0.12 plane, 0.07-0.09 flat; 5x5 672x14x14: 0.37 plane, 0.26 flat).
      // And planes 8 or 16 wide, whose rows the plane kernel covers with whole float8 strips (DeepLab's 16x16,
      // cldl profile, min of 3 alternating runs: 3x3 672ch plane 0.194 ms, flat 0.206; 5x5 dilation 2 960ch
      // plane 0.635, flat 0.88-0.91); 32x32 (5x5 120ch: plane 0.27, flat 0.19) and wider keep the flat kernel.
      const bool cpu = ctx.device(device).info.type == DeviceType::cpu;
      const bool plane_wins = plane_fits && ((g.OW < 8 && g.KH * g.KW >= 25) || (g.OW % 8 == 0 && g.OW <= 16));
      const bool flat_wins = flat.fits && !plane_wins;
      // Stride 2 on rows of 96 and more (the MobileNets' and EfficientNets' 112x112 layer): conv_grouped_band's
      // depthwise form before the split rows (cldl bench conv --set shape=1,96,112,112,96,3,2,1,96 --set
      // algos=depthwise --set depthwise_block=32|128, 3 alternating runs, min ms: 0.49 against 0.31; with the
      // split rows in bands, device time in EfficientNet-B0 (`cldl profile`, two runs): 0.37-0.44 against
      // 0.39). Small stride-2 planes keep the plane kernel: the banded split rows measured faster alone with
      // a ReLU (`cldl bench conv`) but not inside EfficientNet-B0 with its SiLU (device time, 672x14x14 5x5:
      // 0.155-0.179 against 0.134 ms; 240x28x28 3x3: 0.086-0.10 against 0.087).
      const bool band_wins = g.SH == 2 && g.SW == 2 && g.W >= 96 &&
                             grouped_band_geometry(g, ctx.device(device).info.compute_units, nullptr, true).fits;
      const int block = cfg.depthwise_block ? cfg.depthwise_block
                        : !cpu              ? 1
                        : flat_wins         ? 16
                        : plane_fits        ? 64
                        : band_wins         ? 128
                        : s2.fits           ? 32
                                            : 8;
      if (block == 128) {
        std::string no;
        const GroupedBand b = grouped_band_geometry(g, ctx.device(device).info.compute_units, &no, true);
        if (!b.fits)
          invalid("Conv", "depthwise_block 128 (conv_grouped_band) does not apply to input {} weight {}: {}",
                  cfg.input.str(), cfg.weight.shape().str(), no);
        op->band_ = b;
        op->weight_ = ctx.upload(grouped_band_weights(cfg.weight, g, true), device);
        op->main_ = make_kernel(ctx.program("conv.cl",
                                            fmt::format("-DACT={} -DGB_CG=8 -DGB_DW=1 -DGB_KH={} -DGB_KW={} -DGB_S={}",
                                                        int(cfg.act.kind), g.KH, g.KW, g.SH),
                                            device),
                                "conv_grouped_band");
        break;
      }
      op->weight_ = ctx.upload(cfg.weight, device);
      op->depthwise_rows_ = block == 8;
      op->depthwise_plane_ = block == 64;
      op->depthwise_flat_ = block == 16;
      op->depthwise_s2_ = block == 32;
      op->dw_pr_ = int(pr), op->dw_pc_ = int(pc);
      if (op->depthwise_s2_) {
        op->dw_pr_ = int(s2.bands);
        // A program per (kernel, row width, left pad, activation).
        op->main_ = make_kernel(
            ctx.program("conv_dw.cl",
                        fmt::format("-DACT={} -DDWS_KH={} -DDWS_KW={} -DDWS_W={} -DDWS_OW={} -DDWS_PL={} -DDWS_FP={} "
                                    "-DDWS_NV={} -DDWS_LEN={} -DDWS_BR={}",
                                    int(cfg.act.kind), g.KH, g.KW, g.W, g.OW, g.PL, s2.front, s2.vectors, s2.len,
                                    s2.rows),
                        device),
            "conv_dw_s2");
        log::debug("Conv depthwise {}: stride 2, bands of {} output rows per work-item from split rows (conv_dw_s2)",
                   cfg.input.str(), s2.rows);
        break;
      }
      if (op->depthwise_flat_) {
        // A program per (kernel, dilation, plane, pads, activation): the band and tap loops have constant
        // bounds and offsets. MobileNet v2 builds 4, EfficientNet-B0 6.
        op->dw_pr_ = int(flat.bands);
        op->main_ = make_kernel(
            ctx.program("conv_dw.cl",
                        fmt::format("-DACT={} -DDWF_KH={} -DDWF_KW={} -DDWF_DH={} -DDWF_DW={} -DDWF_H={} -DDWF_W={} "
                                    "-DDWF_PT={} -DDWF_PL={} -DDWF_BR={} -DDWF_NV={} -DDWF_LEN={}",
                                    int(cfg.act.kind), g.KH, g.KW, g.DH, g.DW, g.H, g.W, g.PT, g.PL, flat.rows,
                                    flat.vectors, flat.len),
                        device),
            "conv_dw_flat");
        log::debug("Conv depthwise {}: bands of {} rows along the flattened plane (conv_dw_flat)", cfg.input.str(),
                   flat.rows);
        break;
      }
      // The rows and plane kernels built for this kernel size and stride (undilated): their tap loops unroll
      // and the weights sit in registers. A program per (size, stride, activation); MobileNets and EfficientNets
      // use four.
      if ((op->depthwise_plane_ || op->depthwise_rows_) && g.DH == 1 && g.DW == 1 && g.KH * g.KW <= 49)
        prog = ctx.program("conv.cl",
                           fmt::format("-DACT={} -DDW_KH={} -DDW_KW={} -DDW_SH={} -DDW_SW={}", int(cfg.act.kind), g.KH,
                                       g.KW, g.SH, g.SW),
                           device);
      op->main_ = make_kernel(prog, op->depthwise_plane_ ? "conv_depthwise_plane"
                                    : op->depthwise_rows_ ? "conv_depthwise_rows"
                                                          : "conv_depthwise");
      log::debug("Conv depthwise {}: {}", cfg.input.str(),
                 op->depthwise_plane_  ? "a plane per work-item (conv_depthwise_plane)"
                 : op->depthwise_rows_ ? "an output row per work-item, strips of 8 (conv_depthwise_rows)"
                                       : "1 output per work-item (conv_depthwise)");
      break;
    }
    case ConvAlgo::im2col_gemm:
    case ConvAlgo::gemm_1x1: {
      // Per group: Y[n][grp] (KG x P) = W[grp] (KG x R) * B[n][grp] (R x P), batched over images with
      // the weight broadcast (stride 0); B is the im2col matrix or, for 1x1, the input itself.
      op->weight_ = ctx.upload(cfg.weight, device);
      const bool is1x1 = op->algo_ == ConvAlgo::gemm_1x1;
      if (!is1x1) {
        if (cfg.im2col_kernel < 0 || cfg.im2col_kernel > 2)
          invalid("Conv", "im2col_kernel {} is not 0, 1 or 2", cfg.im2col_kernel);
        // CPUs: a contiguous output row per work-item (PoCL, 3->8 channels 3x3 at 8x224x224: see the
        // commit); GPUs: a work-item per output pixel, neighbours coalesce.
        op->im2col_rows_ =
            cfg.im2col_kernel == 2 || (cfg.im2col_kernel == 0 && ctx.device(device).info.type == DeviceType::cpu);
        op->pre_ = make_kernel(prog, op->im2col_rows_ ? "im2col_rows" : "im2col");
        log::debug("Conv im2col {}: {}", cfg.input.str(),
                   op->im2col_rows_ ? "an output row per work-item (im2col_rows)" : "a pixel per work-item (im2col)");
        op->workspace_ = size_t(g.N * g.C * g.KH * g.KW * P) * sizeof(float);
      }
      GemmConfig gc;
      gc.M = KG, gc.N = P, gc.K = R;
      gc.batch = g.N;
      gc.stride_a = 0;
      gc.stride_b = is1x1 ? g.C * g.H * g.W : g.C * g.KH * g.KW * P;
      gc.stride_c = g.K * P;
      gc.bias = op->has_bias_ ? GemmBias::per_row : GemmBias::none;
      gc.act = cfg.act;
      gc.residual = cfg.residual;
      // One Gemm op serves every group: the group is only a view offset.
      op->gemm_.push_back(Gemm::create(ctx, device, gc));
      break;
    }
    case ConvAlgo::winograd: {
      if (cfg.winograd_tile != 0 && cfg.winograd_tile != 2 && cfg.winograd_tile != 4)
        invalid("Conv", "winograd_tile {} is not 0, 2 or 4", cfg.winograd_tile);
      if (cfg.winograd_kernel < 0 || cfg.winograd_kernel > 2)
        invalid("Conv", "winograd_kernel {} is not 0, 1 or 2", cfg.winograd_kernel);
      const bool cpu = ctx.device(device).info.type == DeviceType::cpu;
      // F(4x4,3x3) on CPUs (winograd_tile_for): against F(2x2,3x3) the GEMMs do 2.25 instead of 4 multiplies
      // per output and channel pair and the transformed planes (the transforms' memory traffic) are 2.25x
      // instead of 4x the input and output. Its GEMMs have a quarter of the columns (tiles) though, and 2.25x
      // the weights to read: below 32 tiles (ResNet's 14x14 and 7x7 stages at batch 1: 16 and 4) a GEMM of a
      // few columns per output channel streams its weights for little work, and F(2x2,3x3) is as fast or
      // faster. Min of 3 x 15 runs on PoCL / Zen 4, F2 -> F4 (`cldl bench conv --set shape=...`): 64->64
      // 56x56 2.46 -> 1.39 ms, 128->128 28x28 2.49 -> 1.66 ms; 256->256 14x14 1.99 -> 2.17 ms (1.82 -> 1.67
      // in another run), 512->512 7x7 2.73 -> 5.18 ms.
      const int m = winograd_tile_for(cfg, ctx.device(device).info);
      const int a = m + 2;  // input tile size; a * a products
      op->winograd_m_ = m;
      // U = G g G^T per (k, c), stored [a*a][K][C] so the element-wise products are a batch of GEMMs.
      const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
      const double G4[6][3] = {{0.25, 0, 0},
                               {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                               {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                               {1.0 / 24, 1.0 / 12, 1.0 / 6},
                               {1.0 / 24, -1.0 / 12, 1.0 / 6},
                               {0, 0, 1}};
      auto G = [&](int i, int j) { return m == 4 ? G4[i][j] : G2[i][j]; };
      HostTensor u(DType::f32, Shape{a * a, g.K, g.C});
      const float* w = cfg.weight.as<float>();
      float* U = u.as<float>();
      for (int64_t k = 0; k < g.K; ++k)
        for (int64_t c = 0; c < g.C; ++c) {
          const float* f = w + (k * g.C + c) * 9;
          double t[6][3];  // G f
          for (int i = 0; i < a; ++i)
            for (int j = 0; j < 3; ++j)
              t[i][j] = G(i, 0) * f[0 * 3 + j] + G(i, 1) * f[1 * 3 + j] + G(i, 2) * f[2 * 3 + j];
          for (int i = 0; i < a; ++i)
            for (int j = 0; j < a; ++j)
              U[((i * a + j) * g.K + k) * g.C + c] = float(t[i][0] * G(j, 0) + t[i][1] * G(j, 1) + t[i][2] * G(j, 2));
        }
      op->weight_ = ctx.upload(u, device);
      // CPUs: strips of 8 tiles per work-item in float8 lanes (PoCL, 64->64 3x3 56x56 b8: the two
      // transforms 11.0 + 11.8 ms a tile per work-item; see `cldl bench conv`); GPUs: a tile per work-item.
      op->winograd_rows_ = cfg.winograd_kernel == 2 || (cfg.winograd_kernel == 0 && cpu);
      const char* pre = m == 4 ? (op->winograd_rows_ ? "winograd4_input_rows" : "winograd4_input")
                               : (op->winograd_rows_ ? "winograd_input_rows" : "winograd_input");
      const char* post = m == 4 ? (op->winograd_rows_ ? "winograd4_output_rows" : "winograd4_output")
                                : (op->winograd_rows_ ? "winograd_output_rows" : "winograd_output");
      op->pre_ = make_kernel(prog, pre);
      op->post_ = make_kernel(prog, post);
      log::debug("Conv winograd {}: F({}x{},3x3), {}", cfg.input.str(), m, m,
                 op->winograd_rows_ ? "strips of 8 tiles per work-item (winograd*_rows)" : "a tile per work-item");
      const int64_t T = g.N * ceil_div(g.OH, m) * ceil_div(g.OW, m);
      op->workspace_ = size_t(a * a * (g.C + g.K) * T) * sizeof(float);
      GemmConfig gc;
      gc.M = g.K, gc.N = T, gc.K = g.C;
      gc.batch = a * a;
      op->gemm_.push_back(Gemm::create(ctx, device, gc));
      break;
    }
    case ConvAlgo::fft:
      op->pre_ = make_kernel(prog, "fft_pad");
      op->main_ = make_kernel(prog, "fft_multiply");
      op->post_ = make_kernel(prog, "fft_crop");
      op->prepare_fft(cfg);
      break;
    case ConvAlgo::automatic: break;
  }
  // Small images: whole output planes per work-group, batched over images/channels (plane_batch_local_size).
  const Device& dev = ctx.device(device);
  const size_t N = size_t(g.N), OW = size_t(g.OW), OH = size_t(g.OH);
  const size_t th = size_t(ceil_div(g.OH, op->winograd_m_)), tw = size_t(ceil_div(g.OW, op->winograd_m_));
  if (op->band_.fits) {
    const PaddedLaunch l = padded_launch(grouped_band_items(g, op->band_), 1, 1, 1);
    op->global_main_ = l.global;
    op->local_main_ = l.local;
  } else switch (op->algo_) {
    case ConvAlgo::direct:
      if (op->direct_plane_) {
        const PaddedLaunch l = padded_launch(small_plane_items(g, op->kpad_, op->sp_kv_, cfg.max_pool_2x2), 1, 1, 64);
        op->global_main_ = l.global;
        op->local_main_ = l.local;
        break;
      }
      if (op->direct_rows_) {
        const PaddedLaunch l = padded_launch(g.OH, g.N * g.groups * ceil_div(g.K / g.groups, 8), 1, 1);
        op->global_main_ = l.global;
        op->local_main_ = l.local;
        break;
      }
      op->local_main_ = g.three_d ? plane_batch_local_size(op->main_, dev, OW, OH, N * size_t(g.K) * size_t(g.OD))
                                  : plane_batch_local_size(op->main_, dev, OW, OH,
                                                           N * size_t(g.groups) * size_t(ceil_div(g.K / g.groups, 8)));
      break;
    case ConvAlgo::depthwise:
      if (op->depthwise_s2_) {  // a work-item per group: PoCL keeps one copy of the split rows
        const PaddedLaunch l = padded_launch(op->dw_pr_, g.N * g.K, 1, 1);
        op->global_main_ = l.global;
        op->local_main_ = l.local;
      } else if (op->depthwise_flat_) {
        const PaddedLaunch l = padded_launch(op->dw_pr_, g.N * g.K, 1, 1);
        op->global_main_ = l.global;
        op->local_main_ = l.local;
      } else if (op->depthwise_plane_) {
        const PaddedLaunch l = padded_launch(g.N * g.K, 1, 1, 1);
        op->global_main_ = l.global;
        op->local_main_ = l.local;
      } else if (op->depthwise_rows_) {
        const PaddedLaunch l = padded_launch(g.OH, g.N * g.K, 1, 64);
        op->global_main_ = l.global;
        op->local_main_ = l.local;
      } else {
        op->local_main_ = plane_batch_local_size(op->main_, dev, OW, OH, N * size_t(g.K));
      }
      break;
    case ConvAlgo::im2col_gemm:
      if (op->im2col_rows_) {
        const PaddedLaunch l = padded_launch(ceil_div(g.OH, im2col_rows_per_item(g)), g.KH * g.KW, g.N * g.C, 16);
        op->global_pre_ = l.global;
        op->local_pre_ = l.local;
      } else {
        op->local_pre_ = plane_batch_local_size(op->pre_, dev, OW, OH, N * size_t(g.C));
      }
      break;
    case ConvAlgo::winograd:
      if (op->winograd_rows_) {
        const int64_t strips = ceil_div(int64_t(tw), 8);
        const PaddedLaunch in = padded_launch(strips, int64_t(th), g.N * g.C, 16);
        const PaddedLaunch out = padded_launch(strips, int64_t(th), g.N * g.K, 16);
        op->global_pre_ = in.global, op->local_pre_ = in.local;
        op->global_post_ = out.global, op->local_post_ = out.local;
      } else {
        op->local_pre_ = plane_batch_local_size(op->pre_, dev, th * tw, size_t(g.C), N);
        op->local_post_ = plane_batch_local_size(op->post_, dev, th * tw, size_t(g.K), N);
      }
      break;
    default: break;
  }
  if (cfg.max_pool_2x2 && !op->direct_plane_) {
    // The kernel writes the convolution's output into the workspace, after what it needs there; the Pool op reads it.
    PoolConfig pc;
    pc.kind = PoolKind::max;
    pc.input = op->out_shape_;
    pc.kernel = {2, 2};
    pc.strides = {2, 2};
    op->pool_ = Pool::create(ctx, device, pc);
    op->pool_ws_off_ = round_up(op->workspace_, 256);
    op->workspace_ = op->pool_ws_off_ + size_t(op->out_shape_.numel()) * sizeof(float);
  }
  return op;
}

ConvOp::~ConvOp() { release_fft(); }

std::string ConvOp::algorithm() const {
  const std::string a(to_string(algo_));
  return pool_shape_.rank() == 0 ? a : pool_ ? a + " + MaxPool 2x2 / 2 (the Pool op)" : a + " + MaxPool 2x2 / 2 in the epilogue";
}

std::vector<GemmConfig> ConvOp::gemm_configs() const {
  std::vector<GemmConfig> out;
  for (const auto& g : gemm_) {
    out.push_back(g->config());
    out.back().own = GemmOwnParams{};  // config() holds the resolved parameters; callers want the problem
  }
  return out;
}

void ConvOp::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
                     ExecutionContext& ec) {
  const size_t need_in = residual_ ? 2 : 1;
  if (inputs.size() != need_in || outputs.size() != 1)
    invalid("Conv", "expects {} input(s) and 1 output, got {} and {}", need_in, inputs.size(), outputs.size());
  const Tensor &x = inputs[0], &y = outputs[0];
  if (residual_ && (inputs[1].dtype != DType::f32 || inputs[1].shape != out_shape_))
    invalid("Conv", "residual is {} {}, expected f32 {}", to_string(inputs[1].dtype), inputs[1].shape.str(),
            out_shape_.str());
  if (x.dtype != DType::f32 || y.dtype != DType::f32) invalid("Conv", "only f32 tensors are supported");
  if (x.numel() != g_.N * g_.C * g_.D * g_.H * g_.W)
    invalid("Conv", "input shape {} does not match the configured problem", x.shape.str());
  if (y.shape != output_shape())
    invalid("Conv", "output shape {} does not match the expected {}", y.shape.str(), output_shape().str());
  if (workspace_ && (!workspace || workspace->bytes() < workspace_))
    invalid("Conv", "algorithm {} needs a workspace of {} bytes, got {}", algorithm(), workspace_,
            workspace ? workspace->bytes() : 0);
  if (!pool_) return run(inputs, y, workspace, ec);
  // max_pool_2x2 where the kernel does not pool: the convolution into the workspace, then the Pool op.
  Tensor full = *workspace;
  full.offset_bytes += pool_ws_off_;
  full.dtype = DType::f32;
  full.shape = out_shape_;
  Tensor own = *workspace;  // the algorithm's own part of the workspace
  own.shape = Shape{int64_t(pool_ws_off_)};
  run(inputs, full, pool_ws_off_ ? &own : nullptr, ec);
  const Tensor pin[1] = {full};
  pool_->enqueue(pin, outputs, nullptr, ec);
}

void ConvOp::run(std::span<const Tensor> inputs, const Tensor& y, const Tensor* workspace, ExecutionContext& ec) {
  const Tensor& x = inputs[0];
  const Tensor& b = has_bias_ ? bias_ : y;  // any valid buffer when there is no bias
  const Tensor& r = residual_ ? inputs[1] : y;  // the same for the residual
  const cl_int16 ga = geometry_arg(g_);
  const size_t N = size_t(g_.N), K = size_t(g_.K), OH = size_t(g_.OH), OW = size_t(g_.OW);
  std::lock_guard lock(launch_mutex_);
  if (band_.fits) {  // conv_grouped_band: grouped, image stems (direct) or depthwise (depthwise_block 128)
    set_args(main_, ga, cl_int(grouped_band_items(g_, band_)), cl_int(band_.rows), cl_int(band_.bands),
             cl_int(band_.pitch), cl_int(band_.prow), x.buffer, cl_long(x.offset_elems()), weight_.buffer,
             cl_long(weight_.offset_elems()), b.buffer, cl_long(b.offset_elems()), cl_int(has_bias_), r.buffer,
             cl_long(r.offset_elems()), cl_int(residual_), y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
    ec.enqueue_kernel(main_, global_main_, local_main_, "conv_grouped_band");
    return;
  }
  switch (algo_) {
    case ConvAlgo::direct: {
      if (g_.three_d) {
        cl_int8 depth{};
        const int64_t d[6] = {g_.D, g_.OD, g_.KD, g_.SD, g_.DD, g_.PF};
        for (int i = 0; i < 6; ++i) depth.s[i] = cl_int(d[i]);
        set_args(main_, ga, depth, x.buffer, cl_long(x.offset_elems()), weight_.buffer, cl_long(weight_.offset_elems()),
                 b.buffer, cl_long(b.offset_elems()), cl_int(has_bias_), y.buffer, cl_long(y.offset_elems()),
                 act_.alpha, act_.beta);
        ec.enqueue_kernel(main_, cl::NDRange(OW, OH, N * K * size_t(g_.OD)), local_main_, "conv_direct3d");
        break;
      }
      if (direct_plane_) {
        set_args(main_, ga, cl_int(small_plane_items(g_, kpad_, sp_kv_, pool_shape_.rank() != 0)), x.buffer,
                 cl_long(x.offset_elems()),
                 weight_.buffer, cl_long(weight_.offset_elems()), cl_int(kpad_), offsets_.buffer,
                 cl_long(offsets_.offset_elems()), b.buffer, cl_long(b.offset_elems()), cl_int(has_bias_), r.buffer,
                 cl_long(r.offset_elems()), cl_int(residual_), y.buffer, cl_long(y.offset_elems()), act_.alpha,
                 act_.beta);
        ec.enqueue_kernel(main_, global_main_, local_main_, "conv_small_plane");
        break;
      }
      if (direct_rows_) {
        set_args(main_, ga, cl_int(g_.N * g_.groups * ceil_div(g_.K / g_.groups, 8)), x.buffer,
                 cl_long(x.offset_elems()), weight_.buffer, cl_long(weight_.offset_elems()), b.buffer,
                 cl_long(b.offset_elems()), cl_int(has_bias_), r.buffer, cl_long(r.offset_elems()), cl_int(residual_),
                 y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
        ec.enqueue_kernel(main_, global_main_, local_main_, "conv_grouped_rows");
        break;
      }
      set_args(main_, ga, x.buffer, cl_long(x.offset_elems()), weight_.buffer, cl_long(weight_.offset_elems()), b.buffer,
               cl_long(b.offset_elems()), cl_int(has_bias_), r.buffer, cl_long(r.offset_elems()), cl_int(residual_),
               y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
      const size_t kb = 8;  // K_BLOCK default in conv.cl
      const size_t groups = size_t(g_.groups), bpg = (size_t(g_.K / g_.groups) + kb - 1) / kb;
      ec.enqueue_kernel(main_, cl::NDRange(OW, OH, N * groups * bpg), local_main_, "conv_direct");
      break;
    }
    case ConvAlgo::depthwise:
      if (depthwise_plane_) {
        set_args(main_, ga, cl_int(N * K), cl_int(dw_pr_), cl_int(dw_pc_), x.buffer, cl_long(x.offset_elems()),
                 weight_.buffer, cl_long(weight_.offset_elems()), b.buffer, cl_long(b.offset_elems()),
                 cl_int(has_bias_), y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
        ec.enqueue_kernel(main_, global_main_, local_main_, "conv_depthwise_plane");
        break;
      }
      if (depthwise_rows_ || depthwise_flat_ || depthwise_s2_) {  // the same arguments
        set_args(main_, ga, cl_int(N * K), x.buffer, cl_long(x.offset_elems()), weight_.buffer,
                 cl_long(weight_.offset_elems()), b.buffer, cl_long(b.offset_elems()), cl_int(has_bias_), y.buffer,
                 cl_long(y.offset_elems()), act_.alpha, act_.beta);
        ec.enqueue_kernel(main_, global_main_, local_main_,
                          depthwise_flat_ ? "conv_dw_flat" : depthwise_s2_ ? "conv_dw_s2" : "conv_depthwise_rows");
        break;
      }
      set_args(main_, ga, x.buffer, cl_long(x.offset_elems()), weight_.buffer, cl_long(weight_.offset_elems()), b.buffer,
               cl_long(b.offset_elems()), cl_int(has_bias_), y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
      ec.enqueue_kernel(main_, cl::NDRange(OW, OH, N * K), local_main_, "conv_depthwise");
      break;
    case ConvAlgo::im2col_gemm:
    case ConvAlgo::gemm_1x1: {
      const bool is1x1 = algo_ == ConvAlgo::gemm_1x1;
      const int64_t P = g_.OH * g_.OW, KG = g_.K / g_.groups, CG = g_.C / g_.groups;
      const int64_t R = CG * g_.KH * g_.KW;
      Tensor src = x;
      if (!is1x1) {
        src = *workspace;
        src.dtype = DType::f32;
        src.shape = Shape{int64_t(workspace->bytes() / sizeof(float))};
        if (im2col_rows_) {
          set_args(pre_, ga, cl_int(im2col_rows_per_item(g_)), x.buffer, cl_long(x.offset_elems()), src.buffer,
                   cl_long(src.offset_elems()));
          ec.enqueue_kernel(pre_, global_pre_, local_pre_, "im2col_rows");
        } else {
          set_args(pre_, ga, x.buffer, cl_long(x.offset_elems()), src.buffer, cl_long(src.offset_elems()));
          ec.enqueue_kernel(pre_, cl::NDRange(OW, OH, N * size_t(g_.C)), local_pre_, "im2col");
        }
      }
      for (int64_t grp = 0; grp < g_.groups; ++grp) {
        std::vector<Tensor> in{view(weight_, grp * KG * R), view(src, grp * R * P)};
        if (has_bias_) in.push_back(view(bias_, grp * KG));
        if (residual_) in.push_back(view(inputs[1], grp * KG * P));
        Tensor out[1] = {view(y, grp * KG * P)};
        gemm_[0]->enqueue(in, out, nullptr, ec);
      }
      break;
    }
    case ConvAlgo::winograd: {
      const int64_t wm = winograd_m_, aa = (wm + 2) * (wm + 2);  // output tile, products per tile
      const int64_t th = ceil_div(g_.OH, wm), tw = ceil_div(g_.OW, wm), T = g_.N * th * tw;
      Tensor v = *workspace;
      v.dtype = DType::f32;
      v.shape = Shape{aa * g_.C * T};
      Tensor m = view(v, 0);
      m.offset_bytes += size_t(aa * g_.C * T) * sizeof(float);
      m.shape = Shape{aa * g_.K * T};
      if (winograd_rows_) {
        set_args(pre_, ga, cl_int(th), cl_int(tw), cl_int(N), x.buffer, cl_long(x.offset_elems()), v.buffer,
                 cl_long(v.offset_elems()));
        ec.enqueue_kernel(pre_, global_pre_, local_pre_, wm == 4 ? "winograd4_input_rows" : "winograd_input_rows");
      } else {
        set_args(pre_, ga, cl_int(th), cl_int(tw), x.buffer, cl_long(x.offset_elems()), v.buffer,
                 cl_long(v.offset_elems()));
        ec.enqueue_kernel(pre_, cl::NDRange(size_t(th * tw), size_t(g_.C), N), local_pre_,
                          wm == 4 ? "winograd4_input" : "winograd_input");
      }
      std::vector<Tensor> in{weight_, v};
      Tensor out[1] = {m};
      gemm_[0]->enqueue(in, out, nullptr, ec);
      if (winograd_rows_) {
        set_args(post_, ga, cl_int(th), cl_int(tw), cl_int(N), m.buffer, cl_long(m.offset_elems()), b.buffer,
                 cl_long(b.offset_elems()), cl_int(has_bias_), r.buffer, cl_long(r.offset_elems()), cl_int(residual_),
                 y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
        ec.enqueue_kernel(post_, global_post_, local_post_, wm == 4 ? "winograd4_output_rows" : "winograd_output_rows");
      } else {
        set_args(post_, ga, cl_int(th), cl_int(tw), m.buffer, cl_long(m.offset_elems()), b.buffer,
                 cl_long(b.offset_elems()), cl_int(has_bias_), r.buffer, cl_long(r.offset_elems()), cl_int(residual_),
                 y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
        ec.enqueue_kernel(post_, cl::NDRange(size_t(th * tw), K, N), local_post_,
                          wm == 4 ? "winograd4_output" : "winograd_output");
      }
      break;
    }
    case ConvAlgo::fft: enqueue_fft(x, y, *workspace, ec); break;
    case ConvAlgo::automatic: break;
  }
}

}  // namespace cldl
