// ONNX Gemm wiring (models/ops_gemm.cpp): a constant B with transB = 1 (PyTorch's nn.Linear export) is
// transposed once at load instead of packed on every call. Checked against the double-accumulating GEMM
// reference over odd shapes, M = 1 (a decode step), transA, alpha / beta, a broadcast C and a fused
// activation; B given as a graph input keeps the per-call path and must agree too.
#include <doctest/doctest.h>

#include <algorithm>

#include "models/builder.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using namespace cldl::graph;

TEST_SUITE("onnx_gemm") {

TEST_CASE("Gemm with a constant transposed B equals the reference") {
  struct Case {
    int64_t M, N, K;
    bool ta;
    float alpha, beta;
    bool bias, relu, b_input;
  };
  for (Case c : {Case{1, 63, 128, false, 1, 1, true, false, false}, Case{7, 13, 5, false, 1, 1, true, true, false},
                 Case{1, 1, 1, false, 1, 1, false, false, false}, Case{9, 17, 33, true, 0.7f, 0.5f, true, false, false},
                 Case{4, 384, 128, false, 1, 1, true, false, true}, Case{3, 11, 6, false, 2, 1, false, false, false}}) {
    CAPTURE(c.M);
    CAPTURE(c.N);
    CAPTURE(c.K);
    CAPTURE(c.ta);
    CAPTURE(c.b_input);
    GraphBuilder b("gemm_const", 17);
    HostTensor A = test::random_tensor(c.ta ? Shape{c.K, c.M} : Shape{c.M, c.K}, 1);
    HostTensor W = test::random_tensor(Shape{c.N, c.K}, 2), C = test::random_tensor(Shape{c.N}, 3);
    auto a = b.input("a", DType::f32, A.shape());
    auto w = c.b_input ? b.input("w", DType::f32, W.shape()) : b.constant("w", W);
    std::map<std::string, AttrValue> attrs{{"transA", int64_t(c.ta)}, {"transB", int64_t(1)}, {"alpha", c.alpha},
                                           {"beta", c.beta}};
    std::vector<Value> ins{a, w};
    if (c.bias) ins.push_back(b.constant("c", C));
    auto y = b.op1("Gemm", ins, attrs);
    if (c.relu) y = b.relu(y);
    b.output(y, "y");
    auto m = test::compile_graph(b.build());
    bool transposed = false;
    for (auto& line : m->describe()) transposed |= line.find("constant B transposed at load") != std::string::npos;
    CHECK(transposed == !c.b_input);
    std::map<std::string, HostTensor> feed{{"a", A}};
    if (c.b_input) feed["w"] = W;
    auto out = m->session()->run(feed).at("y");
    REQUIRE(out.shape() == Shape{c.M, c.N});
    auto want = test::gemm_ref(A.as<float>(), W.as<float>(), c.M, c.N, c.K, c.ta, true, c.alpha);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < c.N; ++j) {
        float& v = want[size_t(i * c.N + j)];
        if (c.bias) v += c.beta * C.as<float>()[j];
        if (c.relu) v = std::max(v, 0.0f);
      }
    CLDL_CHECK_CLOSE(out.as<float>(), want.data(), want.size(), 1e-4, 1e-5 * double(c.K));
  }
}

}  // TEST_SUITE
