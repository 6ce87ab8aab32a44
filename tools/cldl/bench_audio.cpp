// `cldl bench audio`: the audio front-end transforms in GFLOP/s of an FFT (5 N log2 N per complex
// transform of length N, the usual count, also for Bluestein, whose real work is three transforms of
// 2 N or more): a speech model's STFT (16 kHz, n_fft 400 / hop 160 and n_fft 512, 30 s), DFT through clFFT
// (512, 400) and through Bluestein (401, a prime), and the log-mel filter bank's MelWeightMatrix kernel.
#include <cmath>

#include <fmt/format.h>

#include "layers/audio.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {

namespace {
double fft_flops(int64_t n, int64_t transforms) { return 5.0 * double(n) * std::log2(double(n)) * double(transforms); }

void run(Context& ctx, const Options& opts, Reporter& rep) {
  for (int64_t n_fft : {400, 512}) {
    const Shape xs{1, 480000, 1};  // 30 s at 16 kHz
    StftConfig cfg{xs, 160, 0, n_fft, true};
    auto op = Stft::create(ctx, 0, cfg);
    const Shape so = Stft::validate(cfg);
    Tensor x = filled(ctx, xs), w = filled(ctx, Shape{n_fft}), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "audio", fmt::format("stft 30 s n_fft {} hop 160", n_fft), *op, {x, w}, {y},
            fft_flops(n_fft, so[1]), "GFLOP/s");
  }
  for (int64_t n : {512, 400, 401}) {
    const Shape xs{256, n, 2};
    DftConfig cfg{xs, 1, 0, false, false};
    auto op = Dft::create(ctx, 0, cfg);
    const Shape so = Dft::validate(cfg);
    Tensor x = filled(ctx, xs), y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "audio", fmt::format("dft [256,{},2]", n), *op, {x}, {y}, fft_flops(n, 256), "GFLOP/s");
  }
  {
    MelWeightMatrixConfig cfg{128, 512, DType::i64};
    auto op = MelWeightMatrix::create(ctx, 0, cfg);
    const Shape so = MelWeightMatrix::validate(cfg);
    HostTensor rate(DType::i64, Shape{}), lo(DType::f32, Shape{}), hi(DType::f32, Shape{});
    rate.as<int64_t>()[0] = 16000, lo.as<float>()[0] = 0.0f, hi.as<float>()[0] = 8000.0f;
    Tensor y = ctx.alloc(so, DType::f32);
    time_op(ctx, opts, rep, "audio", "mel_weight_matrix 128 mels, dft 512", *op,
            {ctx.upload(rate), ctx.upload(lo), ctx.upload(hi)}, {y}, double(so.numel()) * 4);
  }
}

const Registration kAudioBench("audio",
                               "audio front ends: stft (n_fft 400, 512) and dft (clFFT 512 / 400, Bluestein 401) in "
                               "GFLOP/s (5 N log2 N per transform); mel_weight_matrix in GB/s",
                               run);
}  // namespace

}  // namespace cldl::bench
