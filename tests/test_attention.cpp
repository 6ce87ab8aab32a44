// Attention family: fused and plain scaled-dot-product attention against the C++ reference (odd
// shapes, GQA, both layouts, every mask kind, kv lengths, scale, softcap), KV-cache decoding against
// one causal pass, configuration errors, and the ONNX Attention node with f16 storage through the graph.
// Tolerance: 1e-4 relative + 1e-5 absolute (fp32 accumulation, online vs. two-pass softmax).
#include <optional>
#include <tuple>

#include <fmt/format.h>

#include "reference/attention_ref.hpp"
#include "support/test_util.hpp"

using namespace cldl;
using cldl::test::ctx;

namespace {

constexpr double kRtol = 1e-4, kAtol = 1e-5;

struct Case {
  AttentionConfig cfg;
  std::vector<float> q, k, v, mask_f;
  std::vector<uint8_t> mask_b;
  std::vector<int64_t> lens;
};

Case make_case(const AttentionConfig& cfg, uint32_t seed) {
  Case c;
  c.cfg = cfg;
  const int64_t B = cfg.batch, Hq = cfg.q_heads, Hk = cfg.eff_kv_heads(), C = cfg.eff_capacity();
  c.q = test::random_floats(size_t(B * Hq * cfg.q_len * cfg.head_size), seed, -1.5f, 1.5f);
  c.k = test::random_floats(size_t(B * Hk * C * cfg.head_size), seed + 1, -1.5f, 1.5f);
  c.v = test::random_floats(size_t(B * Hk * C * cfg.eff_v_head_size()), seed + 2);
  if (cfg.mask != AttentionMask::none) {
    size_t n = size_t(cfg.mask_shape.numel());
    if (cfg.mask == AttentionMask::additive) {
      c.mask_f = test::random_floats(n, seed + 3, -2.0f, 2.0f);
      // Some -inf entries, as padding masks carry.
      for (size_t i = 0; i < n; i += 5) c.mask_f[i] = -INFINITY;
    } else {
      std::mt19937 rng(seed + 3);
      c.mask_b.resize(n);
      for (auto& x : c.mask_b) x = (rng() % 4) != 0;
    }
  }
  if (cfg.kv_lens != AttentionKvLens::none) {
    std::mt19937 rng(seed + 4);
    for (int64_t b = 0; b < B; ++b) c.lens.push_back(1 + int64_t(rng() % uint32_t(cfg.kv_len)));
  }
  return c;
}

// Runs the op on the device; returns Y.
std::vector<float> run_op(const Case& c, AttentionAlgo algo, std::string* algorithm = nullptr) {
  AttentionConfig cfg = c.cfg;
  cfg.algo = algo;
  auto op = Attention::create(ctx(), 0, cfg);
  if (algorithm) *algorithm = op->algorithm();
  std::vector<Shape> shapes;
  Shape ys = Attention::validate(cfg);
  const int64_t B = cfg.batch, Hq = cfg.q_heads, Hk = cfg.eff_kv_heads(), C = cfg.eff_capacity();
  const int64_t D = cfg.head_size, Dv = cfg.eff_v_head_size();
  bool bhsd = cfg.layout == AttentionLayout::bhsd;
  std::vector<Tensor> in;
  in.push_back(ctx().upload(HostTensor::from<float>(bhsd ? Shape{B, Hq, cfg.q_len, D} : Shape{B, cfg.q_len, Hq * D}, c.q)));
  in.push_back(ctx().upload(HostTensor::from<float>(bhsd ? Shape{B, Hk, C, D} : Shape{B, C, Hk * D}, c.k)));
  in.push_back(ctx().upload(HostTensor::from<float>(bhsd ? Shape{B, Hk, C, Dv} : Shape{B, C, Hk * Dv}, c.v)));
  if (cfg.mask == AttentionMask::additive) in.push_back(ctx().upload(HostTensor::from<float>(cfg.mask_shape, c.mask_f)));
  if (cfg.mask == AttentionMask::boolean) in.push_back(ctx().upload(HostTensor::from<uint8_t>(cfg.mask_shape, c.mask_b)));
  if (cfg.kv_lens == AttentionKvLens::i64) in.push_back(ctx().upload(HostTensor::from<int64_t>({B}, c.lens)));
  if (cfg.kv_lens == AttentionKvLens::i32) {
    std::vector<int32_t> l32(c.lens.begin(), c.lens.end());
    in.push_back(ctx().upload(HostTensor::from<int32_t>({B}, l32)));
  }
  Tensor y = ctx().alloc(ys, DType::f32);
  std::optional<Tensor> ws;
  if (op->workspace_bytes()) ws = ctx().alloc({int64_t(op->workspace_bytes() / 4)}, DType::f32);
  auto ec = ctx().exec();
  Tensor out[1] = {y};
  op->enqueue(in, out, ws ? &*ws : nullptr, ec);
  ec.queue.finish();
  HostTensor h = ctx().download(y);
  return {h.as<float>(), h.as<float>() + h.numel()};
}

std::vector<float> run_ref(const Case& c) {
  return ref::attention(c.cfg, c.q, c.k, c.v, c.mask_f.empty() ? nullptr : &c.mask_f,
                        c.mask_b.empty() ? nullptr : &c.mask_b, c.lens.empty() ? nullptr : &c.lens);
}

// Both fused kernels (the register-blocked one, CPUs' default, and the tile one, GPUs' and decode
// steps' default) and the plain path against the reference and each other.
void check_both(const AttentionConfig& cfg, uint32_t seed, bool plain = true) {
  Case c = make_case(cfg, seed);
  auto want = run_ref(c);
  std::string alg;
  std::vector<float> fused;
  for (int blocked : {1, 0}) {
    CAPTURE(blocked);
    c.cfg.blocked = blocked;
    fused = run_op(c, AttentionAlgo::fused, &alg);
    CHECK(alg.rfind(blocked ? "fused:blocked" : "fused:online-softmax", 0) == 0);
    CLDL_CHECK_CLOSE(fused.data(), want.data(), want.size(), kRtol, kAtol);
  }
  // The tile kernel over 3 chunks of the keys and the merge (GPUs' decode form), where there are 3.
  if (cfg.kv_len > 64) {
    c.cfg.kv_splits = 3;
    auto split = run_op(c, AttentionAlgo::fused, &alg);
    CHECK(alg.find("split-kv 3 x") != std::string::npos);
    CLDL_CHECK_CLOSE(split.data(), want.data(), want.size(), kRtol, kAtol);
    c.cfg.kv_splits = cfg.kv_splits;
  }
  c.cfg.blocked = cfg.blocked;
  if (plain) {
    auto pl = run_op(c, AttentionAlgo::plain, &alg);
    CHECK(alg.rfind("plain:", 0) == 0);
    CLDL_CHECK_CLOSE(pl.data(), want.data(), want.size(), kRtol, kAtol);
    CLDL_CHECK_CLOSE(pl.data(), fused.data(), want.size(), kRtol, kAtol);
  }
}

AttentionConfig base(int64_t B, int64_t Hq, int64_t Hk, int64_t Sq, int64_t Skv, int64_t D) {
  AttentionConfig c;
  c.batch = B, c.q_heads = Hq, c.kv_heads = Hk, c.q_len = Sq, c.kv_len = Skv, c.head_size = D;
  return c;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_SUITE("attention") {

TEST_CASE("fused and plain match the reference on odd shapes, GQA and cross lengths") {
  SUBCASE("B=3 GQA 4/2 heads, Sq=7 Skv=129, D=80") { check_both(base(3, 4, 2, 7, 129, 80), 1); }
  SUBCASE("B=1 Sq=1 Skv=7, D=80, causal decode offset") {
    auto c = base(1, 2, 1, 1, 7, 80);
    c.causal = true, c.causal_offset = 6;
    check_both(c, 2);
  }
  SUBCASE("B=3 Sq=Skv=129 causal, D=80, V head size 17") {
    auto c = base(3, 2, 2, 129, 129, 80);
    c.causal = true, c.v_head_size = 17;
    check_both(c, 3);
  }
  SUBCASE("odd head size 17, scale override and softcap") {
    auto c = base(2, 3, 1, 7, 13, 17);
    c.scale = 0.3f, c.softcap = 2.5f;
    check_both(c, 4);
  }
  SUBCASE("large scores: weights far below the running max flush to zero, the max jumps between key blocks") {
    auto c = base(2, 4, 2, 40, 97, 64);
    c.scale = 3.0f;  // scores of std ~18: gaps near 90, where exp underflows (weights and rescale factors)
    c.causal = true, c.causal_offset = 57;
    check_both(c, 7);
  }
  SUBCASE("tuning knobs: K/V read from global memory, small tiles, GQA rows spanning heads") {
    auto c = base(3, 6, 2, 7, 129, 80);
    c.use_local = 0, c.block_m = 4, c.block_n = 8, c.causal = true, c.causal_offset = 122;
    // group * Sq = 21 rows: the blocked kernel's first 16 rows span all three q heads of a kv head.
    check_both(c, 6, false);
  }
  SUBCASE("blocked kernel register blocks: the AVX2 and AVX-512 defaults and odd ones (key and dim tails)") {
    // 21 rows per kv head (a partly filled second work-item), 103 keys (no block size divides it),
    // V head size 17 (tails of every P.V pass width), causal with an offset and an additive mask.
    auto c = base(2, 6, 2, 7, 103, 80);
    c.causal = true, c.causal_offset = 96, c.v_head_size = 17, c.blocked = 1;
    c.mask = AttentionMask::additive, c.mask_shape = {2, 1, 7, 103};
    Case k = make_case(c, 9);
    auto want = run_ref(k);
    std::vector<std::tuple<int, int, int, int>> blocks = {{1, 6, 4, 24}, {1, 8, 8, 16}, {2, 8, 8, 16}, {2, 6, 4, 24},
                                                          {1, 4, 6, 16}, {2, 12, 8, 48}, {2, 1, 3, 5}};
    // The blocked kernel is the CPU form (other devices run it only when forced): there one block per
    // row-group count, since NVIDIA's compiler takes seconds to minutes per variant of this unrolled kernel.
    if (ctx().device().info.type != DeviceType::cpu) blocks = {{1, 6, 4, 24}, {2, 8, 8, 16}};
    for (auto [rg, kb, cb, bkv] : blocks) {
      CAPTURE(rg);
      CAPTURE(kb);
      CAPTURE(cb);
      CAPTURE(bkv);
      k.cfg.rg = rg, k.cfg.kb = kb, k.cfg.cb = cb, k.cfg.bkv = bkv;
      std::string alg;
      auto got = run_op(k, AttentionAlgo::fused, &alg);
      CHECK(alg.find(fmt::format("rows={} KB={} CB={} BKV={}", 16 * rg, kb, cb, bkv)) != std::string::npos);
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), kRtol, kAtol);
    }
  }
  SUBCASE("automatic choice: blocked on CPUs from 8 rows per kv head, the tile kernel below (decode)") {
    auto c = base(1, 4, 2, 4, 40, 16);  // 2 q heads x 4 positions = 8 rows per kv head
    auto op = Attention::create(ctx(), 0, c);
    CHECK(op->fused());
    CHECK(op->blocked() == (ctx().device().info.type == DeviceType::cpu));
    // Both fused kernels read K and V in place (a GPU splits the keys of so few rows: chunk states).
    if (ctx().device().info.type == DeviceType::cpu) CHECK(op->workspace_bytes() == 0);
    c.q_len = 3;
    CHECK(!Attention::create(ctx(), 0, c)->blocked());
    c.q_len = 1;
    CHECK(!Attention::create(ctx(), 0, c)->blocked());
    // Two row groups per work-item where the device prefers float16 (AVX-512) and a kv head has 32 rows.
    if (ctx().device().info.type == DeviceType::cpu) {
      const bool wide = ctx().device().info.preferred_vector_float >= 16;
      c.q_len = 15;  // 30 rows per kv head
      CHECK(Attention::create(ctx(), 0, c)->algorithm().find("rows=16 ") != std::string::npos);
      c.q_len = 16;  // 32
      CHECK(Attention::create(ctx(), 0, c)->algorithm().find(wide ? "rows=32 " : "rows=16 ") != std::string::npos);
    }
  }
  SUBCASE("decode over key chunks (split-kv): GQA, kv lengths with empty chunks, masks, causal offsets") {
    auto c = base(3, 8, 2, 1, 301, 64);  // 4 q heads per kv head, one query each; 301 keys
    c.kv_lens = AttentionKvLens::i32, c.causal = true, c.causal_offset_from_lens = true;
    Case k = make_case(c, 21);
    k.lens = {301, 40, 1};  // the second and third rows leave later chunks with no visible key
    auto want = run_ref(k);
    for (int splits : {2, 5, 10, 1}) {
      CAPTURE(splits);
      k.cfg.kv_splits = splits;
      std::string alg;
      auto got = run_op(k, AttentionAlgo::fused, &alg);
      CHECK((alg.find("split-kv") != std::string::npos) == (splits > 1));
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), kRtol, kAtol);
    }
    c.kv_lens = AttentionKvLens::none, c.causal = false, c.causal_offset_from_lens = false;
    c.mask = AttentionMask::additive, c.mask_shape = {3, 1, 1, 301}, c.kv_splits = 4, c.use_local = 1;
    check_both(c, 22);
    c.mask = AttentionMask::boolean, c.mask_shape = {1, 301}, c.kv_splits = 7, c.use_local = 0;
    check_both(c, 23);
  }
  SUBCASE("ONNX 3-D layout [B, S, H*D], GQA 6/3") {
    auto c = base(3, 6, 3, 7, 129, 80);
    c.layout = AttentionLayout::bshd;
    c.use_local = 1;  // the tile kernel's local-memory tiles (GPUs' default) run on CPUs too
    check_both(c, 5);
  }
}

