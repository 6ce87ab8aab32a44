// Training ops against tests/reference/training_ref.cpp (double): NegativeLogLikelihoodLoss and
// SoftmaxCrossEntropyLoss (reductions none / sum / mean, weights, ignore_index positive, negative and hitting
// every target, int64 and int32 targets, C = 1, 7, 1000, N = 1, [N, C] and [N, C, d1, ..., dk], SCE's log_prob),
// Adagrad, Momentum (standard, Nesterov) and Adam over several tensor groups, a 40-step Adam run fed back
// through the graph, LpNormalization and MeanVarianceNormalization over odd shapes and axes, BitCast and Scatter,
// and the errors that name the node and the argument. Tolerances: losses and normalizations 1e-4 relative /
// 1e-5 absolute (fp32 sums over up to 5000 terms); one optimizer step 1e-5 relative; the 40-step Adam run 1e-4.
#include <cmath>
#include <cstring>
#include <limits>

#include "layers/training.hpp"
#include "models/builder.hpp"
#include "models/model.hpp"
#include "reference/cnn_harness.hpp"
#include "reference/training_ref.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;
using graph::GraphBuilder;

namespace {
std::vector<double> dbl(const std::vector<float>& v) { return {v.begin(), v.end()}; }
HostTensor f32(const Shape& s, const std::vector<float>& v) { return HostTensor::from<float>(s, v); }
std::vector<float> floats(const HostTensor& t) { return std::vector<float>(t.as<float>(), t.as<float>() + t.numel()); }

void check_close(const HostTensor& got, const std::vector<double>& want, double rtol = 1e-4, double atol = 1e-5) {
  REQUIRE(got.dtype() == DType::f32);
  REQUIRE(size_t(got.numel()) == want.size());
  std::vector<float> w(want.begin(), want.end());
  CLDL_CHECK_CLOSE(got.as<float>(), w.data(), w.size(), rtol, atol);
}

HostTensor targets(const Shape& s, const std::vector<int64_t>& v, DType dt) {
  if (dt == DType::i64) return HostTensor::from<int64_t>(s, v);
  std::vector<int32_t> w(v.begin(), v.end());
  return HostTensor::from<int32_t>(s, w);
}

struct LossCase {
  std::vector<int64_t> dims;  // [N, C, d1, ..., dk]
  std::string reduction;
  bool weight;
  std::optional<int64_t> ignore_index;
  DType target = DType::i64;
};

// Runs one loss node on graph inputs x, target (and w); returns {loss, log_prob}.
std::map<std::string, HostTensor> run_loss(const std::string& op, const LossCase& c, const std::vector<float>& x,
                                           const std::vector<int64_t>& t, const std::vector<float>& w, bool log_prob,
                                           int opset = 13) {
  const Shape xs(c.dims);
  Shape ts{c.dims[0]};
  for (size_t i = 2; i < c.dims.size(); ++i) ts.dims.push_back(c.dims[i]);
  GraphBuilder b("loss", opset);
  std::vector<graph::Value> in{b.input("x", DType::f32, xs), b.input("t", c.target, ts)};
  std::map<std::string, HostTensor> feed{{"x", f32(xs, x)}, {"t", targets(ts, t, c.target)}};
  if (c.weight) {
    in.push_back(b.input("w", DType::f32, Shape{c.dims[1]}));
    feed["w"] = f32(Shape{c.dims[1]}, w);
  }
  std::map<std::string, graph::AttrValue> attrs{{"reduction", c.reduction}};
  if (c.ignore_index) attrs["ignore_index"] = *c.ignore_index;
  auto outs = b.op(op, in, attrs, log_prob ? 2 : 1);
  b.output(outs[0], "loss");
  if (log_prob) b.output(outs[1], "log_prob");
  return run_graph(b.build(), feed);
}

// Targets in [0, C), with about one in four set to ignore_index where there is one.
std::vector<int64_t> make_targets(const LossCase& c, uint32_t seed) {
  int64_t n = c.dims[0];
  for (size_t i = 2; i < c.dims.size(); ++i) n *= c.dims[i];
  auto t = random_ints<int64_t>(size_t(n), 0, c.dims[1] - 1, seed);
  if (c.ignore_index) {
    auto pick = random_ints<int>(size_t(n), 0, 3, seed + 1);
    for (size_t i = 0; i < t.size(); ++i)
      if (pick[i] == 0) t[i] = *c.ignore_index;
  }
  return t;
}

void check_loss_case(const LossCase& c, uint32_t seed) {
  CAPTURE(c.dims.size());
  CAPTURE(c.dims[1]);
  CAPTURE(c.reduction);
  CAPTURE(c.weight);
  CAPTURE(c.ignore_index.value_or(-999));
  const int64_t n = ref::numel(c.dims);
  auto x = random_floats(size_t(n), seed, -3.0f, 3.0f);
  auto w = random_floats(size_t(c.dims[1]), seed + 7, 0.1f, 2.0f);
  auto t = make_targets(c, seed + 3);
  std::vector<double> wd = c.weight ? dbl(w) : std::vector<double>{};
  // NLL on log-probabilities (any numbers do).
  auto nll = run_loss("NegativeLogLikelihoodLoss", c, x, t, w, false);
  check_close(nll.at("loss"), ref::nll_loss(dbl(x), c.dims, t, wd, c.ignore_index, c.reduction));
  // SCE on logits, with and without log_prob.
  const auto lp = ref::log_softmax_axis1(dbl(x), c.dims);
  const auto want = ref::nll_loss(lp, c.dims, t, wd, c.ignore_index, c.reduction);
  auto sce = run_loss("SoftmaxCrossEntropyLoss", c, x, t, w, true);
  check_close(sce.at("loss"), want);
  check_close(sce.at("log_prob"), lp);
  check_close(run_loss("SoftmaxCrossEntropyLoss", c, x, t, w, false).at("loss"), want);
}
}  // namespace

