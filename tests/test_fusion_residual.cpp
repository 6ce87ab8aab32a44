// Residual Add fused into the conv / GEMM epilogue (issue #26): Gemm's residual input in every kernel that
// takes it (gemm_tile with and without K chunks and its column tail, gemm_gemv, CLBlast + gemm_epilogue),
// ConvOp's residual on the GEMM algorithms (gemm_1x1, im2col_gemm with both im2col kernels, groups, 1-D), on
// Winograd (F(2x2) and F(4x4), both transform kernels) and on the three 2-D direct kernels, against the C++
// references (tests/reference: conv_ref, a double GEMM here) plus the residual and the activation written out
// here; and the graph pass (models/ops_conv.cpp, "residual-add"): where it fires (1x1, Winograd, stride-2 and
// small-plane 3x3 convs; both Add operand orders, a Relu after the Add joining, a Conv on both sides), where it
// must not (a second reader, a broadcasting Add, a residual produced after the Conv, an activation before the
// Add, a depthwise conv); MatMul by a 2-D weight with the Add after its bias (and not for a batched B, an
// activation before the Add, a residual made after it); Gemm with C absent or a per-column bias (not with beta 2
// or a full C); each fused graph also against the same graph run unfused
// (CLDL_SKIP_PASSES=residual-add,matmul-residual).
// Tolerances: rtol 1e-4, atol 1e-4 as tests/test_conv.cpp's GEMM algorithms (fp32 sums of at most a few
// thousand products; the residual adds one rounding).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "layers/conv.hpp"
#include "layers/gemm.hpp"
#include "models/builder.hpp"
#include "models/executor.hpp"
#include "support/test_util.hpp"
#include "tests/reference/conv_ref.hpp"
#include "tests/support/graph_util.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using cldl::test::ctx;

namespace {

using test::error_of;

// ---- Gemm ------------------------------------------------------------------------------------------------

// C = act(A * op(B) + bias_row + R), A M x K row-major, B K x N (or N x K when trans_b), double sums.
std::vector<float> gemm_want(const GemmConfig& c, const HostTensor& a, const HostTensor& b, const HostTensor* bias,
                             const HostTensor& r) {
  std::vector<float> y(size_t(c.batch * c.M * c.N));
  for (int64_t t = 0; t < c.batch; ++t)
    for (int64_t m = 0; m < c.M; ++m)
      for (int64_t n = 0; n < c.N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < c.K; ++k)
          s += double(a.as<float>()[(t * c.M + m) * c.K + k]) *
               b.as<float>()[t * c.K * c.N + (c.trans_b ? n * c.K + k : k * c.N + n)];
        if (bias) s += bias->as<float>()[c.bias == GemmBias::per_row ? m : n];
        const size_t i = size_t((t * c.M + m) * c.N + n);
        s += r.as<float>()[i];
        y[i] = float(ref::act_ref(c.act, s));
      }
  return y;
}

std::string check_gemm_residual(GemmConfig c, bool bias) {
  const Shape as{c.batch * c.M * c.K}, bs{c.batch * c.K * c.N}, cs{c.batch * c.M * c.N};
  HostTensor a = test::random_tensor(as, 1), b = test::random_tensor(bs, 2), r = test::random_tensor(cs, 3);
  HostTensor bt = test::random_tensor(Shape{c.bias == GemmBias::per_col ? c.N : c.M}, 4);
  if (!bias) c.bias = GemmBias::none;
  c.residual = true;
  auto g = Gemm::create(ctx(), 0, c);
  Tensor da = ctx().upload(a), db = ctx().upload(b), dr = ctx().upload(r), dc = ctx().alloc(cs, DType::f32);
  std::vector<Tensor> in{da, db};
  if (bias) in.push_back(ctx().upload(bt));
  in.push_back(dr);
  Tensor out[1] = {dc};
  auto ec = ctx().exec();
  g->enqueue(in, out, nullptr, ec);
  HostTensor got = ctx().download(dc);
  auto want = gemm_want(c, a, b, bias ? &bt : nullptr, r);
  INFO(g->algorithm() << " " << c.M << "x" << c.N << "x" << c.K << " batch " << c.batch);
  CLDL_CHECK_CLOSE(got.as<float>(), want.data(), want.size(), 1e-4, 1e-4);
  return g->algorithm();
}

// ---- Conv ------------------------------------------------------------------------------------------------

struct Problem {
  int64_t N, C, H, W, K, KH, KW, S = 1, P = 0, groups = 1;
  bool bias = true;
  Activation act{};
  bool one_d = false;
};

