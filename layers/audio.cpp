// DFT, STFT, the window generators and MelWeightMatrix: shape rules, the choice between clFFT, Bluestein
// and the direct DFT kernel, workspace regions and the kernel arguments of kernels/audio.cl.
#include "layers/audio.hpp"

#include <cmath>
#include <complex>
#include <numbers>

#include <map>
#include <mutex>

#include "layers/clfft_util.hpp"
#include "layers/tensor_checks.hpp"
#include "runtime/log.hpp"
#include "runtime/program_cache.hpp"

namespace cldl {

namespace {
// The one build of audio.cl (f32; what `cldl compile` prepares).
const ProgramVariants kAudioVariants("audio.cl", {""});

cl::Kernel audio_kernel(Context& ctx, int device, const char* name) {
  return make_kernel(ctx.program("audio.cl", "", device), name);
}

// The largest prime factor of n (1 for n <= 1).
int64_t largest_prime_factor(int64_t n) {
  int64_t p = 1;
  for (int64_t f = 2; f * f <= n; ++f)
    while (n % f == 0) n /= f, p = f;
  return n > 1 ? n : p;
}
}  // namespace

FftAlgo fft_algo_for(int64_t n) {
  // clFFT 2.12 generates kernels for radices 2, 3, 5, 7, 11 and 13; a length of 1 needs no transform.
  if (n < 2) return FftAlgo::direct;
  if (largest_prime_factor(n) <= 13) return FftAlgo::clfft;
  return n <= kDirectDftMax ? FftAlgo::direct : FftAlgo::bluestein;
}

namespace {
// In-place radix-2 FFT in double (n a power of 2): Bluestein's chirp transform, once at create.
void fft_pow2(std::vector<std::complex<double>>& a) {
  const size_t n = a.size();
  for (size_t i = 1, j = 0; i < n; ++i) {
    size_t bit = n >> 1;
    for (; j & bit; bit >>= 1) j ^= bit;
    j ^= bit;
    if (i < j) std::swap(a[i], a[j]);
  }
  for (size_t len = 2; len <= n; len <<= 1) {
    const double ang = -2.0 * std::numbers::pi / double(len);
    for (size_t i = 0; i < n; i += len)
      for (size_t k = 0; k < len / 2; ++k) {
        const std::complex<double> w(std::cos(ang * double(k)), std::sin(ang * double(k)));
        const auto u = a[i + k], v = a[i + k + len / 2] * w;
        a[i + k] = u + v;
        a[i + k + len / 2] = u - v;
      }
  }
}

HostTensor complex_table(const std::vector<std::complex<double>>& v) {
  HostTensor t(DType::f32, Shape{int64_t(v.size()), 2});
  for (size_t i = 0; i < v.size(); ++i)
    t.as<float>()[2 * i] = float(v[i].real()), t.as<float>()[2 * i + 1] = float(v[i].imag());
  return t;
}

// A batched out-of-place complex-to-complex clFFT plan of `length` over contiguous rows.
clfftPlanHandle make_c2c_plan(Context& ctx, int device, const std::string& op, int64_t length, int64_t batch) {
  clfft_setup_once();
  clfftPlanHandle plan = 0;
  size_t lengths[1] = {size_t(length)};
  check_clfft(clfftCreateDefaultPlan(&plan, ctx.cl()(), CLFFT_1D, lengths), op.c_str(), "clfftCreateDefaultPlan");
  try {
    check_clfft(clfftSetPlanPrecision(plan, CLFFT_SINGLE), op.c_str(), "clfftSetPlanPrecision");
    check_clfft(clfftSetLayout(plan, CLFFT_COMPLEX_INTERLEAVED, CLFFT_COMPLEX_INTERLEAVED), op.c_str(),
                "clfftSetLayout");
    check_clfft(clfftSetResultLocation(plan, CLFFT_OUTOFPLACE), op.c_str(), "clfftSetResultLocation");
    check_clfft(clfftSetPlanBatchSize(plan, size_t(std::max<int64_t>(batch, 1))), op.c_str(), "clfftSetPlanBatchSize");
    check_clfft(clfftSetPlanDistance(plan, size_t(length), size_t(length)), op.c_str(), "clfftSetPlanDistance");
    // clFFT's default backward scale is 1 / length: ONNX's inverse, and the convolution's normalisation.
    cl_command_queue qq = ctx.queue(device, 0)();
    check_clfft(clfftBakePlan(plan, 1, &qq, nullptr, nullptr), op.c_str(), "clfftBakePlan");
  } catch (...) {
    clfftDestroyPlan(&plan);
    throw;
  }
  return plan;
}
// Whether clFFT's kernels for `length` build and run on the device: one transform of a batch-1 plan,
// remembered per device and length. Some compilers reject the code clFFT generates for some lengths
// (Intel's CPU runtime: "incompatible pointer types" float2* to float4*, found only at the first enqueue).
bool clfft_runs(Context& ctx, int device, const std::string& op, int64_t length, std::string& why) {
  static std::mutex mu;
  static std::map<std::pair<cl_device_id, int64_t>, std::string> seen;  // "" = runs, else why not
  const auto key = std::make_pair(ctx.device(device).device(), length);
  std::lock_guard lock(mu);
  if (auto it = seen.find(key); it != seen.end()) {
    why = it->second;
    return why.empty();
  }
  clfftPlanHandle plan = 0;
  try {
    plan = make_c2c_plan(ctx, device, op, length, 1);
    const size_t bytes = size_t(length) * 2 * sizeof(float);
    cl::Buffer in(ctx.cl(), CL_MEM_READ_WRITE, bytes), out(ctx.cl(), CL_MEM_READ_WRITE, bytes);
    size_t tmp_bytes = 0;
    check_clfft(clfftGetTmpBufSize(plan, &tmp_bytes), op.c_str(), "clfftGetTmpBufSize");
    cl::Buffer tmp;
    if (tmp_bytes) tmp = cl::Buffer(ctx.cl(), CL_MEM_READ_WRITE, tmp_bytes);
    cl_command_queue q = ctx.queue(device, 0)();
    cl_mem ins[1] = {in()}, outs[1] = {out()};
    check_clfft(clfftEnqueueTransform(plan, CLFFT_FORWARD, 1, &q, 0, nullptr, nullptr, ins, outs,
                                      tmp_bytes ? tmp() : nullptr),
                op.c_str(), "clfftEnqueueTransform");
    if (cl_int e = clFinish(q); e != CL_SUCCESS) throw Error(fmt::format("{}: clFinish failed ({})", op, e), e, "clFinish");
    why.clear();
  } catch (const std::exception& e) {
    why = e.what();
  }
  if (plan) clfftDestroyPlan(&plan);
  seen[key] = why;
  return why.empty();
}
}  // namespace

// The batched complex-to-complex transform of contiguous [batch, n] interleaved complex values, out of
// place; the inverse scales by 1 / n.
struct Dft::Engine {
  std::string op;                   // "DFT" / "STFT", for errors and logs
  int64_t n = 0, batch = 0, m = 0;  // m: Bluestein's convolution length
  bool inverse = false;
  FftAlgo algo = FftAlgo::direct;
  clfftPlanHandle plan = 0;  // clfft: length n; bluestein: length m
  bool has_plan = false;
  cl::Kernel direct, pre, mul, post;
  Tensor twiddle;                     // direct: (cos, sin) of 2 pi j / n, j < n; bluestein: the chirp w[j], j < n
  Tensor chirp_fft;                   // bluestein: the transform of the conjugate chirp, [m]
  size_t work = 0, ext = 0, tmp = 0;  // bytes of each work region, each Bluestein region, clFFT's scratch