TEST_CASE("masks: additive, boolean, broadcast, short mask, kv lengths") {
  SUBCASE("additive [B, 1, Sq, Skv] with -inf entries, causal") {
    auto c = base(3, 2, 2, 7, 129, 80);
    c.mask = AttentionMask::additive, c.mask_shape = {3, 1, 7, 129};
    c.causal = true, c.causal_offset = 122;
    check_both(c, 10);
  }
  SUBCASE("boolean [Sq, Skv'] shorter than Skv (missing columns masked)") {
    auto c = base(3, 4, 2, 7, 129, 80);
    c.mask = AttentionMask::boolean, c.mask_shape = {7, 100};
    check_both(c, 11);
  }
  SUBCASE("additive [Hq, 1, Skv] per head, broadcast over rows") {
    auto c = base(2, 3, 3, 129, 7, 80);
    c.mask = AttentionMask::additive, c.mask_shape = {3, 1, 7};
    check_both(c, 12);
  }
  SUBCASE("padding from int64 kv lengths with per-batch causal offset") {
    auto c = base(3, 2, 1, 7, 129, 80);
    c.kv_lens = AttentionKvLens::i64;
    c.causal = true, c.causal_offset_from_lens = true;
    check_both(c, 13);
  }
  SUBCASE("int32 kv lengths, no causality") {
    auto c = base(3, 2, 2, 7, 129, 80);
    c.kv_lens = AttentionKvLens::i32;
    check_both(c, 14);
  }
  SUBCASE("fully masked rows give zeros on both paths") {
    auto c = base(1, 1, 1, 7, 7, 80);
    c.mask = AttentionMask::boolean, c.mask_shape = {7, 7};
    Case k = make_case(c, 15);
    std::fill(k.mask_b.begin(), k.mask_b.begin() + 7, 0);  // row 0 sees nothing
    auto want = run_ref(k);
    auto p = run_op(k, AttentionAlgo::plain);
    for (int d = 0; d < 80; ++d) CHECK(want[size_t(d)] == 0.0f);
    CLDL_CHECK_CLOSE(p.data(), want.data(), want.size(), kRtol, kAtol);
    for (int blocked : {1, 0}) {  // both fused kernels
      CAPTURE(blocked);
      k.cfg.blocked = blocked;
      auto f = run_op(k, AttentionAlgo::fused);
      for (int d = 0; d < 80; ++d) CHECK(f[size_t(d)] == 0.0f);
      CLDL_CHECK_CLOSE(f.data(), want.data(), want.size(), kRtol, kAtol);
    }
  }
}

