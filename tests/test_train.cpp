// The training session (models/train.hpp) against PyTorch: tests/data/train holds a tiny CNN (Conv, ReLU, MaxPool,
// Flatten, Gemm: every op the digits CNN has) in ONNX with PyTorch's initialisation, its data, and per case the 6
// step losses and the weights PyTorch reached after two epochs of batches 3, 3, 1 (tests/data/train/make.py says
// how they were made). Tolerance: 1e-5 absolute + 1e-4 relative per loss and weight (the largest differences seen
// are about 1e-6: fp32 sums in another order). Also the batching along an axis, the written ONNX file, and errors.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "models/builder.hpp"
#include "models/control_flow.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "models/onnx_import.hpp"
#include "models/passes.hpp"
#include "models/train.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

const std::string kDir = std::string(CLDL_SOURCE_DIR) + "/tests/data/train/";

HostTensor load(const std::string& f) { return read_tensor_file(kDir + f); }

// PyTorch's values within 1e-5 + 1e-4 relative.
void check_close(const HostTensor& got, const HostTensor& want, const std::string& what) {
  test::largest_difference(got, want, what, 1e-5, 1e-4);
}

// Two epochs of `case_name` as make.py ran them; checks every step's loss and the weights.
void run_case(const std::string& case_name, TrainOptions o, const HostTensor& labels) {
  CAPTURE(case_name);
  o.batch = 3;
  o.shuffle = false;
  Trainer t(test::shared_ctx(), import_onnx_file(kDir + "model.onnx"), o);
  REQUIRE(t.weights().size() == 4);
  const HostTensor x = load("x.npy");
  std::vector<float> losses;
  for (int e = 0; e < 2; ++e) {
    auto r = t.epoch(x, labels);
    REQUIRE(r.step_losses.size() == 3);
    losses.insert(losses.end(), r.step_losses.begin(), r.step_losses.end());
  }
  CHECK(t.steps_done() == 6);
  check_close(HostTensor::from<float>(Shape{6}, losses), load(case_name + "_losses.npy"), "step losses");
  auto w = t.read_weights();
  for (auto& name : t.weights()) check_close(w.at(name), load(case_name + "." + name + ".npy"), name);
}

}  // namespace

