// Audio front-end ops against tests/reference/audio_ref.cpp (double precision): DFT on odd lengths (1, 7,
// 12, 17, 97, 400, 401, 512, and 143 = 11 * 13, clFFT's largest radices) through clFFT, the direct kernel
// (17) and Bluestein (97, 401, and 802 = 2 * 401 by dft_length),
// real and complex input, batches around the axis (first, middle, with dims after it), inverse, one-sided,
// irfft, dft_length shorter and longer; STFT with and without a window, odd frame steps, complex signals;
// the window ops (folded and on the device), MelWeightMatrix (folded and with a run-time sample rate);
// opset 17's axis attribute against opset 20's input; errors that name the node and the argument.
// Tolerance of the transforms: max abs error <= 1e-5 * sqrt(N) * max|x| (forward; the expected size of
// a bin of a random signal is sqrt(N) rms), that over N for inverse ones (f32 accumulation, clFFT or
// direct / Bluestein). Windows and mel weights: 1e-6 absolute (values in [0, 1]). The log-mel front end of
// tests/data/audio (HannWindow, STFT, MelWeightMatrix, MatMul, Log at opset 17) against ONNX Runtime:
// 2e-3 absolute on the log (a relative error of 0.2% on the mel power).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <tuple>

#include "layers/audio.hpp"
#include "models/builder.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "models/op_registry.hpp"
#include "reference/audio_ref.hpp"
#include "reference/cnn_harness.hpp"
#include "runtime/program_cache.hpp"
#include "support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::test;
using graph::GraphBuilder;

namespace {
HostTensor f32(const Shape& s, const std::vector<float>& v) { return HostTensor::from<float>(s, v); }
HostTensor i64(const std::vector<int64_t>& v, Shape s = Shape{}) { return HostTensor::from<int64_t>(s, v); }

double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float f : v) m = std::max(m, double(std::fabs(f)));
  return m;
}

// Checks a transform's output against the double reference within 1e-5 * sqrt(N) * max|x| (/ N inverse).
void check_transform(const std::vector<float>& got, const std::vector<double>& want, int64_t n, double xmax,
                     bool inverse) {
  REQUIRE(got.size() == want.size());
  const double scale = std::sqrt(double(n)) * std::max(xmax, 1e-30) / (inverse ? double(n) : 1.0);
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]);
    if (!(e <= worst)) worst = e, at = i;
  }
  INFO("worst error " << worst << " at " << at << " (got " << got[at] << ", want " << want[at] << "), " << worst / scale
                      << " of sqrt(N) max|x|");
  CHECK(worst <= 1e-5 * scale);
}

struct DftCase {
  Shape shape;  // input
  int64_t axis, length;
  bool inverse, onesided;
};

void run_dft_case(const DftCase& c, uint32_t seed) {
  CAPTURE(c.shape.str());
  CAPTURE(c.axis);
  CAPTURE(c.length);
  CAPTURE(c.inverse);
  CAPTURE(c.onesided);
  auto x = random_floats(size_t(c.shape.numel()), seed);
  DftConfig cfg{c.shape, c.axis, c.length, c.inverse, c.onesided};
  const Shape out = Dft::validate(cfg);
  Shape ref_shape;
  auto want =
      ref::dft(std::vector<double>(x.begin(), x.end()), c.shape, c.axis, c.length, c.inverse, c.onesided, &ref_shape);
  REQUIRE(out == ref_shape);
  auto op = Dft::create(ctx(), 0, cfg);
  CAPTURE(op->algorithm());
  auto y = down<float>(run_op(*op, {up(x, c.shape)}, out));
  const int64_t n = c.length > 0              ? c.length
                    : c.inverse && c.onesided ? 2 * (c.shape[size_t(c.axis)] - 1)
                                              : c.shape[size_t(c.axis)];
  check_transform(y, want, n, max_abs(x), c.inverse);
}
}  // namespace