// act(conv(x) + bias + r) from the reference conv (no activation there) and the residual added here.
void check_conv_residual(const Problem& p, ConvAlgo algo, int im2col_kernel = 0,
                         const std::function<void(ConvConfig&)>& tweak = {}) {
  ConvConfig cfg;
  cfg.input = p.one_d ? Shape{p.N, p.C, p.W} : Shape{p.N, p.C, p.H, p.W};
  cfg.weight = test::random_tensor(p.one_d ? Shape{p.K, p.C / p.groups, p.KW} : Shape{p.K, p.C / p.groups, p.KH, p.KW}, 5);
  if (p.bias) cfg.bias = test::random_tensor(Shape{p.K}, 6);
  if (p.one_d) {
    cfg.strides = {p.S}, cfg.pads = {p.P, p.P};
  } else {
    cfg.strides = {p.S, p.S}, cfg.pads = {p.P, p.P, p.P, p.P};
  }
  cfg.groups = p.groups;
  cfg.act = p.act;
  cfg.residual = true;
  cfg.algo = algo;
  cfg.im2col_kernel = im2col_kernel;
  if (tweak) tweak(cfg);
  const Shape ys = ConvOp::validate(cfg);
  HostTensor x = test::random_tensor(cfg.input, 7), r = test::random_tensor(ys, 8);
  ref::ConvParams rp;
  rp.N = p.N, rp.C = p.C, rp.H = p.one_d ? 1 : p.H, rp.W = p.W, rp.K = p.K, rp.KH = p.one_d ? 1 : p.KH, rp.KW = p.KW;
  rp.SH = p.one_d ? 1 : p.S, rp.SW = p.S, rp.PT = p.one_d ? 0 : p.P, rp.PB = rp.PT, rp.PL = p.P, rp.PR = p.P;
  rp.groups = p.groups;
  int64_t OH = 0, OW = 0;
  auto want = ref::conv2d(rp, x.as<float>(), cfg.weight.as<float>(), p.bias ? cfg.bias->as<float>() : nullptr,
                          Activation{}, OH, OW);
  REQUIRE(int64_t(want.size()) == ys.numel());
  for (size_t i = 0; i < want.size(); ++i) want[i] = float(ref::act_ref(p.act, double(want[i]) + r.as<float>()[i]));
  auto op = ConvOp::create(ctx(), 0, cfg);
  CHECK(op->algo() == algo);
  Tensor dx = ctx().upload(x), dr = ctx().upload(r), dy = ctx().alloc(ys, DType::f32);
  Tensor ws;
  if (op->workspace_bytes()) ws = ctx().alloc(Shape{int64_t(op->workspace_bytes())}, DType::u8);
  auto ec = ctx().exec();
  Tensor in[2] = {dx, dr}, out[1] = {dy};
  op->enqueue(in, out, op->workspace_bytes() ? &ws : nullptr, ec);
  HostTensor got = ctx().download(dy);
  INFO(to_string(algo) << " im2col_kernel " << im2col_kernel << " winograd tile / kernel " << cfg.winograd_tile << " / "
                       << cfg.winograd_kernel << " direct_kernel " << cfg.direct_kernel << " input " << cfg.input.str() << " weight "
                       << cfg.weight.shape().str() << " act " << int(p.act.kind));
  CLDL_CHECK_CLOSE(got.as<float>(), want.data(), want.size(), 1e-4, 1e-4);
}

// ---- Graph -----------------------------------------------------------------------------------------------

using graph::Graph;
using graph::GraphBuilder;
using graph::Value;
using test::count_ops;

HostTensor run_graph(Graph g, const std::map<std::string, HostTensor>& in, const std::string& skip, Graph* prepared) {
  test::prepare_skipping(g, skip);
  if (prepared) *prepared = g;
  return graph::CompiledModel::compile(test::shared_ctx(), std::move(g))->session()->run(in)["y"];
}

int count_residual(const Graph& g) {
  int n = 0;
  for (auto& node : g.nodes)
    n += (node.op_type == "Conv" || node.op_type == "MatMul" || node.op_type == "Gemm") &&
         node.attr_i("_cldl_residual", 0) != 0;
  return n;
}

