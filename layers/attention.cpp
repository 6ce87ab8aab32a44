// Attention op (fused and plain algorithms) and the KV cache: validation, tile choice, enqueue.
#include "layers/attention.hpp"

#include <cmath>
#include <functional>
#include <tuple>

#include "layers/tuning_ops.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {
// Default variants, exactly as create() builds them: the CPU blocked kernel (rows across vector lanes)
// without and with an additive mask, at the AVX2 and at the AVX-512 register blocks (one and two row
// groups); the tile kernel at
// head size 64 on CPUs (an MHA decode step over a KV cache: BLOCK_M 1, VEC 16, global reads) and on GPUs
// with 48 KiB of local memory (BLOCK_M 64, VEC 4), head size 128, and their decode step over a KV cache with
// the keys split into chunks (SPLIT_KV); and the plain path's kernels (which
// the KV cache shares). Each is registered for the devices where create() picks it.
bool cpu_narrow(const DeviceInfo& d) { return d.type == DeviceType::cpu && d.preferred_vector_float < 16; }
bool cpu_wide(const DeviceInfo& d) { return d.type == DeviceType::cpu && d.preferred_vector_float >= 16; }
bool cpu_any(const DeviceInfo& d) { return d.type == DeviceType::cpu; }
bool not_cpu(const DeviceInfo& d) { return d.type != DeviceType::cpu; }
const ProgramVariants kAttentionAvx2Variants(
    "attention.cl",
    {"-DATT_KERNEL=2 -DATT_RG=1 -DATT_KB=6 -DATT_CB=4 -DATT_BKV=24 -DMASK=0 -DKV_LENS=0",
     "-DATT_KERNEL=2 -DATT_RG=1 -DATT_KB=6 -DATT_CB=4 -DATT_BKV=24 -DMASK=1 -DKV_LENS=0"},
    cpu_narrow);
const ProgramVariants kAttentionAvx512Variants(
    "attention.cl",
    {"-DATT_KERNEL=2 -DATT_RG=2 -DATT_KB=8 -DATT_CB=8 -DATT_BKV=16 -DMASK=0 -DKV_LENS=0",
     "-DATT_KERNEL=2 -DATT_RG=2 -DATT_KB=8 -DATT_CB=8 -DATT_BKV=16 -DMASK=1 -DKV_LENS=0",
     "-DATT_KERNEL=2 -DATT_RG=1 -DATT_KB=8 -DATT_CB=8 -DATT_BKV=16 -DMASK=0 -DKV_LENS=0",
     "-DATT_KERNEL=2 -DATT_RG=1 -DATT_KB=8 -DATT_CB=8 -DATT_BKV=16 -DMASK=1 -DKV_LENS=0"},
    cpu_wide);
const ProgramVariants kAttentionCpuDecodeVariants(
    "attention.cl",
    {"-DATT_KERNEL=1 -DHEAD_DIM=64 -DHEAD_DIM_V=64 -DBLOCK_M=1 -DBLOCK_N=32 -DVEC=16 -DUSE_LOCAL=0 -DMASK=0 -DKV_LENS=1"},
    cpu_any);
const ProgramVariants kAttentionLocalVariants(
    "attention.cl",
    {"-DATT_KERNEL=1 -DHEAD_DIM=64 -DHEAD_DIM_V=64 -DBLOCK_M=64 -DBLOCK_N=32 -DVEC=4 -DUSE_LOCAL=1 -DMASK=0 -DKV_LENS=0",
     "-DATT_KERNEL=1 -DHEAD_DIM=64 -DHEAD_DIM_V=64 -DBLOCK_M=64 -DBLOCK_N=32 -DVEC=4 -DUSE_LOCAL=1 -DMASK=1 -DKV_LENS=0",
     "-DATT_KERNEL=1 -DHEAD_DIM=128 -DHEAD_DIM_V=128 -DBLOCK_M=64 -DBLOCK_N=16 -DVEC=4 -DUSE_LOCAL=1 -DMASK=0 -DKV_LENS=0",
     "-DATT_KERNEL=1 -DHEAD_DIM=64 -DHEAD_DIM_V=64 -DBLOCK_M=64 -DBLOCK_N=32 -DVEC=4 -DUSE_LOCAL=1 -DMASK=0 -DKV_LENS=1 -DSPLIT_KV=1"},
    not_cpu);
const ProgramVariants kAttentionPlainVariants("attention.cl", {"-DATT_KERNEL=3 -DMASK=0 -DKV_LENS=0"});

// Host twin of attn_params in kernels/attention.cl (same member order; cl_long members 8-aligned).
struct AttnParams {
  cl_int Sq, Skv, q_heads, group, causal, causal_from_lens, causal_offset, mask_cols;
  cl_long mask_sb, mask_sh, mask_ss;
  cl_float scale, softcap;
};
static_assert(sizeof(AttnParams) == 64, "AttnParams must match attn_params in attention.cl");

// Largest tile of keys whose K and V rows fit in half the local memory (the rest is headroom for the
// compiler), a power of two between 4 and 32.
size_t pick_block_n(const DeviceInfo& info, int64_t d, int64_t dv) {
  size_t budget = std::max<size_t>(info.local_mem_bytes / 2, 4096);
  size_t bn = 32;
  while (bn > 4 && bn * size_t(d + dv) * sizeof(float) > budget) bn /= 2;
  return bn;
}