TEST_SUITE("losses") {
  TEST_CASE("NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss on odd shapes against the reference") {
    uint32_t seed = 100;
    for (const char* red : {"none", "sum", "mean"})
      for (bool weight : {false, true})
        for (auto dims : std::vector<std::vector<int64_t>>{{1, 1}, {1, 7}, {5, 7}, {3, 7, 5}, {2, 4, 3, 1, 5}})
          check_loss_case({dims, red, weight, std::nullopt}, seed++);
  }

  TEST_CASE("C = 1000, N = 1 and long reductions") {
    check_loss_case({{2, 1000}, "mean", true, std::nullopt}, 7);
    check_loss_case({{1, 1000}, "sum", false, 3}, 8);
    check_loss_case({{3, 11, 40, 41}, "mean", true, 5}, 9);    // 4920 terms: 3 work-groups of partial sums
    check_loss_case({{1, 2, 800, 701}, "sum", false, 1}, 10);  // 560800 terms: the 256 work-groups cap
  }

  TEST_CASE("ignore_index: positive, negative, out of the class range, int32 targets") {
    uint32_t seed = 200;
    for (const char* red : {"none", "sum", "mean"})
      for (int64_t ii : {int64_t(2), int64_t(-1), int64_t(-5), int64_t(10)})
        for (DType dt : {DType::i64, DType::i32}) check_loss_case({{3, 7, 4}, red, true, ii, dt}, seed++);
    check_loss_case({{4, 5}, "mean", false, 0, DType::i32}, seed++);
  }

  TEST_CASE("every target ignored: none gives zeros, sum 0, mean NaN (the ONNX reference's 0 / 0)") {
    for (bool weight : {false, true}) {
      LossCase c{{2, 5, 3}, "none", weight, 4};
      std::vector<int64_t> t(6, 4);
      auto x = random_floats(30, 1), w = random_floats(5, 2, 0.5f, 1.0f);
      for (const char* op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}) {
        CAPTURE(op);
        CHECK(floats(run_loss(op, c, x, t, w, false).at("loss")) == std::vector<float>(6, 0.0f));
        c.reduction = "sum";
        CHECK(floats(run_loss(op, c, x, t, w, false).at("loss")) == std::vector<float>{0.0f});
        c.reduction = "mean";
        auto mean = run_loss(op, c, x, t, w, false).at("loss");
        REQUIRE(mean.numel() == 1);
        CHECK(std::isnan(mean.as<float>()[0]));
        c.reduction = "none";
      }
    }
  }

  TEST_CASE("opsets 12 and 22 read the same; a class id out of range is a NaN at run time, an error when constant") {
    LossCase c{{2, 3}, "sum", false, std::nullopt};
    auto x = random_floats(6, 3);
    check_close(run_loss("NegativeLogLikelihoodLoss", c, x, {0, 2}, {}, false, 12).at("loss"),
                ref::nll_loss(dbl(x), c.dims, {0, 2}, {}, std::nullopt, "sum"));
    check_close(run_loss("NegativeLogLikelihoodLoss", c, x, {1, 2}, {}, false, 22).at("loss"),
                ref::nll_loss(dbl(x), c.dims, {1, 2}, {}, std::nullopt, "sum"));
    auto bad = run_loss("NegativeLogLikelihoodLoss", c, x, {0, 3}, {}, false).at("loss");
    CHECK(std::isnan(bad.as<float>()[0]));
    c.reduction = "none";
    auto none = floats(run_loss("SoftmaxCrossEntropyLoss", c, x, {-1, 1}, {}, false).at("loss"));
    CHECK(std::isnan(none[0]));
    CHECK(std::isfinite(none[1]));
    // Constant targets are checked when planning.
    GraphBuilder b("nll_const", 13);
    b.output(b.op1("NegativeLogLikelihoodLoss",
                   {b.input("x", DType::f32, Shape{2, 3}),
                    b.constant("t", HostTensor::from<int64_t>(Shape{2}, std::vector<int64_t>{0, 3}))},
                   {{"reduction", std::string("sum")}}),
             "loss");
    expect_invalid(
        [&] {
          run_graph(b.build(), {{"x", f32(Shape{2, 3}, x)}});
        },
        {"NegativeLogLikelihoodLoss", "target", "class 3", "[0, 3)"});
  }

  TEST_CASE("loss errors name the node and the argument") {
    auto build = [](Shape xs, DType tt, Shape ts, std::optional<Shape> ws, std::string reduction) {
      GraphBuilder b("bad_loss", 13);
      std::vector<graph::Value> in{b.input("x", DType::f32, xs), b.input("t", tt, ts)};
      if (ws) in.push_back(b.input("w", DType::f32, *ws));
      b.output(b.op1("SoftmaxCrossEntropyLoss", in, {{"reduction", reduction}}), "loss");
      return b.build();
    };
    auto load = [](graph::Graph g) { compile_graph(std::move(g)); };
    expect_invalid(
        [&] {
          load(build({3, 4}, DType::i64, {3}, std::nullopt, "avg"));
        },
        {"SoftmaxCrossEntropyLoss", "reduction", "'avg'"});
    expect_invalid(
        [&] {
          load(build({3, 4}, DType::f32, {3}, std::nullopt, "mean"));
        },
        {"SoftmaxCrossEntropyLoss", "target", "int64 or int32"});
    expect_invalid(
        [&] {
          load(build({3, 4, 2}, DType::i64, {3, 4}, std::nullopt, "mean"));
        },
        {"SoftmaxCrossEntropyLoss", "target", "[3, 2]"});
    expect_invalid(
        [&] {
          load(build({3, 4}, DType::i64, {3}, Shape{3}, "mean"));
        },
        {"SoftmaxCrossEntropyLoss", "weight", "[4]"});
    expect_invalid([&] { load(build({4}, DType::i64, {4}, std::nullopt, "mean")); },
                   {"SoftmaxCrossEntropyLoss", "[N, C]"});
  }
}

