// FFT convolution through clFFT: zero-pad each plane to FH x FW (>= padded input, sizes with factors
// 2, 3, 5, 7 only, which clFFT supports), real-to-complex transforms of input planes (per enqueue) and of
// the weights (once, at create), Y = sum_c X * conj(Wf) per frequency bin (conv is a cross-correlation),
// one complex-to-real inverse per output plane (clFFT scales the backward transform by 1/(FH*FW)), and a
// crop of the valid corner with bias and activation. No wrap-around reaches the valid corner because
// FH >= H + pads, so it equals the linear correlation.
#include "layers/clfft_util.hpp"
#include "layers/conv.hpp"
#include "layers/conv_internal.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {

void check_fft(clfftStatus s, const char* call) { check_clfft(s, "Conv (fft)", call); }

// Smallest even n' >= n whose prime factors are all in {2, 3, 5, 7} (1 stays 1: a 1-D problem). Even
// lengths keep the real-to-complex transforms on clFFT's most exercised path.
int64_t fft_size(int64_t n) {
  if (n <= 1) return 1;
  for (int64_t m = n + (n & 1);; m += 2) {
    int64_t r = m;
    for (int64_t p : {2, 3, 5, 7})
      while (r % p == 0) r /= p;
    if (r == 1) return m;
  }
}

// Batched out-of-place real<->hermitian plan over planes of fh x fw reals (1-D when fh == 1).
clfftPlanHandle make_plan(const cl::Context& ctx, cl::CommandQueue& q, int64_t fh, int64_t fw, size_t batch,
                          bool forward) {
  clfftPlanHandle p = 0;
  const bool one_d = fh == 1;
  size_t lengths[2] = {size_t(fw), size_t(fh)};
  const clfftDim dim = one_d ? CLFFT_1D : CLFFT_2D;
  check_fft(clfftCreateDefaultPlan(&p, ctx(), dim, lengths), "clfftCreateDefaultPlan");
  try {
    const size_t cw = size_t(fw / 2 + 1);
    size_t real_strides[2] = {1, size_t(fw)}, cplx_strides[2] = {1, cw};
    check_fft(clfftSetPlanPrecision(p, CLFFT_SINGLE), "clfftSetPlanPrecision");
    check_fft(clfftSetResultLocation(p, CLFFT_OUTOFPLACE), "clfftSetResultLocation");
    check_fft(clfftSetPlanBatchSize(p, batch), "clfftSetPlanBatchSize");
    const size_t real_dist = size_t(fh * fw), cplx_dist = size_t(fh) * cw;
    if (forward) {
      check_fft(clfftSetLayout(p, CLFFT_REAL, CLFFT_HERMITIAN_INTERLEAVED), "clfftSetLayout");
      check_fft(clfftSetPlanInStride(p, dim, real_strides), "clfftSetPlanInStride");
      check_fft(clfftSetPlanOutStride(p, dim, cplx_strides), "clfftSetPlanOutStride");
      check_fft(clfftSetPlanDistance(p, real_dist, cplx_dist), "clfftSetPlanDistance");
    } else {
      check_fft(clfftSetLayout(p, CLFFT_HERMITIAN_INTERLEAVED, CLFFT_REAL), "clfftSetLayout");
      check_fft(clfftSetPlanInStride(p, dim, cplx_strides), "clfftSetPlanInStride");
      check_fft(clfftSetPlanOutStride(p, dim, real_strides), "clfftSetPlanOutStride");
      check_fft(clfftSetPlanDistance(p, cplx_dist, real_dist), "clfftSetPlanDistance");
    }
    cl_command_queue qq = q();
    check_fft(clfftBakePlan(p, 1, &qq, nullptr, nullptr), "clfftBakePlan");
  } catch (...) {
    clfftDestroyPlan(&p);
    throw;
  }
  return p;
}

size_t tmp_size(clfftPlanHandle p) {
  size_t n = 0;
  check_fft(clfftGetTmpBufSize(p, &n), "clfftGetTmpBufSize");
  return n;
}

