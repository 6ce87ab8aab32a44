// Normalisation against the reference: BatchNormalization (inference and training mode), InstanceNormalization,
// GroupNormalization (per-channel and per-group scale), odd shapes, ranks 2 to 5, fused activation.
// Tolerance: 1e-4 relative + 1e-5 absolute (float statistics over up to ~1000 elements).
#include "layers/norm.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"

using namespace cldl;
using namespace cldl::test;

TEST_SUITE("norm") {

TEST_CASE("BatchNormalization inference over ranks 2 to 5, with and without fused ReLU") {
  for (Shape s : {Shape{4, 5}, Shape{1, 3, 7, 13}, Shape{2, 5, 7, 13}, Shape{2, 3, 3, 4, 5}}) {
    for (bool relu : {false, true}) {
      int64_t N = s[0], C = s[1], sp = s.numel() / (N * C);
      auto x = random_floats(s.numel(), 1);
      auto sc = random_floats(C, 2, 0.5f, 2.0f), b = random_floats(C, 3), m = random_floats(C, 4),
           v = random_floats(C, 5, 0.1f, 3.0f);
      NormConfig cfg{NormKind::batch, s, 1e-3f};
      if (relu) cfg.act = Activation(Act::relu);
      auto op = Norm::create(ctx(), 0, cfg);
      Shape pc{C};
      auto got = down<float>(run_op(*op, {up(x, s), up(sc, pc), up(b, pc), up(m, pc), up(v, pc)}, s));
      auto want = ref::batch_norm(x, int(N), int(C), sp, sc, b, m, v, 1e-3f);
      if (relu)
        for (auto& w : want) w = std::max(w, 0.0f);
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-5);
    }
  }
}

TEST_CASE("BatchNormalization training mode: batch statistics and running mean / var, outputs left out") {
  // Ranks 2 to 5, batch 1, a plane larger than one work-group; momentum 0.9 (the default) and 0.3.
  for (Shape s : {Shape{4, 5}, Shape{1, 3, 7, 13}, Shape{2, 5, 7, 13}, Shape{3, 2, 3, 4, 5}, Shape{2, 3, 50, 61}}) {
    for (int outputs : {3, 1, 2}) {  // 2: running_mean left out (an empty tensor), running_var written
      CAPTURE(s.str());
      CAPTURE(outputs);
      int64_t N = s[0], C = s[1], sp = s.numel() / (N * C);
      auto x = random_floats(s.numel(), 21, -2.0f, 4.0f);
      auto sc = random_floats(C, 22, 0.5f, 2.0f), b = random_floats(C, 23), m = random_floats(C, 24),
           v = random_floats(C, 25, 0.1f, 3.0f);
      NormConfig cfg{NormKind::batch, s, 1e-3f};
      cfg.training = true;
      cfg.momentum = outputs == 1 ? 0.9f : 0.3f;
      auto op = Norm::create(ctx(), 0, cfg);
      Shape pc{C};
      Tensor y = ctx().alloc(s, DType::f32), rm = ctx().alloc(pc, DType::f32), rv = ctx().alloc(pc, DType::f32);
      std::vector<Tensor> outs =
          outputs == 1 ? std::vector<Tensor>{y} : std::vector<Tensor>{y, outputs == 2 ? Tensor{} : rm, rv};
      auto ec = ctx().exec();
      op->enqueue(std::vector<Tensor>{up(x, s), up(sc, pc), up(b, pc), up(m, pc), up(v, pc)}, outs, nullptr, ec);
      ctx().finish();
      std::vector<float> want_m, want_v;
      auto want = ref::batch_norm_training(x, int(N), int(C), sp, sc, b, m, v, 1e-3f, cfg.momentum, want_m, want_v);
      auto got = down<float>(y);
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-5);
      if (outputs == 3) {
        auto gm = down<float>(rm);
        CLDL_CHECK_CLOSE(gm.data(), want_m.data(), want_m.size(), 1e-5, 1e-6);
      }
      if (outputs >= 2) {
        auto gv = down<float>(rv);
        CLDL_CHECK_CLOSE(gv.data(), want_v.data(), want_v.size(), 1e-5, 1e-6);
      }
    }
  }
  NormConfig bad{NormKind::batch, Shape{2, 3}, 1e-5f};
  bad.training = true;
  bad.momentum = 1.5f;
  expect_invalid([&] { Norm::validate(bad); }, {"BatchNormalization", "momentum", "1.5"});
  bad.kind = NormKind::instance;
  expect_invalid([&] { Norm::validate(bad); }, {"InstanceNormalization", "training"});
}