namespace {
const char* const kTraining = "ai.onnx.preview.training";

// One optimizer node over `shapes`: inputs R, T, X_i, G_i, states; outputs X_i_new, then the new states.
graph::Graph optimizer_graph(const std::string& op, const std::vector<Shape>& shapes, size_t states,
                             std::map<std::string, graph::AttrValue> attrs) {
  GraphBuilder b("opt", 17);
  b.graph().opsets[kTraining] = 1;
  std::vector<graph::Value> in{b.input("R", DType::f32, Shape{}), b.input("T", DType::i64, Shape{})};
  const size_t n = shapes.size();
  for (size_t k = 0; k < 2 + states; ++k)
    for (size_t i = 0; i < n; ++i) in.push_back(b.input(fmt::format("in{}_{}", k, i), DType::f32, shapes[i]));
  auto outs = b.op(op, in, std::move(attrs), int(n * (1 + states)), op == "AdamW" ? graph::kFusedDomain : kTraining);
  for (size_t k = 0; k < 1 + states; ++k)
    for (size_t i = 0; i < n; ++i) b.output(outs[k * n + i], fmt::format("out{}_{}", k, i));
  return b.build();
}

HostTensor scalar_f32(float v) { return HostTensor::from<float>(Shape{}, std::vector<float>{v}); }
HostTensor scalar_i64(int64_t v) { return HostTensor::from<int64_t>(Shape{}, std::vector<int64_t>{v}); }
}  // namespace

