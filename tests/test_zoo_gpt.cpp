// models/zoo/tiny_gpt: the character-level Transformer trained and exported by train.py (PyTorch), run
// through the ONNX importer and the executor and compared with what PyTorch stored beside the model:
// the logits for a fixed text (ref_tokens.npy / ref_logits.npy) and the greedy continuation of a fixed
// prompt by full recompute (reference.json), through Session calls, the Generator and `cldl generate`.
// The KV-cache protocol (tokens at `pos`, k<l>/v<l>_in -> _out carried between calls) is checked
// against one full pass over the same tokens, up to a full cache.
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "models/generate.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

const std::string kDir = std::string(CLDL_SOURCE_DIR) + "/models/zoo/tiny_gpt";

// The model compiled for batch B and T new tokens a call (the symbolic dims are bound at prepare).
std::shared_ptr<CompiledModel> gpt_model(int64_t B, int64_t T) {
  Graph g = import_onnx_file(kDir + "/model.onnx");
  PrepareOptions p;
  p.dims = {{"B", B}, {"T", T}};
  return test::compile_graph(std::move(g), p);
}

// The state inputs (k0_in, v0_in, ...) of a prepared model, zero-filled.
std::map<std::string, HostTensor> zero_state(const CompiledModel& m) {
  std::map<std::string, HostTensor> s;
  for (auto& in : m.graph().inputs)
    if (in.name.size() > 3 && in.name.ends_with("_in")) {
      HostTensor t(in.dtype, in.shape.to_shape());
      std::fill_n(t.as<float>(), t.numel(), 0.0f);
      s[in.name] = std::move(t);
    }
  return s;
}

HostTensor ids(int64_t B, const std::vector<int64_t>& row) {
  std::vector<int64_t> v;
  for (int64_t b = 0; b < B; ++b) v.insert(v.end(), row.begin(), row.end());
  return HostTensor::from<int64_t>(Shape{B, int64_t(row.size())}, v);
}

// One call: tokens [B, T] at `pos` with the given state; returns the outputs and replaces `state` by
// the *_out tensors.
HostTensor step(Session& s, const HostTensor& tokens, int64_t pos, std::map<std::string, HostTensor>& state) {
  auto in = state;
  in["tokens"] = tokens;
  in["pos"] = HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{pos});
  auto out = s.run(in);
  for (auto& [name, t] : state) t = out.at(name.substr(0, name.size() - 3) + "_out");
  return out.at("logits");
}

int64_t argmax(const float* p, int64_t n) { return std::max_element(p, p + n) - p; }

nlohmann::json reference() { return nlohmann::json::parse(std::ifstream(kDir + "/reference.json")); }

std::vector<int64_t> encode(const std::string& text) {
  auto vocab = nlohmann::json::parse(std::ifstream(kDir + "/vocab.json"))["chars"].get<std::vector<std::string>>();
  std::vector<int64_t> out;
  for (char c : text) {
    auto it = std::find(vocab.begin(), vocab.end(), std::string(1, c));
    REQUIRE_MESSAGE(it != vocab.end(), "character '" << c << "' is not in vocab.json");
    out.push_back(it - vocab.begin());
  }
  return out;
}

}  // namespace

TEST_SUITE("zoo") {

TEST_CASE("tiny_gpt: logits for the fixed text equal PyTorch's (batch 1 and 2)") {
  HostTensor tok = read_npy(kDir + "/ref_tokens.npy"), want = read_npy(kDir + "/ref_logits.npy");
  REQUIRE(tok.shape().rank() == 2);
  REQUIRE(tok.shape()[0] == 1);
  const int64_t T = tok.shape()[1], V = want.shape()[2];
  std::vector<int64_t> row(tok.as<int64_t>(), tok.as<int64_t>() + T);
  for (int64_t B : {1, 2}) {
    CAPTURE(B);
    auto m = gpt_model(B, T);
    auto state = zero_state(*m);
    REQUIRE(state.size() == 4);
    HostTensor got = step(*m->session(), ids(B, row), 0, state);
    REQUIRE(got.shape() == Shape{B, T, V});
    int64_t agree = 0;
    double max_err = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const float* g = got.as<float>() + (b * T + t) * V;
        const float* w = want.as<float>() + t * V;
        agree += argmax(g, V) == argmax(w, V);
        for (int64_t v = 0; v < V; ++v) max_err = std::max(max_err, double(std::fabs(g[v] - w[v])));
      }
    MESSAGE("B=" << B << " T=" << T << ": max abs logit error " << max_err << ", argmax agrees at " << agree << "/"
                 << B * T);
    CHECK(max_err < 1e-3);
    CHECK(agree == B * T);
  }
}

TEST_CASE("tiny_gpt: greedy generation with the KV cache equals PyTorch's full recompute") {
  auto ref = reference();
  auto prompt = encode(ref["prompt"].get<std::string>());
  auto want = ref["greedy_tokens"].get<std::vector<int64_t>>();
  REQUIRE(want.size() >= 100);
  auto prefill = gpt_model(1, int64_t(prompt.size()));
  auto decode = gpt_model(1, 1);
  auto state = zero_state(*prefill);
  auto ps = prefill->session(), ds = decode->session();
  HostTensor logits = step(*ps, ids(1, prompt), 0, state);
  const int64_t V = logits.shape()[2];
  std::vector<int64_t> got{argmax(logits.as<float>() + (int64_t(prompt.size()) - 1) * V, V)};
  int64_t pos = int64_t(prompt.size());
  while (got.size() < want.size()) {
    logits = step(*ds, ids(1, {got.back()}), pos++, state);
    got.push_back(argmax(logits.as<float>(), V));
  }
  CHECK(got == want);
}