TEST_CASE("KV cache: decoding N tokens one by one equals one causal pass over N") {
  const int64_t B = 3, Hq = 4, Hk = 2, D = 80, N = 9, max_len = 16;
  auto full = base(B, Hq, Hk, N, N, D);
  full.causal = true;
  Case c = make_case(full, 20);
  auto want = run_op(c, AttentionAlgo::fused);
  auto want_ref = run_ref(c);
  CLDL_CHECK_CLOSE(want.data(), want_ref.data(), want.size(), kRtol, kAtol);

  KvCache cache(ctx(), 0, B, Hk, max_len, D);
  // Prefill 2 tokens at once, then decode one at a time.
  auto step_cfg = [&](int64_t s) { return cache.attention_config(Hq, s); };
  std::vector<float> got(want.size());
  auto ec = ctx().exec();
  int64_t pos = 0;
  for (int64_t s : {int64_t(2), int64_t(1), int64_t(1), int64_t(1), int64_t(1), int64_t(1), int64_t(1), int64_t(1)}) {
    auto slice = [&](const std::vector<float>& src, int64_t H, int64_t dim) {
      std::vector<float> out;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t t = pos; t < pos + s; ++t)
            for (int64_t d = 0; d < dim; ++d) out.push_back(src[size_t(((b * H + h) * N + t) * dim + d)]);
      return out;
    };
    Tensor kn = ctx().upload(HostTensor::from<float>({B, Hk, s, D}, slice(c.k, Hk, D)));
    Tensor vn = ctx().upload(HostTensor::from<float>({B, Hk, s, D}, slice(c.v, Hk, D)));
    Tensor qn = ctx().upload(HostTensor::from<float>({B, Hq, s, D}, slice(c.q, Hq, D)));
    cache.append(kn, vn, ec);
    auto op = Attention::create(ctx(), 0, step_cfg(s));
    CHECK(op->fused());
    Tensor y = ctx().alloc({B, Hq, s, D}, DType::f32);
    Tensor in[4] = {qn, cache.keys(), cache.values(), cache.lengths()};
    Tensor out[1] = {y};
    std::optional<Tensor> ws;  // a GPU splits a decode step's keys into chunks: their states
    if (op->workspace_bytes()) ws = ctx().alloc({int64_t(op->workspace_bytes() / 4)}, DType::f32);
    op->enqueue(in, out, ws ? &*ws : nullptr, ec);
    ec.queue.finish();
    HostTensor h = ctx().download(y);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hh = 0; hh < Hq; ++hh)
        for (int64_t t = 0; t < s; ++t)
          for (int64_t d = 0; d < D; ++d)
            got[size_t(((b * Hq + hh) * N + pos + t) * D + d)] = h.as<float>()[((b * Hq + hh) * s + t) * D + d];
    pos += s;
  }
  CHECK(cache.length() == N);
  CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), kRtol, kAtol);
  // The cache refuses to overflow, naming the numbers.
  Tensor big = ctx().alloc({B, Hk, 8, D}, DType::f32);
  auto msg = error_of([&] { cache.append(big, big, ec); });
  CHECK(msg.find("KvCache") != std::string::npos);
  CHECK(msg.find("max_len 16") != std::string::npos);
}