// Strides (b, h, s) of Q/K/V/Y in elements, for a tensor of `heads` heads of `dim` over `seq` positions.
struct Strides {
  int64_t b, h, s;
};
Strides strides_of(AttentionLayout layout, int64_t heads, int64_t seq, int64_t dim) {
  if (layout == AttentionLayout::bhsd) return {heads * seq * dim, seq * dim, dim};
  return {seq * heads * dim, dim, heads * dim};
}

void expect_shape(const char* arg, const Shape& got, const Shape& want) {
  if (got != want) invalid("Attention", "{} has shape {}, expected {}", arg, got.str(), want.str());
}
}  // namespace

float AttentionConfig::eff_scale() const { return scale != 0.0f ? scale : 1.0f / std::sqrt(float(head_size)); }

double AttentionConfig::flops() const {
  double f = 2.0 * double(batch) * double(q_heads) * double(q_len) * double(kv_len) *
             double(head_size + eff_v_head_size());
  return causal && q_len == kv_len ? f / 2 : f;
}

Shape Attention::validate(const AttentionConfig& c, std::span<const Shape> inputs) {
  if (c.batch <= 0) invalid("Attention", "batch must be positive, got {}", c.batch);
  if (c.q_heads <= 0) invalid("Attention", "q_heads must be positive, got {}", c.q_heads);
  if (c.kv_heads < 0) invalid("Attention", "kv_heads must be positive (or 0 = q_heads), got {}", c.kv_heads);
  if (c.q_heads % c.eff_kv_heads() != 0)
    invalid("Attention", "kv_heads {} does not divide q_heads {}", c.eff_kv_heads(), c.q_heads);
  if (c.q_len <= 0) invalid("Attention", "q_len must be positive, got {}", c.q_len);
  if (c.kv_splits < 0 || c.kv_splits > 1024)
    invalid("Attention", "kv_splits must be 0 (auto), 1 (none) or a chunk count up to 1024, got {}", c.kv_splits);
  if (c.kv_len <= 0) invalid("Attention", "kv_len must be positive, got {}", c.kv_len);
  if (c.head_size <= 0) invalid("Attention", "head_size must be positive, got {}", c.head_size);
  if (c.v_head_size < 0) invalid("Attention", "v_head_size must be positive, got {}", c.v_head_size);
  if (c.kv_capacity != 0 && c.kv_capacity < c.kv_len)
    invalid("Attention", "kv_capacity {} is smaller than kv_len {}", c.kv_capacity, c.kv_len);
  if (c.eff_kv_layout() == AttentionLayout::bshd && c.kv_capacity != 0 && c.kv_capacity != c.kv_len)
    invalid("Attention", "kv_capacity {} needs the [B, H, S, D] layout", c.kv_capacity);
  if (c.qk_output_mode < -1 || c.qk_output_mode > 3)
    invalid("Attention", "qk_output_mode must be -1 (none) or 0..3, got {}", c.qk_output_mode);
  if (c.causal_offset_from_lens && c.kv_lens == AttentionKvLens::none)
    invalid("Attention", "causal_offset_from_lens needs kv_lens");
  if (!(c.scale >= 0.0f) || !std::isfinite(c.scale)) invalid("Attention", "scale must be finite, got {}", c.scale);
  if (!(c.softcap >= 0.0f) || !std::isfinite(c.softcap))
    invalid("Attention", "softcap must be >= 0, got {}", c.softcap);
  const int64_t lim = int64_t(1) << 31;
  if (c.q_len >= lim || c.eff_capacity() >= lim) invalid("Attention", "sequence lengths above 2^31 are not supported");
  if (c.mask != AttentionMask::none) {
    const auto& m = c.mask_shape;
    if (m.rank() < 2 || m.rank() > 4) invalid("Attention", "mask rank must be 2..4, got shape {}", m.str());
    const int64_t full[4] = {c.batch, c.q_heads, c.q_len, c.kv_len};
    const char* names[4] = {"batch", "q_heads", "q_len", "kv_len"};
    for (size_t i = 0; i + 1 < m.rank(); ++i) {
      size_t axis = 4 - m.rank() + i;
      if (m[i] != 1 && m[i] != full[axis])
        invalid("Attention", "mask shape {} does not broadcast to {} = {} on axis {}", m.str(), names[axis],
                full[axis], i);
    }
    if (m[m.rank() - 1] < 1 || m[m.rank() - 1] > c.kv_len)
      invalid("Attention", "mask shape {}: last dim must be 1..kv_len = {}", m.str(), c.kv_len);
  }
  const int64_t B = c.batch, Hq = c.q_heads, Hk = c.eff_kv_heads(), D = c.head_size, Dv = c.eff_v_head_size();
  const int64_t C = c.eff_capacity();
  Shape y = c.layout == AttentionLayout::bhsd ? Shape{B, Hq, c.q_len, Dv} : Shape{B, c.q_len, Hq * Dv};
  if (inputs.empty()) return y;
  size_t need = 3 + (c.mask != AttentionMask::none) + (c.kv_lens != AttentionKvLens::none);
  if (inputs.size() != need) invalid("Attention", "expects {} inputs, got {}", need, inputs.size());
  if (c.layout == AttentionLayout::bhsd) expect_shape("Q", inputs[0], {B, Hq, c.q_len, D});
  else expect_shape("Q", inputs[0], {B, c.q_len, Hq * D});
  if (c.eff_kv_layout() == AttentionLayout::bhsd) {
    if (inputs[1].rank() == 4 && inputs[2].rank() == 4 && inputs[1][2] != inputs[2][2])
      invalid("Attention", "K has {} positions but V has {}: K and V lengths must match", inputs[1][2],
              inputs[2][2]);
    expect_shape("K", inputs[1], {B, Hk, C, D});
    expect_shape("V", inputs[2], {B, Hk, C, Dv});
  } else {
    if (inputs[1].rank() == 3 && inputs[2].rank() == 3 && inputs[1][1] != inputs[2][1])
      invalid("Attention", "K has {} positions but V has {}: K and V lengths must match", inputs[1][1],
              inputs[2][1]);
    expect_shape("K", inputs[1], {B, C, Hk * D});
    expect_shape("V", inputs[2], {B, C, Hk * Dv});
  }
  size_t i = 3;
  if (c.mask != AttentionMask::none) expect_shape("mask", inputs[i++], c.mask_shape);
  if (c.kv_lens != AttentionKvLens::none) expect_shape("kv_lens", inputs[i++], {B});
  return y;
}

