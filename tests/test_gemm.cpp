// Gemm op: own kernel (both B paths, register blocks of 1-8 rows x 1-4 vectors) and CLBlast against the
// double-precision reference over every transpose combination, odd shapes, ld > packed, strided and
// broadcast batches, alpha/beta, both bias modes and activations; bad configurations name Gemm and the
// argument.
// Tolerance: |got - want| <= 1e-4 * |want| + 1e-5 * K (fp32 accumulation over K terms of size <= 1).
// Distinct kernel builds are kept to about a dozen (each ~1 s on PoCL): shapes, ld, strides, alpha and
// beta are runtime arguments; only transposes, bias, activation and tile parameters are build options.
#include <algorithm>
#include <limits>

#include "support/test_util.hpp"
#include "layers/gemm.hpp"
#include "runtime/tuning.hpp"
#include "tests/reference/gemm_ref.hpp"

using namespace cldl;
using cldl::test::ctx;

namespace {

int64_t elems(int64_t stride, int64_t batch, int64_t rows, int64_t ld) {
  return std::max<int64_t>(stride, 0) * (batch - 1) + rows * ld;
}

// Runs `cfg` on random data through the op and the reference and compares the whole C buffer, so
// elements between rows (ld > N) and between batch items must stay untouched too.
void check_gemm(const GemmConfig& cfg, uint32_t seed, const char* expect_algo = nullptr) {
  CAPTURE(cfg.M);
  CAPTURE(cfg.N);
  CAPTURE(cfg.K);
  CAPTURE(cfg.batch);
  CAPTURE(cfg.trans_a);
  CAPTURE(cfg.trans_b);
  const int64_t na = elems(cfg.eff_stride_a(), cfg.batch, cfg.trans_a ? cfg.K : cfg.M, cfg.eff_lda());
  const int64_t nb = elems(cfg.eff_stride_b(), cfg.batch, cfg.trans_b ? cfg.N : cfg.K, cfg.eff_ldb());
  const int64_t nc = elems(cfg.eff_stride_c(), cfg.batch, cfg.M, cfg.eff_ldc());
  HostTensor a = test::random_tensor(Shape{na}, seed), b = test::random_tensor(Shape{nb}, seed + 1),
             c = test::random_tensor(Shape{nc}, seed + 2);
  HostTensor bias = test::random_tensor(Shape{std::max(cfg.M, cfg.N)}, seed + 3);
  std::vector<float> want(c.as<float>(), c.as<float>() + nc);
  ref::gemm(cfg, a.as<float>(), b.as<float>(), want.data(), bias.as<float>());

  auto g = Gemm::create(ctx(), 0, cfg);
  CAPTURE(g->algorithm());
  if (expect_algo) CHECK(g->algorithm().find(expect_algo) != std::string::npos);
  Tensor da = ctx().upload(a), db = ctx().upload(b), dc = ctx().upload(c), dbias = ctx().upload(bias);
  auto ec = ctx().exec();
  g->run(da, db, dc, ec, cfg.bias == GemmBias::none ? nullptr : &dbias);
  HostTensor got = ctx().download(dc);
  CLDL_CHECK_CLOSE(got.as<float>(), want.data(), size_t(nc), 1e-4, 1e-5 * double(cfg.K));
}

GemmConfig make(int64_t M, int64_t N, int64_t K, bool ta, bool tb, GemmProvider p = GemmProvider::own) {
  GemmConfig c;
  c.M = M, c.N = N, c.K = K, c.trans_a = ta, c.trans_b = tb, c.provider = p;
  c.own.nr = 16;  // one vector width for most cases (fewer kernel builds); edges are then exercised too
  return c;
}

struct Shape3 {
  int64_t M, N, K;
};
// {1, 77, 300} and {3, 45, 70}: fewer rows than the 6-row block (a block of M rows then).
const Shape3 kShapes[] = {{1, 1, 1}, {7, 13, 5}, {33, 17, 65}, {1000, 3, 257}, {6, 16, 16}, {64, 100, 31}, {1, 77, 300}, {3, 45, 70}};

}  // namespace