TEST_SUITE("losses") {
  TEST_CASE("Loss as a layer: the workspace path and the enqueue checks name the op and the argument") {
    LossConfig cfg;
    cfg.input = Shape{3, 7, 2};
    cfg.softmax = true;
    cfg.reduction = LossReduction::sum;
    auto op = Loss::create(ctx(), 0, cfg);
    CHECK(op->workspace_bytes() >= 42 * sizeof(float));  // the log-probabilities, then the partial sums
    auto x = random_floats(42, 70);
    std::vector<int64_t> t{0, 6, 3, 3, 1, 5};
    auto y = down<float>(run_op(*op, {up(x, cfg.input), up(t, Shape{3, 2})}, Shape{}));
    const auto want = ref::nll_loss(ref::log_softmax_axis1(dbl(x), {3, 7, 2}), {3, 7, 2}, t, {}, std::nullopt, "sum");
    CHECK(y[0] == doctest::Approx(want[0]).epsilon(1e-5));
    std::vector<int32_t> t32(t.begin(), t.end());
    expect_invalid(
        [&] {
          run_op(*op, {up(x, cfg.input), up(t32, Shape{3, 2})}, Shape{});
        },
        {"SoftmaxCrossEntropyLoss", "target", "i32", "i64"});
    expect_invalid(
        [&] {
          run_op(*op, {up(x, Shape{3, 14}), up(t, Shape{3, 2})}, Shape{});
        },
        {"SoftmaxCrossEntropyLoss", "input", "[3, 14]"});
    cfg.softmax = false;
    cfg.log_prob = true;
    expect_invalid([&] { Loss::create(ctx(), 0, cfg); }, {"NegativeLogLikelihoodLoss", "log_prob"});
    cfg.input = Shape{5};
    expect_invalid([&] { Loss::validate(cfg); }, {"NegativeLogLikelihoodLoss", "[N, C]", "[5]"});
  }
}

