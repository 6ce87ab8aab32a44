// MaxPool 2x2 / 2 fused into the Conv before it (issue #26; layers/conv.hpp max_pool_2x2, the "conv-maxpool" pass
// of models/ops_conv.cpp): conv_small_plane pooling in its epilogue (planes with a pooled row or column left
// over, pooled planes of an odd count so the last tile is half empty, 16 and 32 channels per work-item with a
// partial vector, activations with and without a vector form, SiLU that is not monotonic, stride 2, batch 1 and
// 3), the other algorithms running the Pool op after the kernel through the workspace; against the C++
// reference convolution with the activation and the 2x2 maximum written out here. The pass: where it fires
// (Conv + Relu + MaxPool, a MaxPool before the Relu, which stays a node), where it must not (other windows,
// strides, pads, ceil_mode, a second reader), each graph against the same graph unfused
// (CLDL_SKIP_PASSES=conv-maxpool). Tolerances: rtol 1e-4, atol 1e-4 as tests/test_conv.cpp's (the maximum adds
// no rounding).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "layers/conv.hpp"
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

struct Problem {
  int64_t N, C, H, W, K, KH = 3, KW = 3, S = 1, P = 1;
  bool bias = true;
  Activation act{};
};

// maxpool2x2(act(conv(x) + bias)) from the reference convolution (floor: a last odd row / column dropped).
std::vector<float> want_pooled(const Problem& p, const HostTensor& x, const ConvConfig& cfg) {
  ref::ConvParams rp;
  rp.N = p.N, rp.C = p.C, rp.H = p.H, rp.W = p.W, rp.K = p.K, rp.KH = p.KH, rp.KW = p.KW;
  rp.SH = p.S, rp.SW = p.S, rp.PT = p.P, rp.PB = p.P, rp.PL = p.P, rp.PR = p.P;
  int64_t OH = 0, OW = 0;
  auto y = ref::conv2d(rp, x.as<float>(), cfg.weight.as<float>(), p.bias ? cfg.bias->as<float>() : nullptr,
                       Activation{}, OH, OW);
  const int64_t PH = OH / 2, PW = OW / 2;
  std::vector<float> out;
  for (int64_t nk = 0; nk < p.N * p.K; ++nk)
    for (int64_t qy = 0; qy < PH; ++qy)
      for (int64_t qx = 0; qx < PW; ++qx) {
        double m = -INFINITY;
        for (int64_t a = 0; a < 2; ++a)
          for (int64_t b = 0; b < 2; ++b)
            m = std::max(m, ref::act_ref(p.act, y[size_t((nk * OH + 2 * qy + a) * OW + 2 * qx + b)]));
        out.push_back(float(m));
      }
  return out;
}

// Runs the Conv with max_pool_2x2 on `algo` (tweaked); checks it against the reference; returns the op's algorithm.
std::string check_pooled(const Problem& p, ConvAlgo algo, const std::function<void(ConvConfig&)>& tweak = {}) {
  ConvConfig cfg;
  cfg.input = Shape{p.N, p.C, p.H, p.W};
  cfg.weight = test::random_tensor(Shape{p.K, p.C, p.KH, p.KW}, 5);
  if (p.bias) cfg.bias = test::random_tensor(Shape{p.K}, 6);
  cfg.strides = {p.S, p.S}, cfg.pads = {p.P, p.P, p.P, p.P};
  cfg.act = p.act;
  cfg.max_pool_2x2 = true;
  cfg.algo = algo;
  if (tweak) tweak(cfg);
  const Shape ys = ConvOp::validate(cfg);
  HostTensor x = test::random_tensor(cfg.input, 7);
  auto want = want_pooled(p, x, cfg);
  REQUIRE(int64_t(want.size()) == ys.numel());
  auto op = ConvOp::create(ctx(), 0, cfg);
  CHECK(op->algo() == algo);
  CHECK(op->output_shape() == ys);
  Tensor dx = ctx().upload(x), dy = ctx().alloc(ys, DType::f32);
  Tensor ws;
  if (op->workspace_bytes()) ws = ctx().alloc(Shape{int64_t(op->workspace_bytes())}, DType::u8);
  auto ec = ctx().exec();
  Tensor in[1] = {dx}, out[1] = {dy};
  op->enqueue(in, out, op->workspace_bytes() ? &ws : nullptr, ec);
  HostTensor got = ctx().download(dy);
  INFO(op->algorithm() << " input " << cfg.input.str() << " weight " << cfg.weight.shape().str() << " stride " << p.S
                       << " act " << int(p.act.kind));
  CLDL_CHECK_CLOSE(got.as<float>(), want.data(), want.size(), 1e-4, 1e-4);
  return op->algorithm();
}