size_t Attention::workspace_bytes() const {
  if (fused_) {  // the chunk states of a split tile kernel: Dv accumulators, max and sum per row and chunk
    if (splits_ <= 1) return 0;
    return size_t(cfg_.batch * cfg_.q_heads * cfg_.q_len) * size_t(splits_) * size_t(cfg_.eff_v_head_size() + 2) *
           sizeof(float);
  }
  return size_t(cfg_.batch * cfg_.q_heads * cfg_.q_len * cfg_.kv_len) * sizeof(float);
}

Attention::BlockedDefaults Attention::blocked_defaults(const DeviceInfo& info, const AttentionConfig& cfg) {
  // Query rows per kv head (GQA heads of a group share K/V, so their rows stack).
  const int64_t rows = cfg.q_len * (cfg.q_heads / cfg.eff_kv_heads());
  // The blocked kernel puts 16 query rows of a kv head across the lanes of a vector; with fewer than
  // half of them filled (a decode step) the tile kernel, which needs no packed copy of K, wins.
  const bool use = info.type == DeviceType::cpu && rows >= 8;
  // Register blocks: the accumulators of a pass plus its two operands must fit the vector registers,
  // or each FMA drags a spill along. PoCL reports a preferred float width of 16 with AVX-512 (32
  // zmm, a float16 is one register): 8 keys / 8 dims per pass. Otherwise (AVX2: 16 ymm, a float16
  // is two) 6 keys per Q.K^T pass (12 accumulators) and 4 dims per P.V pass (8), blocks of 24 keys:
  // on PoCL / AVX2 (EPYC, 2 cores) the bench shapes took 1.7x less process CPU time than with the
  // earlier kernel's 8 / 8, which spilled about one accumulator per FMA there. With AVX-512, two
  // groups of 16 rows per work-item (16 accumulators) once a kv head has 32 rows to fill them: one
  // broadcast K or V value then feeds two FMAs (fewer rows would compute a clamped duplicate group).
  const bool wide = info.preferred_vector_float >= 16;
  return {use, wide && rows >= 32 ? 2 : 1, wide ? 8 : 6, wide ? 8 : 4, wide ? 16 : 24};
}

std::pair<int, int> Attention::key_chunks(const DeviceInfo& info, const AttentionConfig& cfg, size_t block_m,
                                           size_t block_n) {
  int64_t splits = cfg.kv_splits, chunk = 0;
  if (splits > 0) {
    chunk = (cfg.kv_len + splits - 1) / splits;  // as asked
  } else {
    // Split the keys where a kv head has fewer query rows than a work-group (a decode step) and the
    // work-groups over rows, kv heads and batch leave compute units idle: on an H100 a decode step over
    // 1024 cached keys (16 heads: 16 work-groups with one live row each on 132 units) took 0.29 ms,
    // twice the plain path. Full work-groups (prefill) keep the timed unsplit form. CPUs have few units
    // and one row per group.
    const int64_t head_rows = cfg.q_len * (cfg.q_heads / cfg.eff_kv_heads());
    const int64_t groups = int64_t((size_t(head_rows) + block_m - 1) / block_m) * cfg.eff_kv_heads() * cfg.batch;
    const int64_t units = std::max<int64_t>(1, info.compute_units);
    if (info.type == DeviceType::cpu || head_rows >= int64_t(block_m) || groups >= units) return {1, 0};
    const int64_t key_tiles = (cfg.kv_len + int64_t(block_n) - 1) / int64_t(block_n);
    splits = std::min<int64_t>(key_tiles, (2 * units + groups - 1) / groups);
    chunk = int64_t(round_up(size_t((cfg.kv_len + splits - 1) / splits), block_n));  // whole key tiles per chunk
  }
  if (splits <= 1) return {1, 0};
  return {int((cfg.kv_len + chunk - 1) / chunk), int(chunk)};  // no chunk starts past the keys
}