// Workspace regions are sub-buffers on kClfftAlign boundaries (clFFT takes whole cl_mem objects).
constexpr size_t kAlign = kClfftAlign;

struct FftLayout {
  size_t real = 0, xc = 0, yc = 0, tmp = 0;  // bytes of each region
  size_t total() const { return kAlign + round_up(real, kAlign) + round_up(xc, kAlign) + round_up(yc, kAlign) + tmp; }
};

FftLayout fft_layout(const ConvGeometry& g, int64_t fh, int64_t fw, size_t tmp) {
  const size_t F = size_t(fh * (fw / 2 + 1));
  FftLayout l;
  l.real = size_t(std::max(g.N * g.C, g.N * g.K) * fh * fw) * sizeof(float);
  l.xc = size_t(g.N * g.C) * F * 2 * sizeof(float);
  l.yc = size_t(g.N * g.K) * F * 2 * sizeof(float);
  l.tmp = tmp;
  return l;
}

cl::Buffer sub_buffer(cl::Buffer b, size_t origin, size_t size) {
  return clfft_region(b, origin, size, "Conv (fft) workspace region");
}

}  // namespace

void ConvOp::prepare_fft(const ConvConfig& cfg) {
  clfft_setup_once();
  const ConvGeometry& g = g_;
  fh_ = fft_size(g.H + g.PT + g.PB);
  fw_ = fft_size(g.W + g.PL + g.PR);
  const size_t F = size_t(fh_ * (fw_ / 2 + 1));
  cl::CommandQueue q = ctx_->queue(device_, 0);
  fft_fwd_ = make_plan(ctx_->cl(), q, fh_, fw_, size_t(g.N * g.C), true);
  fft_inv_ = make_plan(ctx_->cl(), q, fh_, fw_, size_t(g.N * g.K), false);
  fft_plans_ = true;
  // Weights: zero-padded real planes -> spectra, once. They go through the input plan (batch N*C) in
  // chunks, which saves building a third plan (clFFT compiles kernels per plan); the plane count is
  // rounded up to whole chunks with zero planes.
  const int64_t chunk = g.N * g.C, planes = g.K * g.C, chunks = (planes + chunk - 1) / chunk;
  HostTensor wp(DType::f32, Shape{chunks * chunk, fh_, fw_});
  std::fill(wp.as<float>(), wp.as<float>() + wp.numel(), 0.0f);
  const float* w = cfg.weight.as<float>();
  for (int64_t kc = 0; kc < planes; ++kc)
    for (int64_t i = 0; i < g.KH; ++i)
      for (int64_t j = 0; j < g.KW; ++j) wp.as<float>()[(kc * fh_ + i) * fw_ + j] = w[(kc * g.KH + i) * g.KW + j];
  Tensor wreal = ctx_->upload(wp, device_);
  weight_ = ctx_->alloc(Shape{int64_t(F) * 2 * chunks * chunk}, DType::f32, device_);
  cl::Buffer tmp;
  if (size_t n = tmp_size(fft_fwd_)) tmp = cl::Buffer(ctx_->cl(), CL_MEM_READ_WRITE, n);
  cl_command_queue qq = q();
  // clFFT takes cl_mem without offsets and chunk origins are not aligned for sub-buffers in general, so
  // each chunk goes through staging buffers (once, at create).
  const size_t in_bytes = size_t(chunk * fh_ * fw_) * sizeof(float), out_bytes = size_t(chunk) * F * 2 * sizeof(float);
  cl::Buffer inb(ctx_->cl(), CL_MEM_READ_WRITE, in_bytes), outb(ctx_->cl(), CL_MEM_READ_WRITE, out_bytes);
  for (int64_t i = 0; i < chunks; ++i) {
    check(q.enqueueCopyBuffer(wreal.buffer, inb, wreal.offset_bytes + size_t(i) * in_bytes, 0, in_bytes),
          "clEnqueueCopyBuffer", "Conv (fft) weight planes");
    cl_mem in = inb(), out = outb();
    check_fft(clfftEnqueueTransform(fft_fwd_, CLFFT_FORWARD, 1, &qq, 0, nullptr, nullptr, &in, &out, tmp()),
              "clfftEnqueueTransform (weights)");
    check(q.enqueueCopyBuffer(outb, weight_.buffer, 0, weight_.offset_bytes + size_t(i) * out_bytes, out_bytes),
          "clEnqueueCopyBuffer", "Conv (fft) weight spectra");
    check(q.finish(), "clFinish", "Conv (fft) weight transform");
  }
  workspace_ = fft_layout(g, fh_, fw_, std::max(tmp_size(fft_fwd_), tmp_size(fft_inv_))).total();
  log::debug("Conv (fft): transform size {}x{}, workspace {} bytes", fh_, fw_, workspace_);
}

