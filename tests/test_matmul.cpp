// MatMul (numpy broadcasting incl. 1-D operands) and Dense (x W^T + b, fused activation) against the
// reference. Tolerance: 1e-4 relative + 1e-5 absolute (GEMM-based).
#include "layers/matmul.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/cnn_ref.hpp"

using namespace cldl;
using namespace cldl::test;

TEST_SUITE("matmul") {

TEST_CASE("MatMul with broadcast batch dims and 1-D operands") {
  struct Case { Shape a, b; int64_t calls; };
  const Case cases[] = {
      {Shape{7, 13}, Shape{13, 5}, 1},          {Shape{3, 7, 13}, Shape{13, 5}, 1},
      {Shape{7, 13}, Shape{2, 13, 5}, 1},        {Shape{2, 3, 7, 13}, Shape{2, 3, 13, 5}, 1},
      {Shape{2, 1, 7, 13}, Shape{1, 3, 13, 5}, 2}, {Shape{13}, Shape{13, 5}, 1},
      {Shape{3, 7, 13}, Shape{13}, 1},           {Shape{13}, Shape{13}, 1},
      {Shape{13}, Shape{4, 13, 5}, 1},           {Shape{1, 7, 13}, Shape{5, 1, 13, 3}, 1},
  };
  for (const auto& c : cases) {
    CAPTURE(c.a.str());
    CAPTURE(c.b.str());
    auto a = random_floats(c.a.numel(), 1), b = random_floats(c.b.numel(), 2);
    ref::Dims od;
    auto want = ref::matmul(a, c.a.dims, b, c.b.dims, od);
    Shape so = MatMul::validate({c.a, c.b});
    REQUIRE(so == Shape(od));
    auto op = MatMul::create(ctx(), 0, {c.a, c.b});
    CHECK(op->gemm_calls() == c.calls);
    auto got = down<float>(run_op(*op, {up(a, c.a), up(b, c.b)}, so));
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-5);
  }
}

TEST_CASE("Dense with bias and fused activation, batch 1 and larger") {
  for (Shape s : {Shape{1, 13}, Shape{5, 13}, Shape{2, 3, 7}}) {
    for (bool bias : {false, true}) {
      const int64_t K = s.dims.back(), N = 5;
      auto x = random_floats(s.numel(), 3), w = random_floats(N * K, 4), b = random_floats(N, 5);
      DenseConfig cfg{s, N, bias, Activation(Act::tanh)};
      Shape so = Dense::validate(cfg);
      auto op = Dense::create(ctx(), 0, cfg);
      std::vector<Tensor> ins{up(x, s), up(w, Shape{N, K})};
      if (bias) ins.push_back(up(b, Shape{N}));
      auto got = down<float>(run_op(*op, ins, so));
      const int64_t M = s.numel() / K;
      std::vector<float> want(M * N);
      for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
          double acc = bias ? b[n] : 0.0;
          for (int64_t k = 0; k < K; ++k) acc += double(x[m * K + k]) * w[n * K + k];
          want[m * N + n] = std::tanh(float(acc));
        }
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-5);
    }
  }
}

TEST_CASE("bad MatMul / Dense configurations name the op, the argument and the value") {
  expect_invalid([] { MatMul::validate({Shape{3, 4}, Shape{5, 2}}); }, {"MatMul", "input B", "[5, 2]", "K = 4"});
  expect_invalid([] { MatMul::validate({Shape{2, 3, 4}, Shape{3, 4, 2}}); }, {"MatMul", "input 1", "[3]"});
  expect_invalid([] { MatMul::validate({Shape{}, Shape{3}}); }, {"MatMul", "input A", "scalar"});
  expect_invalid([] { Dense::validate({Shape{2, 3}, 0}); }, {"Dense", "units", "0"});
}

}  // TEST_SUITE