std::unique_ptr<Attention> Attention::create(Context& ctx, int device, const AttentionConfig& cfg) {
  validate(cfg);
  tuning::record(cfg);
  std::unique_ptr<Attention> a(new Attention(ctx, device, cfg));
  const auto& info = ctx.device(device).info;
  const int64_t D = cfg.head_size, Dv = cfg.eff_v_head_size();
  // Per-row q and accumulator live in private arrays; past 256 floats each they no longer fit anywhere
  // useful, so the plain path takes over.
  const bool fused_ok = D <= 256 && Dv <= 256 && cfg.qk_output_mode < 0;
  std::string why;
  switch (cfg.algo) {
    case AttentionAlgo::fused:
      if (cfg.qk_output_mode >= 0)
        invalid("Attention", "qk_output_mode {} needs the plain algorithm: the fused one never stores the scores",
                cfg.qk_output_mode);
      if (!fused_ok) invalid("Attention", "the fused algorithm supports head sizes up to 256, got {} / {}", D, Dv);
      a->fused_ = true;
      break;
    case AttentionAlgo::plain:
      a->fused_ = false;
      break;
    case AttentionAlgo::automatic:
      a->fused_ = fused_ok;
      if (!fused_ok) why = cfg.qk_output_mode >= 0 ? " (qk_matmul_output requested)" : " (head size above 256)";
      break;
  }
  const int mask = int(cfg.mask), lens = int(cfg.kv_lens);
  // The tuning database (family "attention") fills the kernel knobs the config leaves at default.
  AttentionConfig tuned_cfg = cfg;
  bool tuned = false;
  if (a->fused_)
    if (auto t = tuning::find(info, "attention", tuning::attention_problem(cfg))) {
      tuning::attention_apply(t->params, tuned_cfg);
      tuned = true;
    }
  if (tuned_cfg.blocked < -1 || tuned_cfg.blocked > 1)
    invalid("Attention", "blocked must be -1 (auto), 0 or 1, got {}", tuned_cfg.blocked);
  const BlockedDefaults bd = blocked_defaults(info, cfg);
  if (a->fused_) a->blocked_ = tuned_cfg.blocked == 1 || (tuned_cfg.blocked < 0 && bd.use);
  if (a->blocked_) {
    int rg = bd.rg, kb = bd.kb, cb = bd.cb, bkv = bd.bkv;
    if (tuned_cfg.rg > 0) rg = tuned_cfg.rg;
    if (tuned_cfg.kb > 0) kb = tuned_cfg.kb;
    if (tuned_cfg.cb > 0) cb = tuned_cfg.cb;
    if (tuned_cfg.bkv > 0) bkv = tuned_cfg.bkv;
    if (rg > 2) invalid("Attention", "rg must be 1 or 2, got {}", rg);
    if (kb > 16) invalid("Attention", "kb must be 1..16, got {}", kb);
    if (cb > 16) invalid("Attention", "cb must be 1..16, got {}", cb);
    if (bkv > 64 || bkv % kb) invalid("Attention", "bkv must be a multiple of kb = {} up to 64, got {}", kb, bkv);
    std::string opts = fmt::format("-DATT_KERNEL=2 -DATT_RG={} -DATT_KB={} -DATT_CB={} -DATT_BKV={} -DMASK={} -DKV_LENS={}",
                                   rg, kb, cb, bkv, mask, lens);
    cl::Program prog = ctx.program("attention.cl", opts, device);
    a->kernel_ = make_kernel(prog, "attention_blocked");
    a->block_m_ = size_t(16 * rg);  // rows per work-item
    a->algorithm_ =
        fmt::format("fused:blocked rows={} KB={} CB={} BKV={}{}", 16 * rg, kb, cb, bkv, tuned ? " (tuned)" : "");
  } else if (a->fused_) {
    // GPUs want enough rows per work-group to share each K/V tile. On CPUs this kernel serves decode steps (a few rows per kv head) and reads K/V from global memory,
    // so rows share nothing through a work-group: one row per group (no idle rows, one build per shape).
    a->block_m_ = info.type == DeviceType::cpu ? 1 : std::min<size_t>(64, std::max<size_t>(info.max_work_group_size, 1));
    if (a->block_m_ > info.max_work_group_size) a->block_m_ = std::max<size_t>(1, info.max_work_group_size);
    size_t bn = pick_block_n(info, D, Dv);
    // Vector width along the head dimension: 16 on CPUs (a decode step over 1024 cached keys ran 3.5x
    // faster than with 8 on PoCL/AVX-512), 4 on GPUs (wide local loads).
    int vec = info.type == DeviceType::cpu ? 16 : 4;
    if (tuned_cfg.block_m > 0) a->block_m_ = size_t(tuned_cfg.block_m);
    if (tuned_cfg.block_n > 0) bn = size_t(tuned_cfg.block_n);
    if (tuned_cfg.vec > 0) vec = tuned_cfg.vec;
    if (vec != 1 && vec != 2 && vec != 4 && vec != 8 && vec != 16) invalid("Attention", "vec must be 1, 2, 4, 8 or 16, got {}", vec);
    while (vec > 1 && (D % vec || Dv % vec)) vec /= 2;
    // GPUs need local tiles; on PoCL a decode step reading K/V straight from global memory (the cache
    // holds them) ran 3.5x faster with VEC 16 than through local tiles.
    const int use_local = tuned_cfg.use_local >= 0 ? tuned_cfg.use_local : info.type == DeviceType::cpu ? 0 : 1;
    std::tie(a->splits_, a->chunk_) = key_chunks(info, tuned_cfg, a->block_m_, bn);
    std::string opts =
        fmt::format("-DATT_KERNEL=1 -DHEAD_DIM={} -DHEAD_DIM_V={} -DBLOCK_M={} -DBLOCK_N={} -DVEC={} -DUSE_LOCAL={} -DMASK={} -DKV_LENS={}{}",
                    D, Dv, a->block_m_, bn, vec, use_local, mask, lens, a->splits_ > 1 ? " -DSPLIT_KV=1" : "");
    cl::Program prog = ctx.program("attention.cl", opts, device);
    a->kernel_ = make_kernel(prog, "attention_fused");
    if (a->splits_ > 1) a->combine_ = make_kernel(prog, "attention_combine");
    a->algorithm_ = fmt::format("fused:online-softmax BLOCK_M={} BLOCK_N={} VEC={}{}{}{}", a->block_m_, bn, vec,
                                use_local ? " local-tiles" : " global-tiles",
                                a->splits_ > 1 ? fmt::format(" split-kv {} x {} keys", a->splits_, a->chunk_) : "",
                                tuned ? " (tuned)" : "");
  } else {
    // One GEMM pair per (batch, head-in-group), batched over the kv heads, so any layout and GQA map
    // onto strided batches: scores [B, Hq, Sq, Skv] with h = hk * group + g.
    const int64_t group = cfg.q_heads / cfg.eff_kv_heads(), C = cfg.eff_capacity(), Hk = cfg.eff_kv_heads();
    Strides qs = strides_of(cfg.layout, cfg.q_heads, cfg.q_len, D), ks = strides_of(cfg.eff_kv_layout(), Hk, C, D),
            vs = strides_of(cfg.eff_kv_layout(), Hk, C, Dv), ys = strides_of(cfg.layout, cfg.q_heads, cfg.q_len, Dv);
    GemmConfig qk;
    qk.M = cfg.q_len, qk.N = cfg.kv_len, qk.K = D, qk.trans_b = true, qk.batch = Hk;
    qk.lda = qs.s, qk.stride_a = group * qs.h, qk.ldb = ks.s, qk.stride_b = ks.h;
    qk.ldc = cfg.kv_len, qk.stride_c = group * cfg.q_len * cfg.kv_len;
    qk.alpha = cfg.eff_scale();
    GemmConfig pv;
    pv.M = cfg.q_len, pv.N = Dv, pv.K = cfg.kv_len, pv.batch = Hk;
    pv.lda = cfg.kv_len, pv.stride_a = qk.stride_c, pv.ldb = vs.s, pv.stride_b = vs.h;
    pv.ldc = ys.s, pv.stride_c = group * ys.h;
    a->qk_ = Gemm::create(ctx, device, qk);
    a->pv_ = Gemm::create(ctx, device, pv);
    std::string opts = fmt::format("-DATT_KERNEL=3 -DMASK={} -DKV_LENS={}", mask, lens);
    cl::Program prog = ctx.program("attention.cl", opts, device);
    a->kernel_ = make_kernel(prog, "attention_softmax_rows");
    if (cfg.qk_output_mode >= 0) a->qk_out_ = make_kernel(prog, "attention_qk_output");
    a->algorithm_ = fmt::format("plain:gemm({})+softmax+gemm{}", a->qk_->algorithm(), why);
  }
  if (why.empty())
    log::debug("Attention B={} Hq={} Hkv={} Sq={} Skv={} D={}: {}", cfg.batch, cfg.q_heads, cfg.eff_kv_heads(),
               cfg.q_len, cfg.kv_len, D, a->algorithm_);
  else
    log::info("Attention B={} Hq={} Sq={} Skv={} D={}: {}", cfg.batch, cfg.q_heads, cfg.q_len, cfg.kv_len, D,
              a->algorithm_);
  return a;
}

