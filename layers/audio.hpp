// Audio front-end ops in ONNX semantics: DFT, STFT, the HannWindow / HammingWindow / BlackmanWindow
// generators and MelWeightMatrix (kernels/audio.cl; transforms through clFFT). f32 data; lengths, axes
// and frame geometry are fixed at create. Each transform gathers its input into a contiguous complex
// [batch, N] buffer (real or complex input, dft_length padding or truncation, any axis, STFT frames times
// the window, the Hermitian extension of a one-sided inverse), transforms it, and scatters the result into
// the output layout (one-sided bins, the real part of an inverse one-sided DFT).
#pragma once
#include <memory>
#include <vector>

#include "layers/op.hpp"

namespace cldl {

// How a transform of length N runs: clFFT where N's prime factors are all ones it supports (2, 3, 5, 7,
// 11, 13); otherwise (a logged choice) a direct O(N^2) DFT kernel over a twiddle table up to
// kDirectDftMax points, and Bluestein's algorithm above (a chirp convolution of a power-of-2 length
// >= 2 N - 1 through clFFT: three transforms' work instead of N^2). While an offline program bundle is
// recorded or used (ProgramCache::binaries_only), always the direct kernel: clFFT compiles from source.
enum class FftAlgo { clfft, bluestein, direct };
inline constexpr int64_t kDirectDftMax = 64;
FftAlgo fft_algo_for(int64_t n);

struct DftConfig {
  Shape input;         // [..., n, 1] (real) or [..., n, 2] (complex), rank >= 2
  int64_t axis = 1;    // the transformed dim, in [0, rank - 2)
  int64_t length = 0;  // the transform length N (dft_length); 0 = the input's extent (2 * (n - 1) for a
                       // one-sided inverse)
  bool inverse = false;
  bool onesided = false;  // forward: keep N / 2 + 1 bins; inverse: the input holds bins 0 .. n - 1 of a
                          // Hermitian spectrum and the output is real (irfft)
};

// Input f32; output [..., M, 2] along `axis` (M = N, or N / 2 + 1 one-sided forward), or [..., N, 1] for a
// one-sided inverse. Inverse transforms scale by 1 / N. Workspace: two complex [batch, N] buffers,
// Bluestein's two [batch, M] ones and clFFT's scratch.
class Dft : public Op {
 public:
  static Shape validate(const DftConfig& cfg);
  static std::unique_ptr<Dft> create(Context& ctx, int device, const DftConfig& cfg);
  ~Dft() override;
  std::string_view type() const override { return "DFT"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

  struct Engine;  // the batched complex transform (layers/audio.cpp)

 private:
  DftConfig cfg_;
  Shape out_;
  int64_t n_ = 0, outer_ = 1, inner_ = 1;
  cl::Kernel gather_, scatter_;
  std::unique_ptr<Engine> engine_;
};

struct StftConfig {
  Shape signal;              // [batch, length, 1] (real) or [batch, length, 2] (complex)
  int64_t frame_step = 1;    // hop between frame starts
  int64_t frame_length = 0;  // N; 0 = the window's length, else the signal's
  int64_t window = -1;       // the window's length when a window input is given, else -1 (rectangular)
  bool onesided = false;     // keep N / 2 + 1 bins
};

// Inputs signal (f32) and, when cfg.window >= 0, window (f32 [frame_length]); output
// [batch, frames, M, 2] with frames = 1 + (length - N) / frame_step, M = N or N / 2 + 1.
class Stft : public Op {
 public:
  static Shape validate(const StftConfig& cfg);
  static std::unique_ptr<Stft> create(Context& ctx, int device, const StftConfig& cfg);
  ~Stft() override;
  std::string_view type() const override { return "STFT"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  StftConfig cfg_;
  Shape out_;
  int64_t n_ = 0, frames_ = 0;
  cl::Kernel frames_k_, scatter_;
  std::unique_ptr<Dft::Engine> engine_;
};

enum class WindowKind { hann, hamming, blackman };
const char* window_op_name(WindowKind k);

// The value of window `k` of `size` points at point i (double; periodic or symmetric as ONNX defines
// them). A symmetric window of one point is [1] (ONNX's formula divides by size - 1 = 0; PyTorch gives 1).
double window_value(WindowKind k, int64_t size, int64_t i, bool periodic);

struct WindowConfig {
  WindowKind kind = WindowKind::hann;
  int64_t size = 0;
  bool periodic = true;
};

// No inputs; output f32 [size]. Models usually fold it at load (constant size); this is its device path.
class WindowOp : public Op {
 public:
  static Shape validate(const WindowConfig& cfg);
  static std::unique_ptr<WindowOp> create(Context& ctx, int device, const WindowConfig& cfg);
  std::string_view type() const override { return window_op_name(cfg_.kind); }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  WindowConfig cfg_;
  cl::Kernel kernel_;
};

struct MelWeightMatrixConfig {
  int64_t num_mel_bins = 0, dft_length = 0;
  DType sample_rate = DType::i64;  // i32 or i64
};

// The triangular mel filter bank of ONNX's MelWeightMatrix (its reference implementation's integer bin
// points, mel = 2595 log10(1 + hz / 700)). Inputs sample_rate (i32 / i64 [1] or scalar), lower_edge_hertz
// and upper_edge_hertz (f32); output f32 [dft_length / 2 + 1, num_mel_bins]. The device path of edges or a
// sample rate computed at run time; constant ones fold at load.
class MelWeightMatrix : public Op {
 public:
  static Shape validate(const MelWeightMatrixConfig& cfg);
  static std::unique_ptr<MelWeightMatrix> create(Context& ctx, int device, const MelWeightMatrixConfig& cfg);
  std::string_view type() const override { return "MelWeightMatrix"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  MelWeightMatrixConfig cfg_;
  Shape out_;
  cl::Kernel kernel_;
};

// MelWeightMatrix on the host, as the kernel computes it (load-time folding): [bins, num_mel_bins] row-major.
std::vector<double> mel_weight_matrix(int64_t num_mel_bins, int64_t dft_length, double sample_rate, double lower_hz,
                                      double upper_hz);

}  // namespace cldl
