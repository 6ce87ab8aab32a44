// Data-parallel training (models/train.hpp, TrainOptions::devices) against one device: the tiny CNN of
// tests/data/train trained on two PoCL devices in one context (suite multi-device: ctest multi_device runs it with
// POCL_DEVICES="pthread pthread") step by step as on one device, every step's loss and the final weights within
// 1e-5 relative (+ 1e-7 absolute for values near zero). The batches cover a batch that does not split evenly over
// the devices (3 = 2 + 1, 5 = 3 + 2), a last batch smaller than the device count (7 samples in batches of 3: the
// last one, 1 sample, leaves the second device without a shard), SGD with Nesterov momentum, Adam and mse with
// weight decay. The single-device suite checks that a bad device list is a clear error.
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "models/builder.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "models/onnx_import.hpp"
#include "models/train.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"
#include "tests/support/train_cli.hpp"
#include "tests/support/two_devices.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

const std::string kDir = std::string(CLDL_SOURCE_DIR) + "/tests/data/train/";

HostTensor load(const std::string& f) { return read_tensor_file(kDir + f); }

using test::two_devices;

void check_close(const float* got, const float* want, int64_t n, const std::string& what) {
  CAPTURE(what);
  double worst = 0, used = 0;  // largest difference; largest share of the tolerance it used
  for (int64_t k = 0; k < n; ++k) {
    const double g = got[k], w = want[k], err = std::fabs(g - w), tol = 1e-5 * std::fabs(w) + 1e-7;
    worst = std::max(worst, err);
    used = std::max(used, err / tol);
    if (err > tol) {
      FAIL_CHECK(what << "[" << k << "]: two devices " << g << ", one device " << w);
      return;
    }
  }
  MESSAGE(what << ": largest difference " << worst << " (" << used * 100 << " % of the tolerance)");
}

// `epochs` epochs of `make()`'s model on one device (the first of ctx) and on both; every step's loss and the final
// weights compared, and the two devices' copies of the weights equal bit for bit.
void one_vs_two(const std::shared_ptr<Context>& ctx, TrainOptions o, const std::function<Graph()>& make,
                const HostTensor& x, const HostTensor& labels, int epochs) {
  TrainOptions one = o, two = o;
  one.devices = {0};
  two.devices = {0, 1};
  Trainer a(ctx, make(), one), b(ctx, make(), two);
  std::vector<float> la, lb;
  double mean_a = 0, mean_b = 0;
  for (int e = 0; e < epochs; ++e) {
    auto ra = a.epoch(x, labels), rb = b.epoch(x, labels);
    la.insert(la.end(), ra.step_losses.begin(), ra.step_losses.end());
    lb.insert(lb.end(), rb.step_losses.begin(), rb.step_losses.end());
    mean_a = ra.mean_loss, mean_b = rb.mean_loss;
  }
  REQUIRE(la.size() == lb.size());
  check_close(lb.data(), la.data(), int64_t(la.size()), "step losses");
  CHECK(std::fabs(mean_b - mean_a) <= 1e-5 * std::fabs(mean_a));
  // One more step through step() on a batch of 4 (2 + 2).
  const std::vector<int64_t> rows{6, 0, 3, 2};
  const HostTensor x4 = take_along(x, o.batch_axis, rows), y4 = take_along(labels, o.batch_axis, rows);
  const float sa = a.step(x4, y4), sb = b.step(x4, y4);
  check_close(&sb, &sa, 1, "step()");
  auto wa = a.read_weights(), wb = b.read_weights(), wb1 = b.read_weights(1);
  const Graph init = make();
  bool moved = false;
  for (auto& name : a.weights()) {
    REQUIRE(wb.at(name).shape() == wa.at(name).shape());
    check_close(wb.at(name).as<float>(), wa.at(name).as<float>(), wa.at(name).numel(), name);
    // Both devices ran the same update on the same summed gradient.
    CHECK(std::memcmp(wb.at(name).data(), wb1.at(name).data(), wb.at(name).bytes()) == 0);
    moved |= std::memcmp(wb.at(name).data(), init.initializers.at(name).data(), wb.at(name).bytes()) != 0;
  }
  CHECK(moved);  // the comparison is not of two untrained models
  CHECK_THROWS_WITH_AS(b.read_weights(2), "train: read_weights: no copy 2; the weights live on 2 devices", Error);
}