void ConvOp::release_fft() {
  if (!fft_plans_ || clfft_torn_down()) return;
  clfftDestroyPlan(&fft_fwd_);
  clfftDestroyPlan(&fft_inv_);
  fft_plans_ = false;
}

void ConvOp::enqueue_fft(const Tensor& x, const Tensor& y, const Tensor& ws, ExecutionContext& ec) {
  const ConvGeometry& g = g_;
  const FftLayout l = fft_layout(g, fh_, fw_, std::max(tmp_size(fft_fwd_), tmp_size(fft_inv_)));
  size_t at = round_up(ws.offset_bytes, kAlign);
  auto region = [&](size_t bytes) {
    cl::Buffer b = sub_buffer(ws.buffer, at, bytes);
    at += round_up(bytes, kAlign);
    return b;
  };
  cl::Buffer real = region(l.real), xc = region(l.xc), yc = region(l.yc);
  cl::Buffer tmp = l.tmp ? region(l.tmp) : cl::Buffer();
  const cl_int16 ga = detail::geometry_arg(g);
  const Tensor& b = has_bias_ ? bias_ : y;
  const size_t F = size_t(fh_ * (fw_ / 2 + 1));
  cl_command_queue q = ec.queue();

  set_args(pre_, ga, cl_int(fh_), cl_int(fw_), x.buffer, cl_long(x.offset_elems()), real);
  ec.enqueue_kernel(pre_, cl::NDRange(size_t(fw_), size_t(fh_), size_t(g.N * g.C)), cl::NullRange, "fft_pad");
  cl_mem in = real(), out = xc();
  cl_event ev = nullptr;
  check_fft(clfftEnqueueTransform(fft_fwd_, CLFFT_FORWARD, 1, &q, 0, nullptr, ec.wants_event() ? &ev : nullptr, &in,
                                  &out, tmp()),
            "clfftEnqueueTransform (forward)");
  if (ev) ec.record(cl::Event(ev), "fft_forward");

  set_args(main_, cl_int(F), cl_int(g.C), cl_int(g.K), xc, weight_.buffer, cl_long(weight_.offset_bytes / 8), yc);
  ec.enqueue_kernel(main_, cl::NDRange(F, size_t(g.K), size_t(g.N)), cl::NullRange, "fft_multiply");

  in = yc(), out = real(), ev = nullptr;
  check_fft(clfftEnqueueTransform(fft_inv_, CLFFT_BACKWARD, 1, &q, 0, nullptr, ec.wants_event() ? &ev : nullptr, &in,
                                  &out, tmp()),
            "clfftEnqueueTransform (inverse)");
  if (ev) ec.record(cl::Event(ev), "fft_inverse");

  set_args(post_, ga, cl_int(fh_), cl_int(fw_), real, b.buffer, cl_long(b.offset_elems()), cl_int(has_bias_),
           y.buffer, cl_long(y.offset_elems()), act_.alpha, act_.beta);
  ec.enqueue_kernel(post_, cl::NDRange(size_t(g.OW), size_t(g.OH), size_t(g.N * g.K)), cl::NullRange, "fft_crop");
}

}  // namespace cldl
