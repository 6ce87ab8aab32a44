// ONNX Gemm wiring (models/ops_gemm.cpp): a constant B with transB = 1 (PyTorch's nn.Linear export) is
// transposed once at load instead of packed on every call. Checked against the double-accumulating GEMM
// reference over odd shapes, M = 1 (a decode step), transA, alpha / beta, a broadcast C and a fused
// activation; B given as a graph input keeps the per-call path and must agree too.
#include <doctest/doctest.h>

#include <algorithm>
#include <tuple>

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
                 Case{4, 384, 128, false, 1, 1, true, false, true}, Case{3, 11, 6, false, 2, 1, false, false, false},
                 Case{5, 1024, 65, false, 1, 1, true, true, false}, Case{1, 2048, 64, false, 1, 1, false, false, false}}) {
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
    // On CPUs rows of 1024 floats would be packed per call: the constant copy gets padded rows instead.
    bool padded = false;
    for (auto& line : m->describe()) padded |= line.find("rows padded") != std::string::npos;
    if (test::shared_ctx()->device(0).info.type == DeviceType::cpu) CHECK(padded == (!c.b_input && c.N % 1024 == 0));
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

TEST_CASE("MatMul by a constant B whose rows are 1024 floats apart: padded once on CPUs, same numbers") {
  // [B, S, K] x [K, N] (+ bias: the matmul-bias fusion) as transformers export nn.Linear; N = 1024 and 3072.
  for (auto [rows, K, N, bias] : {std::tuple<int64_t, int64_t, int64_t, bool>{7, 96, 1024, true}, {1, 64, 3072, false},
                                  {3, 130, 2048, true}}) {
    CAPTURE(rows);
    CAPTURE(N);
    GraphBuilder b("matmul_pad", 17);
    HostTensor A = test::random_tensor(Shape{1, rows, K}, 4), W = test::random_tensor(Shape{K, N}, 5),
               C = test::random_tensor(Shape{N}, 6);
    auto a = b.input("a", DType::f32, A.shape());
    auto y = b.op1("MatMul", {a, b.constant("w", W)});
    if (bias) y = b.add(y, b.constant("c", C));
    b.output(y, "y");
    auto m = test::compile_graph(b.build());
    bool padded = false;
    for (auto& line : m->describe()) padded |= line.find("constant B rows padded") != std::string::npos;
    if (test::shared_ctx()->device(0).info.type == DeviceType::cpu) CHECK(padded);
    auto out = m->session()->run({{"a", A}}).at("y");
    REQUIRE(out.shape() == Shape{1, rows, N});
    auto want = test::gemm_ref(A.as<float>(), W.as<float>(), rows, N, K, false, false, 1.0f);
    if (bias)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < N; ++j) want[size_t(i * N + j)] += C.as<float>()[j];
    CLDL_CHECK_CLOSE(out.as<float>(), want.data(), want.size(), 1e-4, 1e-5 * double(K));
  }
}

}  // TEST_SUITE
