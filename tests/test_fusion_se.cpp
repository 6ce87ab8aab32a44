// Squeeze-excitation fusion (models/fusion_se.cpp, layers/se.hpp, kernels/se.cl): the gate blocks as
// torchvision exports them (GlobalAveragePool or ReduceMean -> Conv 1x1 -> ReLU / SiLU -> Conv 1x1 ->
// HardSigmoid / Sigmoid -> Mul) become one SqueezeExcite node. Each case checks that the block was fused
// (so a broken pass cannot pass silently), then compares the output with a host reference computed here
// in double precision and with the same graph run unfused (CLDL_SKIP_PASSES), on odd channel counts, batch
// 1 and 2, maps small enough for the one-command form and large enough for the split one.
#include <cmath>
#include <cstdlib>
#include <functional>

#include "layers/se.hpp"
#include "reference/cnn_harness.hpp"
#include "tests/support/graph_util.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

using test::count_ops;

enum class Hidden { relu, silu };
enum class Gate { sigmoid, hard_sigmoid };

struct Block {
  Shape x;
  int64_t hidden;
  Hidden act1 = Hidden::relu;
  Gate act2 = Gate::hard_sigmoid;
  bool biases = true;
  bool reduce_mean = false;  // the pool as ReduceMean over the spatial axes
};

struct Weights {
  HostTensor w1, b1, w2, b2;
};

Weights weights_of(const Block& k) {
  const int64_t C = k.x[1];
  std::vector<int64_t> d1{k.hidden, C}, d2{C, k.hidden};
  for (size_t a = 2; a < k.x.rank(); ++a) d1.push_back(1), d2.push_back(1);
  return {test::random_tensor(Shape(d1), 11, -0.5f, 0.5f), test::random_tensor(Shape{k.hidden}, 12),
          test::random_tensor(Shape(d2), 13, -0.5f, 0.5f), test::random_tensor(Shape{C}, 14)};
}

Graph se_graph(const Block& k, const Weights& w) {
  GraphBuilder b("se", 13);
  auto x = b.input("x", DType::f32, k.x);
  Value p;
  if (k.reduce_mean) {
    std::vector<int64_t> axes;
    for (size_t a = 2; a < k.x.rank(); ++a) axes.push_back(int64_t(a));
    p = b.op1("ReduceMean", {x}, {{"axes", axes}, {"keepdims", int64_t(1)}});
  } else {
    p = b.op1("GlobalAveragePool", {x});
  }
  const std::vector<int64_t> strides(k.x.rank() - 2, 1), pads(2 * (k.x.rank() - 2), 0);
  auto conv = [&](Value in, const char* wn, const HostTensor& wt, const char* bn, const HostTensor& bt) {
    return k.biases ? b.conv(in, b.constant(wn, wt), b.constant(bn, bt), strides, pads)
                    : b.conv(in, b.constant(wn, wt), {}, strides, pads);
  };
  auto h = conv(p, "w1", w.w1, "b1", w.b1);
  h = k.act1 == Hidden::relu ? b.relu(h) : b.op1("Mul", {h, b.op1("Sigmoid", {h})});
  auto s = conv(h, "w2", w.w2, "b2", w.b2);
  s = k.act2 == Gate::sigmoid ? b.op1("Sigmoid", {s})
                              : b.op1("HardSigmoid", {s}, {{"alpha", 1.0f / 6.0f}, {"beta", 0.5f}});
  b.output(b.op1("Mul", {x, s}), "y");
  return b.build();
}

// y[n, c, i] in double precision.
std::vector<double> reference(const Block& k, const Weights& w, const HostTensor& x) {
  const int64_t N = k.x[0], C = k.x[1], HW = k.x.numel() / (N * C), CR = k.hidden;
  std::vector<double> y(size_t(k.x.numel()));
  const float* xp = x.as<float>();
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> pooled(static_cast<size_t>(C)), hid(static_cast<size_t>(CR));
    for (int64_t c = 0; c < C; ++c) {
      double s = 0;
      for (int64_t i = 0; i < HW; ++i) s += xp[(n * C + c) * HW + i];
      pooled[size_t(c)] = s / double(HW);
    }
    for (int64_t j = 0; j < CR; ++j) {
      double s = k.biases ? w.b1.as<float>()[j] : 0.0;
      for (int64_t c = 0; c < C; ++c) s += double(w.w1.as<float>()[j * C + c]) * pooled[size_t(c)];
      hid[size_t(j)] = k.act1 == Hidden::relu ? std::max(s, 0.0) : s / (1 + std::exp(-s));
    }
    for (int64_t c = 0; c < C; ++c) {
      double s = k.biases ? w.b2.as<float>()[c] : 0.0;
      for (int64_t j = 0; j < CR; ++j) s += double(w.w2.as<float>()[c * CR + j]) * hid[size_t(j)];
      const double g = k.act2 == Gate::sigmoid ? 1 / (1 + std::exp(-s)) : std::min(1.0, std::max(0.0, s / 6 + 0.5));
      for (int64_t i = 0; i < HW; ++i) y[size_t((n * C + c) * HW + i)] = xp[(n * C + c) * HW + i] * g;
    }
  }
  return y;
}