TEST_SUITE("optimizers") {
  const std::vector<Shape> shapes{Shape{7}, Shape{3, 5}, Shape{1}, Shape{2, 1, 9}};

  TEST_CASE("Adagrad, Momentum (standard, Nesterov), Adam and AdamW over 4 and 12 tensors, steps 0 and 3") {
    // 12 tensors take two launches of 8 slots (kernels/training.cl), one of them empty; the 37 x 61 one spans
    // several work-groups (Adam's rate is computed once per group).
    const std::vector<Shape> many{Shape{7},    Shape{3, 5}, Shape{1}, Shape{2, 1, 9}, Shape{0, 3}, Shape{13},
                                  Shape{4, 4}, Shape{2},    Shape{5}, Shape{3, 3},    Shape{1, 6}, Shape{37, 61}};
    for (const auto* list : {&shapes, &many})
      for (int64_t step : {int64_t(0), int64_t(3)})
        for (const char* which : {"Adagrad", "Momentum", "Nesterov", "Adam", "AdamW"}) {
          const std::vector<Shape>& shapes = *list;
          CAPTURE(shapes.size());
          CAPTURE(which);
          CAPTURE(step);
          const std::string op = std::string(which) == "Nesterov" ? "Momentum" : which;
          const bool adam = op == "Adam" || op == "AdamW";
          const size_t states = adam ? 2 : 1;
          std::map<std::string, graph::AttrValue> attrs;
          if (op == "Adagrad") attrs = {{"decay_factor", 0.1f}, {"epsilon", 1e-6f}, {"norm_coefficient", 0.01f}};
          if (op == "Momentum")
            attrs = {{"alpha", 0.9f},
                     {"beta", 0.7f},
                     {"norm_coefficient", 0.02f},
                     {"mode", std::string(op == which ? "standard" : "nesterov")}};
          if (op == "AdamW")  // torch.optim.AdamW's decoupled weight decay: x (1 - R wd) before the Adam step
            attrs = {{"alpha", 0.85f}, {"beta", 0.95f}, {"epsilon", 1e-3f}, {"weight_decay", 0.2f}};
          if (op == "Adam")
            attrs = {{"alpha", 0.85f},
                     {"beta", 0.95f},
                     {"epsilon", 1e-3f},
                     {"norm_coefficient", 0.01f},
                     {"norm_coefficient_post", 0.001f}};
          std::map<std::string, HostTensor> feed{{"R", scalar_f32(0.05f)}, {"T", scalar_i64(step)}};
          std::vector<std::vector<std::vector<double>>> vals(2 + states);  // [input kind][tensor]
          uint32_t seed = 300;
          for (size_t k = 0; k < 2 + states; ++k)
            for (size_t i = 0; i < shapes.size(); ++i) {
              const float lo = k >= 2 ? 0.0f : -1.0f;  // states non-negative (H is a sum of squares)
              auto v = random_floats(size_t(shapes[i].numel()), seed++, lo, 1.0f);
              feed[fmt::format("in{}_{}", k, i)] = f32(shapes[i], v);
              vals[k].push_back(dbl(v));
            }
          auto out = run_graph(optimizer_graph(op, shapes, states, attrs), feed);
          for (size_t i = 0; i < shapes.size(); ++i) {
            auto x = vals[0][i], g = vals[1][i], s1 = vals[2][i];
            std::vector<double> s2 = states == 2 ? vals[3][i] : std::vector<double>{};
            if (op == "Adagrad") ref::adagrad_step(0.05, step, x, g, s1, 0.01, 1e-6, 0.1);
            if (op == "Momentum") ref::momentum_step(0.05, step, x, g, s1, 0.02, 0.9, 0.7, op != which);
            if (op == "Adam") ref::adam_step(0.05, step, x, g, s1, s2, 0.01, 0.001, 0.85, 0.95, 1e-3);
            if (op == "AdamW") {
              for (double& v : x) v *= 1.0 - 0.05 * 0.2;
              ref::adam_step(0.05, step, x, g, s1, s2, 0.0, 0.0, 0.85, 0.95, 1e-3);
            }
            check_close(out.at(fmt::format("out0_{}", i)), x, 1e-5, 1e-6);
            check_close(out.at(fmt::format("out1_{}", i)), s1, 1e-5, 1e-6);
            if (states == 2) check_close(out.at(fmt::format("out2_{}", i)), s2, 1e-5, 1e-6);
          }
        }
  }

  TEST_CASE("40 Adam steps fed back through the graph match a double-precision run") {
    const std::vector<Shape> sh{Shape{13}, Shape{3, 7}};
    auto m = graph::Model::create(
        shared_ctx(), optimizer_graph("Adam", sh, 2, {{"alpha", 0.9f}, {"beta", 0.999f}, {"epsilon", 1e-8f}}));
    auto s = m->session();
    std::vector<std::vector<double>> x, v, h;
    std::map<std::string, HostTensor> feed{{"R", scalar_f32(0.01f)}};
    for (size_t i = 0; i < sh.size(); ++i) {
      auto x0 = random_floats(size_t(sh[i].numel()), 500 + uint32_t(i));
      x.push_back(dbl(x0));
      v.emplace_back(x0.size(), 0.0);
      h.emplace_back(x0.size(), 0.0);
      feed[fmt::format("in0_{}", i)] = f32(sh[i], x0);
      feed[fmt::format("in2_{}", i)] = f32(sh[i], std::vector<float>(x0.size(), 0.0f));
      feed[fmt::format("in3_{}", i)] = f32(sh[i], std::vector<float>(x0.size(), 0.0f));
    }
    for (int64_t step = 1; step <= 40; ++step) {
      feed["T"] = scalar_i64(step);
      for (size_t i = 0; i < sh.size(); ++i) {
        // The gradient of sum((x - 0.3)^2 * (1 + i)): a quadratic the run descends.
        std::vector<float> g(x[i].size());
        const auto& xf = feed.at(fmt::format("in0_{}", i));
        for (size_t j = 0; j < g.size(); ++j) g[j] = 2.0f * (xf.as<float>()[j] - 0.3f) * float(1 + i);
        std::vector<double> gd(g.begin(), g.end());
        ref::adam_step(0.01, step, x[i], gd, v[i], h[i], 0, 0, 0.9, 0.999, 1e-8);
        feed[fmt::format("in1_{}", i)] = f32(sh[i], g);
      }
      auto out = s->run(feed);
      for (size_t i = 0; i < sh.size(); ++i) {
        feed[fmt::format("in0_{}", i)] = out.at(fmt::format("out0_{}", i));
        feed[fmt::format("in2_{}", i)] = out.at(fmt::format("out1_{}", i));
        feed[fmt::format("in3_{}", i)] = out.at(fmt::format("out2_{}", i));
      }
    }
    for (size_t i = 0; i < sh.size(); ++i) {
      check_close(feed.at(fmt::format("in0_{}", i)), x[i], 1e-4, 1e-5);
      check_close(feed.at(fmt::format("in2_{}", i)), v[i], 1e-4, 1e-6);
      check_close(feed.at(fmt::format("in3_{}", i)), h[i], 1e-4, 1e-7);
    }
  }

  TEST_CASE("optimizer errors name the node and the argument") {
    auto load = [](graph::Graph g) { compile_graph(std::move(g)); };
    // Momentum has no default for its attributes.
    expect_invalid(
        [&] {
          load(optimizer_graph("Momentum", {Shape{3}}, 1, {{"alpha", 0.9f}}));
        },
        {"Momentum", "attribute beta is required"});
    expect_invalid(
        [&] {
          load(optimizer_graph(
              "Momentum", {Shape{3}}, 1,
              {{"alpha", 0.9f}, {"beta", 0.9f}, {"norm_coefficient", 0.0f}, {"mode", std::string("nag")}}));
        },
        {"Momentum", "mode", "'nag'"});
    // Adam's groups come in fours: five tensor inputs is no whole number of them.
    {
      GraphBuilder b("opt_bad", 17);
      b.graph().opsets[kTraining] = 1;
      std::vector<graph::Value> in{b.input("R", DType::f32, Shape{}), b.input("T", DType::i64, Shape{})};
      for (int i = 0; i < 5; ++i) in.push_back(b.input(fmt::format("a{}", i), DType::f32, Shape{3}));
      auto outs = b.op("Adam", in, {}, 3, kTraining);
      for (auto& o : outs) b.output(o);
      expect_invalid([&] { load(b.build()); }, {"Adam", "7 inputs", "X, G, V, H"});
    }
    // Adagrad with G of shape g and T of dtype t.
    auto adagrad = [&](Shape g, DType t) {
      GraphBuilder b("opt_adagrad", 17);
      b.graph().opsets[kTraining] = 1;
      auto outs = b.op("Adagrad",
                       {b.input("R", DType::f32, Shape{}), b.input("T", t, Shape{}), b.input("X", DType::f32, Shape{4}),
                        b.input("G", DType::f32, g), b.input("H", DType::f32, Shape{4})},
                       {}, 2, kTraining);
      for (auto& o : outs) b.output(o);
      return b.build();
    };
    expect_invalid([&] { load(adagrad(Shape{5}, DType::i64)); }, {"Adagrad", "'G'", "[5]", "'X'"});
    expect_invalid([&] { load(adagrad(Shape{4}, DType::f32)); }, {"Adagrad", "'T'", "int64"});
  }
}