TEST_CASE("tiny_gpt: KV-cache decode of N tokens equals one full pass over them") {
  // Prefill 5, a chunk of 7 at pos 5 (several new tokens written into a non-empty cache), then one
  // token a call up to N = max_positions (the last call fills the cache's last slot); the logits and the
  // final caches must match a single pass over all N.
  auto full = gpt_model(2, 1);
  const int64_t N = full->graph().info("k0_in")->shape.dims.at(1), B = 2;
  REQUIRE(N >= 100);
  auto all = encode("And the LORD spake unto Moses, saying, Speak unto the children of Israel, and say unto them, When any "
                    "man of you bring an offering unto the LORD");
  REQUIRE(int64_t(all.size()) >= N);
  all.resize(size_t(N));
  full = gpt_model(B, N);
  auto full_state = zero_state(*full);
  HostTensor want = step(*full->session(), ids(B, all), 0, full_state);
  const int64_t V = want.shape()[2];

  auto state = zero_state(*full);
  std::vector<HostTensor> got;  // logits per call
  std::vector<int64_t> starts;
  auto run_chunk = [&](int64_t pos, int64_t len) {
    auto m = gpt_model(B, len);
    got.push_back(step(*m->session(), ids(B, {all.begin() + pos, all.begin() + pos + len}), pos, state));
    starts.push_back(pos);
  };
  run_chunk(0, 5);
  run_chunk(5, 7);
  auto one = gpt_model(B, 1);
  auto os = one->session();
  for (int64_t pos = 12; pos < N; ++pos) {
    got.push_back(step(*os, ids(B, {all[size_t(pos)]}), pos, state));
    starts.push_back(pos);
  }
  double max_err = 0;
  for (size_t c = 0; c < got.size(); ++c) {
    const int64_t len = got[c].shape()[1];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < len; ++t) {
        const float* g = got[c].as<float>() + (b * len + t) * V;
        const float* w = want.as<float>() + (b * N + starts[c] + t) * V;
        CAPTURE(starts[c] + t);
        CHECK(argmax(g, V) == argmax(w, V));
        for (int64_t v = 0; v < V; ++v) max_err = std::max(max_err, double(std::fabs(g[v] - w[v])));
      }
  }
  MESSAGE("decode vs full pass over " << N << " tokens: max abs logit difference " << max_err);
  CHECK(max_err < 1e-4);
  // The caches hold the same K/V for slots < N, and zeros beyond.
  for (auto& [name, t] : state) {
    CAPTURE(name);
    const HostTensor& w = full_state.at(name);
    REQUIRE(t.shape() == w.shape());
    double err = 0;
    for (int64_t i = 0; i < t.numel(); ++i)
      err = std::max(err, double(std::fabs(t.as<float>()[i] - w.as<float>()[i])));
    CHECK(err < 1e-4);
  }
}

TEST_CASE("tiny_gpt: Generator and cldl generate give PyTorch's greedy text; the context limit holds") {
  auto ref = reference();
  const std::string prompt = ref["prompt"].get<std::string>(), text = ref["greedy_text"].get<std::string>();
  auto want = ref["greedy_tokens"].get<std::vector<int64_t>>();
  Vocab vocab = Vocab::load(kDir + "/vocab.json");
  for (bool one_by_one : {false, true}) {
    CAPTURE(one_by_one);
    GeneratorOptions go;
    go.prompt_token_by_token = one_by_one;
    Generator gen(test::shared_ctx(), kDir + "/model.onnx", go);
    REQUIRE(gen.max_positions().has_value());
    CHECK(*gen.max_positions() == ref["max_positions"].get<int64_t>());
    auto states = gen.state_names();
    std::sort(states.begin(), states.end());
    CHECK(states == std::vector<std::string>{"k0", "k1", "v0", "v1"});
    GenerateOptions o;
    o.max_new_tokens = int(want.size());
    auto r = gen.generate(vocab, prompt, o);
    CHECK(r.tokens == want);
    CHECK(r.text == text);
    CHECK(!r.hit_context_limit);
    // Past the context: the last call feeds position max_positions - 1, so max_positions - len(prompt) + 1
    // new tokens, the first ones PyTorch's.
    o.max_new_tokens = 1000;
    r = gen.generate(vocab, prompt, o);
    CHECK(r.hit_context_limit);
    REQUIRE(int64_t(r.tokens.size()) == *gen.max_positions() - int64_t(prompt.size()) + 1);
    CHECK(std::equal(want.begin(), want.end(), r.tokens.begin()));
  }
  std::string out;
  REQUIRE(test::run_command(std::string(CLDL_CLI_PATH) + " generate " + kDir + "/model.onnx --prompt '" + prompt +
                                "' --tokens " + std::to_string(want.size()),
                            out) == 0);
  INFO(out);
  CHECK(out.find(prompt + text) == 0);
  CHECK(out.find("ms/token") != std::string::npos);
}

}  // TEST_SUITE
