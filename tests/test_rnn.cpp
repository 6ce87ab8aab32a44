// RNN family tests: RNN / LSTM / GRU against the plain C++ reference (directions, ragged sequence_lens,
// layouts, peepholes, clip, input_forget, linear_before_reset, custom activations), every strategy
// against sequential, stacked layers, bad configurations, and the ONNX conformance data.
// Tolerance vs the reference: |d| <= 2e-5 + 1e-4 |want| (fp32 kernels vs double reference over a few
// dozen steps); strategies vs sequential: 1e-6 relative (same arithmetic, in practice bit-identical).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "layers/rnn.hpp"
#include "tests/reference/rnn_ref.hpp"
#include "tests/support/onnx_test_data.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using cldl::test::ctx;

namespace {

constexpr double kRtol = 1e-4, kAtol = 2e-5;

struct Case {
  RnnConfig cfg;
  RnnWeights w;
  std::vector<float> X;
  std::optional<std::vector<int32_t>> lens;
  std::optional<std::vector<float>> h0, c0;
};

Case make_case(RnnCell cell, RnnDirection dir, int64_t T, int64_t B, int64_t I, int64_t H, uint32_t seed,
               bool ragged = true, bool states = true) {
  Case c;
  c.cfg.cell = cell;
  c.cfg.direction = dir;
  c.cfg.seq_length = T;
  c.cfg.batch = B;
  c.cfg.input_size = I;
  c.cfg.hidden_size = H;
  const int64_t D = c.cfg.dirs(), GH = c.cfg.gates() * H;
  c.w.W = test::random_tensor({D, GH, I}, seed, -0.5f, 0.5f);
  c.w.R = test::random_tensor({D, GH, H}, seed + 1, -0.5f, 0.5f);
  c.w.B = test::random_tensor({D, 2 * GH}, seed + 2, -0.5f, 0.5f);
  c.X = test::random_floats(size_t(T * B * I), seed + 3);
  if (ragged) {
    std::vector<int32_t> l(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) l[size_t(b)] = int32_t((b * 5 + 3) % (T + 1));  // includes 0 and T
    l[0] = int32_t(T);
    c.lens = l;
  }
  if (states) {
    c.h0 = test::random_floats(size_t(D * B * H), seed + 4);
    if (cell == RnnCell::lstm) c.c0 = test::random_floats(size_t(D * B * H), seed + 5);
  }
  return c;
}

struct Got {
  std::vector<float> Y, Yh, Yc;
  std::string algorithm;
};

std::vector<float> to_vec(const HostTensor& h) { return {h.as<float>(), h.as<float>() + h.numel()}; }

Got run(Context& cx, const Case& c, RnnStrategy s) {
  auto layer = RnnLayer::create(cx, 0, c.cfg, c.w);
  layer->set_strategy(s);
  auto shapes = RnnLayer::validate(c.cfg);
  const int64_t T = c.cfg.seq_length, B = c.cfg.batch, I = c.cfg.input_size;
  Shape xs = c.cfg.layout == 0 ? Shape{T, B, I} : Shape{B, T, I};
  std::vector<Tensor> in(4), out(3);
  in[0] = cx.upload(HostTensor::from<float>(xs, c.X));
  if (c.lens) in[1] = cx.upload(HostTensor::from<int32_t>({B}, *c.lens));
  if (c.h0) in[2] = cx.upload(HostTensor::from<float>(shapes[1], *c.h0));
  if (c.c0) in[3] = cx.upload(HostTensor::from<float>(shapes[1], *c.c0));
  out[0] = cx.alloc(shapes[0], DType::f32);
  out[1] = cx.alloc(shapes[1], DType::f32);
  if (c.cfg.cell == RnnCell::lstm) out[2] = cx.alloc(shapes[2], DType::f32);
  // Poison the outputs: positions past a sequence's end must be written (as 0), not left alone.
  std::vector<float> nan(size_t(shapes[0].numel()), 12345.0f);
  {
    ExecutionContext e(cx.queue());
    cx.write_async(out[0], nan.data(), nan.size() * 4, e);
    cx.finish();
  }
  ExecutionContext ec(cx.queue());
  cl::Event done;
  ec.signal = &done;
  layer->enqueue(in, out, nullptr, ec);
  done.wait();
  Got g;
  g.Y = to_vec(cx.download(out[0]));
  g.Yh = to_vec(cx.download(out[1]));
  if (out[2].valid()) g.Yc = to_vec(cx.download(out[2]));
  g.algorithm = layer->algorithm();
  return g;
}

void check_vs_reference(const Case& c, const Got& g) {
  auto want = ref::rnn_layer(c.cfg, c.w, c.X, c.lens ? &*c.lens : nullptr, c.h0 ? &*c.h0 : nullptr,
                             c.c0 ? &*c.c0 : nullptr);
  INFO("algorithm: " << g.algorithm);
  CLDL_CHECK_CLOSE(g.Y.data(), want.Y.data(), want.Y.size(), kRtol, kAtol);
  CLDL_CHECK_CLOSE(g.Yh.data(), want.Yh.data(), want.Yh.size(), kRtol, kAtol);
  if (c.cfg.cell == RnnCell::lstm) CLDL_CHECK_CLOSE(g.Yc.data(), want.Yc.data(), want.Yc.size(), kRtol, kAtol);
}

// Two strategies sum the gate products in different orders (tile kernels, GEMM, the GEMV for a batch of at
// most 4): on a hidden value of 0.0055 made of O(1) terms they differed by 1.15e-7 on Intel's CPU runtime,
// so the absolute part is 5e-7, still 40x below the reference tolerance (kAtol).
void check_same(const Got& a, const Got& b) {
  INFO("algorithms: " << a.algorithm << " vs " << b.algorithm);
  CLDL_CHECK_CLOSE(a.Y.data(), b.Y.data(), b.Y.size(), 1e-6, 5e-7);
  CLDL_CHECK_CLOSE(a.Yh.data(), b.Yh.data(), b.Yh.size(), 1e-6, 5e-7);
  if (!b.Yc.empty()) CLDL_CHECK_CLOSE(a.Yc.data(), b.Yc.data(), b.Yc.size(), 1e-6, 5e-7);
}

const RnnStrategy kAll[] = {RnnStrategy::sequential, RnnStrategy::time_parallel, RnnStrategy::layer_parallel,
                            RnnStrategy::data_parallel, RnnStrategy::automatic};

// Whether the wavefront strategy applies: forward LSTM in the tiles weight layout (the CPU default).
bool wave_applies(Context& cx, const RnnConfig& c) {
  return c.cell == RnnCell::lstm && c.direction == RnnDirection::forward && test::rnn_tiles_layout(cx);
}

// Every strategy against the reference and against sequential; the wavefront where it applies, else
// its error.
void check_all_strategies(Context& cx, const Case& c) {
  Got seq = run(cx, c, RnnStrategy::sequential);
  check_vs_reference(c, seq);
  for (RnnStrategy s : kAll) {
    if (s == RnnStrategy::sequential) continue;
    CAPTURE(to_string(s));
    check_same(run(cx, c, s), seq);
  }
  if (wave_applies(cx, c.cfg)) {
    Got w = run(cx, c, RnnStrategy::wavefront);
    CHECK(w.algorithm.find("wavefront: 1 layer(s)") != std::string::npos);
    check_same(w, seq);
  } else {
    try {
      run(cx, c, RnnStrategy::wavefront);
      FAIL("wavefront ran a configuration it does not support");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("strategy wavefront: layer 0") != std::string::npos);
    }
  }
}

const char* dir_name(RnnDirection d) {
  return d == RnnDirection::forward ? "forward" : d == RnnDirection::reverse ? "reverse" : "bidirectional";
}