TEST_CASE("bad configurations name the argument and value") {
  auto c = base(2, 6, 4, 7, 9, 64);
  auto msg = error_of([&] { Attention::validate(c); });
  CHECK(msg.find("Attention") != std::string::npos);
  CHECK(msg.find("kv_heads 4 does not divide q_heads 6") != std::string::npos);

  c = base(2, 4, 2, 7, 9, 64);
  std::vector<Shape> shapes{{2, 4, 7, 64}, {2, 2, 9, 64}, {2, 2, 8, 64}};
  msg = error_of([&] { Attention::validate(c, shapes); });
  CHECK(msg.find("K has 9 positions but V has 8") != std::string::npos);

  shapes = {{2, 4, 7, 64}, {2, 3, 9, 64}, {2, 3, 9, 64}};
  msg = error_of([&] { Attention::validate(c, shapes); });
  CHECK(msg.find("K has shape [2, 3, 9, 64], expected [2, 2, 9, 64]") != std::string::npos);

  c.mask = AttentionMask::additive, c.mask_shape = {2, 5, 7, 9};
  msg = error_of([&] { Attention::validate(c); });
  CHECK(msg.find("mask shape [2, 5, 7, 9] does not broadcast to q_heads = 4") != std::string::npos);

  c = base(1, 1, 1, 1, 1, 300);
  c.algo = AttentionAlgo::fused;
  msg = error_of([&] { Attention::create(ctx(), 0, c); });
  CHECK(msg.find("head sizes up to 256, got 300") != std::string::npos);
  c.algo = AttentionAlgo::automatic;
  auto op = Attention::create(ctx(), 0, c);
  CHECK(op->algorithm().find("plain:") == 0);  // the choice is visible, not silent
  CHECK(op->algorithm().find("head size above 256") != std::string::npos);

  OnnxAttentionNode node;
  node.q = {2, 7, 64}, node.k = {2, 9, 32}, node.v = {2, 9, 32};
  msg = error_of([&] { onnx_attention_config(node); });
  CHECK(msg.find("3-D inputs need q_num_heads and kv_num_heads, got 0 and 0") != std::string::npos);
  node.q_num_heads = 6, node.kv_num_heads = 4;
  msg = error_of([&] { onnx_attention_config(node); });
  CHECK(msg.find("not multiples of q_num_heads 6") != std::string::npos);

  c = base(1, 2, 2, 9, 9, 8);
  c.blocked = 2;
  msg = error_of([&] { Attention::create(ctx(), 0, c); });
  CHECK(msg.find("blocked must be -1 (auto), 0 or 1, got 2") != std::string::npos);
  c.blocked = 1, c.kb = 6, c.bkv = 16;
  msg = error_of([&] { Attention::create(ctx(), 0, c); });
  CHECK(msg.find("bkv must be a multiple of kb = 6 up to 64, got 16") != std::string::npos);
  c.kb = 17;
  msg = error_of([&] { Attention::create(ctx(), 0, c); });
  CHECK(msg.find("kb must be 1..16, got 17") != std::string::npos);
  c.kb = 8, c.rg = 3;
  msg = error_of([&] { Attention::create(ctx(), 0, c); });
  CHECK(msg.find("rg must be 1 or 2, got 3") != std::string::npos);

  c = base(1, 2, 2, 3, 3, 8);
  c.qk_output_mode = 0, c.algo = AttentionAlgo::fused;
  msg = error_of([&] { Attention::create(ctx(), 0, c); });
  CHECK(msg.find("qk_output_mode 0 needs the plain algorithm") != std::string::npos);

  c = base(1, 2, 2, 1, 100, 8);
  c.kv_splits = -1;
  msg = error_of([&] { Attention::validate(c); });
  CHECK(msg.find("kv_splits must be 0 (auto), 1 (none) or a chunk count up to 1024, got -1") != std::string::npos);
  // Split into key chunks, the op needs a workspace for the chunk states; none given is an error.
  c.kv_splits = 3, c.blocked = 0;
  auto split = Attention::create(ctx(), 0, c);
  CHECK(split->workspace_bytes() == size_t(2 * 1 * 3 * (8 + 2)) * sizeof(float));  // heads x rows x chunks x (Dv + 2)
  std::vector<Tensor> in{ctx().alloc({1, 2, 1, 8}, DType::f32), ctx().alloc({1, 2, 100, 8}, DType::f32),
                         ctx().alloc({1, 2, 100, 8}, DType::f32)};
  Tensor out[1] = {ctx().alloc({1, 2, 1, 8}, DType::f32)};
  auto ec = ctx().exec();
  msg = error_of([&] { split->enqueue(in, out, nullptr, ec); });
  CHECK(msg.find("split into 3 key chunks needs a workspace of 240 bytes, got 0") != std::string::npos);
}

}  // TEST_SUITE

