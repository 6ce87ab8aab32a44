// Sequence-model ops through the graph runtime (models/ops_rnn.cpp): a 2-layer LSTM built with the
// builder API (layer 0 reverse with ragged sequence_lens and initial_h/c, layer 1 forward reading layer
// 0's Y through a Reshape), run by the executor and compared with the plain C++ reference
// (tests/reference/rnn_ref). Tolerance |d| <= 2e-5 + 1e-4 |want| as in test_rnn.cpp. Plus the
// load-time errors naming the node.
#include <doctest/doctest.h>

#include <cmath>

#include "models/builder.hpp"
#include "tests/reference/rnn_ref.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

std::vector<float> vec(const HostTensor& h) { return {h.as<float>(), h.as<float>() + h.numel()}; }

RnnWeights lstm_weights(int64_t I, int64_t H, uint32_t seed) {
  RnnWeights w;
  w.W = test::random_tensor(Shape{1, 4 * H, I}, seed, -0.5f, 0.5f);
  w.R = test::random_tensor(Shape{1, 4 * H, H}, seed + 1, -0.5f, 0.5f);
  w.B = test::random_tensor(Shape{1, 8 * H}, seed + 2, -0.5f, 0.5f);
  return w;
}

}  // namespace

TEST_SUITE("onnx_seq") {

TEST_CASE("2-layer LSTM graph matches the reference") {
  const int64_t T = 7, B = 3, I = 5, H0 = 6, H1 = 9;
  RnnWeights w0 = lstm_weights(I, H0, 11), w1 = lstm_weights(H0, H1, 21);
  GraphBuilder b("lstm2", 17);
  auto x = b.input("x", DType::f32, Shape{T, B, I});
  auto lens = b.input("lens", DType::i32, Shape{B});
  auto h0 = b.input("h0", DType::f32, Shape{1, B, H0});
  auto c0 = b.input("c0", DType::f32, Shape{1, B, H0});
  auto l0 = b.op("LSTM",
                 {x, b.constant("W0", w0.W), b.constant("R0", w0.R), b.constant("B0", *w0.B), lens, h0, c0},
                 {{"hidden_size", H0}, {"direction", std::string("reverse")}}, 3);
  auto y0 = b.reshape(l0[0], {T, B, H0});  // [T, 1, B, H0] -> [T, B, H0]
  auto l1 = b.op("LSTM", {y0, b.constant("W1", w1.W), b.constant("R1", w1.R), b.constant("B1", *w1.B)},
                 {{"hidden_size", H1}}, 3);
  b.output(l1[0], "y");
  b.output(l1[1], "y_h");
  b.output(l1[2], "y_c");
  b.output(l0[1], "h_0");

  HostTensor X = test::random_tensor(Shape{T, B, I}, 1), Hi = test::random_tensor(Shape{1, B, H0}, 2),
             Ci = test::random_tensor(Shape{1, B, H0}, 3);
  std::vector<int32_t> L{7, 4, 1};
  auto m = test::compile_graph(b.build());
  auto out = m->session()->run({{"x", X}, {"lens", HostTensor::from<int32_t>(Shape{B}, L)}, {"h0", Hi}, {"c0", Ci}});

  RnnConfig c0cfg;
  c0cfg.cell = RnnCell::lstm, c0cfg.seq_length = T, c0cfg.batch = B, c0cfg.input_size = I, c0cfg.hidden_size = H0;
  c0cfg.direction = RnnDirection::reverse;
  auto hv = vec(Hi), cv = vec(Ci);
  auto r0 = ref::rnn_layer(c0cfg, w0, vec(X), &L, &hv, &cv);
  RnnConfig c1cfg = c0cfg;
  c1cfg.direction = RnnDirection::forward, c1cfg.input_size = H0, c1cfg.hidden_size = H1;
  auto r1 = ref::rnn_layer(c1cfg, w1, r0.Y, nullptr, nullptr, nullptr);

  auto check = [&](const char* name, const std::vector<float>& want, Shape shape) {
    CAPTURE(name);
    const HostTensor& got = out.at(name);
    REQUIRE(got.shape() == shape);
    CLDL_CHECK_CLOSE(got.as<float>(), want.data(), want.size(), 1e-4, 2e-5);
  };
  check("y", r1.Y, Shape{T, 1, B, H1});
  check("y_h", r1.Yh, Shape{1, B, H1});
  check("y_c", r1.Yc, Shape{1, B, H1});
  check("h_0", r0.Yh, Shape{1, B, H0});
}

TEST_CASE("LayerNormalization with only InvStdDev wanted (Mean to the node's scratch)") {
  // Host reference in double: rows of 13 over axis 1 of [5, 13]; tolerance 1e-4 relative + 1e-5.
  const int64_t R = 5, C = 13;
  HostTensor X = test::random_tensor(Shape{R, C}, 7, -2.0f, 3.0f), S = test::random_tensor(Shape{C}, 8),
             Bi = test::random_tensor(Shape{C}, 9);
  GraphBuilder b("ln", 17);
  auto x = b.input("x", DType::f32, Shape{R, C});
  auto outs = b.op("LayerNormalization", {x, b.constant("s", S), b.constant("b", Bi)},
                   {{"axis", int64_t(1)}, {"epsilon", 1e-3f}}, 3);
  Graph& g = b.graph();
  g.nodes.back().outputs[1].clear();  // Mean not wanted
  b.output(outs[0], "y");
  b.output(outs[2], "inv");
  auto m = test::compile_graph(b.build());
  auto out = m->session()->run({{"x", X}});
  std::vector<float> y(static_cast<size_t>(R * C)), inv(static_cast<size_t>(R));
  const float *xp = X.as<float>(), *sp = S.as<float>(), *bp = Bi.as<float>();
  for (int64_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (int64_t k = 0; k < C; ++k) mean += xp[r * C + k];
    mean /= double(C);
    for (int64_t k = 0; k < C; ++k) var += (xp[r * C + k] - mean) * (xp[r * C + k] - mean);
    double is = 1.0 / std::sqrt(var / double(C) + 1e-3);
    inv[size_t(r)] = float(is);
    for (int64_t k = 0; k < C; ++k) y[size_t(r * C + k)] = float((xp[r * C + k] - mean) * is * sp[k] + bp[k]);
  }
  REQUIRE(out.at("inv").shape() == Shape{R, 1});
  CLDL_CHECK_CLOSE(out.at("y").as<float>(), y.data(), y.size(), 1e-4, 1e-5);
  CLDL_CHECK_CLOSE(out.at("inv").as<float>(), inv.data(), inv.size(), 1e-4, 1e-5);
}

TEST_CASE("load-time errors name the node and the problem") {
  GraphBuilder b("bad", 17);
  auto x = b.input("x", DType::f32, Shape{4, 2, 3});
  auto w = b.input("w", DType::f32, Shape{1, 8, 3});  // a runtime W: not supported
  RnnWeights wt = lstm_weights(3, 2, 5);
  b.output(b.op("LSTM", {x, w, b.constant("R", wt.R)}, {{"hidden_size", int64_t(2)}})[0], "y");
  Graph g = b.build();
  auto msg = test::error_of([&] { prepare(g); });
  CHECK(msg.find("LSTM") != std::string::npos);
  CHECK(msg.find("W and R must be known at load") != std::string::npos);

  GraphBuilder b2("bad2", 17);
  auto x2 = b2.input("x", DType::f32, Shape{4, 2, 3});
  b2.output(b2.op("GRU", {x2, b2.constant("W", test::random_tensor(Shape{1, 6, 3}, 1)),
                          b2.constant("R", test::random_tensor(Shape{1, 6, 2}, 2))},
                  {{"hidden_size", int64_t(2)}, {"direction", std::string("sideways")}})[0], "y");
  Graph g2 = b2.build();
  msg = test::error_of([&] { prepare(g2); });
  CHECK(msg.find("GRU") != std::string::npos);
  CHECK(msg.find("sideways") != std::string::npos);
}

}  // TEST_SUITE