TEST_SUITE("train") {
  TEST_CASE("SGD with Nesterov momentum, cross entropy: the losses and weights PyTorch gives") {
    TrainOptions o;
    o.optimizer = TrainOptimizer::sgd;
    o.lr = 0.1f;
    o.momentum = 0.9f;
    o.nesterov = true;
    run_case("sgd_nesterov", o, load("y.npy"));
  }

  TEST_CASE("Adam, cross entropy") {
    TrainOptions o;
    o.optimizer = TrainOptimizer::adam;
    o.lr = 0.01f;
    run_case("adam", o, load("y.npy"));
  }

  TEST_CASE("mse, SGD with momentum and weight decay") {
    TrainOptions o;
    o.loss = TrainLoss::mse;
    o.lr = 0.05f;
    o.momentum = 0.5f;
    o.weight_decay = 0.01f;
    run_case("mse_sgd", o, load("t.npy"));
  }

  // make.py's schedule_cases: warm-up 2, cosine over the 6 steps to lr / 10, gradients clipped to norm 0.6 (the
  // data has steps with norms 0.44 to 1.15, so some are clipped and some not).
  TEST_CASE("cosine schedule with warm-up and gradient clipping, SGD and Adam: PyTorch's losses and weights") {
    for (bool adam : {false, true}) {
      TrainOptions o;
      o.optimizer = adam ? TrainOptimizer::adam : TrainOptimizer::sgd;
      o.lr = adam ? 0.02f : 0.2f;
      o.momentum = 0.9f;
      o.schedule = LrSchedule::cosine;
      o.warmup = 2;
      o.total_steps = 6;
      o.min_lr = o.lr / 10;
      o.clip_norm = 0.6f;
      run_case(adam ? "adam_cosine_clip" : "sgd_cosine_clip", o, load("y.npy"));
    }
  }

  TEST_CASE("lr_at: constant, warm-up, cosine to min_lr and after its end") {
    TrainOptions o;
    o.lr = 0.5f;
    CHECK(lr_at(o, 0) == 0.5f);
    CHECK(lr_at(o, 1000) == 0.5f);
    o.warmup = 4;
    CHECK(lr_at(o, 0) == doctest::Approx(0.125));
    CHECK(lr_at(o, 2) == doctest::Approx(0.375));
    CHECK(lr_at(o, 3) == 0.5f);
    o.warmup = 0;
    o.schedule = LrSchedule::cosine;
    o.total_steps = 10;
    o.min_lr = 0.1f;
    CHECK(lr_at(o, 0) == doctest::Approx(0.5));
    CHECK(lr_at(o, 5) == doctest::Approx(0.3));
    CHECK(lr_at(o, 10) == doctest::Approx(0.1));
    CHECK(lr_at(o, 11) == doctest::Approx(0.1));
    o.warmup = 5;
    CHECK(lr_at(o, 1) == doctest::Approx(0.4 * (0.1 + 0.4 * 0.5 * (1 + std::cos(M_PI * 0.1)))));
  }

  TEST_CASE("BatchNorm (training mode) + Dropout(0), SGD: losses, weights and running statistics as PyTorch's") {
    TrainOptions o;
    o.lr = 0.1f;
    o.momentum = 0.9f;
    o.batch = 3;  // 3, 3, 1: the last batch's statistics are over 1 x 5 x 6 values per channel
    o.shuffle = false;
    Trainer t(test::shared_ctx(), import_onnx_file(kDir + "model_bn.onnx"), o);
    REQUIRE(t.weights().size() == 6);  // conv, bn scale / bias, fc: not the running mean / var
    std::vector<float> losses;
    for (int e = 0; e < 2; ++e) {
      auto r = t.epoch(load("x.npy"), load("y.npy"));
      losses.insert(losses.end(), r.step_losses.begin(), r.step_losses.end());
    }
    check_close(HostTensor::from<float>(Shape{6}, losses), load("bn_sgd_losses.npy"), "step losses");
    auto w = t.read_weights();
    REQUIRE(w.size() == 8);
    for (auto& [name, h] : w) check_close(h, load("bn_sgd." + name + ".npy"), name);
    // The written model has the running statistics; ONNX Runtime's output of it is checked by train_vs_torch.py.
    const std::string out = (std::filesystem::temp_directory_path() / "cldl_test_train_bn.onnx").string();
    t.save_onnx(kDir + "model_bn.onnx", out);
    Graph g = import_onnx_file(out);
    std::remove(out.c_str());
    check_close(g.initializers.at("bn.running_var"), load("bn_sgd.bn.running_var.npy"), "written running_var");
  }

  TEST_CASE("Dropout 0.5 trains with a mask per step (not the identity), reproducibly from the seed") {
    auto first_losses = [](const char* model, uint64_t seed) {
      TrainOptions o;
      o.batch = 7;
      o.shuffle = false;
      o.seed = seed;
      Trainer t(test::shared_ctx(), import_onnx_file(kDir + model), o);
      std::vector<float> l;
      for (int s = 0; s < 3; ++s) l.push_back(t.step(load("x.npy"), load("y.npy")));
      return l;
    };
    const auto plain = first_losses("model_bn.onnx", 0), a = first_losses("model_bn_drop.onnx", 0),
               again = first_losses("model_bn_drop.onnx", 0), other = first_losses("model_bn_drop.onnx", 1);
    for (size_t k = 0; k < 3; ++k) {
      CAPTURE(k);
      CHECK(std::isfinite(a[k]));
      CHECK(a[k] != plain[k]);
      CHECK(a[k] == again[k]);
    }
    CHECK(a != other);
  }

  TEST_CASE("the written model holds the trained weights and runs") {
    TrainOptions o;
    o.batch = 4;
    o.seed = 5;  // shuffled
    Trainer t(test::shared_ctx(), import_onnx_file(kDir + "model.onnx"), o);
    t.epoch(load("x.npy"), load("y.npy"));
    const std::string out = (std::filesystem::temp_directory_path() / "cldl_test_train.onnx").string();
    t.save_onnx(kDir + "model.onnx", out);
    Graph g = import_onnx_file(out);
    std::remove(out.c_str());
    auto w = t.read_weights();
    for (auto& name : t.weights()) {
      CAPTURE(name);
      REQUIRE(g.initializers.count(name));
      const HostTensor& h = g.initializers.at(name);
      REQUIRE(h.shape() == w.at(name).shape());
      for (int64_t k = 0; k < h.numel(); ++k) REQUIRE(h.as<float>()[k] == w.at(name).as<float>()[k]);
    }
    // The trained weights differ from the initial ones, and the model runs (batch 1).
    Graph init = import_onnx_file(kDir + "model.onnx");
    CHECK(init.initializers.at("fc.weight").as<float>()[0] != w.at("fc.weight").as<float>()[0]);
    auto y = Model::create(test::shared_ctx(), std::move(g))->session()->run({{"x", take_along(load("x.npy"), 0, {6})}});
    CHECK(y.at("logits").shape() == Shape{1, 4});
  }

  TEST_CASE("cldl train: the same step losses as the C++ session, a model cldl run loads, errors") {
    const std::string cli = CLDL_CLI_PATH, dir = test::temp_dir("train-cli"), out = dir + "/trained.onnx";
    const std::string common = cli + " train " + kDir + "model.onnx --device " + test::device_spec() + " --out " + out,
                      base = common + " --input x=" + kDir + "x.npy --labels " + kDir + "y.npy";
    std::string text;
    REQUIRE_MESSAGE(test::run_command(base + " --epochs 2 --batch 3 --optimizer sgd --lr 0.1 --momentum 0.9 "
                                             "--nesterov --no-shuffle --json", text) == 0, text);
    const auto j = nlohmann::json::parse(text.substr(text.find('{')));
    REQUIRE(j["epochs"].size() == 2);
    const HostTensor want = load("sgd_nesterov_losses.npy");
    int k = 0;
    for (auto& e : j["epochs"])
      for (auto& l : e["step_losses"]) CHECK(std::fabs(l.get<double>() - want.as<float>()[k++]) <= 1e-5);
    CHECK(k == 6);
    // The cosine over both epochs' 6 steps (the CLI counts them), warm-up and clipping: make.py's sgd_cosine_clip.
    REQUIRE_MESSAGE(test::run_command(base + " --epochs 2 --batch 3 --optimizer sgd --lr 0.2 --momentum 0.9 "
                                             "--schedule cosine --warmup 2 --min-lr 0.02 --clip-norm 0.6 "
                                             "--no-shuffle --json", text) == 0, text);
    const auto jc = nlohmann::json::parse(text.substr(text.find('{')));
    const HostTensor want_c = load("sgd_cosine_clip_losses.npy");
    k = 0;
    for (auto& e : jc["epochs"])
      for (auto& l : e["step_losses"]) CHECK(std::fabs(l.get<double>() - want_c.as<float>()[k++]) <= 1e-5);
    CHECK(k == 6);
    CHECK(jc["epochs"][1]["lr"].get<double>() == doctest::Approx(0.02 + 0.18 * 0.5 * (1 + std::cos(M_PI * 5 / 6))));
    REQUIRE_MESSAGE(test::run_command(cli + " run " + out + " --input x=" + kDir + "x.npy --device " +
                                          test::device_spec(), text) == 0, text);
    CHECK(text.find("logits") != std::string::npos);
    // Float labels for cross_entropy; a model input that does not exist.
    CHECK(test::run_command(common + " --input x=" + kDir + "x.npy --labels " + kDir + "t.npy", text) != 0);
    CHECK(text.find("cross_entropy takes i64") != std::string::npos);
    CHECK(test::run_command(common + " --input nope=" + kDir + "x.npy --labels " + kDir + "y.npy", text) != 0);
    CHECK(text.find("the model has no input 'nope'") != std::string::npos);
  }

  TEST_CASE("take_along: rows of any axis, in the order given") {
    std::vector<float> v(24);
    for (size_t k = 0; k < v.size(); ++k) v[k] = float(k);
    const HostTensor t = HostTensor::from<float>(Shape{2, 3, 4}, v);
    const HostTensor r = take_along(t, 1, {2, 0});
    REQUIRE(r.shape() == Shape{2, 2, 4});
    const std::vector<float> want{8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15};
    for (size_t k = 0; k < want.size(); ++k) CHECK(r.as<float>()[k] == want[k]);
    CHECK_THROWS_WITH_AS(take_along(t, 1, {3}), "row 3 is outside [0, 3) of shape [2, 3, 4]", Error);
    CHECK_THROWS_AS(take_along(t, 3, {0}), Error);
  }

  TEST_CASE("time-major data [T, B, I] with labels [B] (--batch-axis 1): PyTorch's losses of the batch-major model") {
    // rnn_lstm.onnx (batch_first LSTM, last hidden state -> Linear) read through a Transpose from [T, N, 3]: the
    // same network on the same batches, so make_rnn.py's losses and weights (SGD lr 0.2, momentum 0.9).
    CHECK(labels_batch_axis(1, 2) == 1);
    CHECK(labels_batch_axis(1, 1) == 0);
    CHECK(labels_batch_axis(0, 1) == 0);
    Graph g = import_onnx_file(kDir + "rnn_lstm.onnx");
    REQUIRE(g.inputs.size() == 1);
    const std::string x_name = g.inputs[0].name;
    g.inputs[0].name = "x_time_major";
    std::swap(g.inputs[0].shape.dims[0], g.inputs[0].shape.dims[1]);
    std::swap(g.inputs[0].shape.symbols[0], g.inputs[0].shape.symbols[1]);
    g.nodes.insert(g.nodes.begin(), make_node(g, "to_batch_major", "Transpose", {"x_time_major"}, {x_name},
                                              {{"perm", std::vector<int64_t>{1, 0, 2}}}));
    TrainOptions o;
    o.lr = 0.2f;
    o.momentum = 0.9f;
    o.batch = 3;
    o.batch_axis = 1;
    o.shuffle = false;
    Trainer t(test::shared_ctx(), std::move(g), o);
    const HostTensor x = load("rnn_x.npy"), y = load("rnn_y.npy");  // [7, 5, 3], [7]
    REQUIRE(x.shape() == Shape{7, 5, 3});
    std::vector<float> xt(size_t(x.numel()));
    for (int64_t n = 0; n < 7; ++n)
      for (int64_t s = 0; s < 5; ++s)
        for (int64_t i = 0; i < 3; ++i) xt[size_t((s * 7 + n) * 3 + i)] = x.as<float>()[(n * 5 + s) * 3 + i];
    const HostTensor xtm = HostTensor::from<float>(Shape{5, 7, 3}, xt);
    std::vector<float> losses;
    for (int e = 0; e < 2; ++e) {
      auto r = t.epoch(xtm, y);
      REQUIRE(r.step_losses.size() == 3);
      losses.insert(losses.end(), r.step_losses.begin(), r.step_losses.end());
    }
    check_close(HostTensor::from<float>(Shape{6}, losses), load("rnn_lstm_sgd_losses.npy"), "step losses");
    auto w = t.read_weights();
    for (auto& name : t.weights()) check_close(w.at(name), load("rnn_lstm_sgd." + name + ".npy"), name);
    CHECK_THROWS_WITH_AS(t.epoch(xtm, take_along(y, 0, {0, 1, 2})),
                         doctest::Contains("the data has 7 samples along axis 1, the labels 3 along their axis 0"),
                         Error);
  }

  TEST_CASE("ConvTranspose's W and B are trained (ConvTransposeDynamic, the bias added after it)") {
    GraphBuilder b("convt_train", 17);
    Value x = b.input("x", DType::f32, Shape{4, 2, 3, 3});  // batches of 4
    Value y = b.op1("ConvTranspose",
                    {x, b.constant("W", test::random_tensor(Shape{2, 5, 3, 2}, 1, -0.5f, 0.5f)),
                     b.constant("B", test::random_tensor(Shape{5}, 2, -0.5f, 0.5f))},
                    {{"strides", std::vector<int64_t>{2, 1}}});
    b.output(b.op1("Flatten", {b.op1("GlobalAveragePool", {y})}), "logits");
    TrainOptions o;
    o.lr = 0.5f;
    o.batch = 4;
    o.shuffle = false;
    Graph g = b.build();
    infer_shapes(g, false);  // the output's shape, as an imported model has it
    Trainer t(test::shared_ctx(), std::move(g), o);
    REQUIRE(t.weights().size() == 2);
    const HostTensor data = test::random_tensor(Shape{8, 2, 3, 3}, 3);
    const HostTensor labels = HostTensor::from<int64_t>(Shape{8}, std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2});
    const auto before = t.read_weights();
    const float first = t.epoch(data, labels).step_losses[0];
    for (int e = 0; e < 20; ++e) t.epoch(data, labels);
    const auto after = t.read_weights();
    for (auto& name : t.weights()) {
      CAPTURE(name);
      double moved = 0;
      for (int64_t k = 0; k < after.at(name).numel(); ++k)
        moved = std::max(moved, double(std::fabs(after.at(name).as<float>()[k] - before.at(name).as<float>()[k])));
      CHECK(moved > 1e-3);
    }
    CHECK(t.epoch(data, labels).step_losses[0] < first);
  }

  TEST_CASE("parse_train_options: the CLI's and Python's options, their defaults and errors") {
    TrainOptionNames n;
    TrainOptions o = parse_train_options(n);
    CHECK(o.optimizer == TrainOptimizer::sgd);
    CHECK(o.lr == 0.01f);
    n.optimizer = "adamw";
    n.weight_decay = 0.05f;
    o = parse_train_options(n);
    CHECK(o.optimizer == TrainOptimizer::adamw);
    CHECK(o.lr == 1e-3f);
    CHECK(o.weight_decay == 0.05f);
    n.lr = 0.3f;
    n.loss = "mse";
    CHECK(parse_train_options(n).lr == 0.3f);
    CHECK(parse_train_options(n).loss == TrainLoss::mse);
    auto err = [](TrainOptionNames v) { return test::error_of([&] { parse_train_options(v); }); };
    TrainOptionNames bad;
    bad.optimizer = "rmsprop";
    CHECK(err(bad).find("optimizer 'rmsprop' is not one of sgd, adam, adamw") != std::string::npos);
    bad = {};
    bad.loss = "hinge";
    CHECK(err(bad).find("loss 'hinge' is not one of cross_entropy, mse") != std::string::npos);
    bad = {};
    bad.lr = 0.0f;
    CHECK(err(bad).find("the learning rate must be positive, got 0") != std::string::npos);
    bad = {};
    bad.momentum = -1;
    CHECK(err(bad).find("momentum must not be negative") != std::string::npos);
    bad = {};
    bad.batch = 0;
    CHECK(err(bad).find("the batch must be at least 1, got 0") != std::string::npos);
    bad = {};
    bad.batch_axis = -2;
    CHECK(err(bad).find("the batch axis must not be negative, got -2") != std::string::npos);
    bad = {};
    bad.schedule = "step";
    CHECK(err(bad).find("schedule 'step' is not one of constant, cosine") != std::string::npos);
    bad = {};
    bad.warmup = -1;
    CHECK(err(bad).find("warmup must not be negative, got -1 steps") != std::string::npos);
    bad = {};
    bad.min_lr = 0.5f;  // above the default 0.01
    CHECK(err(bad).find("min_lr must be in [0, lr = 0.01], got 0.5") != std::string::npos);
    bad = {};
    bad.clip_norm = -1;
    CHECK(err(bad).find("clip_norm must not be negative, got -1") != std::string::npos);
    n = {};
    n.schedule = "cosine";
    n.warmup = 3;
    n.clip_norm = 1.5f;
    o = parse_train_options(n);
    CHECK(o.schedule == LrSchedule::cosine);
    CHECK(o.warmup == 3);
    CHECK(o.clip_norm == 1.5f);
  }

  TEST_CASE("errors name the option, the input or the output") {
    auto err = [](TrainOptions o) {
      try {
        Trainer t(test::shared_ctx(), import_onnx_file(kDir + "model.onnx"), o);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    TrainOptions o;
    o.input = "nope";
    CHECK(err(o).find("the model has no input 'nope'") != std::string::npos);
    o = {};
    o.output = "nope";
    CHECK(err(o).find("the model has no output 'nope'") != std::string::npos);
    o = {};
    o.schedule = LrSchedule::cosine;
    CHECK(err(o).find("the cosine schedule needs total_steps (the steps it decays over), got 0") != std::string::npos);
    o = {};
    o.batch_axis = 4;
    CHECK(err(o).find("--batch-axis 4 is outside the rank 4 of input 'x'") != std::string::npos);
    o = {};
    o.batch_axis = 1;  // cross entropy: labels [N], their batch on axis 0 (labels_batch_axis); x [7, 1, 5, 6]
    {
      Trainer t(test::shared_ctx(), import_onnx_file(kDir + "model.onnx"), o);
      CHECK_THROWS_WITH_AS(t.epoch(load("x.npy"), load("y.npy")),
                           doctest::Contains("the data has 1 samples along axis 1, the labels 7 along their axis 0 "
                                             "(labels of rank 1 have their batch on axis 0 when the batch axis is 1)"),
                           Error);
    }
    // Labels of the wrong type, and a count that does not match the data.
    Trainer t(test::shared_ctx(), import_onnx_file(kDir + "model.onnx"), TrainOptions{});
    CHECK_THROWS_WITH_AS(t.epoch(load("x.npy"), take_along(load("y.npy"), 0, {0, 1})),
                         doctest::Contains("the data has 7 samples along axis 0, the labels 2"), Error);
    CHECK_THROWS_WITH_AS(t.epoch(load("x.npy"), load("t.npy")), doctest::Contains("cross_entropy takes i64"), Error);
    CHECK_THROWS_WITH_AS(t.step(load("x.npy"), load("t.npy")), doctest::Contains("the labels are f32; cross_entropy takes i64"), Error);
    CHECK_THROWS_WITH_AS(t.epoch(take_along(load("x.npy"), 0, {0, 1}), load("y.npy")),
                         doctest::Contains("the data has 2 samples along axis 0, the labels 7"), Error);
  }
}