  Engine(Context& ctx, int device, std::string op_name, int64_t length, int64_t batches, bool inv)
      : op(std::move(op_name)), n(length), batch(batches), inverse(inv), algo(fft_algo_for(length)) {
    work = size_t(std::max<int64_t>(batch * n, 1)) * 2 * sizeof(float);
    if (algo != FftAlgo::direct && ProgramCache::global().binaries_only()) {
      // clFFT compiles its kernels from source at run time, which an offline program bundle cannot hold.
      log::info(
          "{}: length {}: the direct DFT kernel, since an offline program bundle (--binaries) cannot hold "
          "clFFT's kernels",
          op, n);
      algo = FftAlgo::direct;
    }
    if (algo == FftAlgo::bluestein) {
      m = 1;
      while (m < 2 * n - 1) m *= 2;
    }
    std::string why;
    const int64_t fft_len = algo == FftAlgo::clfft ? n : m;
    const uint64_t max_alloc = ctx.device(device).info.max_alloc_bytes;
    const bool probe = algo != FftAlgo::direct && (!max_alloc || uint64_t(fft_len) * 8 <= max_alloc);
    if (probe && !clfft_runs(ctx, device, op, fft_len, why)) {
      log::info("{}: length {}: the direct DFT kernel, since clFFT's length-{} transform fails on this device: {}",
                op, n, fft_len, why);
      algo = FftAlgo::direct;
      m = 0;
    }
    if (algo == FftAlgo::bluestein) ext = size_t(std::max<int64_t>(batch * m, 1)) * 2 * sizeof(float);
    // The workspace is one buffer: refused here, before any plan or table is made, when the device cannot
    // hold it (clFFT's scratch, at most one more region, comes on top).
    const uint64_t limit = ctx.device(device).info.max_alloc_bytes;
    if (limit && total() > limit)
      invalid(op,
              "a transform of length {} over a batch of {} needs {} bytes of workspace, more than the {} bytes "
              "the device allocates at once",
              n, batch, total(), limit);
    if (algo == FftAlgo::clfft) {
      plan = make_c2c_plan(ctx, device, op, n, batch);
      has_plan = true;
    } else if (algo == FftAlgo::bluestein) {
      log::info(
          "{}: length {} has the prime factor {}, which clFFT does not support (2, 3, 5, 7, 11, 13): "
          "Bluestein's algorithm, a convolution of length {} through clFFT",
          op, n, largest_prime_factor(n), m);
      plan = make_c2c_plan(ctx, device, op, m, batch);
      has_plan = true;
      const double sign = inverse ? 1.0 : -1.0;
      std::vector<std::complex<double>> w(static_cast<size_t>(n)), b(static_cast<size_t>(m));
      for (int64_t t = 0; t < n; ++t) {
        // t^2 mod 2n exactly (t < n < 2^32, so t^2 fits in 64 bits): the phase stays exact for any t.
        const int64_t q = int64_t(uint64_t(t) * uint64_t(t) % uint64_t(2 * n));
        const double a = sign * std::numbers::pi * double(q) / double(n);
        w[size_t(t)] = {std::cos(a), std::sin(a)};
      }
      for (int64_t t = 0; t < n; ++t) {
        b[size_t(t)] = std::conj(w[size_t(t)]);
        if (t > 0) b[size_t(m - t)] = std::conj(w[size_t(t)]);
      }
      fft_pow2(b);
      twiddle = ctx.upload(complex_table(w), device);
      chirp_fft = ctx.upload(complex_table(b), device);
      pre = audio_kernel(ctx, device, "bluestein_pre");
      mul = audio_kernel(ctx, device, "bluestein_mul");
      post = audio_kernel(ctx, device, "bluestein_post");
    } else {
      if (n > 1 && fft_algo_for(n) == FftAlgo::direct)
        log::info(
            "{}: length {} has the prime factor {}, which clFFT does not support (2, 3, 5, 7, 11, 13): "
            "a direct DFT kernel (short: O(N^2) is cheap)",
            op, n, largest_prime_factor(n));
      direct = audio_kernel(ctx, device, "dft_direct");
      std::vector<std::complex<double>> w(size_t(std::max<int64_t>(n, 1)));
      for (int64_t j = 0; j < n; ++j) w[size_t(j)] = std::polar(1.0, 2.0 * std::numbers::pi * double(j) / double(n));
      twiddle = ctx.upload(complex_table(w), device);
    }
    if (has_plan) check_clfft(clfftGetTmpBufSize(plan, &tmp), op.c_str(), "clfftGetTmpBufSize");
  }
  Engine(const Engine&) = delete;  // owns its clFFT plan
  Engine& operator=(const Engine&) = delete;
  ~Engine() {
    if (has_plan && !clfft_torn_down()) clfftDestroyPlan(&plan);
  }
  size_t total() const { return kClfftAlign + 2 * round_up(work, kClfftAlign) + 2 * round_up(ext, kClfftAlign) + tmp; }
  std::string describe() const {
    if (algo == FftAlgo::clfft) return fmt::format("clFFT, length {}", n);
    if (algo == FftAlgo::bluestein)
      return fmt::format("Bluestein, length {} (prime factor {} > 13) as a clFFT convolution of length {}", n,
                         largest_prime_factor(n), m);
    return fmt::format("direct DFT, length {}", n);
  }
  void fft(const cl::Buffer& in, const cl::Buffer& out, const cl::Buffer& scratch, bool backward,
           ExecutionContext& ec) {
    cl_command_queue q = ec.queue();
    cl_mem i = in(), o = out();
    cl_event ev = nullptr;
    check_clfft(clfftEnqueueTransform(plan, backward ? CLFFT_BACKWARD : CLFFT_FORWARD, 1, &q, 0, nullptr,
                                      ec.wants_event() ? &ev : nullptr, &i, &o, tmp ? scratch() : nullptr),
                op.c_str(), "clfftEnqueueTransform");
    if (ev) ec.record(cl::Event(ev), "fft");
  }
  // Workspace regions, each a sub-buffer on a kClfftAlign boundary.
  struct Regions {
    cl::Buffer a, b, ea, eb, tmp;  // work in / out; Bluestein's two convolution buffers; clFFT's scratch
  };
  Regions split(const Tensor& ws) const {
    size_t at = round_up(ws.offset_bytes, kClfftAlign);
    auto region = [&](size_t bytes) {
      if (bytes == 0) return cl::Buffer();
      cl::Buffer b = clfft_region(ws.buffer, at, bytes, op.c_str());
      at += round_up(bytes, kClfftAlign);
      return b;
    };
    Regions r;
    r.a = region(work), r.b = region(work), r.ea = region(ext), r.eb = region(ext), r.tmp = region(tmp);
    return r;
  }
  // r.a -> r.b; the first command of `ec` is already enqueued (the gather), so its wait list is consumed.
  void run(const Regions& r, ExecutionContext& ec) {
    if (algo == FftAlgo::clfft) return fft(r.a, r.b, r.tmp, inverse, ec);
    if (algo == FftAlgo::bluestein) {
      const cl::NDRange conv{static_cast<size_t>(m), static_cast<size_t>(batch)};
      set_args(pre, cl_long(n), cl_long(m), twiddle.buffer, r.a, r.ea);
      ec.enqueue_kernel(pre, conv, cl::NullRange, "bluestein_pre");
      fft(r.ea, r.eb, r.tmp, false, ec);
      set_args(mul, cl_long(m), chirp_fft.buffer, r.eb);
      ec.enqueue_kernel(mul, conv, cl::NullRange, "bluestein_mul");
      fft(r.eb, r.ea, r.tmp, true, ec);
      set_args(post, cl_long(n), cl_long(m), cl_float(inverse ? 1.0 / double(n) : 1.0), twiddle.buffer, r.ea, r.b);
      ec.enqueue_kernel(post, cl::NDRange(size_t(n), size_t(batch)), cl::NullRange, "bluestein_post");
      return;
    }
    set_args(direct, cl_long(n), cl_int(inverse ? 1 : 0), twiddle.buffer, r.a, r.b);
    ec.enqueue_kernel(direct, cl::NDRange(size_t(n), size_t(batch)), cl::NullRange, "dft_direct");
  }
};

// ---------------------------------------------------------------- DFT
Shape Dft::validate(const DftConfig& c) {
  const int64_t r = int64_t(c.input.rank());
  if (r < 2) invalid("DFT", "input must have rank >= 2 ([..., n, 1] or [..., n, 2]), got shape {}", c.input.str());
  check_dims("DFT", c.input, "input");
  const int64_t last = c.input[size_t(r - 1)];
  if (last != 1 && last != 2)
    invalid("DFT", "input's last dim must be 1 (real) or 2 (complex), got shape {}", c.input.str());
  if (c.axis < 0 || c.axis >= r - 1)
    invalid("DFT", "axis {} is out of range for input of shape {} (the last dim holds real / imaginary parts)", c.axis,
            c.input.str());
  const int64_t n_in = c.input[size_t(c.axis)];
  const bool irfft = c.inverse && c.onesided;
  const int64_t n = c.length > 0 ? c.length : irfft ? 2 * (n_in - 1) : n_in;
  if (c.length < 0) invalid("DFT", "dft_length must be >= 1, got {}", c.length);
  if (n < 1)
    invalid("DFT", "the transform length is {} (input of shape {} along axis {}); pass dft_length >= 1", n,
            c.input.str(), c.axis);
  if (n_in == 0) invalid("DFT", "input has no elements along axis {} (shape {})", c.axis, c.input.str());
  if (n > (int64_t(1) << 31)) invalid("DFT", "the transform length {} is past 2^31", n);
  Shape out = c.input;
  out.dims[size_t(c.axis)] = !c.inverse && c.onesided ? n / 2 + 1 : n;
  out.dims[size_t(r - 1)] = irfft ? 1 : 2;
  return out;
}

std::unique_ptr<Dft> Dft::create(Context& ctx, int device, const DftConfig& cfg) {
  std::unique_ptr<Dft> d(new Dft());
  d->cfg_ = cfg;
  d->out_ = validate(cfg);
  const Shape& s = cfg.input;
  const size_t r = s.rank();
  d->n_ = cfg.length > 0                ? cfg.length
          : cfg.inverse && cfg.onesided ? 2 * (s[size_t(cfg.axis)] - 1)
                                        : s[size_t(cfg.axis)];
  for (size_t i = 0; i < size_t(cfg.axis); ++i) d->outer_ *= s[i];
  for (size_t i = size_t(cfg.axis) + 1; i + 1 < r; ++i) d->inner_ *= s[i];
  d->gather_ = audio_kernel(ctx, device, "dft_gather");
  d->scatter_ = audio_kernel(ctx, device, "dft_scatter");
  d->engine_ = std::make_unique<Engine>(ctx, device, "DFT", d->n_, d->outer_ * d->inner_, cfg.inverse);
  log::debug("DFT: input {}, axis {}, {}, batch {}", s.str(), cfg.axis, d->engine_->describe(), d->outer_ * d->inner_);
  return d;
}

Dft::~Dft() = default;

std::string Dft::algorithm() const { return engine_->describe(); }

size_t Dft::workspace_bytes() const { return engine_->total(); }

void Dft::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws, ExecutionContext& ec) {
  if (in.empty() || out.size() != 1)
    invalid("DFT", "expects the input and 1 output, got {} and {}", in.size(), out.size());
  check_tensor("DFT", "input", in[0], cfg_.input, DType::f32);
  check_tensor("DFT", "output", out[0], out_, DType::f32);
  if (out_.numel() == 0) return;
  if (!ws || ws->bytes() < workspace_bytes())
    invalid("DFT", "needs a workspace of {} bytes, got {}", workspace_bytes(), ws ? ws->bytes() : 0);
  const int64_t batch = outer_ * inner_, r = int64_t(cfg_.input.rank());
  const int64_t n_in = cfg_.input[size_t(cfg_.axis)], cin = cfg_.input[size_t(r - 1)];
  const int64_t m = out_[size_t(cfg_.axis)], cout = out_[size_t(r - 1)];
  std::lock_guard lock(launch_mutex_);
  const auto reg = engine_->split(*ws);
  set_args(gather_, cl_long(n_in), cl_long(inner_), cl_int(cin), cl_long(n_), cl_int(cfg_.inverse && cfg_.onesided),
           in[0].buffer, cl_long(in[0].offset_elems()), reg.a);
  ec.enqueue_kernel(gather_, cl::NDRange(size_t(n_), size_t(batch)), cl::NullRange, "dft_gather");
  engine_->run(reg, ec);
  set_args(scatter_, cl_long(m), cl_long(inner_), cl_long(n_), cl_int(cout), reg.b, out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(scatter_, cl::NDRange(size_t(inner_), size_t(m), size_t(outer_)), cl::NullRange, "dft_scatter");
}

// ---------------------------------------------------------------- STFT
Shape Stft::validate(const StftConfig& c) {
  const Shape& s = c.signal;
  if (s.rank() != 3 || (s[2] != 1 && s[2] != 2))
    invalid("STFT", "signal must have shape [batch, length, 1] or [batch, length, 2], got {}", s.str());
  check_dims("STFT", s, "signal");
  if (c.frame_step < 1) invalid("STFT", "frame_step must be >= 1, got {}", c.frame_step);
  if (c.window == 0) invalid("STFT", "window is empty");
  if (c.frame_length < 0) invalid("STFT", "frame_length must be >= 1, got {}", c.frame_length);
  const int64_t n = c.frame_length > 0 ? c.frame_length : c.window > 0 ? c.window : s[1];
  if (n < 1) invalid("STFT", "the frame length is {} (signal of shape {}); pass frame_length >= 1", n, s.str());
  if (c.window > 0 && c.window != n)
    invalid("STFT", "window has {} points, but frame_length is {} (they must match)", c.window, n);
  if (n > s[1]) invalid("STFT", "frame_length {} is longer than the signal ({} samples)", n, s[1]);
  const int64_t frames = 1 + (s[1] - n) / c.frame_step;
  return Shape{s[0], frames, c.onesided ? n / 2 + 1 : n, 2};
}

std::unique_ptr<Stft> Stft::create(Context& ctx, int device, const StftConfig& cfg) {
  std::unique_ptr<Stft> st(new Stft());
  st->cfg_ = cfg;
  st->out_ = validate(cfg);
  st->n_ = cfg.frame_length > 0 ? cfg.frame_length : cfg.window > 0 ? cfg.window : cfg.signal[1];
  st->frames_ = st->out_[1];
  st->frames_k_ = audio_kernel(ctx, device, "stft_frames");
  st->scatter_ = audio_kernel(ctx, device, "dft_scatter");
  st->engine_ = std::make_unique<Dft::Engine>(ctx, device, "STFT", st->n_, cfg.signal[0] * st->frames_, false);
  return st;
}

Stft::~Stft() = default;

std::string Stft::algorithm() const { return engine_->describe(); }

size_t Stft::workspace_bytes() const { return engine_->total(); }

void Stft::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws, ExecutionContext& ec) {
  const bool has_window = cfg_.window >= 0;
  if (in.size() < (has_window ? 2u : 1u) || out.size() != 1)
    invalid("STFT", "expects the signal{} and 1 output, got {} inputs and {} outputs", has_window ? " and window" : "",
            in.size(), out.size());
  check_tensor("STFT", "signal", in[0], cfg_.signal, DType::f32);
  if (has_window) check_tensor("STFT", "window", in[1], Shape{cfg_.window}, DType::f32);
  check_tensor("STFT", "output", out[0], out_, DType::f32);
  if (out_.numel() == 0) return;
  if (!ws || ws->bytes() < workspace_bytes())
    invalid("STFT", "needs a workspace of {} bytes, got {}", workspace_bytes(), ws ? ws->bytes() : 0);
  const int64_t batch = cfg_.signal[0];
  std::lock_guard lock(launch_mutex_);
  const auto r = engine_->split(*ws);
  const Tensor& w = has_window ? in[1] : in[0];
  set_args(frames_k_, cl_long(cfg_.signal[1]), cl_int(cfg_.signal[2]), cl_long(cfg_.frame_step), cl_long(n_),
           cl_long(frames_), cl_int(has_window ? 1 : 0), in[0].buffer, cl_long(in[0].offset_elems()), w.buffer,
           cl_long(w.offset_elems()), r.a);
  ec.enqueue_kernel(frames_k_, cl::NDRange(size_t(n_), size_t(frames_), size_t(batch)), cl::NullRange, "stft_frames");
  engine_->run(r, ec);
  set_args(scatter_, cl_long(out_[2]), cl_long(1), cl_long(n_), cl_int(2), r.b, out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(scatter_, cl::NDRange(1, size_t(out_[2]), size_t(batch * frames_)), cl::NullRange, "dft_scatter");
}

// ---------------------------------------------------------------- windows
const char* window_op_name(WindowKind k) {
  switch (k) {
    case WindowKind::hann:
      return "HannWindow";
    case WindowKind::hamming:
      return "HammingWindow";
    case WindowKind::blackman:
      return "BlackmanWindow";
  }
  return "Window";
}

double window_value(WindowKind k, int64_t size, int64_t i, bool periodic) {
  const int64_t d = periodic ? size : size - 1;
  if (d <= 0) return 1.0;
  const double a = 2.0 * std::numbers::pi * double(i) / double(d);
  switch (k) {
    case WindowKind::hann: {
      const double s = std::sin(a / 2);
      return s * s;
    }
    case WindowKind::hamming:
      return 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a);
    case WindowKind::blackman:
      return 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
  }
  return 0.0;
}