TEST_SUITE("gemm") {

TEST_CASE("own kernel: every transpose combination, odd shapes, alpha/beta, batch 1 and 3") {
  uint32_t seed = 1;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (const auto& s : kShapes) {
        GemmConfig c = make(s.M, s.N, s.K, ta, tb);
        check_gemm(c, seed++, tb ? "packB" : "own:tile");
        c.alpha = -0.75f, c.beta = 0.5f, c.batch = s.M * s.N < 5000 ? 3 : 1;
        check_gemm(c, seed++);
      }
}

TEST_CASE("own kernel: B read in place and packed give the same results for both layouts") {
  uint32_t seed = 100;
  for (int tb = 0; tb < 2; ++tb)
    for (const auto& s : {Shape3{7, 13, 5}, Shape3{1000, 3, 257}, Shape3{45, 70, 33}}) {
      GemmConfig c = make(s.M, s.N, s.K, false, tb);
      c.own.pack_b = tb ? 0 : 1;  // the non-default path of each layout
      c.beta = 1.0f;
      check_gemm(c, seed++, tb ? "own:tile" : "packB");
    }
}

TEST_CASE("own kernel: other register blocks (mr=3, nr=8 and mr=1, nr=4)") {
  uint32_t seed = 200;
  for (auto [mr, nr] : {std::pair{3, 8}, std::pair{1, 4}})
    for (const auto& s : {Shape3{7, 13, 5}, Shape3{1000, 3, 257}, Shape3{31, 45, 19}}) {
      GemmConfig c = make(s.M, s.N, s.K, true, false);
      c.own.mr = mr, c.own.nr = nr, c.batch = 2, c.alpha = 2.0f;
      check_gemm(c, seed++, fmt::format("mr={} nr={}", mr, nr).c_str());
    }
}

TEST_CASE("own kernel: 1 to 4 vectors per work-item (nc), with partial last groups of panels") {
  // N = 13 (1 panel of 16), 45 (3 panels: nc 2 and 4 leave a panel past N), 100 (7 panels), each transpose of
  // B, B read in place and packed, A packed for some; nr 8 and 16.
  uint32_t seed = 250;
  for (int nc : {1, 2, 3, 4})
    for (int tb = 0; tb < 2; ++tb)
      for (const auto& s : {Shape3{7, 13, 5}, Shape3{31, 45, 19}, Shape3{64, 100, 31}}) {
        GemmConfig c = make(s.M, s.N, s.K, false, tb);
        c.own.nc = nc, c.own.nr = nc == 3 ? 8 : 16, c.own.mr = nc == 4 ? 5 : 6;
        c.own.pack_b = tb ? 1 : nc % 2, c.own.pack_a = nc == 2 ? 1 : 0;
        c.bias = GemmBias::per_col, c.beta = 0.5f, c.batch = 2;
        check_gemm(c, seed++, fmt::format("nc={}", nc).c_str());
      }
}

TEST_CASE("own kernel: leading dimensions above packed, strided and broadcast batches") {
  uint32_t seed = 300;
  for (int tb = 0; tb < 2; ++tb) {
    GemmConfig c = make(19, 23, 29, false, tb);
    c.lda = 31, c.ldb = tb ? 37 : 41, c.ldc = 27, c.batch = 4, c.beta = -1.0f;
    check_gemm(c, seed++);
    c.stride_a = 0;  // the same A for every item (conv weights)
    check_gemm(c, seed++);
    c.stride_a = -1, c.stride_b = 0;  // the same B for every item (dense weights)
    check_gemm(c, seed++);
    c.stride_b = c.eff_ldb() * (tb ? 23 : 29) + 7, c.stride_a = 19 * 31 + 3, c.stride_c = 19 * 27 + 11;
    check_gemm(c, seed++);
  }
}

TEST_CASE("own kernel: columns past N are never summed, even where B's padding holds NaN and Inf") {
  // B read in place with ldb > N: the strip that runs past N reads whole vectors of each row and clears
  // the lanes past N. Any arithmetic masking (a multiply by 0) would turn the NaN / Inf there into NaN in C.
  for (auto [N, nc] : {std::pair<int64_t, int>{49, 4}, {13, 1}, {45, 2}, {196, 4}}) {
    CAPTURE(N);
    CAPTURE(nc);
    const int64_t M = 11, K = 23, ldb = N + 5;
    GemmConfig c = make(M, N, K, false, false);
    c.ldb = ldb, c.own.nc = nc, c.own.pack_b = 0, c.own.mr = 5;
    HostTensor a = test::random_tensor(Shape{M * K}, 450), b = test::random_tensor(Shape{K * ldb}, 451);
    float* pb = b.as<float>();
    for (int64_t k = 0; k < K; ++k)
      for (int64_t n = N; n < ldb; ++n) pb[k * ldb + n] = n % 2 ? std::numeric_limits<float>::quiet_NaN()
                                                                 : std::numeric_limits<float>::infinity();
    std::vector<float> want(size_t(M * N), 0.0f);
    ref::gemm(c, a.as<float>(), pb, want.data(), nullptr);
    auto g = Gemm::create(ctx(), 0, c);
    Tensor da = ctx().upload(a), db = ctx().upload(b), dc = ctx().alloc(Shape{M, N}, DType::f32);
    auto ec = ctx().exec();
    g->run(da, db, dc, ec);
    HostTensor got = ctx().download(dc);
    const size_t count = want.size();
    CLDL_CHECK_CLOSE(got.as<float>(), want.data(), count, 1e-4, 1e-5 * double(K));
  }
}

TEST_CASE("own kernel: a long K in chunks (B's strip past the L2 cache), with beta, bias, activation and batches") {
  // K = 6500 with 64 columns per work-item: strips of 1.6 MiB, so K runs in 7 chunks of 944 (the last 836),
  // each adding into C; the first keeps the caller's beta, the last applies bias and activation. Odd M and
  // N (a partial strip), A transposed or not, a strided batch.
  for (int ta = 0; ta < 2; ++ta) {
    GemmConfig c = make(13, 70, 6500, ta, false);
    c.own.nc = 4, c.beta = 0.5f, c.alpha = -1.25f, c.batch = 2;
    c.bias = GemmBias::per_row, c.act = Activation(Act::leaky_relu, 0.2f);
    // Chunked on CPUs only (elsewhere the whole K in one launch, checked all the same).
    const bool cpu = ctx().device(0).info.type == DeviceType::cpu;
    check_gemm(c, 460 + uint32_t(ta), cpu ? "kchunk=944" : nullptr);
  }
}

TEST_CASE("own kernel: the column tail past whole strips runs as a launch of its own, with every epilogue") {
  // Strips of 4 x 16 columns: N = 196 leaves 4 columns (a 4-wide tail), 100 leaves 36 (3 vectors of 16), 400
  // leaves 16, 65 leaves 1; 817 has 12 whole strips (none from 8 on) and 7 is below one strip (none).
  // Odd M and K, batch 1 and a strided batch of 2, A transposed or not, bias per column / row with
  // activations, beta; a K long enough for chunks (the tail's own partial launches) on 196 and 65.
  const bool cpu = ctx().device(0).info.type == DeviceType::cpu;
  struct Case {
    int64_t M, N, K;
    const char* tail;  // expected in algorithm() on CPUs; nullptr: no tail
  };
  const Case cases[] = {{37, 196, 29, "tail=4x1"},  {13, 100, 61, "tail=16x3"}, {7, 400, 33, "tail=16x1"},
                        {19, 65, 17, "tail=4x1"},   {11, 817, 23, nullptr},     {5, 7, 9, nullptr},
                        {9, 196, 6500, "tail=4x1"}, {1, 65, 6500, "tail=4x1"}};
  uint32_t seed = 470;
  for (const auto& cs : cases)
    for (int variant = 0; variant < 2; ++variant) {
      GemmConfig c = make(cs.M, cs.N, cs.K, variant == 1, false);
      c.own.nc = 4, c.own.pack_a = 0;
      if (variant == 0) {
        c.bias = GemmBias::per_col, c.act = Activation(Act::relu), c.beta = 0.5f;
      } else {
        c.bias = GemmBias::per_row, c.act = Activation(Act::leaky_relu, 0.1f), c.batch = 2, c.alpha = -1.5f;
        c.stride_c = cs.M * cs.N + 5;
      }
      CAPTURE(variant);
      auto g = Gemm::create(ctx(), 0, c);
      const bool has_tail = g->algorithm().find(" tail=") != std::string::npos;
      CHECK(has_tail == (cpu && cs.tail));
      check_gemm(c, seed++, cpu && cs.tail ? cs.tail : nullptr);
    }
}

TEST_CASE("own kernel: bias per column / per row with activations") {
  GemmConfig c = make(37, 29, 41, false, true);
  c.bias = GemmBias::per_col, c.act = Activation(Act::relu), c.batch = 2, c.beta = 0.25f;
  check_gemm(c, 400);
  c = make(37, 29, 41, false, false);
  c.bias = GemmBias::per_row, c.act = Activation(Act::leaky_relu, 0.1f), c.stride_b = 0, c.batch = 3;
  check_gemm(c, 401);
  c.M = 1000, c.N = 3, c.K = 257, c.batch = 1;
  check_gemm(c, 402);
  // Activations the epilogue applies to whole vectors (SiLU, sigmoid), with full and partial vectors.
  c = make(23, 45, 19, false, false);
  c.bias = GemmBias::per_row, c.act = Activation(Act::silu);
  check_gemm(c, 403);
  c.act = Activation(Act::sigmoid), c.trans_b = true;
  check_gemm(c, 404);
}

TEST_CASE("own kernel: the vector-matrix kernel (M <= 4, B stored N x K) on odd shapes, with every epilogue") {
  // gemm_gemv: float16 loads along K, then a scalar tail (K = 1, 3, 49, 577 leave 1, 3, 1, 1 elements past
  // whole vectors; 16 and 1024 none); N = 1, 3, 49, 196, 1000 against 8- and 4-column work-items (M <= 2 / 3..4);
  // A transposed or not, bias per column or row with activations, beta, alpha, a strided batch and padded
  // leading dimensions (every element of C outside the product must stay as it was).
  struct Case {
    int64_t M, N, K;
  };
  const Case cases[] = {{1, 1, 1}, {1, 1000, 577}, {2, 49, 3}, {3, 196, 49}, {4, 3, 1024}, {1, 49, 16}, {4, 17, 577}};
  uint32_t seed = 700;
  for (const auto& cs : cases)
    for (int variant = 0; variant < 3; ++variant) {
      CAPTURE(variant);
      GemmConfig c = make(cs.M, cs.N, cs.K, variant == 1, true);
      c.own = GemmOwnParams{};
      c.own.gemv = 1;
      if (variant == 0) {
        c.bias = GemmBias::per_col, c.act = Activation(Act::relu);
      } else if (variant == 1) {
        c.bias = GemmBias::per_row, c.act = Activation(Act::leaky_relu, 0.1f), c.beta = 0.5f, c.alpha = -1.25f;
        c.batch = 2, c.stride_c = cs.M * cs.N + 3;
      } else {
        c.act = Activation(Act::silu), c.ldb = cs.K + 5, c.lda = cs.K + 2, c.ldc = cs.N + 1, c.batch = 3;
        c.stride_b = 0;
      }
      check_gemm(c, seed++, "own:gemv");
    }
  // Chosen by shape: M <= 4 with B^T and the own parameters left at auto; not for M = 5 or B stored K x N.
  if (ctx().device(0).info.type == DeviceType::cpu) {
    tuning::ScopedEnabled heuristic_only(false);
    GemmConfig c = make(3, 100, 64, false, true);
    c.own = GemmOwnParams{};
    CHECK(Gemm::create(ctx(), 0, c)->algorithm() == "own:gemv m=3 cols=4");
    c.M = 1;
    CHECK(Gemm::create(ctx(), 0, c)->algorithm() == "own:gemv m=1 cols=8");
    c.M = 5;
    CHECK(Gemm::create(ctx(), 0, c)->algorithm().rfind("own:tile", 0) == 0);
    c.M = 1, c.trans_b = false;
    CHECK(Gemm::create(ctx(), 0, c)->algorithm().rfind("own:tile", 0) == 0);
  }
}

TEST_CASE("CLBlast provider: transposes, batches, beta, and the bias/activation epilogue") {
  uint32_t seed = 500;
  GemmConfig c = make(33, 17, 65, false, false, GemmProvider::clblast);
  c.beta = 0.5f;
  check_gemm(c, seed++, "clblast:gemm");
  c = make(19, 23, 29, true, true, GemmProvider::clblast);
  c.lda = 21, c.ldb = 31, c.ldc = 25, c.batch = 3, c.alpha = -1.5f, c.beta = 1.0f;
  check_gemm(c, seed++, "clblast:gemm_strided_batched");
  c = make(37, 29, 41, false, true, GemmProvider::clblast);
  c.bias = GemmBias::per_col, c.act = Activation(Act::relu), c.batch = 2, c.stride_b = 0;
  check_gemm(c, seed++, "+epilogue");
  c = make(7, 13, 5, false, false, GemmProvider::clblast);
  c.bias = GemmBias::per_row, c.act = Activation(Act::leaky_relu, 0.1f);
  check_gemm(c, seed++, "+epilogue");
}

TEST_CASE("automatic provider: own kernel on CPUs, named with its parameters, packing by shape") {
  tuning::ScopedEnabled heuristic_only(false);  // 1000x3x257 below is a bench shape the shipped database tunes
  GemmConfig c = make(64, 100, 40, false, false, GemmProvider::automatic);
  c.own.nr = 0;
  if (ctx().device().info.type != DeviceType::cpu) {
    CHECK(Gemm::create(ctx(), 0, c)->algorithm().rfind("clblast", 0) == 0);
    return;
  }
  // 100 columns = 7 panels of 16: 4 vectors per work-item (nc) where the vector registers are float16 wide,
  // so about 64K multiply-adds take 4 row blocks; else 1 vector and 8 blocks.
  const DeviceInfo& info = ctx().device().info;
  const bool nc4 = std::max(info.preferred_vector_float, info.native_vector_float) >= 16;
  const std::string blk = nc4 ? "nc=4 mt=4" : "nc=1 mt=8", blk70 = nc4 ? "nc=4 mt=2" : "nc=1 mt=8";
  // With 4 vectors, the 36 columns past the first strip of 64 are a tail of 3 vectors; 520 has 8 whole strips
  // (no tail).
  const std::string tail100 = nc4 ? " tail=16x3" : "", tail520;
  CHECK(Gemm::create(ctx(), 0, c)->algorithm() == fmt::format("own:tile mr=6 nr=16 {} local=1{}", blk, tail100));
  // Row-major A with a 4 KiB-multiple lda: read in place under 512 columns (few strips reuse it); from 512
  // columns (33 B panels) packed into 11 panels of 6 rows (66 x 70 floats); B read in place.
  c.K = 70, c.lda = 1024;
  CHECK(Gemm::create(ctx(), 0, c)->algorithm() == fmt::format("own:tile mr=6 nr=16 {} local=1{}", blk70, tail100));
  c.N = 520;
  auto g = Gemm::create(ctx(), 0, c);
  CHECK(g->algorithm() == fmt::format("own:tile mr=6 nr=16 {} local=1 packA{}", blk70, tail520));
  CHECK(g->workspace_bytes() == 66 * 70 * sizeof(float));
  c.beta = 0.5f, c.batch = 2;
  check_gemm(c, 600, "packA");
  // trans_b packs B too: 33 panels of 16 columns (528 x 70 floats) after packed A, per batch item.
  c.trans_b = true;
  auto gt = Gemm::create(ctx(), 0, c);
  CHECK(gt->algorithm() == "own:tile mr=6 nr=16 " + blk70 + " local=1 packA packB");
  CHECK(gt->workspace_bytes() == 2 * (66 + 528) * 70 * sizeof(float));
  check_gemm(c, 601, "packA packB");
  // Packed A with a broadcast A (packed once) and explicit pack_a on an odd shape.
  c = make(45, 70, 33, true, false);
  c.own.pack_a = 1, c.batch = 3, c.stride_a = 0;
  check_gemm(c, 602, "packA");
  // Narrow N: float4 columns, one vector (N has one panel), A read in place.
  c = make(1000, 3, 257, false, false, GemmProvider::automatic);
  c.own.nr = 0;
  check_gemm(c, 603, "own:tile mr=6 nr=4 nc=1 mt=8 local=1");
  // 2 panels of 16: 2 vectors, not 4.
  c = make(20, 30, 9, false, false, GemmProvider::automatic);
  c.own.nr = 0;
  check_gemm(c, 604, nc4 ? "own:tile mr=6 nr=16 nc=2" : "own:tile mr=6 nr=16 nc=1");
}

TEST_CASE("tensor views with offsets and an explicit workspace view, own and CLBlast") {
  // Every tensor (and the workspace) starts inside a larger buffer; packing A and B both on.
  for (GemmProvider p : {GemmProvider::own, GemmProvider::clblast}) {
    GemmConfig c = make(45, 70, 33, false, true, p);
    c.own.pack_a = 1, c.bias = GemmBias::per_col, c.act = Activation(Act::relu), c.beta = 0.5f, c.batch = 2;
    auto g = Gemm::create(ctx(), 0, c);
    CAPTURE(g->algorithm());
    const int64_t na = 2 * 45 * 33, nb = 2 * 70 * 33, nc = 2 * 45 * 70, offs[] = {5, 17, 3, 11, 7};
    HostTensor a = test::random_tensor(Shape{na}, 700), b = test::random_tensor(Shape{nb}, 701),
               cc = test::random_tensor(Shape{nc}, 702), bias = test::random_tensor(Shape{70}, 703);
    std::vector<float> want(cc.as<float>(), cc.as<float>() + nc);
    ref::gemm(c, a.as<float>(), b.as<float>(), want.data(), bias.as<float>());
    auto view = [&](const HostTensor& h, int64_t off) {
      Tensor big = ctx().alloc(Shape{h.numel() + off + 9}, DType::f32);
      Tensor v = big.slice_elems(off, h.numel(), h.shape());
      auto ec = ctx().exec();
      ctx().write_async(v, h.data(), h.bytes(), ec);
      ctx().finish();
      return v;
    };
    Tensor da = view(a, offs[0]), db = view(b, offs[1]), dc = view(cc, offs[2]), dbias = view(bias, offs[3]);
    Tensor ws;
    if (g->workspace_bytes()) {
      Tensor wbig = ctx().alloc(Shape{int64_t(g->workspace_bytes() / 4) + 64}, DType::f32);
      ws = wbig.slice_elems(offs[4], int64_t(g->workspace_bytes() / 4), Shape{int64_t(g->workspace_bytes() / 4)});
    }
    Tensor in[3] = {da, db, dbias}, out[1] = {dc};
    auto ec = ctx().exec();
    g->enqueue(in, out, ws.valid() ? &ws : nullptr, ec);
    HostTensor got = ctx().download(dc);
    CLDL_CHECK_CLOSE(got.as<float>(), want.data(), size_t(nc), 1e-4, 1e-5 * 33);
  }
}

TEST_CASE("bad configurations name Gemm, the argument and the value") {
  auto expect = [](GemmConfig c, std::initializer_list<const char*> parts) {
    try {
      Gemm::validate(c);
      FAIL("config should be rejected");
    } catch (const Error& e) {
      std::string msg = e.what();
      CAPTURE(msg);
      CHECK(msg.find("Gemm") != std::string::npos);
      for (const char* p : parts) CHECK(msg.find(p) != std::string::npos);
    }
  };
  expect(make(0, 4, 4, false, false), {"M", "0"});
  expect(make(4, -2, 4, false, false), {"N", "-2"});
  expect(make(4, 4, 0, false, false), {"K", "0"});
  GemmConfig c = make(8, 6, 5, false, false);
  c.lda = 4;
  expect(c, {"lda", "4"});
  c = make(8, 6, 5, true, false);
  c.lda = 7;
  expect(c, {"lda", "7"});
  c = make(8, 6, 5, false, true);
  c.ldb = 3;
  expect(c, {"ldb", "3"});
  c = make(8, 6, 5, false, false);
  c.ldc = 5;
  expect(c, {"ldc", "5"});
  c.ldc = 0, c.batch = 0;
  expect(c, {"batch", "0"});
  c.batch = 2, c.stride_c = 0;
  expect(c, {"stride_c", "0"});
  c.stride_c = -1, c.own.nr = 5;
  expect(c, {"own.nr", "5"});
  c.own.nr = 0, c.own.nc = 5;
  expect(c, {"own.nc", "5"});
  c.own.nc = 0, c.own.gemv = 1;  // M = 8 rows: too many for the vector-matrix kernel
  expect(c, {"own.gemv", "M = 8"});
  c.own.gemv = 0;

  // Tensors too small for the config fail at enqueue, naming the tensor.
  c = make(8, 6, 5, false, false);
  auto g = Gemm::create(ctx(), 0, c);
  Tensor a = ctx().alloc(Shape{8, 5}, DType::f32), b = ctx().alloc(Shape{4, 6}, DType::f32),
         out = ctx().alloc(Shape{8, 6}, DType::f32);
  auto ec = ctx().exec();
  try {
    g->run(a, b, out, ec);
    FAIL("undersized B should be rejected");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("Gemm") != std::string::npos);
    CHECK(msg.find("tensor B has 24 elements") != std::string::npos);
  }
}

}  // TEST_SUITE
