// General constant folding (models/const_fold.hpp): nodes whose inputs are all constant are evaluated on
// the device when a plan is made. Checked against host references: the folded nodes are gone from the
// plan and the outputs are right; random ops and nodes that read run-time data stay.
#include <cmath>

#include "models/model.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

TEST_SUITE("const_fold") {
  TEST_CASE("a transposed weight and a chain on constants fold; run-time nodes and random draws stay") {
    const int64_t M = 3, K = 7, N = 5;
    HostTensor x = test::random_tensor(Shape{M, K}, 1), w = test::random_tensor(Shape{N, K}, 2),
               v = test::random_tensor(Shape{N}, 3, 0.1f, 2.0f);
    GraphBuilder b("fold", 17);
    auto xi = b.input("x", DType::f32, Shape{M, K});
    auto wt = b.op1("Transpose", {b.constant("w", w)}, {{"perm", std::vector<int64_t>{1, 0}}});  // [K, N]
    auto s = b.op1("Sqrt", {b.op1("Abs", {b.constant("v", v)})});
    auto y = b.op1("Mul", {b.matmul(xi, wt), s});
    b.output(y, "y");
    HostTensor half = HostTensor::from<float>(Shape{N}, std::vector<float>(size_t(N), 0.5f));
    b.output(b.op1("Bernoulli", {b.constant("p", half)}, {{"seed", 5.0f}}), "r");
    auto m = Model::create(test::shared_ctx(), b.build());
    auto plan = m->plan(m->signature({{"x", x}}));
    for (auto& n : plan->graph().nodes) {
      CHECK(n.op_type != "Transpose");
      CHECK(n.op_type != "Sqrt");
      CHECK(n.op_type != "Abs");
    }
    bool random_kept = false;
    for (auto& n : plan->graph().nodes) random_kept |= n.op_type == "Bernoulli";
    CHECK(random_kept);
    auto out = m->session()->run({{"x", x}});
    REQUIRE(out["y"].shape() == Shape{M, N});
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += double(x.as<float>()[i * K + k]) * w.as<float>()[j * K + k];
        CHECK(out["y"].as<float>()[i * N + j] ==
              doctest::Approx(acc * std::sqrt(std::fabs(double(v.as<float>()[j])))).epsilon(1e-5).scale(1.0));
      }
  }
}
