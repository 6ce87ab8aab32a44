// Gemm op: validation, provider choice (own kernel or CLBlast) and enqueue.
#include "layers/gemm.hpp"

#include <clblast.h>

#include <algorithm>

#include "layers/tuning_ops.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
// Variants built by `cldl compile` / warm-up, spelled exactly as create() spells them for the CPU
// defaults: plain row-major, square power-of-two (A and B packed), the dense layer (B^T + column bias)
// and conv-as-GEMM (row bias + ReLU); 4 vectors per work-item where the device's vectors are float16 wide.
std::vector<std::string> gemm_cpu_variants(int nc) {
  std::vector<std::string> v;
  for (const char* o : {"-DTRANS_A=0 -DTRANS_B=0 -DBIAS=0 -DACT=0 -DMR=6 -DNR=16 -DNC={} -DA_PACKED=0 -DB_PACKED=0",
                        "-DTRANS_A=0 -DTRANS_B=0 -DBIAS=0 -DACT=0 -DMR=6 -DNR=16 -DNC={} -DA_PACKED=1 -DB_PACKED=1",
                        "-DTRANS_A=0 -DTRANS_B=1 -DBIAS=1 -DACT=0 -DMR=6 -DNR=16 -DNC={} -DA_PACKED=0 -DB_PACKED=1",
                        "-DTRANS_A=0 -DTRANS_B=0 -DBIAS=2 -DACT=1 -DMR=6 -DNR=16 -DNC={} -DA_PACKED=0 -DB_PACKED=0"})
    v.push_back(fmt::format(fmt::runtime(o), nc));
  return v;
}
// CPUs with float16-wide vector registers (AVX-512): PoCL prefers float16 there, Intel's CPU runtime reports
// preferred 1 but native 16. PoCL on AVX2 reports 8 / 8.
bool gemm_nc4_device(const DeviceInfo& d) {
  return d.type == DeviceType::cpu && d.quirks.prefers_wide_vectors &&
         std::max(d.preferred_vector_float, d.native_vector_float) >= 16;
}
const ProgramVariants kGemmVariants("gemm.cl", gemm_cpu_variants(1),
                                    [](const DeviceInfo& d) { return !gemm_nc4_device(d); });
const ProgramVariants kGemmWideVariants("gemm.cl", gemm_cpu_variants(4), gemm_nc4_device);

constexpr int64_t kPackK = 16;  // PACK_K in kernels/gemm.cl
constexpr int64_t kGemvMaxM = 4;  // gemm_gemv keeps M x GV_COLS float16 sums per work-item

int64_t batch_b(const GemmConfig& c) { return c.eff_stride_b() == 0 ? 1 : c.batch; }
int64_t batch_a(const GemmConfig& c) { return c.eff_stride_a() == 0 ? 1 : c.batch; }

void check_clblast(clblast::StatusCode st, const char* call, const GemmConfig& c) {
  if (st != clblast::StatusCode::kSuccess)
    fail("Gemm: CLBlast {} failed with status {} for {}x{}x{} batch {}", call, int(st), c.M, c.N, c.K, c.batch);
}
}  // namespace

