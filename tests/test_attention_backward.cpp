// Attention backward (layers/attention_backward.hpp, the rule of ONNX Attention in models/autodiff.cpp) against
// PyTorch autograd: tests/data/attention_backward/make.py computes softmax(scale Q K^T + mask) V in float64 and the
// gradients of sum(dO * Y) for the ONNX 3-D and 4-D layouts, S = 1, 7, 9, 33, D = 16, 24, 64 (Dv 24 with D 16),
// batch 1 and 3, causal, additive / boolean / short (padded) masks, an explicit scale and grouped-query heads.
// Here a Gradient graph differentiates sum(dO * Attention(Q, K, V)). Tolerance |cldl - torch| <= 2e-5 + 1e-4
// |torch| (f32 kernels against float64); each case prints its largest difference. The finite-difference checks
// are in tests/test_autodiff.cpp (suite "autodiff attention"); the errors are below.
#include <cmath>

#include "models/builder.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

const std::string kDir = std::string(CLDL_SOURCE_DIR) + "/tests/data/attention_backward/";
const char* const kTraining = "ai.onnx.preview.training";

HostTensor load(const std::string& f) { return read_npy(kDir + f); }

struct Case {
  const char* name;
  int64_t q_heads, kv_heads;  // attributes for the 3-D layout (0: 4-D)
  bool causal;
  float scale;  // 0: default
  bool mask;
};

double check_close(const HostTensor& got, const HostTensor& want, const std::string& what) {
  return test::largest_difference(got, want, what, 2e-5, 1e-4);
}

void run_case(const Case& c) {
  const std::string n = c.name;
  CAPTURE(n);
  GraphBuilder b("attention_backward", 23);
  const HostTensor q = load(n + ".q.npy"), k = load(n + ".k.npy"), v = load(n + ".v.npy"), dO = load(n + ".do.npy");
  Value Q = b.input("q", DType::f32, q.shape()), K = b.input("k", DType::f32, k.shape()), V = b.input("v", DType::f32, v.shape());
  std::vector<Value> in{Q, K, V};
  if (c.mask) in.push_back(b.constant("mask", load(n + ".mask.npy")));
  std::map<std::string, AttrValue> attrs{{"is_causal", int64_t(c.causal)}};
  if (c.q_heads) attrs["q_num_heads"] = c.q_heads, attrs["kv_num_heads"] = c.kv_heads;
  if (c.scale != 0.0f) attrs["scale"] = c.scale;
  Value y = b.op1("Attention", in, attrs);
  Value r = b.op1("Mul", {y, b.constant("dO", dO)});
  auto d = b.op("Gradient", {Q, K, V}, {{"xs", std::vector<std::string>{"q", "k", "v"}}, {"y", r.name}}, 3, kTraining);
  b.graph().opsets[kTraining] = 1;
  b.output(y, "y");
  const char* names[3] = {"dq", "dk", "dv"};
  for (int i = 0; i < 3; ++i) b.output(d[size_t(i)], names[i]);
  auto out = test::run_graph(b.build(), {{"q", q}, {"k", k}, {"v", v}});
  double worst = check_close(out.at("y"), load(n + ".y.npy"), "y");
  for (const char* g : names) worst = std::max(worst, check_close(out.at(g), load(n + "." + g + ".npy"), g));
  MESSAGE(n << ": largest |cldl - PyTorch| " << worst);
}

}  // namespace

TEST_SUITE("attention backward") {
  TEST_CASE("against PyTorch autograd") {
    SUBCASE("S 1, D 16, 4-D, batch 1") { run_case({"s1_d16", 0, 0, false, 0.0f, false}); }
    SUBCASE("S 7, D 24, 3-D, causal, batch 3") { run_case({"s7_causal", 2, 2, true, 0.0f, false}); }
    SUBCASE("S 33, D 64, 3-D, causal") { run_case({"s33_d64", 2, 2, true, 0.0f, false}); }
    SUBCASE("Sq 7, Skv 9, D 16, Dv 24, 4-D, additive mask with -inf, scale 0.3, batch 3") {
      run_case({"add_mask", 0, 0, false, 0.3f, true});
    }
    SUBCASE("S 33, D 24, 3 heads, 4-D, boolean mask [B, 1, S, S]") { run_case({"bool_mask", 0, 0, false, 0.0f, true}); }
    SUBCASE("grouped-query heads 4 / 2, 3-D, causal, batch 3") { run_case({"gqa", 4, 2, true, 0.0f, false}); }
    SUBCASE("a mask shorter than kv_len (the missing keys masked)") { run_case({"short_mask", 2, 2, false, 0.0f, true}); }
  }

  TEST_CASE("errors name the node and what is not differentiated") {
    auto error = [](bool past, bool trained_mask, float softcap) {
      GraphBuilder b("errors", 23);
      Value Q = b.input("q", DType::f32, Shape{1, 2, 5, 8}), K = b.input("k", DType::f32, Shape{1, 2, 5, 8}),
            V = b.input("v", DType::f32, Shape{1, 2, 5, 8});
      std::vector<Value> in{Q, K, V}, xs{Q};
      std::vector<std::string> names{"q"};
      if (trained_mask) {
        Value m = b.input("m", DType::f32, Shape{5, 5});
        in.push_back(m), xs.push_back(m), names.push_back("m");
      }
      if (past) {
        if (!trained_mask) in.push_back(Value{});
        in.push_back(b.input("pk", DType::f32, Shape{1, 2, 3, 8}));
        in.push_back(b.input("pv", DType::f32, Shape{1, 2, 3, 8}));
      }
      std::map<std::string, AttrValue> attrs;
      if (softcap > 0) attrs["softcap"] = softcap;
      Value y = b.op1("Attention", in, attrs);
      b.graph().nodes.back().name = "attn";
      auto d = b.op("Gradient", xs, {{"xs", names}, {"y", y.name}}, int(xs.size()), kTraining);
      b.graph().opsets[kTraining] = 1;
      for (size_t i = 0; i < d.size(); ++i) b.output(d[i], "d" + names[i]);
      std::map<std::string, HostTensor> feed;
      for (auto& [nm, s] : std::map<std::string, Shape>{{"q", {1, 2, 5, 8}}, {"k", {1, 2, 5, 8}}, {"v", {1, 2, 5, 8}},
                                                         {"m", {5, 5}}, {"pk", {1, 2, 3, 8}}, {"pv", {1, 2, 3, 8}}})
        feed[nm] = test::random_tensor(s, 3);
      return test::error_of([&] { test::run_graph(b.build(), feed); });
    };
    std::string e = error(true, false, 0);
    CHECK(e.find("node 'attn' (Attention)") != std::string::npos);
    CHECK(e.find("input 4 ('pk') is not differentiated") != std::string::npos);
    e = error(false, true, 0);
    CHECK(e.find("node 'attn' (Attention)") != std::string::npos);
    CHECK(e.find("attn_mask 'm' depends on trained values") != std::string::npos);
    e = error(false, false, 2.0f);
    CHECK(e.find("softcap 2 is not differentiated") != std::string::npos);
  }
}