TEST_SUITE("axis normalizations") {
  TEST_CASE("LpNormalization p = 1 and 2 along every axis of odd shapes; zero vectors give 0") {
    for (auto dims : std::vector<std::vector<int64_t>>{{7}, {1, 5}, {3, 1, 7}, {2, 3, 4, 5}})
      for (int p : {1, 2})
        for (int64_t axis = -int64_t(dims.size()); axis < int64_t(dims.size()); ++axis) {
          CAPTURE(dims.size());
          CAPTURE(p);
          CAPTURE(axis);
          auto x = random_floats(size_t(ref::numel(dims)), uint32_t(40 + p + axis));
          for (size_t i = 0; i < x.size(); i += 5) x[i] = 0.0f;
          if (dims.size() == 2) std::fill(x.begin(), x.end(), 0.0f);  // the whole tensor zero
          GraphBuilder b("lp", 22);
          b.output(
              b.op1("LpNormalization", {b.input("x", DType::f32, Shape(dims))}, {{"p", int64_t(p)}, {"axis", axis}}),
              "y");
          auto y = run_graph(b.build(), {{"x", f32(Shape(dims), x)}}).at("y");
          check_close(y, ref::lp_normalize(dbl(x), dims, axis, p));
        }
    GraphBuilder b("lp3", 22);
    b.output(b.op1("LpNormalization", {b.input("x", DType::f32, Shape{3})}, {{"p", int64_t(3)}}), "y");
    expect_invalid([&] { compile_graph(b.build()); }, {"LpNormalization", "p must be 1 or 2", "3"});
  }

  TEST_CASE("MeanVarianceNormalization over the default and other axes") {
    struct Case {
      std::vector<int64_t> dims, axes;
    };
    for (const auto& c : std::vector<Case>{{{3, 5, 7, 2}, {0, 2, 3}},
                                           {{1, 4, 3, 3}, {0, 2, 3}},
                                           {{2, 7, 5}, {1}},
                                           {{2, 7, 5}, {-1, 0}},
                                           {{3, 11}, {0, 1}}}) {
      CAPTURE(c.dims.size());
      auto x = random_floats(size_t(ref::numel(c.dims)), 60, -2.0f, 3.0f);
      GraphBuilder b("mvn", 13);
      std::map<std::string, graph::AttrValue> attrs;
      if (c.dims.size() != 4) attrs["axes"] = c.axes;
      b.output(b.op1("MeanVarianceNormalization", {b.input("x", DType::f32, Shape(c.dims))}, attrs), "y");
      auto y = run_graph(b.build(), {{"x", f32(Shape(c.dims), x)}}).at("y");
      check_close(y, ref::mean_variance_normalize(dbl(x), c.dims, c.axes), 1e-4, 2e-5);
    }
    // A constant group: x - mean is 0, so 0 (never NaN).
    GraphBuilder b("mvn_const", 13);
    b.output(b.op1("MeanVarianceNormalization", {b.input("x", DType::f32, Shape{2, 6})},
                   {{"axes", std::vector<int64_t>{1}}}),
             "y");
    auto y = floats(run_graph(b.build(), {{"x", f32(Shape{2, 6}, std::vector<float>(12, 0.7f))}}).at("y"));
    CHECK(y == std::vector<float>(12, 0.0f));
  }
}