void one_vs_two(const std::shared_ptr<Context>& ctx, TrainOptions o, const HostTensor& labels, int epochs) {
  one_vs_two(ctx, o, [] { return import_onnx_file(kDir + "model.onnx"); }, load("x.npy"), labels, epochs);
}

// A time-major model: x [3, N, 5] -> MatMul 5x4 + bias, Relu, MatMul 4x3 -> logits [3, N, 3] (classes last).
Graph time_major() {
  GraphBuilder b("time_major");
  ValueShape s(Shape{3, 1, 5});
  s.dims[1] = -1;
  s.symbols[1] = "N";
  auto x = b.input("x", DType::f32, s);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.6f, 0.6f);
  auto rand = [&](Shape sh) {
    HostTensor t(DType::f32, sh);
    for (auto& v : t.span<float>()) v = u(rng);
    return t;
  };
  auto w1 = b.constant("w1", rand(Shape{5, 4})), b1 = b.constant("b1", rand(Shape{4}));
  auto w2 = b.constant("w2", rand(Shape{4, 3}));
  b.output(b.matmul(b.relu(b.add(b.matmul(x, w1), b1)), w2), "logits");
  Graph g = b.build();
  ValueShape os(Shape{3, 1, 3});
  os.dims[1] = -1;
  os.symbols[1] = "N";
  g.outputs[0].shape = os;
  return g;
}

}  // namespace

TEST_SUITE("multi-device") {
  TEST_CASE("data parallel training on two devices equals one device: SGD Nesterov, batch 3 (2 + 1, last 1 + 0)") {
    auto ctx = two_devices();
    if (!ctx) return;
    TrainOptions o;
    o.batch = 3;
    o.shuffle = false;
    o.lr = 0.1f;
    o.nesterov = true;
    one_vs_two(ctx, o, load("y.npy"), 3);
  }

  TEST_CASE("data parallel: Adam, batch 5 (3 + 2, last 1 + 1), shuffled") {
    auto ctx = two_devices();
    if (!ctx) return;
    TrainOptions o;
    o.batch = 5;
    o.seed = 3;
    o.optimizer = TrainOptimizer::adam;
    o.lr = 0.01f;
    one_vs_two(ctx, o, load("y.npy"), 3);
  }

  TEST_CASE("data parallel: cosine schedule, warm-up and gradient clipping (of the summed gradient), Adam") {
    auto ctx = two_devices();
    if (!ctx) return;
    TrainOptions o;
    o.batch = 3;
    o.shuffle = false;
    o.optimizer = TrainOptimizer::adam;
    o.lr = 0.02f;
    o.schedule = LrSchedule::cosine;
    o.warmup = 2;
    o.total_steps = 10;  // 3 epochs of 3 steps and one_vs_two's step()
    o.min_lr = 0.002f;
    o.clip_norm = 0.6f;  // the tiny CNN's gradient norms are 0.4 to 1.2 (tests/data/train/make.py schedule)
    one_vs_two(ctx, o, load("y.npy"), 3);
  }

  TEST_CASE("data parallel: mse, SGD with momentum and weight decay, batch 1 (every step on one device)") {
    auto ctx = two_devices();
    if (!ctx) return;
    TrainOptions o;
    o.batch = 1;
    o.shuffle = false;
    o.loss = TrainLoss::mse;
    o.lr = 0.05f;
    o.momentum = 0.5f;
    o.weight_decay = 0.01f;
    one_vs_two(ctx, o, load("t.npy"), 2);
  }

  TEST_CASE("data parallel: mse, batch 4 (2 + 2, last 2 + 1)") {
    auto ctx = two_devices();
    if (!ctx) return;
    TrainOptions o;
    o.batch = 4;
    o.shuffle = false;
    o.loss = TrainLoss::mse;
    o.lr = 0.05f;
    one_vs_two(ctx, o, load("t.npy"), 2);
  }

  TEST_CASE("data parallel along batch axis 1 (time-major): cross entropy and mse, batch 3 (2 + 1, last 1 + 0)") {
    auto ctx = two_devices();
    if (!ctx) return;
    std::mt19937 rng(11);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    HostTensor x(DType::f32, Shape{3, 7, 5}), t(DType::f32, Shape{3, 7, 3});
    HostTensor y(DType::i64, Shape{3, 7});
    for (auto& v : x.span<float>()) v = u(rng);
    for (auto& v : t.span<float>()) v = u(rng);
    for (auto& v : y.span<int64_t>()) v = int64_t(rng() % 3);
    TrainOptions o;
    o.batch = 3;
    o.batch_axis = 1;
    o.shuffle = false;
    o.lr = 0.2f;
    one_vs_two(ctx, o, time_major, x, y, 3);
    o.loss = TrainLoss::mse;
    o.optimizer = TrainOptimizer::adam;
    o.lr = 0.02f;
    o.shuffle = true;
    one_vs_two(ctx, o, time_major, x, t, 3);
  }

  TEST_CASE("BatchNormalization in training mode and Dropout are refused data parallel, naming them") {
    auto ctx = two_devices();
    if (!ctx) return;
    TrainOptions o;
    o.devices = {0, 1};
    for (const char* f : {"model_bn.onnx", "model_bn_drop.onnx"}) {
      CAPTURE(f);
      CHECK_THROWS_WITH_AS(Trainer(ctx, import_onnx_file(kDir + f), o),
                           doctest::Contains("is not data parallel yet: train on one device"), Error);
    }
    // One device of the same context trains them.
    o.devices = {1};
    CHECK_NOTHROW(Trainer(ctx, import_onnx_file(kDir + "model_bn_drop.onnx"), o));
  }

  TEST_CASE("cldl train -d cpu:0,cpu:1: the losses of one device") {
    if (!two_devices()) return;
    const std::string cli = CLDL_CLI_PATH, dir = test::temp_dir("train-dp-cli");
    const std::string base = cli + " train " + kDir + "model.onnx --input x=" + kDir + "x.npy --labels " + kDir +
                             "y.npy --epochs 2 --batch 3 --lr 0.1 --nesterov --no-shuffle --json --out " + dir +
                             "/trained.onnx -d ";
    std::string one, two;
    REQUIRE_MESSAGE(test::run_command(base + "cpu:0", one) == 0, one);
    REQUIRE_MESSAGE(test::run_command(base + "cpu:0,cpu:1", two) == 0, two);
    CHECK(two.find(" + ") != std::string::npos);  // both devices named
    const std::vector<float> a = test::cli_step_losses(one), b = test::cli_step_losses(two);
    REQUIRE(a.size() == 6);
    REQUIRE(b.size() == 6);
    check_close(b.data(), a.data(), 6, "cldl train step losses");
  }
}