void Attention::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
                        ExecutionContext& ec) {
  const auto& c = cfg_;
  std::vector<Shape> shapes;
  for (const auto& t : inputs) shapes.push_back(t.shape);
  const size_t n_out = c.qk_output_mode >= 0 ? 2 : 1;
  if (outputs.size() != n_out) invalid("Attention", "expects {} outputs, got {}", n_out, outputs.size());
  if (n_out == 2) {
    expect_shape("qk_matmul_output", outputs[1].shape, {c.batch, c.q_heads, c.q_len, c.kv_len});
    if (outputs[1].dtype != DType::f32)
      invalid("Attention", "qk_matmul_output must be f32, got {}", to_string(outputs[1].dtype));
  }
  expect_shape("Y", outputs[0].shape, validate(c, shapes));
  const char* names[3] = {"Q", "K", "V"};
  for (int i = 0; i < 3; ++i)
    if (inputs[i].dtype != DType::f32) invalid("Attention", "{} must be f32, got {}", names[i], to_string(inputs[i].dtype));
  if (outputs[0].dtype != DType::f32) invalid("Attention", "Y must be f32, got {}", to_string(outputs[0].dtype));
  size_t idx = 3;
  const Tensor* mask = nullptr;
  const Tensor* lens = nullptr;
  if (c.mask != AttentionMask::none) {
    mask = &inputs[idx++];
    bool ok = c.mask == AttentionMask::additive ? mask->dtype == DType::f32
                                                : (mask->dtype == DType::boolean || mask->dtype == DType::u8);
    if (!ok) invalid("Attention", "mask has dtype {}, expected {}", to_string(mask->dtype),
                     c.mask == AttentionMask::additive ? "f32" : "bool or u8");
  }
  if (c.kv_lens != AttentionKvLens::none) {
    lens = &inputs[idx++];
    DType want = c.kv_lens == AttentionKvLens::i32 ? DType::i32 : DType::i64;
    if (lens->dtype != want)
      invalid("Attention", "kv_lens has dtype {}, expected {}", to_string(lens->dtype), to_string(want));
  }
  const int64_t Hk = c.eff_kv_heads(), D = c.head_size, Dv = c.eff_v_head_size(), C = c.eff_capacity();
  AttnParams p{};
  p.Sq = cl_int(c.q_len), p.Skv = cl_int(c.kv_len), p.q_heads = cl_int(c.q_heads), p.group = cl_int(c.q_heads / Hk);
  p.causal = c.causal, p.causal_from_lens = c.causal_offset_from_lens, p.causal_offset = cl_int(c.causal_offset);
  p.scale = fused_ ? c.eff_scale() : 1.0f;  // the plain path's GEMM applies the scale as alpha
  p.softcap = c.softcap;
  if (mask) {
    const AttentionMaskLayout m = attention_mask_layout(c);
    p.mask_cols = cl_int(m.cols), p.mask_sb = m.sb, p.mask_sh = m.sh, p.mask_ss = m.ss;
  }
  const cl::Buffer none;
  const cl::Buffer& mbuf = mask ? mask->buffer : none;
  const cl::Buffer& lbuf = lens ? lens->buffer : none;
  const cl_long moff = mask ? cl_long(mask->offset_bytes / dtype_size(mask->dtype)) : 0;
  const cl_long loff = lens ? cl_long(lens->offset_elems()) : 0;
  const Tensor &Q = inputs[0], &K = inputs[1], &V = inputs[2], &Y = outputs[0];
  const Strides qs = strides_of(c.layout, c.q_heads, c.q_len, D), ks = strides_of(c.eff_kv_layout(), Hk, C, D),
                vs = strides_of(c.eff_kv_layout(), Hk, C, Dv), ys = strides_of(c.layout, c.q_heads, c.q_len, Dv);
  if (blocked_) {
    std::lock_guard lock(launch_mutex_);
    set_args(kernel_, p, cl_int(D), cl_int(Dv), Q.buffer, cl_long(Q.offset_elems()), cl_long(qs.b), cl_long(qs.h),
             cl_long(qs.s), K.buffer, cl_long(K.offset_elems()), cl_long(ks.b), cl_long(ks.h), cl_long(ks.s), V.buffer,
             cl_long(V.offset_elems()), cl_long(vs.b), cl_long(vs.h), cl_long(vs.s), Y.buffer, cl_long(Y.offset_elems()),
             cl_long(ys.b), cl_long(ys.h), cl_long(ys.s), mbuf, moff, lbuf, loff);
    const size_t rows = size_t(c.q_len * (c.q_heads / Hk));
    ec.enqueue_kernel(kernel_, cl::NDRange((rows + block_m_ - 1) / block_m_, size_t(Hk), size_t(c.batch)),
                      cl::NDRange(1, 1, 1), "attention_blocked");
    return;
  }
  if (fused_) {
    if (splits_ > 1 && (!workspace || workspace->bytes() < workspace_bytes()))
      invalid("Attention", "the fused algorithm split into {} key chunks needs a workspace of {} bytes, got {}",
              splits_, workspace_bytes(), workspace ? workspace->bytes() : 0);
    std::lock_guard lock(launch_mutex_);
    set_args(kernel_, p, Q.buffer, cl_long(Q.offset_elems()), cl_long(qs.b), cl_long(qs.h), cl_long(qs.s), K.buffer,
             cl_long(K.offset_elems()), cl_long(ks.b), cl_long(ks.h), cl_long(ks.s), V.buffer,
             cl_long(V.offset_elems()), cl_long(vs.b), cl_long(vs.h), cl_long(vs.s), Y.buffer,
             cl_long(Y.offset_elems()), cl_long(ys.b), cl_long(ys.h), cl_long(ys.s), mbuf, moff, lbuf, loff);
    const size_t rows = round_up(size_t(c.q_len * (c.q_heads / Hk)), block_m_);
    if (splits_ <= 1) {
      ec.enqueue_kernel(kernel_, cl::NDRange(rows, size_t(Hk), size_t(c.batch)), cl::NDRange(block_m_, 1, 1),
                        "attention_fused");
      return;
    }
    const cl_long poff = cl_long(workspace->offset_elems());
    // After the 25 arguments above: the chunking and the chunk states. The merge follows on the same
    // in-order queue.
    detail::check_arg(kernel_.setArg(25, cl_int(splits_)), kernel_, 25);
    detail::check_arg(kernel_.setArg(26, cl_int(chunk_)), kernel_, 26);
    detail::check_arg(kernel_.setArg(27, workspace->buffer), kernel_, 27);
    detail::check_arg(kernel_.setArg(28, poff), kernel_, 28);
    ec.enqueue_kernel(kernel_, cl::NDRange(rows, size_t(Hk), size_t(c.batch * splits_)), cl::NDRange(block_m_, 1, 1),
                      "attention_fused");
    set_args(combine_, p, cl_int(splits_), workspace->buffer, poff, Y.buffer, cl_long(Y.offset_elems()),
             cl_long(ys.b), cl_long(ys.h), cl_long(ys.s));
    const size_t lx = std::min<size_t>(64, round_up(size_t(Dv), 8));
    ec.enqueue_kernel(combine_, cl::NDRange(round_up(size_t(Dv), lx), size_t(c.q_heads * c.q_len), size_t(c.batch)),
                      cl::NDRange(lx, 1, 1), "attention_combine");
    return;
  }
  if (!workspace || workspace->bytes() < workspace_bytes())
    invalid("Attention", "the plain algorithm needs a workspace of {} bytes, got {}", workspace_bytes(),
            workspace ? workspace->bytes() : 0);
  const int64_t n_scores = c.batch * c.q_heads * c.q_len * c.kv_len, group = c.q_heads / Hk;
  Tensor S = workspace->slice_elems(0, n_scores, Shape{n_scores});
  // A view `elems` further into t (the GEMM reads it with its own strides).
  auto at = [](const Tensor& t, int64_t elems) {
    Tensor v = t;
    v.offset_bytes += size_t(elems) * dtype_size(t.dtype);
    return v;
  };
  auto for_each_bg = [&](const std::function<void(int64_t, int64_t)>& f) {
    for (int64_t b = 0; b < c.batch; ++b)
      for (int64_t g = 0; g < group; ++g) f(b, g);
  };
  for_each_bg([&](int64_t b, int64_t g) {
    Tensor qk_in[2] = {at(Q, b * qs.b + g * qs.h), at(K, b * ks.b)};
    Tensor s_out[1] = {at(S, (b * c.q_heads + g) * c.q_len * c.kv_len)};
    qk_->enqueue(qk_in, s_out, nullptr, ec);
  });
  {
    std::lock_guard lock(launch_mutex_);
    auto qk_output = [&] {
      const Tensor& o = outputs[1];
      set_args(qk_out_, p, cl_int(c.qk_output_mode), S.buffer, cl_long(S.offset_elems()), o.buffer,
               cl_long(o.offset_elems()), mbuf, moff, lbuf, loff);
      ec.enqueue_kernel(qk_out_, cl::NDRange(size_t(c.kv_len), size_t(c.q_len), size_t(c.batch * c.q_heads)),
                        cl::NullRange, "attention_qk_output");
    };
    if (c.qk_output_mode >= 0 && c.qk_output_mode < 3) qk_output();
    set_args(kernel_, p, S.buffer, cl_long(S.offset_elems()), mbuf, moff, lbuf, loff);
    ec.enqueue_kernel(kernel_, cl::NDRange(size_t(c.q_len), size_t(c.q_heads), size_t(c.batch)), cl::NullRange,
                      "attention_softmax_rows");
    if (c.qk_output_mode == 3) qk_output();
  }
  for_each_bg([&](int64_t b, int64_t g) {
    Tensor pv_in[2] = {at(S, (b * c.q_heads + g) * c.q_len * c.kv_len), at(V, b * vs.b)};
    Tensor y_out[1] = {at(Y, b * ys.b + g * ys.h)};
    pv_->enqueue(pv_in, y_out, nullptr, ec);
  });
}

