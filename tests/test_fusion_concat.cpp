// Concat passes (models/fusion.cpp: concat-single, concat-chain) with the memory plan's in-place
// concatenation: DenseNet's block as torchvision exports it starts with a Concat of the block input alone.
// Each case checks what the passes made of the graph (so a broken pass cannot pass silently) and compares
// the outputs with a host reference, at batch 1 (parts written in place) and batch 2 (copies).
#include <cmath>

#include "tests/support/graph_util.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

using test::count_ops;

TEST_SUITE("fusion_concat") {
  TEST_CASE("DenseNet's block: a Concat of one input is that input, every Concat in place at batch 1") {
    // p = MaxPool(x); c0 = Concat(p); f1 = Sigmoid(c0); c1 = Concat(p, f1); f2 = Tanh(c1);
    // c2 = Concat(p, f1, f2); y = -c2. Channels 5 over 8x9 planes (odd; the parts 16-byte aligned).
    const int64_t C = 5, H = 16, W = 18, OH = 8, OW = 9, P = C * OH * OW;
    auto build = [&](int64_t N) {
      GraphBuilder b;
      auto x = b.input("x", DType::f32, Shape{N, C, H, W});
      auto p = b.max_pool(x, {2, 2}, {2, 2});
      auto c0 = b.op1("Concat", {p}, {{"axis", int64_t(1)}});
      auto f1 = b.op1("Sigmoid", {c0});
      auto c1 = b.op1("Concat", {p, f1}, {{"axis", int64_t(1)}});
      auto f2 = b.op1("Tanh", {c1});
      auto c2 = b.op1("Concat", {p, f1, f2}, {{"axis", int64_t(1)}});
      b.output(b.op1("Neg", {c2}), "y");
      return b.build();
    };
    for (int64_t N : {1, 2}) {
      INFO("batch " << N);
      auto m = test::compile_graph(build(N));
      CHECK(count_ops(m->graph(), "Concat") == 2);
      CHECK(count_ops(m->graph(), "Identity") == 0);
      int in_place = 0;
      for (auto& line : m->describe()) in_place += line.find("in place (inputs written") != std::string::npos;
      CHECK(in_place == (N == 1 ? 2 : 0));
      HostTensor x = test::random_tensor(Shape{N, C, H, W}, 3, -2, 2);
      auto out = m->session()->run({{"x", x}});
      std::vector<float> want(size_t(N * 4 * P));
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t i = 0; i < OH; ++i)
            for (int64_t j = 0; j < OW; ++j) {
              float mx = -INFINITY;
              for (int64_t di = 0; di < 2; ++di)
                for (int64_t dj = 0; dj < 2; ++dj)
                  mx = std::max(mx, x.as<float>()[((n * C + c) * H + 2 * i + di) * W + 2 * j + dj]);
              const int64_t k = (c * OH + i) * OW + j;
              const float f1 = 1.0f / (1.0f + std::exp(-mx));
              float* yn = want.data() + n * 4 * P;
              yn[k] = -mx, yn[P + k] = -f1, yn[2 * P + k] = -std::tanh(mx), yn[3 * P + k] = -std::tanh(f1);
            }
      REQUIRE(out["y"].shape() == Shape{N, 4 * C, OH, OW});
      CLDL_CHECK_CLOSE(out["y"].as<float>(), want.data(), want.size(), 1e-5, 1e-6);
    }
  }

  TEST_CASE("a Concat of one input that is a graph output keeps its value (as an Identity)") {
    GraphBuilder b;
    auto x = b.input("x", DType::f32, Shape{1, 3, 5});
    auto c = b.op1("Concat", {b.relu(x)}, {{"axis", int64_t(1)}});
    b.output(c);
    b.output(b.op1("Neg", {c}), "y");
    auto m = test::compile_graph(b.build());
    CHECK(count_ops(m->graph(), "Concat") == 0);
    HostTensor xv = test::random_tensor(Shape{1, 3, 5}, 4);
    auto out = m->session()->run({{"x", xv}});
    for (int64_t i = 0; i < 15; ++i) {
      const float r = std::max(xv.as<float>()[i], 0.0f);
      CHECK(out[c.name].as<float>()[i] == r);
      CHECK(out["y"].as<float>()[i] == -r);
    }
  }
}