Shape WindowOp::validate(const WindowConfig& c) {
  if (c.size < 0) invalid(window_op_name(c.kind), "size must be >= 0, got {}", c.size);
  return Shape{c.size};
}

std::unique_ptr<WindowOp> WindowOp::create(Context& ctx, int device, const WindowConfig& cfg) {
  validate(cfg);
  std::unique_ptr<WindowOp> w(new WindowOp());
  w->cfg_ = cfg;
  w->kernel_ = audio_kernel(ctx, device, "window");
  return w;
}

void WindowOp::enqueue(std::span<const Tensor>, std::span<const Tensor> out, const Tensor*, ExecutionContext& ec) {
  const char* op = window_op_name(cfg_.kind);
  if (out.size() != 1) invalid(op, "expects 1 output, got {}", out.size());
  check_tensor(op, "output", out[0], Shape{cfg_.size}, DType::f32);
  if (cfg_.size == 0) return;
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_int(int(cfg_.kind)), cl_long(cfg_.size), cl_int(cfg_.periodic ? 1 : 0), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(cfg_.size)), cl::NullRange, "window");
}

// ---------------------------------------------------------------- MelWeightMatrix
namespace {
// The integer frequency bins of the num_mel_bins + 2 mel points (ONNX's reference).
std::vector<int64_t> mel_points(int64_t num_mel_bins, int64_t dft_length, double sample_rate, double lower_hz,
                                double upper_hz) {
  const double low = 2595.0 * std::log10(1.0 + lower_hz / 700.0), high = 2595.0 * std::log10(1.0 + upper_hz / 700.0);
  const double step = (high - low) / double(num_mel_bins + 2);
  std::vector<int64_t> p(size_t(num_mel_bins + 2));
  for (int64_t i = 0; i < num_mel_bins + 2; ++i) {
    const double hz = 700.0 * (std::pow(10.0, (low + double(i) * step) / 2595.0) - 1.0);
    p[size_t(i)] = int64_t(std::floor(double(dft_length + 1) * hz / sample_rate));
  }
  return p;
}
}  // namespace

