// LSTM and GRU training (layers/rnn_backward.hpp, models/ops_rnn_backward.cpp; the backward itself is checked
// against finite differences in test_autodiff.cpp, suite "autodiff rnn"):
// - the training forward (LSTMTrain / GRUTrain, weights read at run time) gives the inference LSTM / GRU's Y, Y_h,
//   Y_c (tolerance 1e-5: the same math, sums in another order);
// - the Trainer on a tiny LSTM and a tiny GRU classifier exported by PyTorch (tests/data/train/make_rnn.py): every
//   step's loss and the final weights within 1e-5 + 1e-4 relative of PyTorch's;
// - errors: sequence_lens that is not full, clip.
#include <cmath>

#include "models/autodiff.hpp"
#include "models/builder.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "models/onnx_import.hpp"
#include "models/train.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

const std::string kDir = std::string(CLDL_SOURCE_DIR) + "/tests/data/train/";


struct Layer {
  const char* op;
  const char* direction;
  int64_t layout;
  int64_t linear_before_reset = 1;  // GRU
};

// y = LSTM / GRU(x, W, R, B, -, h0, c0) with its three (two) outputs; weights as constants or as inputs.
Graph rnn_graph(const Layer& l, bool weights_as_inputs, const std::map<std::string, HostTensor>& w) {
  const bool lstm = std::string(l.op) == "LSTM";
  GraphBuilder b("rnn", 14);
  std::vector<Value> args{b.input("x", DType::f32, w.at("x").shape())};
  for (const char* name : {"W", "R", "B"})
    args.push_back(weights_as_inputs ? b.input(name, DType::f32, w.at(name).shape()) : b.constant(name, w.at(name)));
  args.push_back(Value{});
  args.push_back(b.input("h0", DType::f32, w.at("h0").shape()));
  if (lstm) args.push_back(b.input("c0", DType::f32, w.at("c0").shape()));
  std::map<std::string, AttrValue> attrs{{"hidden_size", int64_t(7)}, {"direction", std::string(l.direction)},
                                         {"layout", l.layout}};
  if (!lstm) attrs["linear_before_reset"] = l.linear_before_reset;
  auto out = b.op(l.op, args, attrs, lstm ? 3 : 2);
  b.output(out[0], "Y");
  b.output(out[1], "Y_h");
  if (lstm) b.output(out[2], "Y_c");
  Graph g = b.build();
  if (weights_as_inputs) CHECK(make_rnn_weights_dynamic(g) == 1);
  return g;
}

// Two epochs of `case_name` as make_rnn.py ran them; checks every step's loss and the weights.
void run_case(const std::string& model, const std::string& case_name, TrainOptions o) {
  CAPTURE(case_name);
  o.batch = 3;
  o.shuffle = false;
  Trainer t(test::shared_ctx(), import_onnx_file(kDir + model), o);
  REQUIRE(t.weights().size() == 5);
  const HostTensor x = read_tensor_file(kDir + "rnn_x.npy"), y = read_tensor_file(kDir + "rnn_y.npy");
  std::vector<float> losses;
  for (int e = 0; e < 2; ++e) {
    auto r = t.epoch(x, y);
    REQUIRE(r.step_losses.size() == 3);
    losses.insert(losses.end(), r.step_losses.begin(), r.step_losses.end());
  }
  test::largest_difference(HostTensor::from<float>(Shape{6}, losses), read_tensor_file(kDir + case_name + "_losses.npy"),
                     "step losses", 1e-5, 1e-4);
  auto w = t.read_weights();
  for (auto& name : t.weights())
    test::largest_difference(w.at(name), read_tensor_file(kDir + case_name + "." + name + ".npy"), name, 1e-5, 1e-4);
}

}  // namespace