// A stack of forward LSTM layers (the wavefront kernels' domain) with hidden sizes `H`: different
// activations, clip and peepholes in layer 1, input_forget in layer 2; ragged lengths with 0 and T;
// initial states and Y_h / Y_c for some layers only; the composed reference in either layout.
struct LstmStackCase {
  int64_t T, B, I = 6, L;
  int layout;
  std::vector<int64_t> H;
  std::vector<RnnConfig> cfgs;
  std::vector<RnnWeights> ws;
  std::vector<float> X;
  std::vector<int32_t> lens;
  std::vector<std::vector<float>> h0s, c0s;
  std::vector<ref::RnnOutputs> want;
  std::vector<float> want_y;

  LstmStackCase(int64_t T_, int64_t B_, int layout_, std::vector<int64_t> H_, unsigned seed)
      : T(T_), B(B_), L(int64_t(H_.size())), layout(layout_), H(std::move(H_)) {
    for (int64_t l = 0; l < L; ++l) {
      Case c = make_case(RnnCell::lstm, RnnDirection::forward, T, B, l == 0 ? I : H[size_t(l - 1)], H[size_t(l)],
                         seed += 10, false, false);
      c.cfg.layout = layout;
      if (l == 1) {
        c.w.P = test::random_tensor({1, 3 * H[1]}, seed + 7);
        c.cfg.clip = 0.6f;
        c.cfg.activations = rnn_activations_from_onnx({"HardSigmoid", "Softsign", "Tanh"}, {0.3f}, {0.4f});
      }
      if (l == 2) c.cfg.input_forget = true;
      cfgs.push_back(c.cfg);
      ws.push_back(c.w);
    }
    X = test::random_floats(size_t(T * B * I), seed + 1);
    lens.resize(size_t(B));
    for (int64_t b = 0; b < B; ++b) lens[size_t(b)] = int32_t((b * 4 + 2) % (T + 1));
    lens[0] = int32_t(T);
    // Reference: the layers composed, in layout 0 (transposed in and out for layout 1).
    auto to_tb = [&](const std::vector<float>& v, int64_t W) {  // [B, T, W] -> [T, B, W]
      std::vector<float> r(v.size());
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = 0; k < W; ++k) r[size_t((t * B + b) * W + k)] = v[size_t((b * T + t) * W + k)];
      return r;
    };
    std::vector<float> x = layout == 1 ? to_tb(X, I) : X;
    for (int64_t l = 0; l < L; ++l) {
      const bool has_h0 = l % 2 == 0, has_c0 = l != 1;
      h0s.push_back(has_h0 ? test::random_floats(size_t(B * H[size_t(l)]), seed + 20 + unsigned(l)) : std::vector<float>{});
      c0s.push_back(has_c0 ? test::random_floats(size_t(B * H[size_t(l)]), seed + 40 + unsigned(l)) : std::vector<float>{});
      RnnConfig c0 = cfgs[size_t(l)];
      c0.layout = 0;
      want.push_back(ref::rnn_layer(c0, ws[size_t(l)], x, &lens, has_h0 ? &h0s.back() : nullptr, has_c0 ? &c0s.back() : nullptr));
      x = want.back().Y;
    }
    const int64_t HL = H.back();
    want_y = want.back().Y;
    if (layout == 1) {  // [T, B, H] -> [B, T, H]
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t k = 0; k < HL; ++k) want_y[size_t((b * T + t) * HL + k)] = want.back().Y[size_t((t * B + b) * HL + k)];
    }
  }

  // One run of `stack` (made from cfgs / ws in context `cx`), checked against the reference; Y, the
  // Y_h and Y_c asked for, and the schedule.
  // `dev`: the device of the stack and its inputs.
  Got run(Context& cx, RnnStack& stack, const RnnRunOptions& o, int dev = 0) const {
    RnnStackIO io;
    io.x = cx.upload(HostTensor::from<float>(layout == 0 ? Shape{T, B, I} : Shape{B, T, I}, X), dev);
    io.lens = cx.upload(HostTensor::from<int32_t>({B}, lens), dev);
    const int64_t HL = H.back();
    io.y = cx.alloc(layout == 0 ? Shape{T, 1, B, HL} : Shape{B, T, 1, HL}, DType::f32, dev);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t Hl = H[size_t(l)];
      const Shape ss = layout == 0 ? Shape{1, B, Hl} : Shape{B, 1, Hl};
      io.h0.push_back(h0s[size_t(l)].empty() ? Tensor{} : cx.upload(HostTensor::from<float>(ss, h0s[size_t(l)]), dev));
      io.c0.push_back(c0s[size_t(l)].empty() ? Tensor{} : cx.upload(HostTensor::from<float>(ss, c0s[size_t(l)]), dev));
      io.yh.push_back(l != 1 ? cx.alloc(ss, DType::f32, dev) : Tensor{});
      io.yc.push_back(l != 0 || L == 1 ? cx.alloc(ss, DType::f32, dev) : Tensor{});
    }
    ExecutionContext ec(cx.queue(dev));
    stack.enqueue(io, o, ec);
    cx.finish();
    Got g;
    g.algorithm = stack.last_schedule();
    INFO("schedule: " << g.algorithm);
    g.Y = to_vec(cx.download(io.y));
    for (int64_t l = 0; l < L; ++l) {
      if (io.yh[size_t(l)].valid()) {
        auto v = to_vec(cx.download(io.yh[size_t(l)]));
        CLDL_CHECK_CLOSE(v.data(), want[size_t(l)].Yh.data(), v.size(), kRtol, kAtol);
        g.Yh.insert(g.Yh.end(), v.begin(), v.end());
      }
      if (io.yc[size_t(l)].valid()) {
        auto v = to_vec(cx.download(io.yc[size_t(l)]));
        CLDL_CHECK_CLOSE(v.data(), want[size_t(l)].Yc.data(), v.size(), kRtol, kAtol);
        g.Yc.insert(g.Yc.end(), v.begin(), v.end());
      }
    }
    CLDL_CHECK_CLOSE(g.Y.data(), want_y.data(), want_y.size(), kRtol, kAtol);
    return g;
  }
};

// The LSTM tile widths the tests exercise on device 0: 8 everywhere, 16 where the device prefers float16
// (the heuristic picks it there). Intel's FPGA emulator (preferred width 1) took over 15 minutes to build
// the tile-knob test's 16-wide programs.
std::vector<int> tile_widths(Context& cx) {
  std::vector<int> w{8};
  if (cx.device(0).info.preferred_vector_float >= 16) w.push_back(16);
  return w;
}

// `fn` throws an Error whose message holds `what`.
template <typename F> void expect_error(F&& fn, const std::string& what) {
  try {
    fn();
    FAIL("no error; expected: " << what);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(std::string(e.what()).find(what) != std::string::npos);
  }
}

}  // namespace

