// The typed fusion passes (models/fusion_patterns.cpp) on ONNX files exported by PyTorch 1.13
// (tests/data/patterns/make_patterns.py): decomposed LayerNorm, GELU (erf in both Mul orders, tanh) and
// hand-written attention (Div / Mul scale, causal Where, additive mask; nn.MultiheadAttention), SiLU, hard-swish,
// ReLU6 / Clip, zero Pads and lone BatchNorms must become the fused ops and give PyTorch's outputs (.npy written by
// the same script). Patterns whose intermediates have another reader must stay as they are and still be right.
#include <array>
#include <cmath>

#include "models/model.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {
std::string data(const std::string& f) { return std::string(CLDL_SOURCE_DIR) + "/tests/data/patterns/" + f; }

struct Loaded {
  Graph g;  // prepared
  std::map<std::string, HostTensor> out;
};

// Imports, prepares and runs `name`.onnx on its .npy inputs; checks y against PyTorch's.
Loaded run_pattern(const std::string& name, const std::vector<std::string>& inputs, double rtol = 1e-4,
                   double atol = 1e-5) {
  Loaded l;
  l.g = import_onnx_file(data(name + ".onnx"));
  prepare(l.g);
  std::map<std::string, HostTensor> in;
  for (auto& i : inputs) in[i] = read_npy(data(name + "." + i + ".npy"));
  auto m = CompiledModel::compile(test::shared_ctx(), l.g);
  l.out = m->session()->run(in);
  HostTensor want = read_npy(data(name + ".y.npy"));
  REQUIRE(l.out.count("y"));
  REQUIRE(l.out["y"].shape() == want.shape());
  CLDL_CHECK_CLOSE(l.out["y"].as<float>(), want.as<float>(), size_t(want.numel()), rtol, atol);
  return l;
}

int count_ops(const Graph& g, const std::string& op) {
  return int(std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op_type == op; }));
}
const Node& only(const Graph& g, const std::string& op) {
  REQUIRE(count_ops(g, op) == 1);
  return *std::find_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op_type == op; });
}
}  // namespace