// Runs `build` fused and unfused on x; checks the fused graph has `fused` residual convs and `adds` Adds left and
// that both runs agree; returns the fused output.
HostTensor check_graph(const std::function<Graph()>& build, const HostTensor& x, int fused, int adds) {
  Graph gf, gu;
  HostTensor yf = run_graph(build(), {{"x", x}}, "", &gf);
  HostTensor yu = run_graph(build(), {{"x", x}}, "residual-add,matmul-residual", &gu);
  CHECK(count_residual(gf) == fused);
  // Left alone, the Add stays an Add or joins an element-wise group (the late pass).
  CHECK(count_ops(gf, "Add") + count_ops(gf, "FusedElementwise") == adds);
  CHECK(count_residual(gu) == 0);
  REQUIRE(yf.shape() == yu.shape());
  CLDL_CHECK_CLOSE(yf.as<float>(), yu.as<float>(), size_t(yf.numel()), 1e-5, 1e-5);
  return yf;
}

// Host reference of y = relu?(conv1x1(x) + bias + r) for a [N, C, H, W] x and [K, C, 1, 1] weight.
std::vector<float> conv1x1_add(const HostTensor& x, const HostTensor& w, const HostTensor* b, const float* r,
                               bool relu) {
  const Shape& xs = x.shape();
  ref::ConvParams rp;
  rp.N = xs[0], rp.C = xs[1], rp.H = xs[2], rp.W = xs[3], rp.K = w.shape()[0];
  int64_t OH = 0, OW = 0;
  auto y = ref::conv2d(rp, x.as<float>(), w.as<float>(), b ? b->as<float>() : nullptr, Activation{}, OH, OW);
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] += r[i];
    if (relu) y[i] = std::max(y[i], 0.0f);
  }
  return y;
}

}  // namespace