struct Run {
  Graph g;
  HostTensor y;
};

Run prepare_and_run(Graph g, const HostTensor& x, bool fuse = true) {
  Run r;
  test::prepare_skipping(g, fuse ? "" : "squeeze-excitation");
  r.g = g;
  r.y = CompiledModel::compile(test::shared_ctx(), std::move(g))->session()->run({{"x", x}})["y"];
  return r;
}

void check_block(const Block& k, const std::string& algorithm_part) {
  INFO("x " << k.x.str() << " hidden " << k.hidden);
  Weights w = weights_of(k);
  HostTensor x = test::random_tensor(k.x, 7, -2, 2);
  Run fused = prepare_and_run(se_graph(k, w), x);
  REQUIRE(count_ops(fused.g, "SqueezeExcite") == 1);
  CHECK(count_ops(fused.g, "Conv") == 0);
  CHECK(count_ops(fused.g, "GlobalAveragePool") + count_ops(fused.g, "ReduceMean") == 0);
  auto cm = CompiledModel::compile(test::shared_ctx(), fused.g);
  std::string desc;
  for (auto& line : cm->describe()) desc += line + "\n";
  CHECK(desc.find(algorithm_part) != std::string::npos);
  Run plain = prepare_and_run(se_graph(k, w), x, false);
  CHECK(count_ops(plain.g, "SqueezeExcite") == 0);
  std::vector<double> want = reference(k, w, x);
  REQUIRE(fused.y.shape() == k.x);
  for (int64_t i = 0; i < k.x.numel(); ++i) {
    INFO("element " << i);
    CHECK(fused.y.as<float>()[i] == doctest::Approx(want[size_t(i)]).epsilon(1e-5).scale(1.0));
    CHECK(fused.y.as<float>()[i] == doctest::Approx(plain.y.as<float>()[i]).epsilon(1e-5).scale(1.0));
  }
}

}  // namespace