std::vector<double> mel_weight_matrix(int64_t num_mel_bins, int64_t dft_length, double sample_rate, double lower_hz,
                                      double upper_hz) {
  const int64_t bins = dft_length / 2 + 1;
  if (!(sample_rate > 0)) invalid("MelWeightMatrix", "sample_rate must be > 0, got {}", sample_rate);
  const auto p = mel_points(num_mel_bins, dft_length, sample_rate, lower_hz, upper_hz);
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] < 0 || p[i] > (i + 1 == p.size() ? bins : bins - 1))
      invalid("MelWeightMatrix",
              "mel point {} falls on frequency bin {}, outside the {} bins of dft_length {} (lower_edge_hertz {}, "
              "upper_edge_hertz {}, sample_rate {})",
              i, p[i], bins, dft_length, lower_hz, upper_hz, sample_rate);
  std::vector<double> w(size_t(bins * num_mel_bins), 0.0);
  for (int64_t i = 0; i < num_mel_bins; ++i) {
    const int64_t l = p[size_t(i)], c = p[size_t(i + 1)], h = p[size_t(i + 2)];
    if (c == l)
      w[size_t(c * num_mel_bins + i)] = 1.0;
    else
      for (int64_t j = l; j <= c; ++j) w[size_t(j * num_mel_bins + i)] = double(j - l) / double(c - l);
    for (int64_t j = c; j < h; ++j) w[size_t(j * num_mel_bins + i)] = double(h - j) / double(h - c);
  }
  return w;
}