TEST_SUITE("fusion_residual") {
  TEST_CASE("Gemm adds the residual after the bias, before the activation, in every own kernel and CLBlast") {
    GemmConfig c;
    c.act = Activation{Act::relu};
    c.bias = GemmBias::per_row;
    // gemm_tile: odd sizes (partial vectors past N, rows past the block), batch 1 and 3.
    c.M = 13, c.N = 37, c.K = 29;
    check_gemm_residual(c, true);
    c.batch = 3, c.act = Activation{Act::leaky_relu, 0.1f};
    check_gemm_residual(c, false);
    // The column tail (N just past a strip on CPUs) and K chunks (a long K): where the device takes them, the
    // algorithm names them; the numbers are checked either way.
    c.batch = 1, c.M = 7, c.N = 70, c.K = 33;
    check_gemm_residual(c, true);
    c.N = 70, c.K = 6200;
    check_gemm_residual(c, true);
    // gemm_gemv: M <= 4 with B stored N x K, a per-column bias (the own kernels: other devices than CPUs take
    // CLBlast by default).
    GemmConfig v;
    v.provider = GemmProvider::own;
    v.M = 3, v.N = 41, v.K = 35, v.trans_b = true, v.bias = GemmBias::per_col, v.act = Activation{Act::sigmoid};
    CHECK(check_gemm_residual(v, true).find("gemv") != std::string::npos);
    // CLBlast, then gemm_epilogue with the residual.
    c.provider = GemmProvider::clblast, c.M = 9, c.N = 17, c.K = 12, c.batch = 2;
    CHECK(check_gemm_residual(c, true).find("+epilogue") != std::string::npos);
  }

  TEST_CASE("Gemm refuses a residual that overlaps C or is too small") {
    GemmConfig c;
    c.M = 4, c.N = 8, c.K = 3, c.residual = true;
    auto g = Gemm::create(ctx(), 0, c);
    Tensor a = ctx().alloc(Shape{12}, DType::f32), b = ctx().alloc(Shape{24}, DType::f32),
           y = ctx().alloc(Shape{32}, DType::f32), small = ctx().alloc(Shape{31}, DType::f32);
    auto ec = ctx().exec();
    Tensor out[1] = {y};
    std::vector<Tensor> same{a, b, y}, tiny{a, b, small};
    CHECK(error_of([&] { g->enqueue(same, out, nullptr, ec); }).find("overlaps") != std::string::npos);
    CHECK(error_of([&] { g->enqueue(tiny, out, nullptr, ec); }).find("residual") != std::string::npos);
  }

  TEST_CASE("Conv with a residual on gemm_1x1 and im2col_gemm matches the reference") {
    const Activation relu{Act::relu}, leaky{Act::leaky_relu, 0.2f};
    // 1x1 projections, batch 1 and 3, odd channels and planes.
    check_conv_residual({1, 7, 5, 9, 11, 1, 1}, ConvAlgo::gemm_1x1);
    check_conv_residual({3, 16, 7, 7, 24, 1, 1, 1, 0, 1, false, relu}, ConvAlgo::gemm_1x1);
    check_conv_residual({2, 12, 6, 5, 10, 1, 1, 1, 0, 2, true, leaky}, ConvAlgo::gemm_1x1);  // grouped
    // im2col + GEMM: 3x3 pad 1 stride 1 and 2, both im2col kernels, groups, 1-D, a 1x1 stride-2 downsample.
    for (int k : {1, 2}) {
      check_conv_residual({1, 5, 9, 11, 6, 3, 3, 1, 1, 1, true, relu}, ConvAlgo::im2col_gemm, k);
      check_conv_residual({3, 8, 10, 7, 9, 3, 3, 2, 1, 1, false}, ConvAlgo::im2col_gemm, k);
      check_conv_residual({2, 6, 5, 8, 4, 3, 3, 1, 1, 2, true, leaky}, ConvAlgo::im2col_gemm, k);
    }
    check_conv_residual({3, 5, 1, 17, 7, 1, 3, 1, 1, 1, true, relu, true}, ConvAlgo::im2col_gemm);
    check_conv_residual({1, 16, 9, 9, 32, 1, 1, 2, 0, 1, true}, ConvAlgo::im2col_gemm);
  }

  TEST_CASE("Conv with a residual on Winograd (both tiles, both transform kernels) and the direct kernels") {
    const Activation relu{Act::relu}, leaky{Act::leaky_relu, 0.2f};
    // Winograd: planes that are not whole tiles (the output kernels' partial strips), a strip of 8 tiles and
    // more (9x37: 10 F(4x4) tiles across), batch 1 and 2.
    for (int tile : {2, 4})
      for (int kernel : {1, 2}) {
        auto wino = [&](ConvConfig& c) { c.winograd_tile = tile, c.winograd_kernel = kernel; };
        check_conv_residual({1, 16, 9, 37, 17, 3, 3, 1, 1, 1, true, relu}, ConvAlgo::winograd, 0, wino);
        check_conv_residual({2, 5, 7, 6, 9, 3, 3, 1, 1, 1, false}, ConvAlgo::winograd, 0, wino);
        check_conv_residual({1, 24, 34, 35, 8, 3, 3, 1, 1, 1, true, leaky}, ConvAlgo::winograd, 0, wino);
      }
    // Direct: conv_direct (1), conv_grouped_rows (2, rows of fewer and more than 8 outputs, stride 2),
    // conv_small_plane (3, planes under and over 8 pixels, batch 3).
    for (int kernel : {1, 2}) {
      auto direct = [&](ConvConfig& c) { c.direct_kernel = kernel; };
      check_conv_residual({1, 6, 9, 11, 13, 3, 3, 1, 1, 1, true, relu}, ConvAlgo::direct, 0, direct);
      check_conv_residual({2, 8, 5, 6, 12, 3, 3, 1, 1, 4, false, leaky}, ConvAlgo::direct, 0, direct);  // grouped
      check_conv_residual({1, 4, 23, 21, 9, 3, 3, 2, 1, 1, true}, ConvAlgo::direct, 0, direct);
      check_conv_residual({2, 3, 4, 19, 5, 1, 3, 1, 1, 1, true, relu, true}, ConvAlgo::direct, 0, direct);  // 1-D
    }
    // conv_grouped_band (4): rows of 16 and more outputs (an overlapping last strip) and fewer, stride 2, batch 2.
    auto band = [](ConvConfig& c) { c.direct_kernel = 4; };
    check_conv_residual({1, 16, 9, 37, 16, 3, 3, 1, 1, 2, true, relu}, ConvAlgo::direct, 0, band);
    check_conv_residual({2, 8, 5, 6, 12, 3, 3, 1, 1, 4, false, leaky}, ConvAlgo::direct, 0, band);
    check_conv_residual({1, 24, 23, 40, 24, 3, 3, 2, 1, 3, true}, ConvAlgo::direct, 0, band);
    auto small = [](ConvConfig& c) { c.direct_kernel = 3; };
    check_conv_residual({3, 16, 5, 5, 20, 3, 3, 1, 1, 1, true, relu}, ConvAlgo::direct, 0, small);
    check_conv_residual({1, 7, 2, 3, 33, 3, 3, 1, 1, 1, false}, ConvAlgo::direct, 0, small);
    check_conv_residual({2, 9, 8, 7, 16, 3, 3, 1, 1, 1, true, leaky}, ConvAlgo::direct, 0, small);
  }

  TEST_CASE("Conv: depthwise and fft refuse a residual, and the automatic choice avoids them") {
    ConvConfig cfg;
    cfg.input = Shape{1, 16, 8, 8};
    cfg.weight = test::random_tensor(Shape{16, 16, 3, 3}, 1);
    cfg.pads = {1, 1, 1, 1};
    CHECK(ConvOp::choose(cfg) == ConvAlgo::winograd);
    cfg.residual = true;
    CHECK(ConvOp::choose(cfg) == ConvAlgo::winograd);  // the Winograd output kernels add it
    std::string why;
    CHECK_FALSE(ConvOp::applies(cfg, ConvAlgo::fft, &why));
    CHECK(why.find("residual") != std::string::npos);
    cfg.algo = ConvAlgo::fft;
    CHECK(error_of([&] { ConvOp::choose(cfg); }).find("residual") != std::string::npos);
    // A 7x7 stride-1 conv of fewer than 16 channels would take fft: with the residual, im2col + GEMM.
    ConvConfig big;
    big.input = Shape{1, 4, 12, 12};
    big.weight = test::random_tensor(Shape{6, 4, 7, 7}, 4);
    big.pads = {3, 3, 3, 3};
    CHECK(ConvOp::choose(big) == ConvAlgo::fft);
    big.residual = true;
    CHECK(ConvOp::choose(big) == ConvAlgo::im2col_gemm);
    // Depthwise: the small reduction runs the direct kernel.
    ConvConfig dw;
    dw.input = Shape{1, 8, 6, 6};
    dw.weight = test::random_tensor(Shape{8, 1, 3, 3}, 2);
    dw.groups = 8;
    dw.residual = true;
    CHECK_FALSE(ConvOp::applies(dw, ConvAlgo::depthwise, &why));
    CHECK(why.find("residual") != std::string::npos);
    CHECK(ConvOp::choose(dw) == ConvAlgo::direct);
    // 3-D runs the direct algorithm only.
    ConvConfig d3;
    d3.input = Shape{1, 2, 3, 4, 5};
    d3.weight = test::random_tensor(Shape{3, 2, 1, 1, 1}, 3);
    d3.residual = true;
    CHECK(error_of([&] { ConvOp::validate(d3); }).find("residual") != std::string::npos);
  }

  TEST_CASE("the pass fuses Conv + Add (+ Relu) in both operand orders, batch 1 and 3") {
    for (int64_t N : {1, 3})
      for (int side = 0; side < 2; ++side)
        for (bool relu : {false, true}) {
          INFO("batch " << N << " conv on side " << side << " relu " << relu);
          const Shape xs{N, 12, 5, 7};
          HostTensor w = test::random_tensor(Shape{12, 12, 1, 1}, 11), b = test::random_tensor(Shape{12}, 12);
          HostTensor x = test::random_tensor(xs, 13);
          auto build = [&] {
            GraphBuilder gb("res", 13);
            Value xi = gb.input("x", DType::f32, xs);
            Value r = gb.relu(xi);  // the residual, produced before the conv
            Value c = gb.conv(r, gb.constant("w", w), gb.constant("b", b));
            Value y = side == 0 ? gb.add(c, r) : gb.add(r, c);
            gb.output(relu ? gb.relu(y) : y, "y");
            return gb.build();
          };
          HostTensor y = check_graph(build, x, 1, 0);
          Graph g = build();
          graph::prepare(g);
          CHECK(count_ops(g, "Relu") == 1);  // the residual's; the one after the Add joined the conv
          std::vector<float> rx(x.as<float>(), x.as<float>() + x.numel());
          for (auto& v : rx) v = std::max(v, 0.0f);
          HostTensor xr(DType::f32, xs);
          std::copy(rx.begin(), rx.end(), xr.as<float>());
          auto want = conv1x1_add(xr, w, &b, rx.data(), relu);
          CLDL_CHECK_CLOSE(y.as<float>(), want.data(), want.size(), 1e-4, 1e-4);
        }
  }

  TEST_CASE("the pass fuses one Conv of a downsample block (the later one), not the stride-2 shortcut") {
    const Shape xs{2, 8, 9, 9};
    HostTensor x = test::random_tensor(xs, 21);
    HostTensor wa = test::random_tensor(Shape{16, 8, 1, 1}, 22), wb = test::random_tensor(Shape{16, 8, 3, 3}, 23),
               wc = test::random_tensor(Shape{16, 16, 1, 1}, 24);
    auto build = [&] {
      GraphBuilder gb("down", 13);
      Value xi = gb.input("x", DType::f32, xs);
      Value a = gb.conv(xi, gb.constant("wa", wa), {}, {2, 2});  // 1x1 stride 2, before c: the residual
      Value b = gb.relu(gb.conv(xi, gb.constant("wb", wb), {}, {2, 2}, {1, 1, 1, 1}));
      Value c = gb.conv(b, gb.constant("wc", wc));  // 1x1 stride 1: gemm_1x1, after a
      gb.output(gb.relu(gb.add(c, a)), "y");
      return gb.build();
    };
    check_graph(build, x, 1, 0);
    Graph g = build();
    graph::prepare(g);
    for (auto& n : g.nodes)
      if (n.op_type == "Conv") CHECK((n.attr_i("_cldl_residual", 0) != 0) == (n.input(1) == "wc"));
  }

  TEST_CASE("the pass leaves the Add where fusing would be wrong or slower") {
    const Shape xs{1, 12, 5, 7};
    HostTensor x = test::random_tensor(xs, 31);
    HostTensor w = test::random_tensor(Shape{12, 12, 1, 1}, 32);
    // x -> Conv 1x1 (w) -> c; y = tail(x, c), which holds the Add.
    auto graph_of = [&](std::function<Value(GraphBuilder&, Value, Value)> tail) {
      return [&xs, &w, tail] {
        GraphBuilder gb("neg", 13);
        Value xi = gb.input("x", DType::f32, xs);
        gb.output(tail(gb, xi, gb.conv(xi, gb.constant("w", w))), "y");
        return gb.build();
      };
    };
    SUBCASE("the conv output has a second reader") {
      check_graph(graph_of([](GraphBuilder& gb, Value xi, Value c) { return gb.op1("Mul", {gb.add(c, xi), c}); }), x,
                  0, 1);
    }
    SUBCASE("the conv output is a graph output") {
      GraphBuilder gb("out", 13);
      Value xi = gb.input("x", DType::f32, xs);
      Value c = gb.conv(xi, gb.constant("w", w));
      gb.output(gb.add(c, xi), "y");
      gb.output(c, "c");
      Graph g = gb.build();
      graph::prepare(g);
      CHECK(count_residual(g) == 0);
    }
    SUBCASE("the Add broadcasts") {
      check_graph(graph_of([](GraphBuilder& gb, Value xi, Value c) {
                    return gb.add(c, gb.op1("GlobalAveragePool", {xi}));
                  }),
                  x, 0, 1);
    }
    SUBCASE("the residual is produced after the conv") {
      check_graph(graph_of([](GraphBuilder& gb, Value xi, Value c) { return gb.add(c, gb.op1("Sigmoid", {xi})); }), x,
                  0, 1);
    }
    SUBCASE("an activation between the conv and the Add") {
      check_graph(graph_of([](GraphBuilder& gb, Value xi, Value c) { return gb.add(gb.relu(c), xi); }), x, 0, 1);
    }
    // A 3x3 conv (padding 1) of x's channels plus a residual made from x: the pass must leave it alone.
    auto conv3x3_add = [](const Shape& ws, const HostTensor& w3, int64_t stride,
                          std::function<Value(GraphBuilder&, Value)> residual) {
      return [=] {
        GraphBuilder gb("conv3x3", 13);
        Value xi = gb.input("x", DType::f32, ws);
        Value c = gb.conv(xi, gb.constant("w", w3), {}, {stride, stride}, {1, 1, 1, 1});
        gb.output(gb.add(c, residual(gb, xi)), "y");
        return gb.build();
      };
    };
    SUBCASE("a depthwise conv (its kernels take no residual)") {
      const Shape ws{1, 8, 9, 10};
      HostTensor xw = test::random_tensor(ws, 37), wd = test::random_tensor(Shape{8, 1, 3, 3}, 38);
      auto build = [&] {
        GraphBuilder gb("dw", 13);
        Value xi = gb.input("x", DType::f32, ws);
        Value c = gb.op1("Conv", {xi, gb.constant("w", wd)},
                         {{"group", int64_t(8)}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}});
        gb.output(gb.add(c, xi), "y");
        return gb.build();
      };
      check_graph(build, xw, 0, 1);
    }
  }

  TEST_CASE("the pass fuses the Add into 3x3 convs: Winograd, stride 2 (im2col or direct), a small plane") {
    auto conv3x3_add = [](const Shape& ws, const HostTensor& w3, int64_t stride,
                          std::function<Value(GraphBuilder&, Value)> residual) {
      return [=] {
        GraphBuilder gb("conv3x3", 13);
        Value xi = gb.input("x", DType::f32, ws);
        Value r = residual(gb, xi);  // produced before the conv, as the pass needs
        Value c = gb.conv(xi, gb.constant("w", w3), {}, {stride, stride}, {1, 1, 1, 1});
        gb.output(gb.relu(gb.add(c, r)), "y");
        return gb.build();
      };
    };
    auto identity = [](GraphBuilder&, Value xi) { return xi; };
    SUBCASE("Winograd, batch 1 and 2, a plane of whole and partial tiles") {
      for (const Shape& ws : {Shape{1, 16, 8, 8}, Shape{2, 16, 13, 30}}) {
        HostTensor xw = test::random_tensor(ws, 33), w3 = test::random_tensor(Shape{16, 16, 3, 3}, 34);
        check_graph(conv3x3_add(ws, w3, 1, identity), xw, 1, 0);
      }
    }
    SUBCASE("stride 2, the residual a strided pooling of x") {
      const Shape ws{1, 8, 9, 9};
      HostTensor xw = test::random_tensor(ws, 35), w3 = test::random_tensor(Shape{8, 8, 3, 3}, 36);
      check_graph(conv3x3_add(ws, w3, 2,
                              [](GraphBuilder& gb, Value xi) {
                                return gb.op1("MaxPool", {xi}, {{"kernel_shape", std::vector<int64_t>{1, 1}},
                                                                {"strides", std::vector<int64_t>{2, 2}}});
                              }),
                  xw, 1, 0);
    }
    SUBCASE("a 7x7 plane (CPUs: conv_small_plane)") {
      const Shape ws{2, 32, 7, 7};
      HostTensor xw = test::random_tensor(ws, 39), w3 = test::random_tensor(Shape{32, 32, 3, 3}, 40);
      check_graph(conv3x3_add(ws, w3, 1, identity), xw, 1, 0);
    }
  }

  TEST_CASE("MatMul by a 2-D weight: the residual Add joins the GEMM epilogue, after the bias, before a Relu") {
    // A transformer block's output projection: x [B, S, D] -> x + (h W + b), at odd sizes, batch 1 and 3, with and
    // without the bias, with and without a Relu after the Add; against a double reference written out here.
    for (int64_t B : {1, 3})
      for (bool bias : {false, true})
        for (bool relu : {false, true}) {
          INFO("batch " << B << " bias " << bias << " relu " << relu);
          const int64_t S = 7, D = 13, H = 11;
          const Shape xs{B, S, D};
          HostTensor x = test::random_tensor(xs, 41), w1 = test::random_tensor(Shape{D, H}, 42),
                     w2 = test::random_tensor(Shape{H, D}, 43), b2 = test::random_tensor(Shape{D}, 44);
          auto build = [&] {
            GraphBuilder gb("mm", 13);
            Value xi = gb.input("x", DType::f32, xs);
            Value h = gb.relu(gb.matmul(xi, gb.constant("w1", w1)));
            Value p = gb.matmul(h, gb.constant("w2", w2));
            if (bias) p = gb.add(p, gb.constant("b2", b2));
            Value y = gb.add(xi, p);
            gb.output(relu ? gb.relu(y) : y, "y");
            return gb.build();
          };
          HostTensor y = check_graph(build, x, 1, 0);
          std::vector<double> want(size_t(B * S * D));
          const float* X = x.as<float>();
          for (int64_t r = 0; r < B * S; ++r) {
            std::vector<double> hr(size_t(H), 0.0);
            for (int64_t j = 0; j < H; ++j) {
              for (int64_t k = 0; k < D; ++k) hr[size_t(j)] += double(X[r * D + k]) * w1.as<float>()[k * H + j];
              hr[size_t(j)] = std::max(hr[size_t(j)], 0.0);
            }
            for (int64_t j = 0; j < D; ++j) {
              double v = bias ? b2.as<float>()[j] : 0.0;
              for (int64_t k = 0; k < H; ++k) v += hr[size_t(k)] * w2.as<float>()[k * D + j];
              v += X[r * D + j];
              want[size_t(r * D + j)] = relu ? std::max(v, 0.0) : v;
            }
          }
          std::vector<float> wf(want.begin(), want.end());
          CLDL_CHECK_CLOSE(y.as<float>(), wf.data(), wf.size(), 1e-4, 1e-4);
        }
  }

  TEST_CASE("Gemm (nn.Linear on rows): the residual Add joins the epilogue with C absent or a per-column bias") {
    // y = alpha x W^T + C + x (+ Relu), x [M, D], W [D, D] (transB 1, as torch exports nn.Linear); against a double
    // reference. C [D] or [1, D] with beta 1, or no C; alpha 1, 0.5 and 1.5; M 1 and 7.
    const int64_t D = 11;
    HostTensor w = test::random_tensor(Shape{D, D}, 61), b = test::random_tensor(Shape{D}, 62);
    struct Case {
      int64_t M;
      int c_rank;  // 0: no C, 1: [D], 2: [1, D]
      float alpha;
      bool relu;
    };
    for (const Case& k : {Case{1, 1, 1.0f, false}, Case{7, 2, 0.5f, true}, Case{7, 0, 1.5f, false}, Case{1, 0, 1.0f, true}}) {
      INFO("M " << k.M << " C rank " << k.c_rank << " alpha " << k.alpha << " relu " << k.relu);
      HostTensor x = test::random_tensor(Shape{k.M, D}, 63);
      HostTensor c = k.c_rank == 2 ? HostTensor(DType::f32, Shape{1, D}) : b;
      if (k.c_rank == 2) std::copy(b.as<float>(), b.as<float>() + D, c.as<float>());
      auto build = [&] {
        GraphBuilder gb("gemm_res", 13);
        Value xi = gb.input("x", DType::f32, Shape{k.M, D});
        Value p = gb.gemm(xi, gb.constant("w", w), k.c_rank ? gb.constant("c", c) : Value{}, k.alpha, 1.0f, false, true);
        Value y = gb.add(p, xi);
        gb.output(k.relu ? gb.relu(y) : y, "y");
        return gb.build();
      };
      HostTensor y = check_graph(build, x, 1, 0);
      std::vector<float> want(size_t(k.M * D));
      for (int64_t m = 0; m < k.M; ++m)
        for (int64_t n = 0; n < D; ++n) {
          double v = 0;
          for (int64_t j = 0; j < D; ++j) v += double(x.as<float>()[m * D + j]) * w.as<float>()[n * D + j];
          v = k.alpha * v + (k.c_rank ? b.as<float>()[n] : 0.0) + x.as<float>()[m * D + n];
          want[size_t(m * D + n)] = float(k.relu ? std::max(v, 0.0) : v);
        }
      CLDL_CHECK_CLOSE(y.as<float>(), want.data(), want.size(), 1e-4, 1e-4);
    }
    SUBCASE("not with beta 2, nor a full [M, D] C (the lowering's C copy runs first)") {
      HostTensor x = test::random_tensor(Shape{5, D}, 64), cfull = test::random_tensor(Shape{5, D}, 65);
      for (int which : {0, 1}) {
        CAPTURE(which);
        check_graph([&] {
          GraphBuilder gb("gemm_nores", 13);
          Value xi = gb.input("x", DType::f32, Shape{5, D});
          Value p = which == 0 ? gb.gemm(xi, gb.constant("w", w), gb.constant("b", b), 1.0f, 2.0f, false, true)
                               : gb.gemm(xi, gb.constant("w", w), gb.constant("cf", cfull), 1.0f, 1.0f, false, true);
          gb.output(gb.add(p, xi), "y");
          return gb.build();
        }, x, 0, 1);
      }
    }
  }

  TEST_CASE("MatMul: no residual fusion for a batched B, a fused activation, or a residual made after it") {
    const Shape xs{2, 5, 6};
    HostTensor x = test::random_tensor(xs, 51), w = test::random_tensor(Shape{6, 6}, 52),
               wb = test::random_tensor(Shape{2, 6, 6}, 53);
    SUBCASE("B of rank 3") {
      check_graph([&] {
        GraphBuilder gb("b3", 13);
        Value xi = gb.input("x", DType::f32, xs);
        gb.output(gb.add(gb.matmul(xi, gb.constant("wb", wb)), xi), "y");
        return gb.build();
      }, x, 0, 1);
    }
    SUBCASE("an activation between the MatMul and the Add") {
      check_graph([&] {
        GraphBuilder gb("act", 13);
        Value xi = gb.input("x", DType::f32, xs);
        gb.output(gb.add(gb.relu(gb.matmul(xi, gb.constant("w", w))), xi), "y");
        return gb.build();
      }, x, 0, 1);
    }
    SUBCASE("the residual is produced after the MatMul") {
      check_graph([&] {
        GraphBuilder gb("late", 13);
        Value xi = gb.input("x", DType::f32, xs);
        Value p = gb.matmul(xi, gb.constant("w", w));
        gb.output(gb.add(p, gb.op1("Sigmoid", {xi})), "y");
        return gb.build();
      }, x, 0, 1);
    }
  }
}