TEST_SUITE("rnn backward") {
  TEST_CASE("LSTMTrain / GRUTrain give the inference LSTM / GRU's outputs") {
    for (const Layer& l : {Layer{"LSTM", "forward", 0}, Layer{"LSTM", "bidirectional", 1}, Layer{"LSTM", "reverse", 0},
                           Layer{"GRU", "forward", 1}, Layer{"GRU", "bidirectional", 0},
                           Layer{"GRU", "reverse", 1, 0}, Layer{"GRU", "bidirectional", 0, 0}}) {
      const bool lstm = std::string(l.op) == "LSTM";
      const int64_t D = std::string(l.direction) == "bidirectional" ? 2 : 1, T = 5, B = 3, G = (lstm ? 4 : 3) * 7;
      std::map<std::string, HostTensor> w{
          {"x", test::random_tensor(l.layout ? Shape{B, T, 5} : Shape{T, B, 5}, 1)},
          {"W", test::random_tensor(Shape{D, G, 5}, 2, -0.5f, 0.5f)},
          {"R", test::random_tensor(Shape{D, G, 7}, 3, -0.5f, 0.5f)},
          {"B", test::random_tensor(Shape{D, 2 * G}, 4, -0.5f, 0.5f)},
          {"h0", test::random_tensor(l.layout ? Shape{B, D, 7} : Shape{D, B, 7}, 5)},
          {"c0", test::random_tensor(l.layout ? Shape{B, D, 7} : Shape{D, B, 7}, 6)}};
      std::map<std::string, HostTensor> feed{{"x", w["x"]}, {"h0", w["h0"]}};
      if (lstm) feed["c0"] = w["c0"];
      const auto want = test::run_graph(rnn_graph(l, false, w), feed);
      for (const char* name : {"W", "R", "B"}) feed[name] = w[name];
      const auto got = test::run_graph(rnn_graph(l, true, w), feed);
      for (const char* out : {"Y", "Y_h", "Y_c"}) {
        if (!lstm && std::string(out) == "Y_c") continue;
        test::largest_difference(got.at(out), want.at(out),
                           fmt::format("{} {} linear_before_reset {} {}", l.op, l.direction, l.linear_before_reset, out),
                           1e-5, 0);
      }
    }
  }

  TEST_CASE("an LSTM classifier trained with SGD and momentum: PyTorch's losses and weights") {
    TrainOptions o;
    o.optimizer = TrainOptimizer::sgd;
    o.lr = 0.2f;
    o.momentum = 0.9f;
    run_case("rnn_lstm.onnx", "rnn_lstm_sgd", o);
  }

  TEST_CASE("a GRU classifier (mean of Y over time) trained with Adam: PyTorch's losses and weights") {
    TrainOptions o;
    o.optimizer = TrainOptimizer::adam;
    o.lr = 0.02f;
    run_case("rnn_gru.onnx", "rnn_gru_adam", o);
  }

  TEST_CASE("errors name the node") {
    const int64_t T = 5, B = 3, G = 21;
    std::map<std::string, HostTensor> w{{"x", test::random_tensor(Shape{T, B, 5}, 1)},
                                        {"W", test::random_tensor(Shape{1, G, 5}, 2)},
                                        {"R", test::random_tensor(Shape{1, G, 7}, 3)},
                                        {"B", test::random_tensor(Shape{1, 2 * G}, 4)},
                                        {"h0", test::random_tensor(Shape{1, B, 7}, 5)}};
    SUBCASE("sequence_lens shorter than the sequence") {
      GraphBuilder b("rnn", 14);
      auto out = b.op("GRU",
                      {b.input("x", DType::f32, w["x"].shape()), b.input("W", DType::f32, w["W"].shape()),
                       b.constant("R", w["R"]), b.constant("B", w["B"]),
                       b.constant("lens", HostTensor::from<int32_t>(Shape{B}, std::vector<int32_t>{5, 4, 5}))},
                      {{"hidden_size", int64_t(7)}, {"linear_before_reset", int64_t(1)}}, 2);
      b.output(out[1], "Y_h");
      Graph g = b.build();
      CHECK_THROWS_WITH_AS(make_rnn_weights_dynamic(g),
                           doctest::Contains("training needs full sequences: sequence_lens 'lens'"), Error);
      // Full lengths are dropped.
      g.initializers["lens"] = HostTensor::from<int32_t>(Shape{B}, std::vector<int32_t>{5, 5, 5});
      CHECK(make_rnn_weights_dynamic(g) == 1);
    }
    SUBCASE("clip") {
      GraphBuilder b("rnn", 14);
      auto out = b.op("GRU",
                      {b.input("x", DType::f32, w["x"].shape()), b.input("W", DType::f32, w["W"].shape()),
                       b.constant("R", w["R"]), b.constant("B", w["B"])},
                      {{"hidden_size", int64_t(7)}, {"clip", 2.0f}}, 2);
      b.output(out[1], "Y_h");
      Graph g = b.build();
      CHECK(make_rnn_weights_dynamic(g) == 1);
      CHECK_THROWS_WITH_AS(test::compile_graph(std::move(g)),
                           doctest::Contains("node 'GRU_0' (ai.cldl.fused.GRUTrain): clip is not implemented for training"), Error);
    }
  }
}