void Gemm::validate(const GemmConfig& c) {
  if (c.M <= 0) invalid("Gemm", "M must be positive, got {}", c.M);
  if (c.N <= 0) invalid("Gemm", "N must be positive, got {}", c.N);
  if (c.K <= 0) invalid("Gemm", "K must be positive, got {}", c.K);
  if (c.batch <= 0) invalid("Gemm", "batch must be positive, got {}", c.batch);
  if (c.lda < 0 || c.eff_lda() < (c.trans_a ? c.M : c.K))
    invalid("Gemm", "lda {} is smaller than the row length {} of A", c.lda, c.trans_a ? c.M : c.K);
  if (c.ldb < 0 || c.eff_ldb() < (c.trans_b ? c.K : c.N))
    invalid("Gemm", "ldb {} is smaller than the row length {} of B", c.ldb, c.trans_b ? c.K : c.N);
  if (c.ldc < 0 || c.eff_ldc() < c.N) invalid("Gemm", "ldc {} is smaller than N = {}", c.ldc, c.N);
  if (c.stride_a < -1) invalid("Gemm", "stride_a must be -1 (packed) or >= 0, got {}", c.stride_a);
  if (c.stride_b < -1) invalid("Gemm", "stride_b must be -1 (packed) or >= 0, got {}", c.stride_b);
  if (c.stride_c < -1) invalid("Gemm", "stride_c must be -1 (packed) or >= 0, got {}", c.stride_c);
  if (c.batch > 1 && c.eff_stride_c() == 0)
    invalid("Gemm", "stride_c 0 with batch {} would write every item to the same C", c.batch);
  const int64_t lim = int64_t(1) << 31;
  if (c.M >= lim || c.N >= lim || c.K >= lim) invalid("Gemm", "dimensions above 2^31 are not supported");
  if (c.eff_lda() >= lim || c.eff_ldb() >= lim || c.eff_ldc() >= lim)
    invalid("Gemm", "leading dimensions above 2^31 are not supported");
  const auto& o = c.own;
  if (o.mr < 0 || o.mr > 8) invalid("Gemm", "own.mr must be 1..8 (0 = auto), got {}", o.mr);
  if (o.nr != 0 && o.nr != 4 && o.nr != 8 && o.nr != 16)
    invalid("Gemm", "own.nr must be 4, 8 or 16 (0 = auto), got {}", o.nr);
  if (o.nc < 0 || o.nc > 4) invalid("Gemm", "own.nc must be 1..4 (0 = auto), got {}", o.nc);
  if (o.pack_b < -1 || o.pack_b > 1) invalid("Gemm", "own.pack_b must be -1, 0 or 1, got {}", o.pack_b);
  if (o.pack_a < -1 || o.pack_a > 1) invalid("Gemm", "own.pack_a must be -1, 0 or 1, got {}", o.pack_a);
  if (o.local < 0) invalid("Gemm", "own.local must be >= 0, got {}", o.local);
  if (o.mt < 0 || o.mt > 64) invalid("Gemm", "own.mt must be 1..64 (0 = auto), got {}", o.mt);
  if (o.gemv < -1 || o.gemv > 1) invalid("Gemm", "own.gemv must be -1, 0 or 1, got {}", o.gemv);
  if (o.gemv == 1 && (c.M > kGemvMaxM || !c.trans_b))
    invalid("Gemm", "own.gemv=1 needs M <= {} and trans_b (B stored N x K), got M = {}, trans_b {}", kGemvMaxM, c.M,
            int(c.trans_b));
}

Gemm::Gemm(Context& ctx, int device, GemmConfig cfg) : ctx_(&ctx), device_(device), cfg_(std::move(cfg)) {}