TEST_SUITE("audio") {
  TEST_CASE("DFT lengths: clFFT where the factors allow, the direct kernel otherwise") {
    CHECK(fft_algo_for(1) == FftAlgo::direct);
    CHECK(fft_algo_for(512) == FftAlgo::clfft);
    CHECK(fft_algo_for(400) == FftAlgo::clfft);
    CHECK(fft_algo_for(143) == FftAlgo::clfft);
    CHECK(fft_algo_for(17) == FftAlgo::direct);
    CHECK(fft_algo_for(2 * 17) == FftAlgo::direct);
    CHECK(fft_algo_for(97) == FftAlgo::bluestein);
    CHECK(fft_algo_for(401) == FftAlgo::bluestein);
    CHECK(fft_algo_for(2 * 401) == FftAlgo::bluestein);
  }

  TEST_CASE("DFT forward and inverse, real and complex, odd lengths, axis first and in the middle") {
    uint32_t seed = 1;
    for (int64_t n : {1, 7, 12, 17, 97, 143, 400, 401, 512}) {
      for (int64_t c : {1, 2}) {
        run_dft_case({Shape{3, n, c}, 1, 0, false, false}, seed++);      // batch before the axis
        run_dft_case({Shape{n, 1, c}, 0, 0, false, false}, seed++);      // batch 1, axis 0
        run_dft_case({Shape{2, n, 5, c}, 1, 0, c == 2, false}, seed++);  // dims after the axis
        run_dft_case({Shape{2, 3, n, c}, 2, 0, false, c == 1}, seed++);  // one-sided real
      }
    }
  }

  TEST_CASE("DFT dft_length shorter and longer than the input, inverse, one-sided, irfft") {
    uint32_t seed = 100;
    for (int64_t n : {7, 12, 17, 97, 401}) {
      for (int64_t len : {std::max<int64_t>(n - 3, 1), n + 5, 2 * n}) {
        run_dft_case({Shape{2, n, 1}, 1, len, false, false}, seed++);
        run_dft_case({Shape{2, n, 2}, 1, len, true, false}, seed++);
        run_dft_case({Shape{n, 3, 1}, 0, len, false, true}, seed++);
        run_dft_case({Shape{1, n, 1}, 1, len, true, false}, seed++);  // inverse of a real signal
        run_dft_case({Shape{2, n, 2}, 1, len, false, true}, seed++);  // one-sided of a complex one: bins kept
      }
      // irfft: n one-sided bins -> 2 (n - 1) real samples, or an explicit odd / even length
      run_dft_case({Shape{3, n, 2}, 1, 0, true, true}, seed++);
      run_dft_case({Shape{n, 4, 2}, 0, 2 * n - 1, true, true}, seed++);
      run_dft_case({Shape{2, n, 2}, 1, n + 2, true, true}, seed++);
    }
  }

  TEST_CASE("DFT under an offline program bundle: the direct kernel, whose program the bundle records") {
    auto& cache = ProgramCache::global();
    cache.start_recording();
    std::unique_ptr<Dft> op;
    try {
      op = Dft::create(ctx(), 0, {Shape{2, 400, 1}, 1, 0, false, false});
    } catch (...) {
      cache.stop_recording();
      throw;
    }
    auto rec = cache.stop_recording();
    CHECK(op->algorithm() == "direct DFT, length 400");
    bool has_audio = false;
    for (auto& r : rec) has_audio |= r.file == "audio.cl";
    CHECK(has_audio);
    run_dft_case({Shape{2, 400, 1}, 1, 0, false, false}, 77);  // clFFT again once recording stops
    auto x = random_floats(800, 78);
    auto y = down<float>(run_op(*op, {up(x, Shape{2, 400, 1})}, Shape{2, 400, 2}));
    auto want = ref::dft(std::vector<double>(x.begin(), x.end()), Shape{2, 400, 1}, 1, 0, false, false);
    check_transform(y, want, 400, max_abs(x), false);
  }

  TEST_CASE("DFT round trip: inverse of forward is the signal") {
    for (int64_t n : {12, 401}) {
      auto x = random_floats(size_t(4 * n * 2), 7);
      auto fwd = Dft::create(ctx(), 0, {Shape{4, n, 2}, 1, 0, false, false});
      auto inv = Dft::create(ctx(), 0, {Shape{4, n, 2}, 1, 0, true, false});
      Tensor y = run_op(*fwd, {up(x, Shape{4, n, 2})}, Shape{4, n, 2});
      auto z = down<float>(run_op(*inv, {y}, Shape{4, n, 2}));
      CLDL_CHECK_CLOSE(z.data(), x.data(), x.size(), 1e-4, 1e-5);
    }
  }

  TEST_CASE("STFT with and without a window, odd frame steps, complex signals") {
    struct Case {
      Shape signal;
      int64_t step, frame_length;
      bool window, onesided;
    };
    uint32_t seed = 200;
    for (const Case& c : {Case{Shape{2, 301, 1}, 7, 25, true, true}, Case{Shape{1, 301, 1}, 7, 25, false, false},
                          Case{Shape{1, 128, 1}, 8, 16, true, true}, Case{Shape{3, 1000, 1}, 160, 400, true, true},
                          Case{Shape{1, 1000, 2}, 3, 401, true, false}, Case{Shape{2, 97, 2}, 1, 97, false, true},
                          Case{Shape{1, 50, 1}, 13, 7, true, false}, Case{Shape{2, 200, 1}, 11, 23, true, true}}) {
      CAPTURE(c.signal.str());
      CAPTURE(c.step);
      CAPTURE(c.frame_length);
      auto x = random_floats(size_t(c.signal.numel()), seed++);
      auto w = ref::window(0, c.frame_length, true);
      std::vector<float> wf(w.begin(), w.end());
      StftConfig cfg{c.signal, c.step, c.window ? 0 : c.frame_length, c.window ? c.frame_length : -1, c.onesided};
      const Shape out = Stft::validate(cfg);
      Shape ref_shape;
      auto want = ref::stft(std::vector<double>(x.begin(), x.end()), c.signal, c.step, c.frame_length,
                            c.window ? w : std::vector<double>{}, c.onesided, &ref_shape);
      REQUIRE(out == ref_shape);
      auto op = Stft::create(ctx(), 0, cfg);
      Tensor sig = up(x, c.signal);
      auto y = down<float>(c.window ? run_op(*op, {sig, up(wf, Shape{c.frame_length})}, out) : run_op(*op, {sig}, out));
      check_transform(y, want, c.frame_length, max_abs(x), false);
    }
  }

  TEST_CASE("DFT in a graph: opset 17's axis attribute, opset 20's axis input, dft_length, negative axis") {
    const Shape xs{2, 9, 3, 1};
    auto x = random_floats(size_t(xs.numel()), 300);
    std::vector<double> xd(x.begin(), x.end());
    {  // opset 17, axis 2 (attribute), dft_length 5 (truncates)
      GraphBuilder b("dft17", 17);
      auto in = b.input("x", DType::f32, xs);
      b.output(b.op1("DFT", {in, b.constant("len", i64({5}))}, {{"axis", int64_t(2)}, {"onesided", int64_t(1)}}), "y");
      auto out = run_graph(b.build(), {{"x", f32(xs, x)}});
      auto want = ref::dft(xd, xs, 2, 5, false, true);
      auto& y = out.at("y");
      CHECK(y.shape() == Shape{2, 9, 3, 2});
      check_transform(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()), want, 5, max_abs(x), false);
    }
    {  // opset 20, axis -3 (input) = 1, no dft_length; and the default axis -2 = 2
      for (int64_t axis : {-3, 0}) {
        GraphBuilder b("dft20", 20);
        auto in = b.input("x", DType::f32, xs);
        std::vector<graph::Value> ins{in, graph::Value{}};
        if (axis != 0) ins.push_back(b.constant("axis", i64({axis})));
        b.output(b.op1("DFT", ins, {{"inverse", int64_t(1)}}), "y");
        auto out = run_graph(b.build(), {{"x", f32(xs, x)}});
        const int64_t a = axis == 0 ? 2 : 1;
        auto want = ref::dft(xd, xs, a, 0, true, false);
        auto& y = out.at("y");
        check_transform(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()), want, xs[size_t(a)], max_abs(x),
                        true);
      }
    }
  }

  TEST_CASE("STFT in a graph: default one-sided, frame_length from the window") {
    const Shape xs{1, 200, 1};
    auto x = random_floats(size_t(xs.numel()), 301);
    auto w = ref::window(1, 31, false);
    GraphBuilder b("stft", 17);
    auto in = b.input("x", DType::f32, xs);
    auto win = b.input("w", DType::f32, Shape{31});
    b.output(b.op1("STFT", {in, b.constant("step", i64({9})), win}), "y");
    auto out = run_graph(b.build(), {{"x", f32(xs, x)}, {"w", f32(Shape{31}, std::vector<float>(w.begin(), w.end()))}});
    Shape rs;
    auto want = ref::stft(std::vector<double>(x.begin(), x.end()), xs, 9, 31, w, true, &rs);
    auto& y = out.at("y");
    REQUIRE(y.shape() == rs);
    check_transform(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()), want, 31, max_abs(x), false);
  }

  TEST_CASE("Lengths decided at run time: a Model plans per value (dft_length, frame_step, window size)") {
    using namespace graph;
    const Shape xs{1, 120, 1};
    auto x = random_floats(size_t(xs.numel()), 400);
    std::vector<double> xd(x.begin(), x.end());
    GraphBuilder b("runtime_lengths", 17);
    auto in = b.input("x", DType::f32, xs);
    auto len = b.input("len", DType::i64, Shape{});
    auto one = b.constant("one", i64({1}));
    b.output(b.op1("DFT", {in, len}), "spectrum");
    // frame_step and the window's size computed on the device (an Add): the plan stops there and reads them.
    auto step = b.op1("Add", {b.input("step", DType::i64, Shape{}), one});
    auto win = b.op1("HannWindow", {b.op1("Add", {b.input("n", DType::i64, Shape{}), one})});
    b.output(b.op1("STFT", {in, step, win}), "stft");
    auto m = Model::create(test::shared_ctx(), b.build());
    auto s = m->session();
    for (auto [l, st, n] : {std::tuple<int64_t, int64_t, int64_t>{5, 6, 15}, {131, 12, 32}, {97, 0, 96}}) {
      CAPTURE(l);
      CAPTURE(st);
      CAPTURE(n);
      auto out = s->run({{"x", f32(xs, x)}, {"len", i64({l})}, {"step", i64({st})}, {"n", i64({n})}});
      auto& y = out.at("spectrum");
      auto want = ref::dft(xd, xs, 1, l, false, false);
      check_transform(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()), want, l, max_abs(x), false);
      Shape rs;
      auto want_stft = ref::stft(xd, xs, st + 1, n + 1, ref::window(0, n + 1, true), true, &rs);
      auto& z = out.at("stft");
      REQUIRE(z.shape() == rs);
      check_transform(std::vector<float>(z.as<float>(), z.as<float>() + z.numel()), want_stft, n + 1, max_abs(x),
                      false);
    }
  }

  TEST_CASE("Window ops: folded at load and on the device, periodic and symmetric") {
    const char* ops[] = {"HannWindow", "HammingWindow", "BlackmanWindow"};
    for (int kind = 0; kind < 3; ++kind)
      for (int64_t size : {1, 2, 7, 400, 401})
        for (int64_t periodic : {0, 1})
          for (bool fold : {true, false}) {
            CAPTURE(ops[kind]);
            CAPTURE(size);
            CAPTURE(periodic);
            CAPTURE(fold);
            GraphBuilder b("win", 17);
            b.output(b.op1(ops[kind],
                           {b.constant("n", HostTensor::from<int32_t>(Shape{}, std::vector<int32_t>{int32_t(size)}))},
                           {{"periodic", periodic}}),
                     "y");
            auto z = b.input("z", DType::f32, Shape{1});
            b.output(b.op1("Identity", {z}), "zz");
            graph::PrepareOptions p;
            p.fold_constants = fold;
            auto out = run_graph(b.build(), {{"z", f32(Shape{1}, {0.0f})}}, p);
            auto want = ref::window(kind, size, periodic == 1);
            auto& y = out.at("y");
            REQUIRE(y.shape() == Shape{size});
            std::vector<float> wf(want.begin(), want.end());
            CLDL_CHECK_CLOSE(y.as<float>(), wf.data(), wf.size(), 0.0, 1e-6);
          }
    {  // past the host folding limit: made by the kernel at run time
      const int64_t size = graph::kMaxHostFoldElements + 3;
      GraphBuilder b("bigwin", 17);
      b.output(b.op1("HannWindow", {b.constant("n", i64({size}))}), "y");
      auto z = b.input("z", DType::f32, Shape{1});
      b.output(b.op1("Identity", {z}), "zz");
      auto out = run_graph(b.build(), {{"z", f32(Shape{1}, {0.0f})}});
      auto& y = out.at("y");
      REQUIRE(y.shape() == Shape{size});
      for (int64_t i = 0; i < size; i += 99991) {
        CAPTURE(i);
        const double s = std::sin(std::numbers::pi * double(i) / double(size));
        CHECK(std::fabs(y.as<float>()[i] - s * s) <= 2e-6);
      }
    }
    // output_datatype double (folded)
    GraphBuilder b("win64", 17);
    b.output(b.op1("HannWindow", {b.constant("n", i64({10}))}, {{"output_datatype", int64_t(11)}}), "y");
    auto z = b.input("z", DType::f32, Shape{1});
    b.output(b.op1("Identity", {z}), "zz");
    auto out = run_graph(b.build(), {{"z", f32(Shape{1}, {0.0f})}});
    auto want = ref::window(0, 10, true);
    REQUIRE(out.at("y").dtype() == DType::f64);
    for (size_t i = 0; i < 10; ++i) CHECK(out.at("y").as<double>()[i] == doctest::Approx(want[i]).epsilon(1e-12));
  }

  TEST_CASE("MelWeightMatrix: folded on constants, on the device with a run-time sample rate") {
    struct Case {
      int64_t mel, dft, rate;
      float lo, hi;
    };
    for (const Case& c : {Case{8, 16, 8192, 0.0f, 4096.0f}, Case{40, 400, 16000, 20.0f, 7600.0f},
                          Case{13, 257, 22050, 0.0f, 8000.0f}, Case{1, 7, 100, 5.0f, 40.0f}}) {
      CAPTURE(c.mel);
      CAPTURE(c.dft);
      auto want = ref::mel_weight_matrix(c.mel, c.dft, c.rate, c.lo, c.hi);
      std::vector<float> wf(want.begin(), want.end());
      const Shape ws{c.dft / 2 + 1, c.mel};
      for (bool constant : {true, false}) {
        CAPTURE(constant);
        GraphBuilder b("mel", 17);
        auto rate = constant ? b.constant("rate", i64({c.rate})) : b.input("rate", DType::i64, Shape{});
        b.output(
            b.op1("MelWeightMatrix", {b.constant("m", i64({c.mel})), b.constant("d", i64({c.dft})), rate,
                                      b.constant("lo", f32(Shape{}, {c.lo})), b.constant("hi", f32(Shape{}, {c.hi}))}),
            "y");
        auto z = b.input("z", DType::f32, Shape{1});
        b.output(b.op1("Identity", {z}), "zz");
        std::map<std::string, HostTensor> feed{{"z", f32(Shape{1}, {0.0f})}};
        if (!constant) feed.emplace("rate", i64({c.rate}));
        auto out = run_graph(b.build(), feed);
        auto& y = out.at("y");
        REQUIRE(y.shape() == ws);
        CLDL_CHECK_CLOSE(y.as<float>(), wf.data(), wf.size(), 0.0, 1e-6);
      }
    }
  }

  TEST_CASE("Errors name the op, the node and the argument") {
    auto dft_error = [](Shape xs, std::map<std::string, graph::AttrValue> attrs, int64_t len = 0) {
      GraphBuilder b("bad", 17);
      auto x = b.input("x", DType::f32, xs);
      std::vector<graph::Value> in{x};
      if (len) in.push_back(b.constant("len", i64({len})));
      b.output(b.op1("DFT", in, attrs), "y");
      return error_of([&] { compile_graph(b.build()); });
    };
    auto e = dft_error(Shape{2, 8, 2}, {{"axis", int64_t(-1)}});
    CHECK(e.find("DFT") != std::string::npos);
    CHECK(e.find("axis -1") != std::string::npos);
    e = dft_error(Shape{2, 8, 3}, {});
    CHECK(e.find("last dim must be 1 (real) or 2 (complex)") != std::string::npos);
    e = dft_error(Shape{2, 8, 1}, {}, -4);
    CHECK(e.find("dft_length must be >= 1") != std::string::npos);
    e = dft_error(Shape{2, 8, 1}, {{"inverse", int64_t(2)}});
    CHECK(e.find("attribute inverse must be 0 or 1") != std::string::npos);
    {
      GraphBuilder b("bad", 17);
      auto x = b.input("x", DType::f32, Shape{1, 64, 1});
      auto w = b.input("w", DType::f32, Shape{15});
      b.output(b.op1("STFT", {x, b.constant("s", i64({4})), w, b.constant("l", i64({16}))}), "y");
      e = error_of([&] { compile_graph(b.build()); });
      CHECK(e.find("STFT") != std::string::npos);
      CHECK(e.find("window has 15 points, but frame_length is 16") != std::string::npos);
    }
    {
      GraphBuilder b("bad", 17);
      b.output(b.op1("HannWindow", {b.constant("n", i64({-3}))}), "y");
      e = error_of([&] { compile_graph(b.build()); });
      CHECK(e.find("HannWindow") != std::string::npos);
      CHECK(e.find("size) must be >= 0, got -3") != std::string::npos);
    }
    {
      GraphBuilder b("bad", 17);
      b.output(b.op1("BlackmanWindow", {b.constant("n", i64({3}))}, {{"periodic", int64_t(2)}}), "y");
      e = error_of([&] { compile_graph(b.build()); });
      CHECK(e.find("attribute periodic must be 0 or 1") != std::string::npos);
    }
    {  // mel points past the spectrum (upper edge above the Nyquist frequency)
      GraphBuilder b("bad", 17);
      b.output(
          b.op1("MelWeightMatrix", {b.constant("m", i64({8})), b.constant("d", i64({16})), b.constant("r", i64({1000})),
                                    b.constant("lo", f32(Shape{}, {0.0f})), b.constant("hi", f32(Shape{}, {4000.0f}))}),
          "y");
      e = error_of([&] { compile_graph(b.build()); });
      CHECK(e.find("MelWeightMatrix") != std::string::npos);
      CHECK(e.find("outside the 9 bins") != std::string::npos);
    }
    // A length whose workspace the device cannot allocate is refused at create, before any table is made.
    e = error_of([&] { Dft::create(ctx(), 0, {Shape{65536, 8, 1}, 1, 2147483647, false, false}); });  // petabytes
    CHECK(e.find("DFT: a transform of length 2147483647") != std::string::npos);
    CHECK(e.find("the device allocates at once") != std::string::npos);
    // The layer refuses a wrong input at enqueue too.
    auto op = Dft::create(ctx(), 0, {Shape{2, 7, 1}, 1, 0, false, false});
    e = error_of([&] { run_op(*op, {up(std::vector<float>(16), Shape{2, 8, 1})}, Shape{2, 7, 2}); });
    CHECK(e.find("DFT: input has shape [2, 8, 1], expected [2, 7, 1]") != std::string::npos);
  }

  TEST_CASE("A log-mel front end (HannWindow, STFT, MelWeightMatrix) against ONNX Runtime") {
    const std::string dir = std::string(CLDL_SOURCE_DIR) + "/tests/data/audio/";
    auto m = graph::load_model(test::shared_ctx(), dir + "logmel.onnx");
    auto s = m->session();
    int cases = 0;
    for (int k = 0; std::filesystem::exists(fmt::format("{}logmel/{}_logmel.npy", dir, k)); ++k, ++cases) {
      CAPTURE(k);
      HostTensor audio = graph::read_npy(fmt::format("{}logmel/{}_audio.npy", dir, k));
      HostTensor want = graph::read_npy(fmt::format("{}logmel/{}_logmel.npy", dir, k));
      auto out = s->run({{"audio", audio}});
      const HostTensor& got = out.at("logmel");
      REQUIRE(got.shape() == want.shape());
      CLDL_CHECK_CLOSE(got.as<float>(), want.as<float>(), size_t(got.numel()), 0.0, 2e-3);
    }
    CHECK(cases == 3);
  }
}