// ---------------------------------------------------------------------------------------------------
// ONNX Attention (opset 23/24) conformance: the backend node tests in CLDL_CONFORMANCE_DIR, mapped onto
// Attention + KvCache the way the importer maps them. Tolerance 1e-4 relative + 1e-4 absolute (the
// expected values were computed by numpy in fp32); fp16 cases run in f32 and compare at 2e-3.
#include <filesystem>

#include "support/attn_onnx_data.hpp"

namespace {

namespace ox = cldl::test::attn_onnx;

struct OnnxResult {
  std::map<std::string, std::vector<float>> outputs;  // by node output name
  std::string skipped;                                // why, when the case is not supported
  bool fp16 = false;                                  // computed in f32 from fp16 data
};

OnnxResult run_onnx_attention(const ox::NodeTest& t) {
  OnnxResult r;
  const auto& n = t.node;
  auto in = [&](size_t i) -> const ox::Tensor* {
    if (i >= n.inputs.size() || n.inputs[i].empty()) return nullptr;
    return &t.inputs.at(n.inputs[i]);
  };
  const ox::Tensor *Q = in(0), *K = in(1), *V = in(2), *mask = in(3), *pk = in(4), *pv = in(5), *nonpad = in(6);
  // fp16 models run in f32 on the widened data (the op is f32); compared at fp16 precision.
  for (const ox::Tensor* x : {Q, K, V, mask, pk, pv}) r.fp16 |= x && x->data_type == ox::kFloat16;
  OnnxAttentionNode node;
  node.q = Q->shape(), node.k = K->shape(), node.v = V->shape();
  if (mask) node.attn_mask = mask->shape(), node.attn_mask_bool = mask->data_type == ox::kBool;
  if (pk) node.past_key = pk->shape();
  node.nonpad_kv_seqlen = nonpad != nullptr;
  node.q_num_heads = n.get_i("q_num_heads", 0), node.kv_num_heads = n.get_i("kv_num_heads", 0);
  node.is_causal = n.get_i("is_causal", 0) != 0;
  if (n.has("scale")) node.scale = n.get_f("scale", 0.0f);
  node.softcap = n.get_f("softcap", 0.0f);
  const bool want_qk = n.outputs.size() > 3 && !n.outputs[3].empty();
  if (want_qk) node.qk_matmul_output_mode = int(n.get_i("qk_matmul_output_mode", 0));
  AttentionConfig c = onnx_attention_config(node);
  std::vector<Tensor> inputs;
  inputs.push_back(ctx().upload(HostTensor::from<float>(Q->shape(), Q->f)));
  std::optional<KvCache> cache;
  auto ec = ctx().exec();
  if (pk) {
    // past + new -> present through the KV cache, which then serves as K/V ([B, Hkv, P+S, D]).
    cache.emplace(ctx(), 0, c.batch, c.eff_kv_heads(), c.kv_len, c.head_size, c.eff_v_head_size());
    Tensor pkd = ctx().upload(HostTensor::from<float>(pk->shape(), pk->f));
    Tensor pvd = ctx().upload(HostTensor::from<float>(pv->shape(), pv->f));
    Tensor kd = ctx().upload(HostTensor::from<float>(K->shape(), K->f));
    Tensor vd = ctx().upload(HostTensor::from<float>(V->shape(), V->f));
    cache->append(pkd, pvd, ec);
    cache->append(kd, vd, ec, c.layout);
    inputs.push_back(cache->keys());
    inputs.push_back(cache->values());
  } else {
    inputs.push_back(ctx().upload(HostTensor::from<float>(K->shape(), K->f)));
    inputs.push_back(ctx().upload(HostTensor::from<float>(V->shape(), V->f)));
  }
  if (mask) {
    if (mask->data_type == ox::kBool) {
      std::vector<uint8_t> b(mask->i.begin(), mask->i.end());
      inputs.push_back(ctx().upload(HostTensor::from<uint8_t>(mask->shape(), b)));
    } else {
      inputs.push_back(ctx().upload(HostTensor::from<float>(mask->shape(), mask->f)));
    }
  }
  if (nonpad) inputs.push_back(ctx().upload(HostTensor::from<int64_t>(nonpad->shape(), nonpad->i)));
  auto op = Attention::create(ctx(), 0, c);
  Tensor y = ctx().alloc(Attention::validate(c), DType::f32);
  std::vector<Tensor> out{y};
  if (want_qk) out.push_back(ctx().alloc({c.batch, c.q_heads, c.q_len, c.kv_len}, DType::f32));
  std::optional<Tensor> ws;
  if (op->workspace_bytes()) ws = ctx().alloc({int64_t(op->workspace_bytes() / 4)}, DType::f32);
  op->enqueue(inputs, out, ws ? &*ws : nullptr, ec);
  ec.queue.finish();
  auto vec = [&](const Tensor& d) {
    HostTensor h = ctx().download(d);
    return std::vector<float>(h.as<float>(), h.as<float>() + h.numel());
  };
  r.outputs[n.outputs[0]] = vec(y);
  if (want_qk) r.outputs[n.outputs[3]] = vec(out[1]);
  if (cache) {
    if (n.outputs.size() > 1 && !n.outputs[1].empty()) r.outputs[n.outputs[1]] = vec(cache->keys());
    if (n.outputs.size() > 2 && !n.outputs[2].empty()) r.outputs[n.outputs[2]] = vec(cache->values());
  }
  return r;
}

}  // namespace