std::unique_ptr<Gemm> Gemm::create(Context& ctx, int device, const GemmConfig& cfg) {
  validate(cfg);
  tuning::record(cfg);
  std::unique_ptr<Gemm> g(new Gemm(ctx, device, cfg));
  const DeviceInfo& info = ctx.device(device).info;
  const bool cpu = info.type == DeviceType::cpu;
  GemmProvider p = cfg.provider;
  // Offline bundles (cldl compile model.onnx / --binaries) hold only cldl's programs; CLBlast would
  // compile its kernels from source at run time, so the own kernels are used there.
  const bool binaries_only = ProgramCache::global().binaries_only();
  if (p == GemmProvider::automatic) p = cpu || binaries_only ? GemmProvider::own : GemmProvider::clblast;
  if (p == GemmProvider::clblast && binaries_only)
    fail("Gemm: provider clblast compiles kernels from source at run time, which an offline program bundle "
         "(--binaries) cannot hold; use the own provider");
  // RESIDUAL only where set, so the programs without one keep the names warm-up and the caches know.
  const std::string base = fmt::format("-DTRANS_A={} -DTRANS_B={} -DBIAS={} -DACT={}{}", int(cfg.trans_a),
                                       int(cfg.trans_b), int(cfg.bias), int(cfg.act.kind),
                                       cfg.residual ? " -DRESIDUAL=1" : "");
  if (p == GemmProvider::clblast) {
    g->clblast_ = true;
    bool epi = cfg.bias != GemmBias::none || cfg.act.kind != Act::none || cfg.residual;
    if (epi) g->kernel_ = make_kernel(ctx.program("gemm.cl", base, device), "gemm_epilogue");
    // CLBlast's Xgemm parameters: the database's set for this device, or CLBlast's defaults.
    tuning::clblast_use_database(ctx.device(device));
    g->algorithm_ =
        fmt::format("clblast:{}{}", cfg.batch > 1 ? "gemm_strided_batched" : "gemm", epi ? " +epilogue" : "");
  } else {
    GemmOwnParams o = cfg.own;
    // The tuning database fills what the caller left at auto; the heuristic below fills the rest.
    bool tuned = false;
    if (auto t = tuning::find(info, "gemm", tuning::gemm_problem(cfg))) {
      tuning::gemm_apply(t->params, o);
      GemmConfig check = cfg;
      check.own = o;
      validate(check);
      tuned = true;
    }
    // Vector-matrix products (a dense layer / MatMul at batch 1..4 with B stored N x K): gemm_gemv reads every
    // weight once in float16 loads along K instead of packing B (a copy of all the weights per call) and
    // running a 6-row block with M rows used. 8 columns per work-item at M <= 2 (8 or more independent FMA
    // chains), 4 above (M x 4 float16 sums + 4 B vectors fit the 32 registers of AVX-512).
    if (o.gemv < 0) o.gemv = cfg.M <= kGemvMaxM && cfg.trans_b && o.mr == 0 && o.nr == 0 && o.nc == 0 ? 1 : 0;
    if (o.gemv == 1) {
      const int cols = cfg.M <= 2 ? 8 : 4;
      g->gemv_cols_ = size_t(cols);
      g->cfg_.own = o;
      g->kernel_ = make_kernel(
          ctx.program("gemm.cl", fmt::format("{} -DMR={} -DGV_COLS={}", base, cfg.M, cols), device), "gemm_gemv");
      g->algorithm_ = fmt::format("own:gemv m={} cols={}{}", cfg.M, cols, tuned ? " (tuned)" : "");
      log::debug("Gemm {}x{}x{} batch {} trans {}{} on {}: {}", cfg.M, cfg.N, cfg.K, cfg.batch, int(cfg.trans_a),
                 int(cfg.trans_b), info.name, g->algorithm_);
      return g;
    }
    // Register block: 6 rows x 16 columns = 12 AVX accumulators on CPUs; small blocks elsewhere, where the
    // own kernel is only a correct fallback (GPUs get CLBlast by default).
    // Fewer rows than the block (a vector-matrix product: a classifier at batch 1) take a block of M rows:
    // the clamped rows of a 6-row block were computed 6 times over (1x1000x1024: 0.55 -> 0.15 ms).
    if (o.mr == 0) o.mr = cpu ? int(std::min<int64_t>(6, cfg.M)) : 4;
    // NR columns are one float vector: wide (float16) where the driver runs explicit wide vectors best
    // (quirk prefers_wide_vectors: PoCL's and Intel's CPU devices); narrow N (a classifier with 3
    // outputs) gets the narrowest vector that covers it.
    const bool wide = info.quirks.prefers_wide_vectors;
    if (o.nr == 0) o.nr = !wide ? 4 : cfg.N <= 4 ? 4 : cfg.N <= 8 ? 8 : 16;
    // Vectors per work-item: 4 adjacent panels on CPUs whose vectors are float16 wide (gemm_nc4_device; 6 x 4
    // float16 accumulators + 4 B vectors + the broadcast = 29 of the 32 zmm registers; each broadcast A
    // value then feeds 4 FMAs instead of 1). Measured against nc 1 on PoCL/AVX-512, all variants alternating
    // in one process: 0.56-0.78x the time on 1024^3 (B and B^T), 512^3, 256x3136x576, 3136x64x576,
    // 4096x64x64, 49x512x4608; mr 5 or 6 with nc 4 were best of (6,1) (5,4) (6,4) (6,2) (8,2) (4,4) (3,4).
    // One vector elsewhere: on AVX2 a float16 is two of its 16 ymm registers, so 6 x 4 of them would spill
    // (unmeasured there, so left as it was), and GPUs run the own kernel only as a fallback. Never more
    // vectors than N has panels.
    if (o.nc == 0)
      o.nc = gemm_nc4_device(info) && o.nr == 16 ? int(std::min<int64_t>(4, (cfg.N + o.nr - 1) / o.nr)) : 1;
    // Packing B: needed for trans_b (otherwise each row of B is a gather); for row-major B, strides that
    // are multiples of 4 KiB make the K rows of one panel collide in the same cache sets.
    if (o.pack_b < 0) o.pack_b = cfg.trans_b || (cfg.K >= 64 && cfg.eff_ldb() % 1024 == 0) ? 1 : 0;
    // Packing A: row-major A with a 4 KiB-multiple stride puts the MR rows read together into the same
    // cache sets (1024^3 runs ~2x faster packed); otherwise reading in place wins (measured on PoCL:
    // the extra pass over A costs more than it saves), and A^T already gives MR contiguous values.
    // A single row block reads each row of A once either way: packing it is a launch for nothing. The packing
    // pass pays off only over many column strips (each strip reads all of A): with N below 512 it cost more
    // than it saved (ratio to OpenBLAS in one run, packed / in place: 320x64x2048 0.44x / 1.31x, 128x196x1024
    // 0.69x / 4.1x; Inception's and DenseNet's 1x1 convolutions on 2048 / 1024 channels).
    if (o.pack_a < 0)
      o.pack_a = !cfg.trans_a && cfg.eff_lda() % 1024 == 0 && cfg.K >= 64 && cfg.N >= 512 && cfg.M > o.mr ? 1 : 0;
    // About 64K multiply-adds per work-item at least: PoCL starts each work-group on a thread, which
    // costs about as much as a 6x16x64 block.
    if (o.mt == 0) o.mt = cpu ? int(std::clamp<int64_t>(65536 / (int64_t(o.mr) * o.nr * o.nc * cfg.K), 1, 8)) : 1;
    if (o.local == 0) o.local = cpu ? 1 : 16;
    g->tile_m_ = size_t(o.mr);
    g->tile_n_ = size_t(o.nr);
    g->nc_ = size_t(o.nc);
    g->local_ = size_t(o.local);
    g->mt_ = size_t(o.mt);
    g->pack_b_ = o.pack_b == 1;
    g->pack_a_ = o.pack_a == 1;
    g->cfg_.own = o;
    std::string opts = fmt::format("{} -DMR={} -DNR={} -DNC={} -DA_PACKED={} -DB_PACKED={}", base, o.mr, o.nr, o.nc,
                                   o.pack_a, o.pack_b);
    cl::Program prog = ctx.program("gemm.cl", opts, device);
    g->kernel_ = make_kernel(prog, "gemm_tile");
    // A long K on CPUs: a work-item's strip of B (K rows of NR * NC floats) outgrows the L2 cache, so every
    // row block streams it again from memory. K is then split into chunks of about 1024 whose strips stay
    // cached, one launch each, the later ones adding into C; bias and activation come with the last.
    // Unpacked operands only (the packed layouts' panels span the whole K). Measured on PoCL / Zen 4 (1 MiB
    // L2), ratio to OpenBLAS in one run: 256x256x8640 (DeepLab's dilated 3x3 on 960 channels) 0.67x ->
    // 1.05x; strips of 0.6 and 1.2 MiB (256x196x2304, 512x49x4608) gained nothing, hence the 1.5 MiB bar.
    const int64_t strip_bytes = cfg.K * o.nr * o.nc * int64_t(sizeof(float));
    if (cpu && !o.pack_a && !o.pack_b && strip_bytes > (int64_t(3) << 19)) {
      const int64_t chunks = (cfg.K + 1023) / 1024;
      g->k_chunk_ = ((cfg.K + chunks - 1) / chunks + 15) / 16 * 16;
      const std::string popts = fmt::format("-DTRANS_A={} -DTRANS_B={} -DBIAS=0 -DACT=0 -DMR={} -DNR={} -DNC={} "
                                            "-DA_PACKED=0 -DB_PACKED=0",
                                            int(cfg.trans_a), int(cfg.trans_b), o.mr, o.nr, o.nc);
      g->kernel_partial_ = make_kernel(ctx.program("gemm.cl", popts, device), "gemm_tile");
    }
    // The column tail on CPUs: when N is not a multiple of the nr * nc strip, the last strip's work-items
    // compute all nc vectors for the few columns left (N = 196 with 64-column strips: 4 strips for 3.06).
    // Those columns get a launch of their own with the narrowest block that covers them (nr 4 or 8 for
    // up to 8 columns, else fewer vectors of nr), so they cost about their share. B read in place only
    // (packed panels span the whole N), strips of several vectors only (nc 1 would trade half a vector
    // for a launch), and fewer than 8 strips: past that the last strip is under 1/8 of the work and the
    // extra launch cost as much as it saved (min of 15 runs, old / new alternating, `cldl bench gemm`:
    // 1024x196x256 1.34 -> 0.97 ms, 256x196x2304 2.91 -> 2.24 ms, but 128x784x1152 2.40 -> 2.53 ms).
    const int64_t strip = int64_t(o.nr) * o.nc, rem = cfg.N % strip;
    g->n_main_ = cfg.N;
    if (cpu && !g->pack_b_ && o.nc > 1 && cfg.N > strip && cfg.N < 8 * strip && rem != 0) {
      const int tnr = rem <= 4 ? 4 : rem <= 8 ? 8 : o.nr;
      const int tnc = int((rem + tnr - 1) / tnr);
      if (int64_t(tnr) * tnc < strip) {
        g->n_main_ = cfg.N - rem;
        g->tail_nr_ = size_t(tnr);
        g->tail_nc_ = size_t(tnc);
        g->tail_mt_ = size_t(std::clamp<int64_t>(65536 / (int64_t(o.mr) * tnr * tnc * cfg.K), 1, 8));
        g->tail_kernel_ = make_kernel(ctx.program("gemm.cl",
                                                  fmt::format("{} -DMR={} -DNR={} -DNC={} -DA_PACKED={} -DB_PACKED=0",
                                                              base, o.mr, tnr, tnc, o.pack_a),
                                                  device),
                                      "gemm_tile");
        if (g->k_chunk_)
          g->tail_kernel_partial_ = make_kernel(
              ctx.program("gemm.cl",
                          fmt::format("-DTRANS_A={} -DTRANS_B={} -DBIAS=0 -DACT=0 -DMR={} -DNR={} -DNC={} "
                                      "-DA_PACKED=0 -DB_PACKED=0",
                                      int(cfg.trans_a), int(cfg.trans_b), o.mr, tnr, tnc),
                          device),
              "gemm_tile");
      }
    }
    size_t floats = 0;
    if (g->pack_a_) {
      g->pack_a_kernel_ = make_kernel(prog, "gemm_pack_a");
      floats += size_t(batch_a(cfg) * ((cfg.M + o.mr - 1) / o.mr) * cfg.K * o.mr);
    }
    g->ws_b_offset_ = floats;
    if (g->pack_b_) {
      g->pack_kernel_ = make_kernel(prog, "gemm_pack_b");
      floats += size_t(batch_b(cfg) * ((cfg.N + o.nr - 1) / o.nr) * cfg.K * o.nr);
    }
    g->workspace_bytes_ = floats * sizeof(float);
    g->algorithm_ = fmt::format("own:tile mr={} nr={} nc={} mt={} local={}{}{}{}{}{}", o.mr, o.nr, o.nc, o.mt, o.local,
                                g->pack_a_ ? " packA" : "", g->pack_b_ ? " packB" : "",
                                g->k_chunk_ ? fmt::format(" kchunk={}", g->k_chunk_) : "",
                                g->tail_nr_ ? fmt::format(" tail={}x{}", g->tail_nr_, g->tail_nc_) : "",
                                tuned ? " (tuned)" : "");
  }
  log::debug("Gemm {}x{}x{} batch {} trans {}{} on {}: {}", cfg.M, cfg.N, cfg.K, cfg.batch, int(cfg.trans_a),
             int(cfg.trans_b), info.name, g->algorithm_);
  return g;
}