TEST_SUITE("onnx_patterns") {
  TEST_CASE("decomposed LayerNorm (opset 13/14 export) becomes LayerNormalization") {
    {
      auto l = run_pattern("layernorm", {"x"});
      const Node& ln = only(l.g, "LayerNormalization");
      CHECK(ln.domain == kFusedDomain);
      CHECK(ln.attr_i("axis", 0) == 2);
      CHECK(ln.inputs.size() == 3);  // gamma and beta taken in
      CHECK(count_ops(l.g, "ReduceMean") == 0);
      CHECK(count_ops(l.g, "Sqrt") == 0);
      CHECK(l.g.nodes.size() == 2);  // LayerNormalization, then the model's * 2
    }
    {
      auto l = run_pattern("layernorm2d_noaffine", {"x"});
      const Node& ln = only(l.g, "LayerNormalization");
      CHECK(ln.attr_i("axis", 0) == 1);  // axes [-2, -1] of a rank-3 input
      CHECK(ln.inputs.size() == 2);      // no beta; gamma = ones
      CHECK(l.g.nodes.size() == 2);
    }
  }

  TEST_CASE("decomposed RMSNorm (x * rsqrt(mean(x^2) + eps) * w, and x / sqrt(...) * w) becomes RMSNormalization") {
    for (const char* name : {"rmsnorm", "rmsnorm_div"}) {
      CAPTURE(name);
      auto l = run_pattern(name, {"x"});
      const Node& rn = only(l.g, "RMSNormalization");
      CHECK(rn.domain == kFusedDomain);
      CHECK(rn.attr_i("axis", 0) == int64_t(l.g.values.at(rn.input(0)).shape.to_shape().rank()) - 1);
      CHECK(rn.attr_f("epsilon", 0) == doctest::Approx(1e-6));
      CHECK(l.g.nodes.size() == 1);  // the weight taken in
    }
  }

  TEST_CASE("GELU erf form (both Mul orders) and tanh form become Gelu, then the first Gemm's epilogue") {
    for (const char* form : {"erf", "erf_half_first", "tanh"}) {
      CAPTURE(form);
      auto l = run_pattern(std::string("gelu_") + form, {"x"});
      REQUIRE(l.g.nodes.size() == 2);
      CHECK(count_ops(l.g, "Gemm") == 2);
      CHECK(l.g.nodes[0].attr_s("_cldl_act", "") == (std::string(form) == "tanh" ? "GeluTanh" : "Gelu"));
      CHECK(!l.g.nodes[1].has("_cldl_act"));
    }
  }

  TEST_CASE("SiLU (x * Sigmoid(x)) joins the epilogue of the Conv / MatMul before it, unless x has another reader") {
    auto l = run_pattern("silu", {"x"});
    // Conv -> SiLU fused; Conv -> SiLU + the Conv output again stays; Linear (MatMul + bias) -> SiLU fused.
    // The unfused one is left to element-wise fusion: Sigmoid, Mul and the Add become one generated kernel.
    CHECK(l.g.nodes.size() == 4);
    CHECK(count_ops(l.g, "Conv") == 2);
    int fused = 0;
    for (const Node& n : l.g.nodes)
      if (n.attr_s("_cldl_act", "") == "Silu") ++fused;
    CHECK(fused == 2);
  }

  TEST_CASE(
      "hard-swish (x * HardSigmoid(x) with alpha 1/6, beta 0.5) joins the Conv / MatMul epilogue, unless x "
      "has another reader") {
    auto l = run_pattern("hardswish", {"x"});
    // Conv -> Hardswish fused; Conv -> Hardswish + the Conv output again stays; F.hardsigmoid(u) * u after a
    // Conv fused; Linear (MatMul + bias) -> Hardswish fused. The unfused one becomes one generated kernel.
    CHECK(count_ops(l.g, "Conv") == 3);
    CHECK(count_ops(l.g, "HardSigmoid") == 0);
    CHECK(l.g.nodes.size() == 5);
    int fused = 0;
    for (const Node& n : l.g.nodes)
      if (n.attr_s("_cldl_act", "") == "HardSwish") ++fused;
    CHECK(fused == 3);

    // Another alpha or beta is another function: x * HardSigmoid(x) stays a product, and still computes it.
    for (const char* attr : {"alpha", "beta"}) {
      CAPTURE(attr);
      Graph g = import_onnx_file(data("hardswish.onnx"));
      for (Node& n : g.nodes)
        if (n.op_type == "HardSigmoid") n.attrs[attr] = 0.25f;
      prepare(g);
      for (const Node& n : g.nodes) CHECK(n.attr_s("_cldl_act", "") != "HardSwish");
      HostTensor x = read_npy(data("hardswish.x.npy"));
      auto out = CompiledModel::compile(test::shared_ctx(), g)->session()->run({{"x", x}});
      CHECK(out.at("y").shape() == read_npy(data("hardswish.y.npy")).shape());
    }
  }

  TEST_CASE(
      "Clip with constant bounds (ReLU6, a clamp) joins the Conv / MatMul epilogue: bounds as Constant "
      "inputs (opset 13) and as attributes (opset 9)") {
    for (const char* name : {"relu6", "relu6_opset9"}) {
      CAPTURE(name);
      auto l = run_pattern(name, {"x"});
      // Conv -> ReLU6 fused; Conv -> ReLU6 - the Conv output stays (one generated kernel); Conv -> clamp(min
      // -1.5) fused with +inf above; Linear (MatMul + bias) -> ReLU6 fused.
      CHECK(count_ops(l.g, "Clip") == 0);
      CHECK(l.g.nodes.size() == 5);
      std::vector<std::pair<float, float>> bounds;
      for (const Node& n : l.g.nodes)
        if (n.attr_s("_cldl_act", "") == "Clip")
          bounds.emplace_back(n.attr_f("_cldl_act_alpha", 0), n.attr_f("_cldl_act_beta", 0));
      REQUIRE(bounds.size() == 3);
      CHECK(bounds[0] == std::pair{0.0f, 6.0f});
      CHECK(bounds[1] == std::pair{-1.5f, INFINITY});
      CHECK(bounds[2] == std::pair{0.0f, 6.0f});
    }
  }

  TEST_CASE("a Pad of all-zero pads (AvgPool2d's export) becomes a view: no kernel runs for it") {
    auto l = run_pattern("avgpool_pad", {"x"});
    CHECK(count_ops(l.g, "Pad") == 0);
    CHECK(count_ops(l.g, "AveragePool") == 1);
  }

  TEST_CASE("a BatchNormalization no convolution takes in becomes Mul and Add, fused with the ReLU after it") {
    auto l = run_pattern("bn_concat", {"x"});
    CHECK(count_ops(l.g, "BatchNormalization") == 0);
    CHECK(count_ops(l.g, "FusedElementwise") == 1);
  }

  TEST_CASE("attention written out (Div / Mul scale, causal Where, additive mask) becomes Attention") {
    {
      auto l = run_pattern("attention", {"x"});
      const Node& a = only(l.g, "Attention");
      CHECK(a.domain == kFusedDomain);
      CHECK(a.attr_f("scale", 0) == doctest::Approx(1.0 / std::sqrt(8.0)));
      CHECK(a.inputs.size() == 3);
      CHECK(!a.has("is_causal"));
      CHECK(count_ops(l.g, "Softmax") == 0);
      // The qkv projection's Split: one MatMul per part (matmul-split), then the out projection.
      CHECK(count_ops(l.g, "Split") == 0);
      CHECK(count_ops(l.g, "MatMul") == 4);
      // The head transposes around it are views: the 4-D attention runs on [B, S, H*D].
      CHECK(count_ops(l.g, "Transpose") == 0);
      CHECK(a.attr_i("q_num_heads", 0) == 3);
    }
    {
      auto l = run_pattern("attention_mulscale", {"x"});
      CHECK(only(l.g, "Attention").attr_f("scale", 0) == doctest::Approx(1.0 / std::sqrt(8.0)));
    }
    {
      auto l = run_pattern("attention_causal", {"x"});
      const Node& a = only(l.g, "Attention");
      CHECK(a.attr_i("is_causal", 0) == 1);
      CHECK(a.inputs.size() == 3);
      CHECK(count_ops(l.g, "Where") == 0);
    }
    {
      auto l = run_pattern("attention_mask", {"x", "mask"});
      const Node& a = only(l.g, "Attention");
      REQUIRE(a.inputs.size() == 4);
      CHECK(a.inputs[3] == "mask");
    }
  }

  TEST_CASE("nn.MultiheadAttention as torchvision's ViT exports it: Slices of the packed projection, heads folded") {
    // [L, N*H, D] heads (N = 2 and 1), Q divided by sqrt(D) before the product, the in-projection cut by
    // three Slices of its last axis.
    for (auto [name, heads] : {std::pair<std::string, int>{"mha", 6}, {"mha_batch1", 5}}) {
      CAPTURE(name);
      const bool batch1 = name == "mha_batch1";
      auto l = run_pattern(name, {"x"});
      const Node& a = only(l.g, "Attention");
      CHECK(a.attr_f("scale", 0) == doctest::Approx(1.0 / std::sqrt(batch1 ? 6.0 : 8.0)));
      CHECK(a.attr_i("q_num_heads", 0) == heads);  // N * H one-row heads of the 3-D layout
      CHECK(count_ops(l.g, "Slice") == 0);
      CHECK(count_ops(l.g, "Div") == 0);
      // Left: the module's [N, L, E] <-> [L, N, E] around it, views at batch 1 (transpose-view).
      CHECK(count_ops(l.g, "Transpose") == (batch1 ? 0 : 2));
      CHECK(count_ops(l.g, "MatMul") == 3);  // Q, K and V, each with its bias in the epilogue
    }
  }

  TEST_CASE("matmul-split leaves overlapping slices, other axes and non-constant weights alone, and is right") {
    const int64_t S = 5, K = 7, N = 12;
    HostTensor x = test::random_tensor(Shape{S, K}, 11), w = test::random_tensor(Shape{K, N}, 12);
    HostTensor bias = test::random_tensor(Shape{N}, 13);
    auto ints = [](std::vector<int64_t> v) { return HostTensor::from<int64_t>(Shape{int64_t(v.size())}, v); };
    // (start, end, axis) of each Slice; whether the pass may split.
    struct Case {
      std::vector<std::array<int64_t, 3>> slices;
      bool split;
    };
    const Case cases[] = {{{{0, 5, -1}, {5, 9, 1}, {-3, 12, -1}}, true},  // gaps, a negative start
                          {{{0, 6, -1}, {4, 12, -1}}, false},            // overlapping
                          {{{0, 6, 1}, {0, 2, 0}}, false},               // one of them cuts rows
                          {{{2, 100, -1}}, true}};                       // one part, end past N
    int c = 0;
    for (const auto& cs : cases) {
      CAPTURE(c);
      GraphBuilder b("split", 13);
      auto xi = b.input("x", DType::f32, Shape{S, K});
      auto y = b.op1("Add", {b.op1("MatMul", {xi, b.constant("w", w)}), b.constant("bias", bias)});
      int k = 0;
      for (auto [st, en, ax] : cs.slices) {
        const std::string t = fmt::format("s{}", k++);
        b.output(b.op1("Slice", {y, b.constant(t + "a", ints({st})), b.constant(t + "b", ints({en})),
                                 b.constant(t + "c", ints({ax}))}),
                 t);
      }
      Graph g = b.build();
      prepare(g);
      CHECK(count_ops(g, "Slice") == (cs.split ? 0 : int(cs.slices.size())));
      CHECK(count_ops(g, "MatMul") == (cs.split ? int(cs.slices.size()) : 1));
      auto out = CompiledModel::compile(test::shared_ctx(), g)->session()->run({{"x", x}});
      k = 0;
      for (auto [st, en, ax] : cs.slices) {
        const HostTensor& got = out.at(fmt::format("s{}", k++));
        const int64_t rows = ax == 0 ? std::min(en, S) - st : S;
        const int64_t c0 = ax == 0 ? 0 : (st < 0 ? st + N : st), c1 = ax == 0 ? N : std::min(en, N);
        REQUIRE(got.numel() == rows * (c1 - c0));
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = c0; j < c1; ++j) {
            double want = bias.as<float>()[j];
            for (int64_t q = 0; q < K; ++q)
              want += double(x.as<float>()[(r + (ax == 0 ? st : 0)) * K + q]) * w.as<float>()[q * N + j];
            CHECK(got.as<float>()[r * (c1 - c0) + j - c0] == doctest::Approx(want).epsilon(1e-5));
          }
      }
      ++c;
    }
  }

  TEST_CASE("a pattern whose intermediate has another reader is left alone and still right") {
    // y = x * 0.5 * (1 + erf(x / sqrt2)), with erf(...) also a graph output; and a Softmax -> MatMul whose
    // scores are an output too.
    const int64_t R = 3, C = 5;
    HostTensor x = test::random_tensor(Shape{R, C}, 3, -3.0f, 3.0f);
    GraphBuilder b("shared", 14);
    auto xi = b.input("x", DType::f32, Shape{R, C});
    auto sc = [&](const char* n, float v) {
      return b.constant(n, HostTensor::from<float>(Shape{}, std::vector<float>{v}));
    };
    auto e = b.op1("Erf", {b.op1("Div", {xi, sc("s2", std::sqrt(2.0f))})});
    auto y = b.op1("Mul", {b.op1("Mul", {xi, b.op1("Add", {e, sc("one", 1.0f)})}), sc("half", 0.5f)});
    b.output(y, "y");
    b.output(e, "e");
    Graph g = b.build();
    prepare(g);
    CHECK(count_ops(g, "Gelu") == 0);
    // The chain is left to element-wise fusion: one generated kernel with both y and erf(...) as outputs.
    CHECK(count_ops(g, "Erf") + count_ops(g, "FusedElementwise") == 1);
    auto out = CompiledModel::compile(test::shared_ctx(), g)->session()->run({{"x", x}});
    for (int64_t i = 0; i < R * C; ++i) {
      double v = x.as<float>()[i];
      CHECK(out["y"].as<float>()[i] == doctest::Approx(0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))).epsilon(1e-5));
      CHECK(out["e"].as<float>()[i] == doctest::Approx(std::erf(v / std::sqrt(2.0))).epsilon(1e-5));
    }
  }
}