TEST_CASE("InstanceNormalization and GroupNormalization") {
  struct Case { Shape s; NormKind k; int G; bool per_group; };
  const Case cases[] = {
      {Shape{1, 3, 7, 13}, NormKind::instance, 3, false}, {Shape{3, 5, 9}, NormKind::instance, 5, false},
      {Shape{2, 6, 7, 13}, NormKind::group, 3, false},    {Shape{2, 6, 7, 13}, NormKind::group, 2, true},
      {Shape{1, 4, 31, 37}, NormKind::group, 1, false},  {Shape{3, 5, 1, 1}, NormKind::group, 5, false},
  };
  for (const auto& c : cases) {
    CAPTURE(c.s.str());
    CAPTURE(c.G);
    int64_t N = c.s[0], C = c.s[1], sp = c.s.numel() / (N * C);
    auto x = random_floats(c.s.numel(), 11, -3.0f, 5.0f);
    int64_t np = c.per_group ? c.G : C;
    auto sc = random_floats(np, 12, 0.5f, 2.0f), b = random_floats(np, 13);
    NormConfig cfg{c.k, c.s, 1e-5f, c.G, c.per_group};
    auto op = Norm::create(ctx(), 0, cfg);
    auto got = down<float>(run_op(*op, {up(x, c.s), up(sc, Shape{np}), up(b, Shape{np})}, c.s));
    std::vector<float> scc(C), bc(C);
    for (int64_t ch = 0; ch < C; ++ch) {
      scc[ch] = c.per_group ? sc[ch / (C / c.G)] : sc[ch];
      bc[ch] = c.per_group ? b[ch / (C / c.G)] : b[ch];
    }
    auto want = ref::group_norm(x, int(N), int(C), sp, c.G, scc, bc, 1e-5f);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-4);
  }
}

TEST_CASE("BatchNorm folded into a dense layer gives BN(dense(x))") {
  const int64_t M = 5, K = 13, N = 3;
  auto x = random_floats(M * K, 21), w = random_floats(N * K, 22), bias = random_floats(N, 23);
  auto sc = random_floats(N, 24, 0.5f, 2.0f), b = random_floats(N, 25), m = random_floats(N, 26),
       v = random_floats(N, 27, 0.1f, 2.0f);
  auto wf = w, bf = bias;
  fold_batch_norm(wf, bf, sc, b, m, v, 1e-5f);
  std::vector<float> dense(M * N), folded(M * N);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t n = 0; n < N; ++n) {
      double a = bias[n], f = bf[n];
      for (int64_t k = 0; k < K; ++k) {
        a += double(x[i * K + k]) * w[n * K + k];
        f += double(x[i * K + k]) * wf[n * K + k];
      }
      dense[i * N + n] = float(a);
      folded[i * N + n] = float(f);
    }
  // Dense output [M, N] is N channels with spatial 1 per row: BN over channel = dim 1.
  auto want = ref::batch_norm(dense, int(M), int(N), 1, sc, b, m, v, 1e-5f);
  CLDL_CHECK_CLOSE(folded.data(), want.data(), want.size(), 1e-5, 1e-5);
  std::vector<float> short_bias(N - 1);
  expect_invalid([&] { fold_batch_norm(wf, short_bias, sc, b, m, v, 1e-5f); }, {"BatchNormalization", "folding"});
}

TEST_CASE("LRN across channels: odd and even window sizes, ranks 3 to 5, batch 1") {
  struct Case {
    Shape s;
    int size;
    float alpha, beta, bias;
  };
  const Case cases[] = {
      {Shape{1, 5, 7, 3}, 3, 2e-4f, 0.5f, 2.0f},
      {Shape{2, 7, 13}, 4, 1e-4f, 0.75f, 1.0f},
      {Shape{1, 3, 2, 3, 5}, 5, 0.1f, 0.75f, 1.5f},
      {Shape{3, 1, 6}, 1, 1.0f, 1.0f, 1.0f},
  };
  for (const auto& c : cases) {
    CAPTURE(c.s.str());
    CAPTURE(c.size);
    auto x = random_floats(size_t(c.s.numel()), 5, -3.0f, 3.0f);
    auto op = Lrn::create(ctx(), 0, {c.s, c.size, c.alpha, c.beta, c.bias});
    auto got = down<float>(run_op(*op, {up(x, c.s)}, c.s));
    const int64_t spatial = c.s.numel() / (c.s[0] * c.s[1]);
    auto want = ref::lrn(x, int(c.s[0]), int(c.s[1]), spatial, c.size, c.alpha, c.beta, c.bias);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
  }
  expect_invalid([&] { Lrn::validate({Shape{1, 3, 4}, 0}); }, {"LRN", "size", "0"});
}

TEST_CASE("bad norm configurations name the op, the argument and the value") {
  expect_invalid([] { Norm::validate({NormKind::group, Shape{1, 6, 4}, 1e-5f, 4}); },
                 {"GroupNormalization", "num_groups", "4", "6"});
  expect_invalid([] { Norm::validate({NormKind::batch, Shape{7}, 1e-5f}); }, {"BatchNormalization", "input X", "[7]"});
  expect_invalid([] { Norm::validate({NormKind::instance, Shape{1, 3, 4}, -1.0f}); },
                 {"InstanceNormalization", "epsilon", "-1"});
  auto op = Norm::create(ctx(), 0, {NormKind::instance, Shape{1, 3, 4}});
  Tensor x = ctx().alloc(Shape{1, 3, 4}, DType::f32), p = ctx().alloc(Shape{4}, DType::f32);
  auto ec = ctx().exec();
  Tensor outs[1] = {x};
  std::vector<Tensor> ins{x, p, p};
  expect_invalid([&] { op->enqueue(ins, outs, nullptr, ec); }, {"InstanceNormalization", "scale", "[4]", "[3]"});
}

}  // TEST_SUITE