using graph::Graph;
using graph::GraphBuilder;
using graph::Value;
using test::count_ops;
using V = std::vector<int64_t>;

HostTensor run_graph(Graph g, const HostTensor& x, const std::string& skip, Graph* prepared) {
  test::prepare_skipping(g, skip);
  if (prepared) *prepared = g;
  return graph::CompiledModel::compile(test::shared_ctx(), std::move(g))->session()->run({{"x", x}})["y"];
}

int count_pooled(const Graph& g) {
  int n = 0;
  for (auto& node : g.nodes) n += node.op_type == "Conv" && node.attr_i("_cldl_pool", 0) != 0;
  return n;
}

// Runs `build` fused and unfused; checks the fused graph has `fused` pooling convs and `pools` MaxPools left, and
// that both runs agree; returns the fused graph.
Graph check_graph(const std::function<Graph()>& build, const HostTensor& x, int fused, int pools) {
  Graph gf, gu;
  HostTensor yf = run_graph(build(), x, "", &gf);
  HostTensor yu = run_graph(build(), x, "conv-maxpool", &gu);
  CHECK(count_pooled(gf) == fused);
  CHECK(count_ops(gf, "MaxPool") == pools);
  CHECK(count_pooled(gu) == 0);
  REQUIRE(yf.shape() == yu.shape());
  CLDL_CHECK_CLOSE(yf.as<float>(), yu.as<float>(), size_t(yf.numel()), 1e-5, 1e-5);
  return gf;
}

}  // namespace