TEST_SUITE("attention") {

TEST_CASE("ONNX Attention node tests (opset 23/24)") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(CLDL_CONFORMANCE_DIR) / "onnx-node";
  REQUIRE(fs::exists(root));
  int run = 0, skipped_cases = 0;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().rfind("test_attention", 0) == 0) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    const std::string name = dir.filename().string();
    CAPTURE(name);
    ox::NodeTest t = ox::load_node_test(dir.string());
    REQUIRE(t.node.op_type == "Attention");
    OnnxResult r = run_onnx_attention(t);
    if (!r.skipped.empty()) {
      MESSAGE(name << " skipped: " << r.skipped);
      ++skipped_cases;
      continue;
    }
    ++run;
    for (auto& want : t.outputs) {
      auto it = r.outputs.find(want.name);
      if (it == r.outputs.end()) {
        MESSAGE(name << ": output " << want.name << " (qk_matmul_output) not produced");
        continue;
      }
      CAPTURE(want.name);
      REQUIRE(it->second.size() == want.f.size());
      // Masked scores (qk_matmul_output mode 2) are -inf on both sides: equal infinities match.
      std::vector<float> got = it->second;
      for (size_t e = 0; e < got.size(); ++e)
        if (std::isinf(got[e]) && got[e] == want.f[e]) got[e] = want.f[e] = 0.0f;
      const double tol = r.fp16 ? 2e-3 : 1e-4;
      CLDL_CHECK_CLOSE(got.data(), want.f.data(), want.f.size(), tol, tol);
    }
  }
  MESSAGE(run << " ONNX attention tests run, " << skipped_cases << " skipped");
  CHECK(run >= 50);
}

}  // TEST_SUITE