void Gemm::run(const Tensor& a, const Tensor& b, const Tensor& c, ExecutionContext& ec, const Tensor* bias,
               const Tensor* residual) {
  std::vector<Tensor> in{a, b};
  if (bias) in.push_back(*bias);
  if (residual) in.push_back(*residual);
  Tensor out[1] = {c};
  enqueue(in, out, nullptr, ec);
}

void Gemm::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
                   ExecutionContext& ec) {
  const auto& c = cfg_;
  const size_t need_in = (c.bias == GemmBias::none ? 2 : 3) + (c.residual ? 1 : 0);
  if (inputs.size() != need_in || outputs.size() != 1)
    invalid("Gemm", "expects {} inputs and 1 output, got {} and {}", need_in, inputs.size(), outputs.size());
  const Tensor &A = inputs[0], &B = inputs[1], &C = outputs[0];
  for (const Tensor* t : {&A, &B, &C})
    if (t->dtype != DType::f32) invalid("Gemm", "only f32 tensors are supported, got {}", to_string(t->dtype));
  // Element counts the views must hold (last item's start + its last row), so bad views fail here
  // instead of reading out of bounds.
  auto need = [&](int64_t stride, int64_t rows, int64_t cols, int64_t ld) {
    return stride * (c.batch - 1) + (rows - 1) * ld + cols;
  };
  struct Req {
    const Tensor* t;
    const char* name;
    int64_t n;
  };
  const Req reqs[] = {{&A, "A", need(c.eff_stride_a(), c.trans_a ? c.K : c.M, c.trans_a ? c.M : c.K, c.eff_lda())},
                      {&B, "B", need(c.eff_stride_b(), c.trans_b ? c.N : c.K, c.trans_b ? c.K : c.N, c.eff_ldb())},
                      {&C, "C", need(c.eff_stride_c(), c.M, c.N, c.eff_ldc())}};
  for (const auto& r : reqs)
    if (r.t->numel() < r.n)
      invalid("Gemm", "tensor {} has {} elements, the config needs {}", r.name, r.t->numel(), r.n);
  if (c.bias != GemmBias::none) {
    int64_t bn = c.bias == GemmBias::per_col ? c.N : c.M;
    if (inputs[2].numel() < bn) invalid("Gemm", "bias has {} elements, expected {}", inputs[2].numel(), bn);
    if (inputs[2].dtype != DType::f32) invalid("Gemm", "bias must be f32, got {}", to_string(inputs[2].dtype));
  }
  const Tensor& bias = c.bias != GemmBias::none ? inputs[2] : C;
  const Tensor& res = c.residual ? inputs[need_in - 1] : C;  // any valid buffer when there is none
  if (c.residual) {
    const int64_t n = need(c.eff_stride_c(), c.M, c.N, c.eff_ldc());
    if (res.dtype != DType::f32 || res.numel() < n)
      invalid("Gemm", "residual is {} with {} elements, expected f32 with {}", to_string(res.dtype), res.numel(), n);
    // Every epilogue reads R where it writes C, but K chunks write C before the last one reads R.
    const size_t rb = res.offset_bytes, re = rb + size_t(n) * sizeof(float), cb = C.offset_bytes,
                 ce = cb + size_t(n) * sizeof(float);  // C spans as many elements as R
    if (res.buffer() == C.buffer() && rb < ce && cb < re) invalid("Gemm", "residual overlaps the output C");
  }
  std::lock_guard lock(launch_mutex_);

  if (clblast_) {
    ec.barrier_on_waits();
    cl_command_queue q = ec.queue();
    cl_event ev = nullptr;
    bool epi = kernel_() != nullptr;
    // CLBlast's event goes to the profiler even when the epilogue follows (which then signals).
    cl_event* evp = ec.wants_event() ? &ev : nullptr;
    auto ta = c.trans_a ? clblast::Transpose::kYes : clblast::Transpose::kNo;
    auto tb = c.trans_b ? clblast::Transpose::kYes : clblast::Transpose::kNo;
    if (c.batch == 1) {
      check_clblast(clblast::Gemm<float>(clblast::Layout::kRowMajor, ta, tb, c.M, c.N, c.K, c.alpha, A.buffer(),
                                         A.offset_elems(), c.eff_lda(), B.buffer(), B.offset_elems(), c.eff_ldb(),
                                         c.beta, C.buffer(), C.offset_elems(), c.eff_ldc(), &q, evp),
                    "Gemm", c);
    } else {
      check_clblast(clblast::GemmStridedBatched<float>(
                        clblast::Layout::kRowMajor, ta, tb, c.M, c.N, c.K, c.alpha, A.buffer(), A.offset_elems(),
                        c.eff_lda(), c.eff_stride_a(), B.buffer(), B.offset_elems(), c.eff_ldb(), c.eff_stride_b(),
                        c.beta, C.buffer(), C.offset_elems(), c.eff_ldc(), c.eff_stride_c(), c.batch, &q, evp),
                    "GemmStridedBatched", c);
    }
    if (evp) ec.record(cl::Event(ev), "gemm_clblast");  // cl::Event takes ownership of ev
    if (epi) {
      set_args(kernel_, cl_int(c.M), cl_int(c.N), C.buffer, cl_long(C.offset_elems()), cl_int(c.eff_ldc()),
               cl_long(c.eff_stride_c()), bias.buffer, cl_long(bias.offset_elems()), c.act.alpha, c.act.beta,
               res.buffer, cl_long(res.offset_elems()));
      ec.enqueue_kernel(kernel_, cl::NDRange(c.N, c.M, c.batch), cl::NullRange, "gemm_epilogue");
    }
    return;
  }

  if (gemv_cols_) {
    set_args(kernel_, cl_int(c.M), cl_int(c.N), cl_int(c.K), A.buffer, cl_long(A.offset_elems()), cl_int(c.eff_lda()),
             cl_long(c.eff_stride_a()), B.buffer, cl_long(B.offset_elems()), cl_int(c.eff_ldb()),
             cl_long(c.eff_stride_b()), C.buffer, cl_long(C.offset_elems()), cl_int(c.eff_ldc()),
             cl_long(c.eff_stride_c()), c.alpha, c.beta, bias.buffer, cl_long(bias.offset_elems()), c.act.alpha,
             c.act.beta, res.buffer, cl_long(res.offset_elems()));
    ec.enqueue_kernel(kernel_, cl::NDRange((c.N + gemv_cols_ - 1) / gemv_cols_, 1, c.batch), cl::NullRange,
                      "gemm_gemv");
    return;
  }
  const cl::Buffer* abuf = &A.buffer;
  const cl::Buffer* bbuf = &B.buffer;
  cl_long a_off = cl_long(A.offset_elems()), a_stride = cl_long(c.eff_stride_a());
  cl_long b_off = cl_long(B.offset_elems()), b_stride = cl_long(c.eff_stride_b());
  bool own_scratch = false;
  if (pack_a_ || pack_b_) {
    const Tensor* ws = workspace;
    if (!ws || ws->bytes() < workspace_bytes_) {
      if (workspace) invalid("Gemm", "workspace has {} bytes, needs {}", workspace->bytes(), workspace_bytes_);
      if (!scratch_.valid())
        scratch_ = ctx_->alloc(Shape{int64_t(workspace_bytes_ / sizeof(float))}, DType::f32, device_);
      ws = &scratch_;
      own_scratch = true;
      // The previous call's GEMM may still read the scratch (possibly from another queue): wait for it.
      if (scratch_done_()) ec.wait_for.push_back(scratch_done_);
    }
    if (pack_a_) {
      const int64_t panels = (c.M + int64_t(tile_m_) - 1) / int64_t(tile_m_);
      set_args(pack_a_kernel_, cl_int(c.M), cl_int(c.K), A.buffer, a_off, cl_int(c.eff_lda()), a_stride, ws->buffer,
               cl_long(ws->offset_elems()));
      ec.enqueue_kernel(pack_a_kernel_, cl::NDRange(panels, (c.K + kPackK - 1) / kPackK, batch_a(c)), cl::NullRange,
                        "gemm_pack_a");
      abuf = &ws->buffer;
      a_off = cl_long(ws->offset_elems());
      a_stride = c.eff_stride_a() == 0 ? 0 : cl_long(panels * c.K * tile_m_);
    }
    if (pack_b_) {
      const int64_t panels = (c.N + int64_t(tile_n_) - 1) / int64_t(tile_n_);
      const cl_long off = cl_long(ws->offset_elems() + ws_b_offset_);
      set_args(pack_kernel_, cl_int(c.N), cl_int(c.K), B.buffer, b_off, cl_int(c.eff_ldb()), b_stride, ws->buffer, off);
      ec.enqueue_kernel(pack_kernel_, cl::NDRange(panels, (c.K + kPackK - 1) / kPackK, batch_b(c)), cl::NullRange,
                        "gemm_pack_b");
      bbuf = &ws->buffer;
      b_off = off;
      b_stride = c.eff_stride_b() == 0 ? 0 : cl_long(panels * c.K * tile_n_);
    }
  }
  // One part of the columns: [n0, n0 + np) with `kern` (and `partial` for the K chunks but the last), nr x nc
  // columns and mt row blocks per work-item. K in chunks (k_chunk_): every chunk but the last without bias
  // and activation; the first with the caller's beta, the later ones adding into C (beta 1). Chunk k0
  // starts at column k0 of op(A) and row k0 of op(B).
  cl::Event done;
  cl::Event* caller_signal = ec.signal;
  auto launch = [&](cl::Kernel& kern, cl::Kernel& partial, int64_t n0, int64_t np, size_t nr, size_t nc, size_t mt,
                    bool last) {
    const size_t gm = round_up(((c.M + tile_m_ - 1) / tile_m_ + mt - 1) / mt, local_);
    const size_t gn = ((np + nr - 1) / nr + nc - 1) / nc;
    const cl_long co = cl_long(C.offset_elems() + n0);
    const cl_long bco = cl_long(bias.offset_elems() + (c.bias == GemmBias::per_col ? n0 : 0));
    const cl_long ro = cl_long(res.offset_elems() + (c.residual ? n0 : 0));
    auto set_chunk = [&](cl::Kernel& kk, int64_t k0, int64_t klen) {
      const cl_long ao = a_off + (c.trans_a ? k0 * c.eff_lda() : k0);
      const cl_long bo = b_off + (c.trans_b ? k0 + n0 * c.eff_ldb() : k0 * c.eff_ldb() + n0);
      set_args(kk, cl_int(c.M), cl_int(np), cl_int(klen), *abuf, ao, cl_int(c.eff_lda()), a_stride, *bbuf, bo,
               cl_int(c.eff_ldb()), b_stride, C.buffer, co, cl_int(c.eff_ldc()), cl_long(c.eff_stride_c()), c.alpha,
               k0 == 0 ? c.beta : 1.0f, bias.buffer, bco, c.act.alpha, c.act.beta, cl_int(mt), res.buffer, ro);
    };
    int64_t k0 = 0;
    if (k_chunk_)
      for (; k0 + k_chunk_ < c.K; k0 += k_chunk_) {
        set_chunk(partial, k0, k_chunk_);
        ec.enqueue_kernel(partial, cl::NDRange(gm, gn, c.batch), cl::NDRange(local_, 1, 1), "gemm_tile");
      }
    set_chunk(kern, k0, c.K - k0);
    if (last) {
      ec.signal = caller_signal;
      if (own_scratch && !caller_signal) ec.signal = &done;  // we need the event even if the caller does not
    }
    ec.enqueue_kernel(kern, cl::NDRange(gm, gn, c.batch), cl::NDRange(local_, 1, 1), "gemm_tile");
  };
  const bool tail = n_main_ < c.N;
  launch(kernel_, kernel_partial_, 0, n_main_, tile_n_, nc_, mt_, !tail);
  if (tail) launch(tail_kernel_, tail_kernel_partial_, n_main_, c.N - n_main_, tail_nr_, tail_nc_, tail_mt_, true);
  if (own_scratch) {
    scratch_done_ = caller_signal ? *caller_signal : done;
    ec.signal = caller_signal;
  }
}

}  // namespace cldl
