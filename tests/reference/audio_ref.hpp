// Double-precision references of the audio front-end ops in ONNX semantics (DFT, STFT, the Hann /
// Hamming / Blackman windows, MelWeightMatrix), written from the ONNX operator specs and the numpy
// reference (onnx/reference/ops), independent of layers/audio.cpp.
#pragma once
#include <cstdint>
#include <vector>

#include "runtime/tensor.hpp"

namespace cldl::ref {

// DFT of x (shape [..., n, c], c = 1 real or 2 complex, row-major) along `axis` (in [0, rank - 2)) of
// length `length` (0: n, or 2 (n - 1) for inverse one-sided). Returns the output in ONNX's layout: [..., M,
// 2] (M = N, or N / 2 + 1 one-sided forward), or [..., N, 1] for a one-sided inverse (numpy's irfft).
std::vector<double> dft(const std::vector<double>& x, const Shape& shape, int64_t axis, int64_t length, bool inverse,
                        bool onesided, Shape* out_shape = nullptr);

// STFT of signal [batch, len, c] with frames of `frame_length` every `step` samples, times `window`
// (empty: ones); output [batch, frames, M, 2].
std::vector<double> stft(const std::vector<double>& signal, const Shape& shape, int64_t step, int64_t frame_length,
                         const std::vector<double>& window, bool onesided, Shape* out_shape = nullptr);

// kind 0 Hann, 1 Hamming, 2 Blackman.
std::vector<double> window(int kind, int64_t size, bool periodic);

// [dft_length / 2 + 1, num_mel_bins], row-major.
std::vector<double> mel_weight_matrix(int64_t num_mel_bins, int64_t dft_length, int64_t sample_rate, double lower_hz,
                                      double upper_hz);

}  // namespace cldl::ref