AttentionMaskLayout attention_mask_layout(const AttentionConfig& c) {
  Shape m = c.mask_shape;
  while (m.rank() < 4) m.dims.insert(m.dims.begin(), 1);
  return {m[0] == 1 ? 0 : m[1] * m[2] * m[3], m[1] == 1 ? 0 : m[2] * m[3], m[2] == 1 ? 0 : m[3], m[3]};
}

AttentionConfig onnx_attention_config(const OnnxAttentionNode& n) {
  auto validate = [](const AttentionConfig& c) { Attention::validate(c); };
  const size_t rank = n.q.rank();
  if ((rank != 3 && rank != 4) || n.k.rank() != rank || n.v.rank() != rank)
    invalid("Attention", "Q, K, V must all be 3-D or all 4-D, got {}, {}, {}", n.q.str(), n.k.str(), n.v.str());
  AttentionConfig c;
  c.batch = n.q[0];
  int64_t s_new;
  if (rank == 3) {
    if (n.q_num_heads <= 0 || n.kv_num_heads <= 0)
      invalid("Attention", "3-D inputs need q_num_heads and kv_num_heads, got {} and {}", n.q_num_heads, n.kv_num_heads);
    if (n.q[2] % n.q_num_heads || n.k[2] % n.kv_num_heads || n.v[2] % n.kv_num_heads)
      invalid("Attention", "hidden sizes {}, {}, {} are not multiples of q_num_heads {} / kv_num_heads {}", n.q[2], n.k[2],
              n.v[2], n.q_num_heads, n.kv_num_heads);
    c.layout = AttentionLayout::bshd;
    c.q_heads = n.q_num_heads, c.kv_heads = n.kv_num_heads;
    c.q_len = n.q[1], c.head_size = n.q[2] / n.q_num_heads;
    s_new = n.k[1], c.v_head_size = n.v[2] / n.kv_num_heads;
  } else {
    c.q_heads = n.q[1], c.kv_heads = n.k[1], c.q_len = n.q[2], c.head_size = n.q[3];
    s_new = n.k[2], c.v_head_size = n.v[3];
  }
  if (n.past_key && n.past_key->rank() != 4)
    invalid("Attention", "past_key must be 4-D [B, Hkv, P, D], got {}", n.past_key->str());
  const int64_t past = n.past_key ? (*n.past_key)[2] : 0;
  c.kv_len = past + s_new;
  if (n.past_key) c.kv_layout = AttentionLayout::bhsd, c.kv_capacity = c.kv_len;
  c.causal = n.is_causal;
  c.causal_offset = past;
  if (n.scale) c.scale = *n.scale;
  c.softcap = n.softcap;
  if (n.attn_mask) {
    c.mask = n.attn_mask_bool ? AttentionMask::boolean : AttentionMask::additive;
    c.mask_shape = *n.attn_mask;
  }
  if (n.nonpad_kv_seqlen) {
    c.kv_lens = AttentionKvLens::i64;
    c.causal_offset_from_lens = c.causal && !n.past_key;  // ONNX: the external-cache frontier
  }
  c.qk_output_mode = n.qk_matmul_output_mode;
  validate(c);
  return c;
}