TEST_SUITE("rnn") {

TEST_CASE("LSTM, GRU and RNN match the reference in every direction with ragged lengths, all strategies") {
  for (RnnCell cell : {RnnCell::lstm, RnnCell::gru, RnnCell::rnn})
    for (RnnDirection dir : {RnnDirection::forward, RnnDirection::reverse, RnnDirection::bidirectional}) {
      CAPTURE(to_string(cell));
      CAPTURE(dir_name(dir));
      Case c = make_case(cell, dir, 7, 5, 13, 11, 100 + unsigned(cell) * 10 + unsigned(dir));
      if (cell == RnnCell::gru) c.cfg.linear_before_reset = dir != RnnDirection::reverse;
      check_all_strategies(ctx(), c);
    }
}

// Runs `fn` with CLDL_RNN_WEIGHT_LAYOUT set (weights are laid out when a layer is created).
template <typename F> auto with_layout(const char* layout, F fn) {
  test::ScopedEnv env("CLDL_RNN_WEIGHT_LAYOUT", layout);
  return fn();
}

// The wavefront needs the tiles weight layout: forced for a test's scope where the device defaults to
// another (GPUs), so the wave kernels run there too.
struct WaveLayout {
  std::optional<test::ScopedEnv> env;
  explicit WaveLayout(Context& cx) {
    if (!test::rnn_tiles_layout(cx)) env.emplace("CLDL_RNN_WEIGHT_LAYOUT", "tiles");
  }
};

TEST_CASE("the k-major (GPU), row and tile weight layouts give the same results") {
  // CPUs get tiles (LSTM) or rows by default; force each so every kernel variant is tested here.
  for (RnnCell cell : {RnnCell::lstm, RnnCell::gru, RnnCell::rnn}) {
    CAPTURE(to_string(cell));
    Case c = make_case(cell, RnnDirection::bidirectional, 5, 6, 9, 10, 150 + unsigned(cell));
    c.cfg.linear_before_reset = false;
    Got rows = with_layout("rows", [&] { return run(ctx(), c, RnnStrategy::sequential); });
    check_vs_reference(c, rows);
    for (const char* lay : {"kmajor", "tiles"}) {
      CAPTURE(lay);
      Got seq = with_layout(lay, [&] { return run(ctx(), c, RnnStrategy::sequential); });
      Got tp = with_layout(lay, [&] { return run(ctx(), c, RnnStrategy::time_parallel); });
      check_vs_reference(c, seq);
      check_same(seq, rows);
      check_same(tp, rows);
    }
  }
}

TEST_CASE("LSTM tile kernels on odd shapes: H not a multiple of 8, batch 1, 3 and 9, every strategy") {
  // (T, B, I, H): partial last tile (H % 8 != 0), a single tile, odd batch (half-used row pair),
  // batch 1, I not a multiple of anything.
  struct Shape4 {
    int64_t T, B, I, H;
  };
  // Batch 1, 2-3 and >= 8 select the 1-, 2- and 4-row step kernels (9 and 10: a partial row group).
  const Shape4 shapes[] = {{6, 1, 3, 5},  {5, 3, 7, 11}, {4, 3, 9, 16}, {7, 1, 17, 19},
                           {3, 5, 1, 8},  {4, 2, 6, 27}, {4, 9, 5, 13}, {3, 10, 4, 8}};
  unsigned seed = 600;
  for (const auto& sh : shapes)
    for (RnnDirection dir : {RnnDirection::forward, RnnDirection::reverse, RnnDirection::bidirectional}) {
      CAPTURE(sh.T);
      CAPTURE(sh.B);
      CAPTURE(sh.I);
      CAPTURE(sh.H);
      CAPTURE(dir_name(dir));
      Case c = make_case(RnnCell::lstm, dir, sh.T, sh.B, sh.I, sh.H, seed += 10, sh.B > 1, sh.B != 3);
      if (sh.H == 11) c.w.P = test::random_tensor({c.cfg.dirs(), 3 * sh.H}, seed + 7);
      with_layout("tiles", [&] {
        Got g = run(ctx(), c, RnnStrategy::sequential);
        REQUIRE(g.algorithm.find("register-blocked") != std::string::npos);
        check_all_strategies(ctx(), c);
        return 0;
      });
      Got rows = with_layout("rows", [&] { return run(ctx(), c, RnnStrategy::time_parallel); });
      Got tiles = with_layout("tiles", [&] { return run(ctx(), c, RnnStrategy::time_parallel); });
      check_same(tiles, rows);
    }
}

// A tile-kernel variant of `k` through the fused step (sequential) and the projected one (time parallel),
// both equal to `want`; returns the layer's algorithm.
std::string tile_variant_same(const Case& k, const Got& want) {
  const Got seq = run(ctx(), k, RnnStrategy::sequential);
  check_same(seq, want);
  check_same(run(ctx(), k, RnnStrategy::time_parallel), want);
  return seq.algorithm;
}

TEST_CASE("LSTM tile knobs give the same results: tile width, rows per work-item, projection rows, work-groups") {
  // The k loops run in passes of 1, 2 or 4 gates by the rows per work-item and the tile width
  // (kernels/rnn.cl RNN_GP): every combination must keep the per-element order, so every strategy still
  // matches sequential. H = 19: a partial last tile at both widths (8 + 8 + 3, 16 + 3).
  Case c = make_case(RnnCell::lstm, RnnDirection::bidirectional, 5, 9, 13, 19, 1400);
  c.w.P = test::random_tensor({2, 3 * 19}, 1407);
  c.cfg.kernel.layout = 2;
  const Got want = run(ctx(), c, RnnStrategy::sequential);
  check_vs_reference(c, want);
  for (int tw : tile_widths(ctx()))
    for (int mr : {1, 2, 4})
      for (int pmr : {1, 2, 4, 8}) {
        CAPTURE(tw);
        CAPTURE(mr);
        CAPTURE(pmr);
        Case k = c;
        k.cfg.kernel.tw = tw;
        k.cfg.kernel.mr = mr;
        k.cfg.kernel.pmr = pmr;
        k.cfg.kernel.wg_m = 3;
        k.cfg.kernel.proj_wg = 5;
        CHECK(tile_variant_same(k, want).find(fmt::format("x {} units", tw)) != std::string::npos);
      }
}

TEST_CASE("LSTM tile steps over several row groups per work-item in k-blocks give the same results") {
  // A work-item of the step (and of the projection) takes rg row groups of mr rows, k-block by k-block
  // (kernels/rnn.cl RNN_KB_ACC). Batch 23: the last group of every rg is partial or past the batch (rows clamped, never
  // stored); I = 13 and H = 19: k-blocks of 1, 5 and 7 leave a partial last block, 64 is one block;
  // ragged lengths; both the fused step (sequential) and the projected one (time parallel).
  Case c = make_case(RnnCell::lstm, RnnDirection::bidirectional, 5, 23, 13, 19, 1500);
  c.w.P = test::random_tensor({2, 3 * 19}, 1507);
  c.cfg.kernel.layout = 2;
  c.cfg.kernel.rg = 1;
  c.cfg.kernel.kb = 4096;
  const Got want = run(ctx(), c, RnnStrategy::sequential);
  check_vs_reference(c, want);
  for (int launch : {1, 2})
    for (int mr : {1, 2, 4})
      for (int rg : {2, 3, 8})
        for (int kb : {1, 5, 7, 64}) {
          if (kb == 1 && (mr != 4 || launch != 1)) continue;  // the 1-wide blocks once; they are slow on every device
          CAPTURE(launch);
          CAPTURE(mr);
          CAPTURE(rg);
          CAPTURE(kb);
          Case k = c;
          k.cfg.kernel.launch = launch;
          k.cfg.kernel.mr = mr;
          k.cfg.kernel.rg = rg;
          k.cfg.kernel.kb = kb;
          k.cfg.kernel.wg_m = 2;
          k.cfg.kernel.prg = rg;  // the projection's row groups (of pmr 4 rows; 5 x 23 = 115 rows)
          k.cfg.kernel.proj_wg = 3;
          const std::string algorithm = tile_variant_same(k, want);
          CHECK(algorithm.find(fmt::format("({} row group(s) of {} batch rows", rg, mr)) != std::string::npos);
          CHECK(algorithm.find(launch == 2 ? "all-steps kernel" : "step kernel (") != std::string::npos);
          CHECK(algorithm.find(fmt::format("k-blocks of {},", kb)) != std::string::npos);
          CHECK(algorithm.find(fmt::format("projection {} row group(s) of 4 rows", rg)) != std::string::npos);
        }
  // The heuristic (rg 0): as many groups as fit while two work-items per compute unit remain, evened out.
  CHECK(rnn_step_row_groups(8, 32, 2) == 8);    // B32 H512 on 2 cores: one work-item per tile
  CHECK(rnn_step_row_groups(16, 16, 2) == 8);   // B64 H256: two per tile
  CHECK(rnn_step_row_groups(10, 32, 2) == 5);   // 10 groups: 2 x 5, not 8 + 2
  CHECK(rnn_step_row_groups(8, 32, 64) == 2);   // 64 compute units: 128 work-items
  CHECK(rnn_step_row_groups(8, 1, 64) == 1);
  CHECK(rnn_step_row_groups(1, 32, 2) == 1);
  CHECK(rnn_step_row_groups(3, 4, 1) == 3);
  Case bad = c;
  bad.cfg.kernel.rg = kRnnMaxRowGroups + 1;
  expect_error([&] { RnnLayer::create(ctx(), 0, bad.cfg, bad.w); }, "kernel.rg must be 1..8 (0 = auto), got 9");
  bad.cfg.kernel.rg = 0;
  bad.cfg.kernel.prg = -1;
  expect_error([&] { RnnLayer::create(ctx(), 0, bad.cfg, bad.w); }, "kernel.prg must be 1..8 (0 = auto), got -1");
  bad.cfg.kernel.prg = 0;
  bad.cfg.kernel.rg = 0;
  bad.cfg.kernel.kb = -2;
  expect_error([&] { RnnLayer::create(ctx(), 0, bad.cfg, bad.w); }, "kernel.kb must be 1..4096 (0 = auto), got -2");
}

TEST_CASE("LSTM all steps in one launch (batch shards) equal one launch per step, every strategy") {
  // kernel.launch 2: lstm_steps_tile_m* runs steps [s0, s1) of a batch shard per work-item in one launch.
  // Odd and small batches (shards of partial row groups, batch 1: one shard), ragged lengths with 0 and T,
  // initial states or none, peepholes, every direction; every strategy (layer parallel: in chunks, so a
  // launch starts at s0 > 0 from the state the previous one left) equal to the per-step launches and the
  // reference.
  struct Shape4 {
    int64_t T, B, I, H;
  };
  const Shape4 shapes[] = {{6, 1, 3, 5}, {5, 4, 7, 11}, {7, 9, 5, 19}, {4, 23, 6, 8}};
  unsigned seed = 1700;
  for (const auto& sh : shapes)
    for (RnnDirection dir : {RnnDirection::forward, RnnDirection::reverse, RnnDirection::bidirectional}) {
      CAPTURE(sh.B);
      CAPTURE(sh.H);
      CAPTURE(dir_name(dir));
      Case c = make_case(RnnCell::lstm, dir, sh.T, sh.B, sh.I, sh.H, seed += 10, true, sh.B != 4);
      c.w.P = test::random_tensor({c.cfg.dirs(), 3 * sh.H}, seed + 7);
      c.cfg.kernel.layout = 2;
      c.cfg.kernel.launch = 1;
      const Got want = run(ctx(), c, RnnStrategy::sequential);
      check_vs_reference(c, want);
      REQUIRE(want.algorithm.find("step kernel (") != std::string::npos);
      Case k = c;
      k.cfg.kernel.launch = 2;
      for (RnnStrategy s : kAll) {
        CAPTURE(to_string(s));
        const Got g = run(ctx(), k, s);
        CHECK(g.algorithm.find("all-steps kernel, one launch per call") != std::string::npos);
        check_same(g, want);
      }
    }
}

TEST_CASE("LSTM all-steps launch: one kernel per direction and call; the heuristic, and what auto picks") {
  Case c = make_case(RnnCell::lstm, RnnDirection::bidirectional, 6, 8, 5, 16, 1800);
  c.cfg.kernel.layout = 2;
  for (int launch : {1, 2}) {
    CAPTURE(launch);
    Case k = c;
    k.cfg.kernel.launch = launch;
    auto layer = RnnLayer::create(ctx(), 0, k.cfg, k.w);
    layer->set_strategy(RnnStrategy::time_parallel);
    Tensor x = ctx().upload(HostTensor::from<float>({6, 8, 5}, k.X));
    Tensor y = ctx().alloc(RnnLayer::validate(k.cfg)[0], DType::f32);
    std::vector<Tensor> in{x}, out{y};
    Profiler prof;
    ExecutionContext ec(ctx().queue(0, 0, true));
    ec.profiler = &prof;
    layer->enqueue(in, out, nullptr, ec);
    ctx().finish();
    size_t steps = 0;
    for (const auto& r : prof.records()) steps += r.name == "LSTM";
    CHECK(steps == (launch == 2 ? 1u : 6u) * 2);
  }
  // The heuristic (launch 0, all_steps_shards): CPU devices only; the weights a shard reads per step fit
  // 1 MiB, or the shard has >= 16 rows and they fit a quarter of the global memory cache; and every compute
  // unit gets a shard, or the idle units' share of a step is below 2^21 FMAs.
  const DeviceInfo& info = ctx().device(0).info;
  const int64_t cu = std::max<int64_t>(2, info.compute_units);
  auto algorithm = [&](int64_t B, int64_t H, int rg = 0) {
    Case k = make_case(RnnCell::lstm, RnnDirection::forward, 2, B, 3, H, 1810, false, false);
    k.cfg.kernel.layout = 2;
    k.cfg.kernel.rg = rg;
    return RnnLayer::create(ctx(), 0, k.cfg, k.w)->algorithm();
  };
  auto all_steps = [](const std::string& a) { return a.find("all-steps") != std::string::npos; };
  const bool cpu = info.type == DeviceType::cpu;
  CHECK(all_steps(algorithm(4 * cu, 256)) == cpu);  // R = 1 MiB
  // ... but W and R together do not (and a shard has 4 rows): the fused step (sequential) keeps one launch
  // per step, with the per-step row groups (the tile width: the heuristic's).
  const int64_t tw = info.preferred_vector_float >= 16 ? 16 : 8;
  CHECK((algorithm(4 * cu, 256)
             .find(fmt::format("(fused input projection: per step, {} row group(s))",
                               rnn_step_row_groups(cu, 256 / tw, info.compute_units))) != std::string::npos) == cpu);
  CHECK(algorithm(4 * cu, 128).find("(fused input projection: per step") == std::string::npos);
  // k-blocks (kb 0): 64, one block for the step that fuses the input projection; or the knob's.
  CHECK(algorithm(4 * cu, 128).find("k-blocks of 64 (fused input projection: one block),") != std::string::npos);
  CHECK_FALSE(all_steps(algorithm(8 * cu, 264)));  // R > 1 MiB and shards of 8 rows
  // Shards of 16 rows: R may exceed 1 MiB up to a quarter of the global memory cache.
  const uint64_t r264 = 4 * 264 * 264 * sizeof(float);
  CHECK(all_steps(algorithm(16 * cu, 264)) == (cpu && r264 <= info.global_mem_cache_bytes / 4));
  // One shard (batch 1) of a step of 16 K FMAs: below a launch's cost, so one launch although units idle.
  CHECK(all_steps(algorithm(1, 64)) == cpu);
  // One shard of 32 rows (rg 8) at H 256: the idle units' share, 32 x 256 K FMAs / 2 or more, is not.
  if (info.compute_units >= 2) CHECK_FALSE(all_steps(algorithm(32, 256, 8)));
  // What auto picks for forward LSTM stacks in the tiles layout on one device (batch < 16).
  {
    WaveLayout tiles(ctx());
    auto pick = [&](int64_t B, int64_t I, int64_t H, int L, int launch) {
      std::vector<RnnConfig> cfgs;
      std::vector<RnnWeights> ws;
      for (int l = 0; l < L; ++l) {
        Case k = make_case(RnnCell::lstm, RnnDirection::forward, 2, B, l ? H : I, H, 1820 + unsigned(l), false, false);
        k.cfg.kernel.launch = launch;
        cfgs.push_back(k.cfg);
        ws.push_back(k.w);
      }
      auto stack = RnnStack::create(ctx(), 0, cfgs, ws);
      RnnStackIO io;
      io.x = ctx().upload(HostTensor::from<float>({2, B, I}, test::random_floats(size_t(2 * B * I), 1830)));
      io.y = ctx().alloc({2, 1, B, H}, DType::f32);
      ExecutionContext ec(ctx().queue());
      stack->enqueue(io, RnnRunOptions{}, ec);
      ctx().finish();
      return stack->last_schedule();
    };
    const int64_t B = std::min<int64_t>(15, 2 * cu);
    // Small layers on a CPU: every layer's fused steps in one launch, so sequential.
    std::string what = pick(B, 5, 16, 2, 0);
    INFO(what);
    CHECK((what.rfind("sequential", 0) == 0 &&
           what.find("(auto: forward LSTM layers, each layer's fused steps in one launch)") != std::string::npos) ==
          cpu);
    if (!cpu) CHECK(what.rfind("wavefront", 0) == 0);
    // One launch per step (the knob): the wavefront.
    what = pick(B, 5, 16, 2, 1);
    CHECK(what.rfind("wavefront", 0) == 0);
    if (cpu && cu <= 3) {
      // H 256: R fits 1 MiB, W + R does not and the shards have 4 rows: time parallel below batch 16.
      what = pick(2 * cu, 256, 256, 2, 0);
      CHECK(what.rfind("time_parallel", 0) == 0);
      CHECK(what.find("(auto: forward LSTM layers, batch < 16, each layer's steps in one launch)") !=
            std::string::npos);
    }
    if (cpu && info.compute_units >= 2) {
      // Batch 1: one shard per layer, units idle: the layers overlap (layer parallel).
      what = pick(1, 256, 256, 2, 0);
      CHECK(what.rfind("layer_parallel", 0) == 0);
      CHECK(what.find("fewer shards than compute units") != std::string::npos);
    }
  }
  Case bad = c;
  bad.cfg.kernel.launch = 3;
  expect_error([&] { RnnLayer::create(ctx(), 0, bad.cfg, bad.w); },
               "kernel.launch must be 1 (per step) or 2 (all steps) (0 = auto), got 3");
}

TEST_CASE("GRU linear_before_reset 0 and 1, batch 1, no initial state, no sequence_lens") {
  for (bool lbr : {false, true}) {
    CAPTURE(lbr);
    Case c = make_case(RnnCell::gru, RnnDirection::bidirectional, 6, 1, 3, 9, 200 + lbr, false, false);
    c.cfg.linear_before_reset = lbr;
    check_all_strategies(ctx(), c);
  }
}

TEST_CASE("layout 1, LSTM peepholes, input_forget, clip and custom activations") {
  Case c = make_case(RnnCell::lstm, RnnDirection::bidirectional, 5, 4, 7, 6, 300);
  c.cfg.layout = 1;
  c.w.P = test::random_tensor({2, 18}, 301);
  c.cfg.clip = 0.7f;
  // Forward: HardSigmoid, Tanh, Softsign; reverse: Sigmoid, ScaledTanh(0.8, 1.2), Tanh.
  c.cfg.activations = rnn_activations_from_onnx({"HardSigmoid", "Tanh", "Softsign", "Sigmoid", "ScaledTanh", "Tanh"},
                                                 {0.3f, 0.8f}, {0.4f, 1.2f});
  CHECK(c.cfg.activations[0].alpha == doctest::Approx(0.3f));
  CHECK(c.cfg.activations[4].beta == doctest::Approx(1.2f));
  check_all_strategies(ctx(), c);
  SUBCASE("input_forget, RNN with Relu and clip in layout 1") {
    Case d = make_case(RnnCell::lstm, RnnDirection::forward, 5, 3, 4, 5, 310);
    d.cfg.input_forget = true;
    d.cfg.layout = 1;
    check_vs_reference(d, run(ctx(), d, RnnStrategy::time_parallel));
    Case r = make_case(RnnCell::rnn, RnnDirection::reverse, 6, 3, 4, 5, 320);
    r.cfg.layout = 1;
    r.cfg.clip = 0.5f;
    r.cfg.activations = {Activation(Act::relu)};
    check_all_strategies(ctx(), r);
  }
}

TEST_CASE("Y_h and Y are optional; larger hidden size") {
  Case c = make_case(RnnCell::lstm, RnnDirection::forward, 9, 3, 20, 70, 400);
  Got g = run(ctx(), c, RnnStrategy::time_parallel);
  check_vs_reference(c, g);
  // Only Y_h requested.
  auto layer = RnnLayer::create(ctx(), 0, c.cfg, c.w);
  Tensor x = ctx().upload(HostTensor::from<float>({9, 3, 20}, c.X));
  Tensor yh = ctx().alloc({1, 3, 70}, DType::f32);
  std::vector<Tensor> in{x}, out{Tensor{}, yh};
  ExecutionContext ec(ctx().queue());
  layer->enqueue(in, out, nullptr, ec);
  auto want = ref::rnn_layer(c.cfg, c.w, c.X, nullptr, nullptr, nullptr);
  auto got = to_vec(ctx().download(yh));
  CLDL_CHECK_CLOSE(got.data(), want.Yh.data(), got.size(), kRtol, kAtol);
}

TEST_CASE("stacked layers: every strategy equals sequential and the composed reference") {
  const int64_t T = 9, B = 4;
  std::vector<RnnConfig> cfgs;
  std::vector<RnnWeights> ws;
  auto add = [&](RnnCell cell, RnnDirection dir, int64_t I, int64_t H, uint32_t seed) {
    Case c = make_case(cell, dir, T, B, I, H, seed, false, false);
    cfgs.push_back(c.cfg);
    ws.push_back(c.w);
  };
  add(RnnCell::lstm, RnnDirection::forward, 5, 8, 500);
  add(RnnCell::gru, RnnDirection::forward, 8, 7, 510);
  add(RnnCell::lstm, RnnDirection::bidirectional, 7, 6, 520);
  add(RnnCell::rnn, RnnDirection::forward, 12, 5, 530);
  auto stack = RnnStack::create(ctx(), 0, cfgs, ws);
  auto X = test::random_floats(size_t(T * B * 5), 540);
  std::vector<int32_t> lens{9, 4, 0, 7};
  // Reference: compose layers.
  std::vector<float> x = X;
  std::vector<ref::RnnOutputs> want;
  for (size_t l = 0; l < cfgs.size(); ++l) {
    want.push_back(ref::rnn_layer(cfgs[l], ws[l], x, &lens, nullptr, nullptr));
    x = ref::concat_directions(want.back().Y, T, cfgs[l].dirs(), B, cfgs[l].hidden_size);
  }
  std::vector<float> seq_y;
  for (RnnStrategy s : kAll) {
    CAPTURE(to_string(s));
    RnnStackIO io;
    io.x = ctx().upload(HostTensor::from<float>({T, B, 5}, X));
    io.lens = ctx().upload(HostTensor::from<int32_t>({B}, lens));
    io.y = ctx().alloc({T, 1, B, 5}, DType::f32);
    for (auto& c : cfgs) io.yh.push_back(ctx().alloc({c.dirs(), B, c.hidden_size}, DType::f32));
    RnnRunOptions o;
    o.strategy = s;
    o.chunk = 2;
    ExecutionContext ec(ctx().queue());
    stack->enqueue(io, o, ec);
    ctx().finish();
    INFO("schedule: " << stack->last_schedule());
    auto y = to_vec(ctx().download(io.y));
    CLDL_CHECK_CLOSE(y.data(), want.back().Y.data(), y.size(), kRtol, kAtol);
    for (size_t l = 0; l < cfgs.size(); ++l) {
      auto yh = to_vec(ctx().download(io.yh[l]));
      CLDL_CHECK_CLOSE(yh.data(), want[l].Yh.data(), yh.size(), kRtol, kAtol);
    }
    if (s == RnnStrategy::sequential) seq_y = y;
    else CLDL_CHECK_CLOSE(y.data(), seq_y.data(), y.size(), 1e-6, 1e-7);
  }
}

TEST_CASE("wavefront: stacks of forward LSTM layers equal sequential and the composed reference") {
  WaveLayout tiles(ctx());
  // Layers with different hidden sizes (partial tiles, one tile, several), activations, clip, peepholes
  // and input_forget; ragged lengths with 0 and T; initial states and Y_h / Y_c for some layers only;
  // both layouts; batch 1, 3 and 9 (1-, 2- and 4-row kernels); the knobs forced too.
  struct Stack {
    int64_t T, B;
    int layout;
    std::vector<int64_t> H;
  };
  const Stack stacks[] = {{7, 3, 0, {5, 13, 8, 11}}, {6, 1, 1, {16, 9}}, {5, 9, 0, {12, 7, 20}}, {9, 2, 1, {8}}};
  unsigned seed = 900;
  for (const auto& st : stacks) {
    const int64_t T = st.T, L = int64_t(st.H.size());
    CAPTURE(T);
    CAPTURE(st.B);
    CAPTURE(L);
    CAPTURE(st.layout);
    const LstmStackCase sc(st.T, st.B, st.layout, st.H, seed += 100);
    auto stack = RnnStack::create(ctx(), 0, sc.cfgs, sc.ws);
    auto run_stack = [&](const RnnRunOptions& o) { return sc.run(ctx(), *stack, o); };
    RnnRunOptions o;
    o.strategy = RnnStrategy::sequential;
    Got seq = run_stack(o);
    o.strategy = RnnStrategy::wavefront;
    Got wave = run_stack(o);
    CHECK(wave.algorithm.find(fmt::format("wavefront: {} layer(s) in ", L)) != std::string::npos);
    check_same(wave, seq);
    // Both forms: fused (lag 1) and projected per chunk (lag 2, 3 and 8: T a multiple or not, one chunk).
    for (int lag : {1, 2, 3, 8}) {
      CAPTURE(lag);
      o.wave.lag = lag;
      Got k = run_stack(o);
      CHECK(k.algorithm.find(fmt::format("in {} launches", T + lag * (L - 1))) != std::string::npos);
      CHECK(k.algorithm.find(lag == 1 ? "fused" : "per ") != std::string::npos);
      check_same(k, seq);
    }
    for (int mr : {1, 2, 4})
      for (int wg : {1, 3}) {
        CAPTURE(mr);
        CAPTURE(wg);
        o.wave.mr = mr;
        o.wave.wg_m = wg;
        o.wave.lag = wg == 1 ? 1 : 2;
        // Row groups per work-item and k-blocks (partial blocks: 3 and 5 divide none of the sizes).
        o.wave.rg = wg == 1 ? 2 : 3;
        o.wave.kb = wg == 1 ? 3 : 5;
        Got k = run_stack(o);
        CHECK(k.algorithm.find(fmt::format("lstm_wave_tile_m{} ({} row group(s)", mr, o.wave.rg)) != std::string::npos);
        check_same(k, seq);
      }
    o.wave.rg = o.wave.kb = 0;
    o = RnnRunOptions{};
    Got a = run_stack(o);
    // auto: the wavefront, or sequential where every layer runs its fused steps in one launch (on a CPU,
    // layers this small always do).
    bool one_launch = true;
    for (int64_t l = 0; l < L; ++l)
      one_launch = one_launch && stack->layer(size_t(l)).steps_in_one_launch(0, st.B, true);
    CHECK(one_launch == (ctx().device(0).info.type == DeviceType::cpu));
    CHECK(a.algorithm.rfind(one_launch ? "sequential" : "wavefront", 0) == 0);
    CHECK(a.algorithm.find("(auto: ") != std::string::npos);
    check_same(a, seq);
    // Both tile widths (the device's heuristic picks one of them; the wave kernel is built for the
    // layers' width), fused and projected, on the first stack.
    for (int tw : &st == &stacks[0] ? tile_widths(ctx()) : std::vector<int>{}) {
      CAPTURE(tw);
      std::vector<RnnConfig> cfgs = sc.cfgs;
      for (auto& cf : cfgs) cf.kernel.tw = tw;
      auto wide = RnnStack::create(ctx(), 0, cfgs, sc.ws);
      RnnRunOptions w;
      w.strategy = RnnStrategy::wavefront;
      for (int lag : {1, 3}) {
        CAPTURE(lag);
        w.wave.lag = lag;
        check_same(sc.run(ctx(), *wide, w), seq);
      }
    }
  }
}

TEST_CASE("wavefront refuses what it cannot run, and auto then picks another strategy") {
  WaveLayout tiles(ctx());
  const int64_t T = 4, B = 2;
  std::vector<RnnConfig> cfgs;
  std::vector<RnnWeights> ws;
  for (RnnCell cell : {RnnCell::lstm, RnnCell::gru}) {
    Case c = make_case(cell, RnnDirection::forward, T, B, 3, 5, 950 + unsigned(cell), false, false);
    if (cell == RnnCell::gru) c.cfg.input_size = 5, c.w.W = test::random_tensor({1, 15, 5}, 960);
    cfgs.push_back(c.cfg);
    ws.push_back(c.w);
  }
  auto stack = RnnStack::create(ctx(), 0, cfgs, ws);
  RnnStackIO io;
  io.x = ctx().upload(HostTensor::from<float>({T, B, 3}, test::random_floats(size_t(T * B * 3), 970)));
  io.y = ctx().alloc({T, 1, B, 5}, DType::f32);
  RnnRunOptions o;
  o.strategy = RnnStrategy::wavefront;
  ExecutionContext ec(ctx().queue());
  expect_error([&] { stack->enqueue(io, o, ec); }, "LSTM: strategy wavefront: layer 1 is GRU");
  o.strategy = RnnStrategy::automatic;
  ExecutionContext ec2(ctx().queue());
  stack->enqueue(io, o, ec2);
  ctx().finish();
  CHECK(stack->last_schedule().find("layer_parallel") != std::string::npos);
  o.wave.mr = 3;
  o.strategy = RnnStrategy::wavefront;
  cfgs.pop_back();
  ws.pop_back();
  auto one = RnnStack::create(ctx(), 0, cfgs, ws);
  io.y = Tensor{};
  ExecutionContext ec3(ctx().queue());
  expect_error([&] { one->enqueue(io, o, ec3); }, "mr must be 1, 2 or 4");
  o.wave.mr = 0;
  o.wave.rg = 9;
  ExecutionContext ec5(ctx().queue());
  expect_error([&] { one->enqueue(io, o, ec5); }, "RNN wavefront: rg must be 1..8 (0 = auto), got 9");
  o.wave.rg = 0;
  // Two LSTM layers with different tile widths: one wave kernel cannot serve both.
  if (tile_widths(ctx()).size() < 2) return;
  cfgs.push_back(cfgs[0]);
  cfgs[1].input_size = 5;
  ws.push_back(make_case(RnnCell::lstm, RnnDirection::forward, T, B, 5, 5, 980, false, false).w);
  cfgs[0].kernel.tw = 8;
  cfgs[1].kernel.tw = 16;
  auto mixed = RnnStack::create(ctx(), 0, cfgs, ws);
  o.wave.mr = 0;
  ExecutionContext ec4(ctx().queue());
  expect_error([&] { mixed->enqueue(io, o, ec4); }, "layer 1 has tiles 16 units wide, layer 0 8");
}

TEST_CASE("auto on one LSTM layer in the tiles layout: the wavefront below batch 16, sequential from 16") {
  WaveLayout tiles(ctx());
  for (int64_t B : {15, 16}) {
    CAPTURE(B);
    Case c = make_case(RnnCell::lstm, RnnDirection::forward, 3, B, 5, 7, 990 + unsigned(B), false, false);
    c.cfg.kernel.launch = 1;  // one launch per step (all steps in one: the test below)
    auto stack = RnnStack::create(ctx(), 0, {c.cfg}, {c.w});
    RnnStackIO io;
    io.x = ctx().upload(HostTensor::from<float>({3, B, 5}, c.X));
    io.y = ctx().alloc({3, 1, B, 7}, DType::f32);
    ExecutionContext ec(ctx().queue());
    stack->enqueue(io, RnnRunOptions{}, ec);
    ctx().finish();
    const std::string& what = stack->last_schedule();
    INFO(what);
    CHECK(what.rfind(B >= 16 ? "sequential" : "wavefront", 0) == 0);
    CHECK(what.find("(auto: ") != std::string::npos);
  }
}

TEST_CASE("a profiler sees the wavefront's launches: T + lag (L - 1) waves and the chunk projections") {
  WaveLayout tiles(ctx());
  const int64_t T = 7, B = 2;
  std::vector<RnnConfig> cfgs;
  std::vector<RnnWeights> ws;
  for (int l = 0; l < 3; ++l) {
    Case c = make_case(RnnCell::lstm, RnnDirection::forward, T, B, l == 0 ? 4 : 6, 6, 980 + unsigned(l), false, false);
    cfgs.push_back(c.cfg);
    ws.push_back(c.w);
  }
  auto stack = RnnStack::create(ctx(), 0, cfgs, ws);
  RnnStackIO io;
  io.x = ctx().upload(HostTensor::from<float>({T, B, 4}, test::random_floats(size_t(T * B * 4), 990)));
  io.y = ctx().alloc({T, 1, B, 6}, DType::f32);
  for (int lag : {1, 3}) {
    CAPTURE(lag);
    RnnRunOptions o;
    o.strategy = RnnStrategy::wavefront;
    o.wave.lag = lag;
    Profiler prof;
    ExecutionContext ec(ctx().queue(0, 0, true));
    ec.profiler = &prof;
    stack->enqueue(io, o, ec);
    size_t waves = 0, projections = 0;
    for (const auto& r : prof.records()) {
      waves += r.name == "lstm_wave";
      projections += r.name == "lstm_project_tile";
    }
    CHECK(waves == size_t(T + lag * 2));
    // Lag 3: layer 0 at once, layers 1 and 2 in chunks of 3 steps (3 chunks each); fused: none.
    CHECK(projections == (lag == 1 ? 0u : 1u + 2 * 3));
  }
}

TEST_CASE("a profiler sees the step kernels of every strategy") {
  Case c = make_case(RnnCell::gru, RnnDirection::bidirectional, 4, 4, 5, 6, 650);
  for (RnnStrategy s : kAll) {
    CAPTURE(to_string(s));
    auto layer = RnnLayer::create(ctx(), 0, c.cfg, c.w);
    layer->set_strategy(s);
    Tensor x = ctx().upload(HostTensor::from<float>({4, 4, 5}, c.X));
    Tensor y = ctx().alloc(RnnLayer::validate(c.cfg)[0], DType::f32);
    std::vector<Tensor> in{x}, out{y};
    Profiler prof;
    ExecutionContext ec(ctx().queue(0, 0, true));
    ec.profiler = &prof;
    layer->enqueue(in, out, nullptr, ec);
    size_t steps = 0;
    for (const auto& r : prof.records()) steps += r.name == "GRU";
    // 4 steps x 2 directions per batch shard (data parallel: 2 shards on one device).
    CHECK(steps == (s == RnnStrategy::data_parallel ? 2u : 1u) * 2 * 4);
  }
}

TEST_CASE("bad configurations fail with clear messages") {
  Case c = make_case(RnnCell::lstm, RnnDirection::forward, 4, 2, 3, 5, 600);
  RnnConfig z = c.cfg;
  z.hidden_size = 0;
  expect_error([&] { RnnLayer::validate(z); }, "LSTM: hidden_size must be positive, got 0");
  RnnWeights bad = c.w;
  bad.R = test::random_tensor({1, 20, 4}, 1);
  expect_error([&] { RnnLayer::create(ctx(), 0, c.cfg, bad); }, "LSTM: R has shape [1, 20, 4], expected [1, 20, 5]");
  std::vector<int32_t> lens{4, 5};
  expect_error([&] { RnnLayer::check_sequence_lens(c.cfg, lens); }, "sequence_lens[1] = 5 is outside [0, seq_length = 4]");
  RnnConfig g = c.cfg;
  g.cell = RnnCell::gru;
  g.activations = {Activation(Act::tanh)};
  expect_error([&] { RnnLayer::validate(g); }, "GRU: activations has 1 entries, expected 2");
  auto layer = RnnLayer::create(ctx(), 0, c.cfg, c.w);
  Tensor x = ctx().alloc({4, 3, 3}, DType::f32);
  std::vector<Tensor> in{x};
  ExecutionContext ec(ctx().queue());
  expect_error([&] { layer->enqueue(in, {}, nullptr, ec); }, "LSTM: X has shape [4, 3, 3], expected [4, 2, 3]");
  expect_error([&] { parse_rnn_strategy("diagonal"); }, "unknown RNN strategy 'diagonal'");
  std::vector<RnnConfig> two{c.cfg, c.cfg};
  expect_error([&] { RnnStack::create(ctx(), 0, two, {c.w, c.w}); }, "layer 1 has input_size 3, expected");
}

TEST_CASE("ONNX conformance: test_lstm_*, test_gru_*, test_rnn_*, test_simple_rnn_*") {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(CLDL_CONFORMANCE_DIR) / "onnx-node";
  if (!fs::exists(root)) {
    MESSAGE("conformance data not found at " << root.string());
    return;
  }
  int ran = 0;
  for (const auto& entry : fs::directory_iterator(root)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("test_lstm_", 0) && name.rfind("test_gru_", 0) && name.rfind("test_rnn_", 0) &&
        name.rfind("test_simple_rnn_", 0))
      continue;
    CAPTURE(name);
    auto node = test::load_onnx_node_test(entry.path().string());
    REQUIRE(node.inputs.at(0));
    const HostTensor& X = *node.inputs.at(0);
    RnnConfig cfg = rnn_config_from_onnx(node.node, X.shape());
    RnnWeights w;
    w.W = *node.inputs.at(1);
    w.R = *node.inputs.at(2);
    auto opt = [&](size_t i) { return i < node.inputs.size() ? node.inputs[i] : std::nullopt; };
    if (opt(3)) w.B = *opt(3);
    if (opt(7)) w.P = *opt(7);
    for (RnnStrategy s : {RnnStrategy::sequential, RnnStrategy::time_parallel, RnnStrategy::data_parallel}) {
      CAPTURE(to_string(s));
      auto layer = RnnLayer::create(ctx(), 0, cfg, w);
      layer->set_strategy(s);
      auto shapes = RnnLayer::validate(cfg);
      std::vector<Tensor> in(4), out(3);
      in[0] = ctx().upload(X);
      if (opt(4)) {
        HostTensor l32(DType::i32, opt(4)->shape());
        for (int64_t i = 0; i < l32.numel(); ++i)
          l32.as<int32_t>()[i] = opt(4)->dtype() == DType::i64 ? int32_t(opt(4)->as<int64_t>()[i]) : opt(4)->as<int32_t>()[i];
        RnnLayer::check_sequence_lens(cfg, l32.span<int32_t>());
        in[1] = ctx().upload(l32);
      }
      if (opt(5)) in[2] = ctx().upload(*opt(5));
      if (opt(6)) in[3] = ctx().upload(*opt(6));
      for (size_t o = 0; o < node.outputs.size(); ++o)
        if (node.outputs[o]) out[o] = ctx().alloc(shapes[o], DType::f32);
      ExecutionContext ec(ctx().queue());
      layer->enqueue(in, out, nullptr, ec);
      ctx().finish();
      for (size_t o = 0; o < node.outputs.size(); ++o) {
        if (!node.outputs[o]) continue;
        CAPTURE(o);
        auto got = to_vec(ctx().download(out[o]));
        const HostTensor& want = *node.outputs[o];
        REQUIRE(size_t(want.numel()) == got.size());
        CLDL_CHECK_CLOSE(got.data(), want.as<float>(), got.size(), 1e-4, 1e-5);
      }
    }
    ++ran;
  }
  CHECK(ran >= 9);
}

}  // TEST_SUITE("rnn")