Shape MelWeightMatrix::validate(const MelWeightMatrixConfig& c) {
  if (c.num_mel_bins < 1) invalid("MelWeightMatrix", "num_mel_bins must be >= 1, got {}", c.num_mel_bins);
  if (c.dft_length < 1) invalid("MelWeightMatrix", "dft_length must be >= 1, got {}", c.dft_length);
  if (c.sample_rate != DType::i32 && c.sample_rate != DType::i64)
    invalid("MelWeightMatrix", "sample_rate must be int32 or int64 on the device, got {}", to_string(c.sample_rate));
  return Shape{c.dft_length / 2 + 1, c.num_mel_bins};
}

std::unique_ptr<MelWeightMatrix> MelWeightMatrix::create(Context& ctx, int device, const MelWeightMatrixConfig& cfg) {
  std::unique_ptr<MelWeightMatrix> m(new MelWeightMatrix());
  m->cfg_ = cfg;
  m->out_ = validate(cfg);
  m->kernel_ = audio_kernel(ctx, device, "mel_weight_matrix");
  return m;
}

void MelWeightMatrix::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor*,
                              ExecutionContext& ec) {
  if (in.size() != 3 || out.size() != 1)
    invalid("MelWeightMatrix", "expects sample_rate, lower_edge_hertz, upper_edge_hertz and 1 output, got {} and {}",
            in.size(), out.size());
  const char* names[] = {"sample_rate", "lower_edge_hertz", "upper_edge_hertz"};
  for (size_t i = 0; i < 3; ++i) {
    if (in[i].shape.numel() != 1)
      invalid("MelWeightMatrix", "{} must hold one value, got shape {}", names[i], in[i].shape.str());
    const DType want = i == 0 ? cfg_.sample_rate : DType::f32;
    if (in[i].dtype != want)
      invalid("MelWeightMatrix", "{} has dtype {}, expected {}", names[i], to_string(in[i].dtype), to_string(want));
  }
  check_tensor("MelWeightMatrix", "output", out[0], out_, DType::f32);
  std::lock_guard lock(launch_mutex_);
  set_args(kernel_, cl_long(cfg_.num_mel_bins), cl_long(cfg_.dft_length), cl_long(out_[0]),
           cl_int(cfg_.sample_rate == DType::i64 ? 1 : 0), in[0].buffer, cl_long(in[0].offset_elems()), in[1].buffer,
           cl_long(in[1].offset_elems()), in[2].buffer, cl_long(in[2].offset_elems()), out[0].buffer,
           cl_long(out[0].offset_elems()));
  ec.enqueue_kernel(kernel_, cl::NDRange(size_t(cfg_.num_mel_bins)), cl::NullRange, "mel_weight_matrix");
}

}  // namespace cldl