TEST_SUITE("bitcast") {
  TEST_CASE("BitCast reinterprets bytes at run time and when folding; widths must match") {
    const std::vector<float> v{1.0f, -2.5f, 0.0f, 3.0e-39f, INFINITY};
    auto build = [&](bool constant) {
      GraphBuilder b("bitcast", 26);
      auto x = constant ? b.constant("x", f32(Shape{5}, v)) : b.input("x", DType::f32, Shape{5});
      b.output(b.op1("BitCast", {x}, {{"to", int64_t(6)}}), "y");  // INT32
      b.output(b.op1("Identity", {b.input("z", DType::f32, Shape{1})}), "zz");
      return b.build();
    };
    std::vector<int32_t> want(v.size());
    std::memcpy(want.data(), v.data(), v.size() * 4);
    for (bool constant : {false, true}) {
      std::map<std::string, HostTensor> feed{{"z", f32(Shape{1}, {0.0f})}};
      if (!constant) feed["x"] = f32(Shape{5}, v);
      auto y = run_graph(build(constant), feed).at("y");
      REQUIRE(y.dtype() == DType::i32);
      CHECK(std::vector<int32_t>(y.as<int32_t>(), y.as<int32_t>() + 5) == want);
    }
    // Between two kernels: f32 Add -> BitCast to int32 -> int32 Add (the view's bytes are the first Add's output).
    {
      GraphBuilder g("bitcast_chain", 26);
      auto sum = g.op1("Add", {g.input("x", DType::f32, Shape{5}), g.constant("zero", f32(Shape{5}, {0, 0, 0, 0, 0}))});
      auto bits = g.op1("BitCast", {sum}, {{"to", int64_t(6)}});
      g.output(g.op1("Add", {bits, g.constant("one", HostTensor::from<int32_t>(Shape{1}, std::vector<int32_t>{1}))}),
               "y");
      const std::vector<float> normal{1.0f, -2.5f, 0.0f, 3.0e-30f, INFINITY};  // no subnormal: an Add may flush it
      std::vector<int32_t> bits_of(normal.size());
      std::memcpy(bits_of.data(), normal.data(), normal.size() * 4);
      auto y = run_graph(g.build(), {{"x", f32(Shape{5}, normal)}}).at("y");
      REQUIRE(y.dtype() == DType::i32);
      for (size_t i = 0; i < normal.size(); ++i) CHECK(y.as<int32_t>()[i] == bits_of[i] + 1);
    }
    GraphBuilder b("bitcast_bad", 26);
    b.output(b.op1("BitCast", {b.input("x", DType::f32, Shape{2})}, {{"to", int64_t(7)}}), "y");  // INT64
    expect_invalid([&] { compile_graph(b.build()); }, {"BitCast", "64 bits", "'x'", "32 bits"});
  }
}