TEST_SUITE("fusion_pool") {
  TEST_CASE("conv_small_plane pools in its epilogue") {
    const Activation relu{Act::relu}, leaky{Act::leaky_relu, 0.2f}, silu{Act::silu};
    auto small = [](ConvConfig& c) { c.direct_kernel = 3; };
    // The zoo digits CNN's two layers (1 -> 16 on 8x8, 16 -> 32 on 4x4), batch 3 and 1.
    CHECK(check_pooled({3, 1, 8, 8, 16, 3, 3, 1, 1, true, relu}, ConvAlgo::direct, small).find("epilogue") !=
          std::string::npos);
    check_pooled({1, 16, 4, 4, 32, 3, 3, 1, 1, true, relu}, ConvAlgo::direct, small);
    // 7x9: pooled 3x4 (a row and a column dropped); 20 channels (32 per work-item, the second vector 4 wide);
    // LeakyRelu has no vector form (the scalar epilogue).
    check_pooled({2, 7, 7, 9, 20, 3, 3, 1, 1, true, leaky}, ConvAlgo::direct, small);
    // 6x6: 9 pooled outputs, the last tile half empty; no bias; SiLU is not monotonic (max after it).
    check_pooled({1, 5, 6, 6, 33, 3, 3, 1, 1, false, silu}, ConvAlgo::direct, small);
    // Stride 2, 1x1 window and no activation; 2x3 plane (one pooled output).
    check_pooled({3, 4, 11, 9, 16, 3, 3, 2, 1}, ConvAlgo::direct, small);
    check_pooled({1, 3, 2, 3, 7, 1, 1, 1, 0}, ConvAlgo::direct, small);
  }

  TEST_CASE("the other algorithms run the Pool op after the kernel, through the workspace") {
    const Activation relu{Act::relu}, silu{Act::silu};
    for (int k : {1, 2}) {
      auto im2col = [&](ConvConfig& c) { c.im2col_kernel = k; };
      CHECK(check_pooled({2, 5, 9, 11, 6, 3, 3, 1, 1, true, relu}, ConvAlgo::im2col_gemm, im2col).find("Pool op") !=
            std::string::npos);
      auto direct = [&](ConvConfig& c) { c.direct_kernel = k; };
      check_pooled({1, 6, 13, 10, 9, 3, 3, 1, 1, true, silu}, ConvAlgo::direct, direct);
    }
    check_pooled({1, 8, 17, 18, 12, 3, 3, 1, 1, true, relu}, ConvAlgo::winograd);
    check_pooled({3, 16, 12, 12, 24, 1, 1, 1, 0, false}, ConvAlgo::gemm_1x1);
  }

  TEST_CASE("max_pool_2x2 errors: a residual, 1-D, a plane under 2x2") {
    ConvConfig c;
    c.input = Shape{1, 4, 5, 5};
    c.weight = test::random_tensor(Shape{8, 4, 3, 3}, 1);
    c.max_pool_2x2 = true;
    c.residual = true;
    CHECK(error_of([&] { ConvOp::validate(c); }).find("max_pool_2x2") != std::string::npos);
    c.residual = false;
    c.input = Shape{1, 4, 9};
    c.weight = test::random_tensor(Shape{8, 4, 3}, 1);
    CHECK(error_of([&] { ConvOp::validate(c); }).find("2-D") != std::string::npos);
    c.input = Shape{1, 4, 3, 9};
    c.weight = test::random_tensor(Shape{8, 4, 3, 3}, 1);
    CHECK(error_of([&] { ConvOp::validate(c); }).find("smaller than the 2x2 window") != std::string::npos);
  }

  TEST_CASE("the pass fuses Conv (+ Relu) + MaxPool 2x2 / 2, on small and larger planes, batch 1 and 3") {
    for (int64_t N : {1, 3})
      for (int64_t hw : {8, 7, 19}) {  // 19x19: not a small plane (the Pool op after the kernel)
        for (int relu_at : {0, 1, 2}) {  // none, before the pool (folded into the conv), after it (a node)
          INFO("batch " << N << " plane " << hw << " relu at " << relu_at);
          const Shape xs{N, 3, hw, hw};
          HostTensor w = test::random_tensor(Shape{16, 3, 3, 3}, 11), b = test::random_tensor(Shape{16}, 12);
          HostTensor x = test::random_tensor(xs, 13);
          auto build = [&] {
            GraphBuilder gb("pool", 13);
            Value c = gb.conv(gb.input("x", DType::f32, xs), gb.constant("w", w), gb.constant("b", b), {1, 1},
                              {1, 1, 1, 1});
            if (relu_at == 1) c = gb.relu(c);
            Value y = gb.max_pool(c, {2, 2}, {2, 2});
            gb.output(relu_at == 2 ? gb.relu(y) : y, "y");
            return gb.build();
          };
          Graph g = check_graph(build, x, 1, 0);
          if (relu_at == 2) CHECK(count_ops(g, "Relu") + count_ops(g, "FusedElementwise") == 1);
          if (relu_at == 1) CHECK(count_ops(g, "Relu") == 0);
        }
      }
  }

  TEST_CASE("the pass leaves the MaxPool where it is not 2x2 / 2 without pads, or the conv has another reader") {
    const Shape xs{2, 4, 8, 8};
    HostTensor w = test::random_tensor(Shape{8, 4, 3, 3}, 21), x = test::random_tensor(xs, 22);
    auto build = [&](std::map<std::string, graph::AttrValue> attrs, bool second_reader) {
      return [=] {
        GraphBuilder gb("nopool", 13);
        Value c = gb.conv(gb.input("x", DType::f32, xs), gb.constant("w", w), {}, {1, 1}, {1, 1, 1, 1});
        Value y = gb.op1("MaxPool", {c}, attrs);
        if (second_reader) y = gb.add(y, gb.max_pool(c, {2, 2}, {2, 2}));
        gb.output(y, "y");
        return gb.build();
      };
    };
    SUBCASE("3x3 / 2") { check_graph(build({{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}}, false), x, 0, 1); }
    SUBCASE("2x2 / 1") { check_graph(build({{"kernel_shape", V{2, 2}}, {"strides", V{1, 1}}}, false), x, 0, 1); }
    SUBCASE("pads") {
      check_graph(build({{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}}, false), x, 0, 1);
    }
    SUBCASE("ceil_mode") {
      check_graph(build({{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}, {"ceil_mode", int64_t(1)}}, false), x, 0, 1);
    }
    SUBCASE("a second reader of the conv") {
      check_graph(build({{"kernel_shape", V{2, 2}}, {"strides", V{2, 2}}}, true), x, 0, 2);
    }
  }
}