TEST_SUITE("train_dp") {
  TEST_CASE("a bad device list is a clear error") {
    auto err = [](std::vector<int> devices) {
      TrainOptions o;
      o.devices = std::move(devices);
      try {
        Trainer t(test::shared_ctx(), import_onnx_file(kDir + "model.onnx"), o);
      } catch (const Error& e) {
        return std::string(e.what());
      }
      return std::string();
    };
    const size_t n = test::shared_ctx()->device_count();
    CHECK(err({0, int(n)}).find("train: device " + std::to_string(n) + " of the device list is not in the context") !=
          std::string::npos);
    CHECK(err({-1}).find("device -1 of the device list is not in the context") != std::string::npos);
    CHECK(err({0, 0}).find("train: device 0 is in the device list twice") != std::string::npos);
    // The CLI, on the test device's kind (cpu, or accelerator where an implementation has no CPU device): a device
    // the platform does not have.
    const std::string kind = test::device_spec().substr(0, test::device_spec().find(':'));
    std::string text;
    CHECK(test::run_command(std::string(CLDL_CLI_PATH) + " train " + kDir + "model.onnx --input x=" + kDir +
                                "x.npy --labels " + kDir + "y.npy --out /tmp/cldl-dp-never.onnx -d " + kind + ":0," + kind + ":99",
                            text) != 0);
    CAPTURE(text);
    CHECK(text.find("99") != std::string::npos);
    // One device named twice makes a context of two entries: data parallel over it is refused.
    CHECK(test::run_command(std::string(CLDL_CLI_PATH) + " train " + kDir + "model.onnx --input x=" + kDir +
                                "x.npy --labels " + kDir + "y.npy --out /tmp/cldl-dp-never.onnx -d " + kind + ":0," + kind + ":0",
                            text) != 0);
    CHECK(text.find("are the same OpenCL device") != std::string::npos);
  }
}