#include "models/builder.hpp"
#include "support/onnx_util.hpp"

namespace {
// f16 bits of v, which must be representable (a normal f16, or zero / -inf).
uint16_t exact_half(float v) {
  if (v == 0.0f) return 0;
  if (std::isinf(v)) return v < 0 ? 0xfc00 : 0x7c00;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t sign = (b >> 16) & 0x8000, exp = (b >> 23) & 0xff, man = b & 0x7fffff;
  REQUIRE((man & 0x1fff) == 0);
  REQUIRE(exp >= 127 - 14);
  REQUIRE(exp <= 127 + 15);
  return uint16_t(sign | ((exp - 127 + 15) << 10) | (man >> 13));
}
// Random f16 tensor (values k / 256 in [lo, hi], exact in f16) and its values as floats.
HostTensor half_tensor(Shape s, uint32_t seed, float lo, float hi, std::vector<float>& values) {
  values = test::random_floats(size_t(s.numel()), seed, lo, hi);
  HostTensor h(DType::f16, s);
  auto* bits = static_cast<uint16_t*>(h.data());
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = std::round(values[i] * 256.0f) / 256.0f;
    bits[i] = exact_half(values[i]);
  }
  return h;
}
std::vector<float> halves(const HostTensor& h) {
  REQUIRE(h.dtype() == DType::f16);
  std::vector<float> v(size_t(h.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = ox::half_to_float(static_cast<const uint16_t*>(h.data())[i]);
  return v;
}
}  // namespace

TEST_SUITE("attention") {
  TEST_CASE("ONNX Attention node in fp16 (f16 storage, f32 compute): GQA, past + present, f16 additive mask") {
    // Odd shape beyond the conformance cases: B 2, Hq 3 over one kv head, Sq 5, past 4 + new 3 keys,
    // head sizes 12 / 10; mask [Sq, P + S] with -inf entries.
    const int64_t B = 2, Hq = 3, Hk = 1, Sq = 5, P = 4, S = 3, L = P + S, D = 12, Dv = 10;
    std::vector<float> q, k, v, pk, pv, mask;
    HostTensor hq = half_tensor({B, Hq, Sq, D}, 81, -1.5f, 1.5f, q),
               hk = half_tensor({B, Hk, S, D}, 82, -1.5f, 1.5f, k),
               hv = half_tensor({B, Hk, S, Dv}, 83, -1.0f, 1.0f, v),
               hpk = half_tensor({B, Hk, P, D}, 84, -1.5f, 1.5f, pk),
               hpv = half_tensor({B, Hk, P, Dv}, 85, -1.0f, 1.0f, pv), hm = half_tensor({Sq, L}, 86, -2.0f, 2.0f, mask);
    for (size_t i = 0; i < mask.size(); i += 6) {
      mask[i] = -INFINITY;
      static_cast<uint16_t*>(hm.data())[i] = exact_half(-INFINITY);
    }
    graph::GraphBuilder b("attention_fp16", 23);
    auto vq = b.input("Q", DType::f16, hq.shape()), vk = b.input("K", DType::f16, hk.shape()),
         vv = b.input("V", DType::f16, hv.shape()), vm = b.input("mask", DType::f16, hm.shape()),
         vpk = b.input("past_key", DType::f16, hpk.shape()), vpv = b.input("past_value", DType::f16, hpv.shape());
    auto outs = b.op("Attention", {vq, vk, vv, vm, vpk, vpv}, {}, 3);
    b.output(outs[0], "Y");
    b.output(outs[1], "present_key");
    b.output(outs[2], "present_value");
    auto m = test::compile_graph(b.build());
    auto got =
        m->session()->run({{"Q", hq}, {"K", hk}, {"V", hv}, {"mask", hm}, {"past_key", hpk}, {"past_value", hpv}});
    // Reference: the f16 values in f32, K / V = past then new.
    std::vector<float> kk, vvals;
    for (int64_t bi = 0; bi < B; ++bi) {
      kk.insert(kk.end(), pk.begin() + bi * P * D, pk.begin() + (bi + 1) * P * D);
      kk.insert(kk.end(), k.begin() + bi * S * D, k.begin() + (bi + 1) * S * D);
      vvals.insert(vvals.end(), pv.begin() + bi * P * Dv, pv.begin() + (bi + 1) * P * Dv);
      vvals.insert(vvals.end(), v.begin() + bi * S * Dv, v.begin() + (bi + 1) * S * Dv);
    }
    AttentionConfig cfg;
    cfg.batch = B, cfg.q_heads = Hq, cfg.kv_heads = Hk, cfg.q_len = Sq, cfg.kv_len = L, cfg.head_size = D;
    cfg.v_head_size = Dv;
    cfg.mask = AttentionMask::additive;
    cfg.mask_shape = Shape{Sq, L};
    auto want = ref::attention(cfg, q, kk, vvals, &mask);
    auto y = halves(got.at("Y"));
    REQUIRE(got.at("Y").shape() == Shape{B, Hq, Sq, Dv});
    REQUIRE(y.size() == want.size());
    // f16 output: half an ulp of rounding (2^-11 relative) over the f32 result.
    CLDL_CHECK_CLOSE(y.data(), want.data(), want.size(), 1e-3, 1e-4);
    CHECK(halves(got.at("present_key")) == kk);  // copies: exact
    CHECK(halves(got.at("present_value")) == vvals);
  }

}  // TEST_SUITE