TEST_SUITE("fusion_se") {
  TEST_CASE("MobileNetV3's block (ReLU, HardSigmoid) at batch 1, one command") {
    check_block({Shape{1, 13, 7, 7}, 5}, "one command");
    check_block({Shape{1, 96, 14, 14}, 24}, "one command");
  }

  TEST_CASE("EfficientNet's block (SiLU, Sigmoid) at batch 2, an odd map") {
    check_block({Shape{2, 37, 9, 11}, 7, Hidden::silu, Gate::sigmoid}, "one command");
  }

  TEST_CASE("a map too large for one work-group runs split: pool, gate, scale") {
    check_block({Shape{2, 37, 43, 47}, 9, Hidden::silu, Gate::sigmoid}, "pool (");
    check_block({Shape{1, 33, 45, 45}, 8, Hidden::relu, Gate::hard_sigmoid, false}, "pool (");
  }

  TEST_CASE("convolutions without biases, ReduceMean as the pool, one spatial dim") {
    check_block({Shape{1, 19, 5, 3}, 3, Hidden::relu, Gate::sigmoid, false}, "one command");
    check_block({Shape{2, 21, 6, 5}, 4, Hidden::silu, Gate::hard_sigmoid, true, true}, "one command");
    check_block({Shape{1, 17, 29}, 6, Hidden::relu, Gate::sigmoid, true, true}, "one command");
  }

  TEST_CASE("blocks that are not squeeze-excitation stay as they are") {
    const Shape xs{1, 12, 5, 5};
    Block k{xs, 4};
    Weights w = weights_of(k);
    HostTensor x = test::random_tensor(xs, 3);
    {  // the gate scales another tensor than the one pooled
      GraphBuilder b("other", 13);
      auto xi = b.input("x", DType::f32, xs);
      auto s = b.op1("Sigmoid", {b.conv(b.relu(b.conv(b.op1("GlobalAveragePool", {xi}), b.constant("w1", w.w1))),
                                        b.constant("w2", w.w2))});
      b.output(b.op1("Mul", {b.relu(xi), s}), "y");
      Graph g = b.build();
      prepare(g);
      CHECK(count_ops(g, "SqueezeExcite") == 0);
    }
    {  // the hidden vector is a graph output too
      GraphBuilder b("shared", 13);
      auto xi = b.input("x", DType::f32, xs);
      auto h = b.relu(b.conv(b.op1("GlobalAveragePool", {xi}), b.constant("w1", w.w1)));
      auto s = b.op1("Sigmoid", {b.conv(h, b.constant("w2", w.w2))});
      b.output(b.op1("Mul", {xi, s}), "y");
      b.output(h, "h");
      Graph g = b.build();
      prepare(g);
      CHECK(count_ops(g, "SqueezeExcite") == 0);
    }
    {  // a 3x3 second convolution
      GraphBuilder b("conv3", 13);
      auto xi = b.input("x", DType::f32, xs);
      auto p = b.op1("GlobalAveragePool", {xi});
      auto h = b.relu(b.conv(p, b.constant("w1", w.w1)));
      auto s =
          b.op1("Sigmoid",
                {b.conv(h, b.constant("w2", test::random_tensor(Shape{12, 4, 3, 3}, 5)), {}, {1, 1}, {1, 1, 1, 1})});
      b.output(b.op1("Mul", {xi, s}), "y");
      Graph g = b.build();
      prepare(g);
      CHECK(count_ops(g, "SqueezeExcite") == 0);
    }
  }

  TEST_CASE("the op with many work-items per image (the GPU form), both forms, batch 3") {
    const Block k{Shape{3, 45, 6, 7}, 13, Hidden::silu, Gate::hard_sigmoid};
    const Weights w = weights_of(k);
    const HostTensor x = test::random_tensor(k.x, 9, -2, 2);
    const std::vector<double> want = reference(k, w, x);
    auto vec = [](const HostTensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); };
    for (size_t items : {size_t(64), size_t(4)})
      for (int64_t whole : {int64_t(0), int64_t(1)}) {
        INFO("items " << items << (whole ? ", split" : ", one command"));
        SqueezeExciteConfig cfg;
        cfg.input = k.x;
        cfg.hidden = k.hidden;
        cfg.act1 = Activation(Act::silu);
        cfg.act2 = Activation(Act::hard_sigmoid, 1.0f / 6.0f, 0.5f);
        cfg.whole_block_elements = whole;
        cfg.work_items = items;
        auto op = SqueezeExcite::create(test::ctx(), 0, cfg);
        CHECK(op->algorithm().find(whole ? "pool (" : "one command") != std::string::npos);
        auto got = test::down<float>(
            test::run_op(*op,
                         {test::up(vec(x), k.x), test::up(vec(w.w1), w.w1.shape()), test::up(vec(w.b1), w.b1.shape()),
                          test::up(vec(w.w2), w.w2.shape()), test::up(vec(w.b2), w.b2.shape())},
                         k.x));
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) {
          INFO("element " << i);
          CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-5).scale(1.0));
        }
      }
  }

  TEST_CASE("a SqueezeExcite node with weights of the wrong shape is an error naming the node and input") {
    GraphBuilder b("bad", 13);
    const Shape xs{1, 8, 3, 3};
    auto xi = b.input("x", DType::f32, xs);
    auto outs = b.op("SqueezeExcite",
                     {xi, b.constant("w1", test::random_tensor(Shape{2, 7, 1, 1}, 1)),
                      b.constant("b1", test::random_tensor(Shape{2}, 2)),
                      b.constant("w2", test::random_tensor(Shape{8, 2, 1, 1}, 3)),
                      b.constant("b2", test::random_tensor(Shape{8}, 4))},
                     {{"act1", int64_t(Act::relu)}, {"act2", int64_t(Act::sigmoid)}}, 1, kFusedDomain);
    b.output(outs[0], "y");
    Graph g = b.build();
    g.nodes.back().name = "se_bad";
    try {
      prepare(g);
      FAIL("no error");
    } catch (const Error& e) {
      const std::string m = e.what();
      CHECK(m.find("SqueezeExcite") != std::string::npos);
      CHECK(m.find("W1") != std::string::npos);
    }
  }
}