TEST_SUITE("multi-device") {

TEST_CASE("RNN strategies over two devices equal sequential") {
  if (!std::getenv("CLDL_TEST_MULTI_DEVICE")) return;
  auto devs = select_devices("cpu:all");
  REQUIRE_MESSAGE(devs.size() >= 2, "run with POCL_DEVICES=\"pthread pthread\"");
  devs.resize(2);
  Context two(devs);
  for (RnnCell cell : {RnnCell::lstm, RnnCell::gru, RnnCell::rnn})
    for (RnnDirection dir : {RnnDirection::forward, RnnDirection::bidirectional}) {
      CAPTURE(to_string(cell));
      CAPTURE(dir_name(dir));
      Case c = make_case(cell, dir, 6, 5, 7, 9, 700 + unsigned(cell) * 10 + unsigned(dir));
      c.cfg.layout = dir == RnnDirection::forward ? 1 : 0;
      check_all_strategies(two, c);
    }
  // A stack whose layers alternate between the devices (layer parallel) or whose batch is split.
  const int64_t T = 8, B = 5;
  std::vector<RnnConfig> cfgs;
  std::vector<RnnWeights> ws;
  for (int l = 0; l < 3; ++l) {
    Case c = make_case(l == 1 ? RnnCell::gru : RnnCell::lstm, l == 2 ? RnnDirection::bidirectional : RnnDirection::forward,
                       T, B, l == 0 ? 4 : 6, 6, 800 + l, false, true);
    cfgs.push_back(c.cfg);
    ws.push_back(c.w);
  }
  auto stack = RnnStack::create(two, 0, cfgs, ws);
  auto X = test::random_floats(size_t(T * B * 4), 810);
  std::vector<int32_t> lens{8, 3, 5, 0, 7};
  std::vector<float> x = X;
  std::vector<ref::RnnOutputs> want;
  std::vector<std::vector<float>> h0s;
  for (size_t l = 0; l < cfgs.size(); ++l) {
    h0s.push_back(test::random_floats(size_t(cfgs[l].dirs() * B * 6), 820 + unsigned(l)));
    want.push_back(ref::rnn_layer(cfgs[l], ws[l], x, &lens, &h0s[l], nullptr));
    x = ref::concat_directions(want.back().Y, T, cfgs[l].dirs(), B, 6);
  }
  for (RnnStrategy s : kAll) {
    CAPTURE(to_string(s));
    RnnStackIO io;
    io.x = two.upload(HostTensor::from<float>({T, B, 4}, X));
    io.lens = two.upload(HostTensor::from<int32_t>({B}, lens));
    io.y = two.alloc({T, 2, B, 6}, DType::f32);
    for (size_t l = 0; l < cfgs.size(); ++l) {
      io.h0.push_back(two.upload(HostTensor::from<float>({cfgs[l].dirs(), B, 6}, h0s[l])));
      io.yh.push_back(two.alloc({cfgs[l].dirs(), B, 6}, DType::f32));
      io.yc.push_back(cfgs[l].cell == RnnCell::lstm ? two.alloc({cfgs[l].dirs(), B, 6}, DType::f32) : Tensor{});
    }
    RnnRunOptions o;
    o.strategy = s;
    o.chunk = 3;
    ExecutionContext ec(two.queue());
    stack->enqueue(io, o, ec);
    two.finish();
    INFO("schedule: " << stack->last_schedule());
    // Layer parallel: the GRU and bidirectional layers keep the per-layer queues (no wavefront kernels).
    if (s == RnnStrategy::layer_parallel) CHECK(stack->last_schedule().find("3 layers on 2 device(s)") != std::string::npos);
    auto y = to_vec(two.download(io.y));
    CLDL_CHECK_CLOSE(y.data(), want.back().Y.data(), y.size(), kRtol, kAtol);
    for (size_t l = 0; l < cfgs.size(); ++l) {
      auto yh = to_vec(two.download(io.yh[l]));
      CLDL_CHECK_CLOSE(yh.data(), want[l].Yh.data(), yh.size(), kRtol, kAtol);
      if (io.yc[l].valid()) {
        auto yc = to_vec(two.download(io.yc[l]));
        CLDL_CHECK_CLOSE(yc.data(), want[l].Yc.data(), yc.size(), kRtol, kAtol);
      }
    }
  }
}

TEST_CASE(
    "layer parallel over two devices: one wavefront per device, or chunks where steps run in one launch, equal "
    "sequential") {
  if (!std::getenv("CLDL_TEST_MULTI_DEVICE")) return;
  auto devs = select_devices("cpu:all");
  REQUIRE_MESSAGE(devs.size() >= 2, "run with POCL_DEVICES=\"pthread pthread\"");
  devs.resize(2);
  Context two(devs);
  // 2 to 5 layers (groups of 1 + 1 up to 2 + 3 layers), batch 1, 2, 3 and 9 (1-, 2- and 4-row kernels),
  // both layouts, the stack on device 0 or 1 (the top group then on the other device or on the home one).
  struct Stack {
    int64_t T, B;
    int layout;
    std::vector<int64_t> H;
    int dev;
  };
  const Stack stacks[] = {{7, 3, 0, {5, 13, 8, 11}, 0}, {6, 1, 1, {16, 9}, 0}, {5, 9, 0, {12, 7, 20}, 1},
                          {11, 2, 1, {8, 6, 9, 10, 7}, 1}};
  unsigned seed = 1300;
  for (const auto& st : stacks) {
    CAPTURE(st.T);
    CAPTURE(st.B);
    CAPTURE(st.H.size());
    CAPTURE(st.layout);
    CAPTURE(st.dev);
    const LstmStackCase sc(st.T, st.B, st.layout, st.H, seed += 100);
    // One launch per step (the wavefronts' case); with the heuristic these small layers run each chunk of
    // steps in one launch on a CPU, and then layer parallel keeps its chunked form (checked after the loop).
    std::vector<RnnConfig> per_step = sc.cfgs;
    for (auto& cf : per_step) cf.kernel.launch = 1;
    auto stack = RnnStack::create(two, st.dev, per_step, sc.ws);
    RnnRunOptions o;
    o.strategy = RnnStrategy::sequential;
    const Got seq = sc.run(two, *stack, o, st.dev);
    o.strategy = RnnStrategy::layer_parallel;
    // Lag 0 (heuristic), fused (1) and projected (2, 3, 16); hand-over chunks of 1, 2, 5 steps and the default.
    for (int lag : {0, 1, 2, 3, 16})
      for (int64_t chunk : {0, 1, 2, 5}) {
        CAPTURE(lag);
        CAPTURE(chunk);
        o.wave.lag = lag;
        o.chunk = chunk;
        const Got lp = sc.run(two, *stack, o, st.dev);
        CHECK(lp.algorithm.find(fmt::format("layer_parallel: {} layers as 2 wavefronts on 2 devices", st.H.size())) !=
              std::string::npos);
        CHECK(lp.algorithm.find(fmt::format("layers 0-{} on device {}", st.H.size() / 2 - 1, st.dev)) != std::string::npos);
        check_same(lp, seq);
      }
    auto heuristic = RnnStack::create(two, st.dev, sc.cfgs, sc.ws);
    bool one_launch = true;
    for (size_t l = 0; l < st.H.size(); ++l)
      one_launch = one_launch && heuristic->layer(l).steps_in_one_launch(int(st.dev + l) % 2, st.B);
    CHECK(one_launch == (two.device(0).info.type == DeviceType::cpu));
    o = RnnRunOptions{};
    o.strategy = RnnStrategy::layer_parallel;
    for (int64_t chunk : {0, 2}) {
      CAPTURE(chunk);
      o.chunk = chunk;
      const Got lp = sc.run(two, *heuristic, o, st.dev);
      CHECK((lp.algorithm.find(fmt::format("layer_parallel: {} layers on 2 device(s)", st.H.size())) !=
             std::string::npos) == one_launch);
      check_same(lp, seq);
    }
  }
}

}  // TEST_SUITE("multi-device")