// ---------------------------------------------------------------------------------------------------

KvCache::KvCache(Context& ctx, int device, int64_t batch, int64_t kv_heads, int64_t max_len, int64_t head_size,
                 int64_t v_head_size)
    : batch_(batch), heads_(kv_heads), max_len_(max_len), d_(head_size), dv_(v_head_size ? v_head_size : head_size) {
  if (batch <= 0) invalid("KvCache", "batch must be positive, got {}", batch);
  if (kv_heads <= 0) invalid("KvCache", "kv_heads must be positive, got {}", kv_heads);
  if (max_len <= 0) invalid("KvCache", "max_len must be positive, got {}", max_len);
  if (head_size <= 0) invalid("KvCache", "head_size must be positive, got {}", head_size);
  k_ = ctx.alloc({batch, kv_heads, max_len, d_}, DType::f32, device);
  v_ = ctx.alloc({batch, kv_heads, max_len, dv_}, DType::f32, device);
  lens_ = ctx.alloc({batch}, DType::i32, device);
  append_ = make_kernel(ctx.program("attention.cl", "-DATT_KERNEL=3 -DMASK=0 -DKV_LENS=0", device), "kv_cache_append");
}

void KvCache::append(const Tensor& k_new, const Tensor& v_new, ExecutionContext& ec, AttentionLayout layout) {
  const bool bhsd = layout == AttentionLayout::bhsd;
  const auto& ks = k_new.shape;
  if (bhsd ? (ks.rank() != 4 || ks[0] != batch_ || ks[1] != heads_ || ks[3] != d_)
           : (ks.rank() != 3 || ks[0] != batch_ || ks[2] != heads_ * d_))
    invalid("KvCache", "k_new has shape {}, expected {}", ks.str(),
            bhsd ? fmt::format("[{}, {}, S, {}]", batch_, heads_, d_) : fmt::format("[{}, S, {}]", batch_, heads_ * d_));
  const int64_t s = bhsd ? ks[2] : ks[1];
  const Shape vs = bhsd ? Shape{batch_, heads_, s, dv_} : Shape{batch_, s, heads_ * dv_};
  if (v_new.shape != vs) invalid("KvCache", "v_new has shape {}, expected {}", v_new.shape.str(), vs.str());
  if (length_ + s > max_len_)
    invalid("KvCache", "appending {} positions to length {} exceeds max_len {}", s, length_, max_len_);
  std::lock_guard lock(launch_mutex_);
  const cl::Buffer none;
  for (int which = 0; which < 2; ++which) {
    const Tensor& src = which ? v_new : k_new;
    const Tensor& dst = which ? v_ : k_;
    const int64_t d = which ? dv_ : d_;
    const Strides st = strides_of(layout, heads_, s, d);
    set_args(append_, cl_int(heads_), cl_int(d), cl_int(max_len_), cl_int(length_), src.buffer,
             cl_long(src.offset_elems()), cl_long(st.b), cl_long(st.h), cl_long(st.s), dst.buffer,
             cl_long(dst.offset_elems()), which ? none : lens_.buffer, cl_long(lens_.offset_elems()));
    ec.enqueue_kernel(append_, cl::NDRange(size_t(d), size_t(s), size_t(batch_ * heads_)), cl::NullRange,
                      "kv_cache_append");
  }
  length_ += s;
}

AttentionConfig KvCache::attention_config(int64_t q_heads, int64_t q_len, bool causal) const {
  AttentionConfig c;
  c.batch = batch_, c.q_heads = q_heads, c.kv_heads = heads_, c.q_len = q_len;
  c.kv_len = max_len_, c.kv_capacity = max_len_;
  c.head_size = d_, c.v_head_size = dv_;
  c.kv_lens = AttentionKvLens::i32;
  c.causal = causal, c.causal_offset_from_lens = causal;
  return c;
}

}  // namespace cldl
