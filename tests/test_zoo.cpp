// The model zoo (models/zoo/): the committed .onnx models run by cldl against what PyTorch computed and
// stored beside them when it trained and exported them (ref_*.npy, reference.json). The digits CNN's
// logits and accuracy; the char LSTM's logits and final states, its greedy continuation of a fixed
// prompt (whole prompt in one call, token by token, every RNN strategy), the context limit read from
// metadata_props, sampling, and the errors of Vocab / Generator; a toy LM built here (pos, state, context
// limit against a closed form); the classify and generate commands.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "models/builder.hpp"
#include "models/generate.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "tests/support/onnx_util.hpp"

using namespace cldl;
using namespace cldl::graph;
namespace fs = std::filesystem;

namespace {

const std::string kZoo = std::string(CLDL_SOURCE_DIR) + "/models/zoo/";
const std::string kCnn = kZoo + "digits_cnn/";
const std::string kLstm = kZoo + "char_lstm/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  REQUIRE_MESSAGE(f.good(), "cannot open " << path);
  return nlohmann::json::parse(f);
}

int64_t argmax(const float* v, int64_t n) { return std::max_element(v, v + n) - v; }

// Max |a - b| over equal-sized f32 tensors.
double max_abs_diff(const HostTensor& a, const HostTensor& b) {
  REQUIRE(a.shape() == b.shape());
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i)
    m = std::max(m, std::fabs(double(a.as<float>()[i]) - double(b.as<float>()[i])));
  return m;
}

// Generation options: n new tokens, sampling when temperature > 0.
GenerateOptions opts(int n, float temperature = 0, int top_k = 0, uint64_t seed = 0, std::vector<int64_t> stop = {}) {
  GenerateOptions o;
  o.max_new_tokens = n, o.temperature = temperature, o.top_k = top_k, o.seed = seed, o.stop_tokens = std::move(stop);
  return o;
}

std::vector<int64_t> reference_greedy() {
  auto j = read_json(kLstm + "reference.json");
  return j["greedy_tokens"].get<std::vector<int64_t>>();
}

// A toy language model that uses every part of the convention, with a closed-form next token:
// tokens i64 [1, T], pos i64 [1], state s f32 [1] (s_out = s_in + 1: the calls so far); the logits at
// every position are one-hot at (token + pos + s + 1) mod V. Without `with_state_out` it breaks the
// convention (s_in without s_out).
Graph toy_lm(int64_t V, bool with_state_out = true) {
  GraphBuilder b("toy_lm", 17);
  ValueShape ts;
  ts.dims = {1, -1};
  ts.symbols = {"", "T"};
  auto tokens = b.input("tokens", DType::i64, ts);
  auto pos = b.input("pos", DType::i64, Shape{1});
  auto s = b.input("s_in", DType::f32, Shape{1});
  std::vector<float> e(size_t(V * V), 0.0f);
  for (int64_t i = 0; i < V; ++i) e[size_t(i * V + (i + 1) % V)] = 1.0f;
  auto table = b.constant("E", HostTensor::from<float>(Shape{V, V}, e));
  std::vector<int64_t> v{V};
  std::vector<float> one{1.0f};
  auto idx = b.op1("Add", {b.op1("Add", {tokens, pos}), b.op1("Cast", {s}, {{"to", int64_t(7)}})});
  idx = b.op1("Mod", {idx, b.constant("V", HostTensor::from<int64_t>(Shape{1}, v))});
  b.output(b.op1("Gather", {table, idx}, {{"axis", int64_t(0)}}), "logits");
  if (with_state_out) b.output(b.add(s, b.constant("one", HostTensor::from<float>(Shape{1}, one))), "s_out");
  return b.build();
}

// The toy model's tokens, simulated call by call: each call sees its last token, its pos and s.
std::vector<int64_t> toy_expected(const std::vector<int64_t>& prompt, int n, int64_t V, bool whole_prompt) {
  std::vector<int64_t> out;
  int64_t s = 0, pos = 0, last = 0;
  auto call = [&](int64_t tok, int64_t len) {
    last = (tok + pos + s + 1) % V;
    pos += len, s += 1;
  };
  if (whole_prompt)
    call(prompt.back(), int64_t(prompt.size()));
  else
    for (int64_t t : prompt) call(t, 1);
  out.push_back(last);
  while (int(out.size()) < n) {
    call(last, 1);
    out.push_back(last);
  }
  return out;
}

}  // namespace

TEST_SUITE("zoo") {
  TEST_CASE("generator: pos and state inputs follow the convention (toy model with a closed-form answer)") {
    const int64_t V = 11;
    const std::string dir = test::temp_dir("zoo-toy");
    export_onnx_file(toy_lm(V), dir + "/toy.onnx");
    const std::vector<int64_t> prompt{3, 9, 4, 0, 7};
    for (bool one_by_one : {false, true}) {
      CAPTURE(one_by_one);
      GeneratorOptions go;
      go.prompt_token_by_token = one_by_one;
      Generator gen(test::shared_ctx(), dir + "/toy.onnx", go);
      CHECK(gen.vocab_size() == V);
      CHECK(gen.state_names() == std::vector<std::string>{"s"});
      auto r = gen.generate(prompt, opts(23));
      CHECK(r.tokens == toy_expected(prompt, 23, V, !one_by_one));
      // A prompt of one token, and the second run of the same Generator starts from zero state again.
      CHECK(gen.generate(std::vector<int64_t>{5}, opts(9)).tokens == toy_expected({5}, 9, V, true));
      CHECK(gen.generate(prompt, opts(23)).tokens == r.tokens);
    }
    Graph limited = toy_lm(V);
    limited.metadata["max_positions"] = "8";
    export_onnx_file(limited, dir + "/limited.onnx");
    Generator gen(test::shared_ctx(), dir + "/limited.onnx");
    auto r = gen.generate(prompt, opts(50));
    CHECK(r.hit_context_limit);
    CHECK(r.tokens == toy_expected(prompt, 8 - 5 + 1, V, true));
    CHECK(gen.generate(std::vector<int64_t>(8, 1), opts(1)).tokens.size() == 1);  // exactly full: one token
    CHECK(test::error_of([&] { gen.generate(std::vector<int64_t>(9, 1), opts(1)); }).find("max_positions 8") !=
          std::string::npos);

    export_onnx_file(toy_lm(V, false), dir + "/broken.onnx");
    auto msg = test::error_of([&] { Generator(test::shared_ctx(), dir + "/broken.onnx"); });
    CHECK(msg.find("state input 's_in' has no output 's_out'") != std::string::npos);
    fs::remove_all(dir);
  }

  TEST_CASE("digits CNN: logits and accuracy match PyTorch's") {
    HostTensor x = read_npy(kCnn + "x_test.npy"), y = read_npy(kCnn + "y_test.npy"),
               want = read_npy(kCnn + "ref_logits.npy");
    auto ref = read_json(kCnn + "reference.json");
    const int64_t n = x.shape()[0], classes = want.shape()[1];
    REQUIRE(y.numel() == n);
    LoadOptions lo;
    lo.prepare.dims["N"] = n;
    auto m = load_onnx_model(test::shared_ctx(), kCnn + "model.onnx", lo);
    HostTensor got = m->session()->run({{"image", x}}).at("logits");
    REQUIRE(got.shape() == want.shape());
    const double err = max_abs_diff(got, want);
    MESSAGE("digits CNN: max abs error vs PyTorch " << err << " over " << n << " x " << classes << " logits");
    CHECK(err < 1e-4);
    int64_t agree = 0, correct = 0;
    for (int64_t i = 0; i < n; ++i) {
      int64_t p = argmax(got.as<float>() + i * classes, classes);
      agree += p == argmax(want.as<float>() + i * classes, classes);
      correct += p == y.as<int64_t>()[i];
    }
    CHECK(agree == n);
    CHECK(correct == ref["correct"].get<int64_t>());
    CHECK(double(correct) / double(n) == doctest::Approx(ref["accuracy"].get<double>()).epsilon(1e-12));

    // Batch 1 and an odd batch of 7 give the same logits as the full batch.
    for (int64_t b : {1, 7}) {
      CAPTURE(b);
      LoadOptions lb;
      lb.prepare.dims["N"] = b;
      auto mb = load_onnx_model(test::shared_ctx(), kCnn + "model.onnx", lb);
      HostTensor part(DType::f32, Shape{b, 1, 8, 8});
      std::memcpy(part.data(), x.as<float>() + 64 * 5, part.bytes());  // samples 5 .. 5+b-1
      HostTensor out = mb->session()->run({{"image", part}}).at("logits");
      const size_t count = size_t(b) * size_t(classes);
      CLDL_CHECK_CLOSE(out.as<float>(), want.as<float>() + 5 * classes, count, 1e-4, 1e-4);
    }
  }

  TEST_CASE("char LSTM: logits and final states match PyTorch's") {
    HostTensor tokens = read_npy(kLstm + "ref_tokens.npy");
    HostTensor want = read_npy(kLstm + "ref_logits.npy"), want_h = read_npy(kLstm + "ref_h_out.npy"),
               want_c = read_npy(kLstm + "ref_c_out.npy");
    Generator gen(test::shared_ctx(), kLstm + "model.onnx");
    CHECK(gen.state_names() == std::vector<std::string>{"c", "h"});
    CHECK(!gen.max_positions());
    auto out = gen.run_once(std::as_const(tokens).span<int64_t>());
    const HostTensor& got = out.at("logits");
    REQUIRE(got.shape() == want.shape());
    const double err = max_abs_diff(got, want);
    MESSAGE("char LSTM: max abs logit error vs PyTorch " << err << " over " << want.shape().str());
    CHECK(err < 2e-4);
    CHECK(max_abs_diff(out.at("h_out"), want_h) < 1e-5);
    CHECK(max_abs_diff(out.at("c_out"), want_c) < 1e-4);
    const int64_t T = want.shape()[1], V = want.shape()[2];
    for (int64_t t = 0; t < T; ++t) CHECK(argmax(got.as<float>() + t * V, V) == argmax(want.as<float>() + t * V, V));
  }

  TEST_CASE("char LSTM: greedy generation gives PyTorch's tokens, whole prompt or token by token") {
    auto ref = read_json(kLstm + "reference.json");
    auto want = reference_greedy();
    Vocab vocab = Vocab::load(kLstm + "vocab.json");
    for (bool one_by_one : {false, true}) {
      CAPTURE(one_by_one);
      GeneratorOptions go;
      go.prompt_token_by_token = one_by_one;
      Generator gen(test::shared_ctx(), kLstm + "model.onnx", go);
      auto r = gen.generate(vocab, ref["prompt"].get<std::string>(), opts(int(want.size())));
      CHECK(r.tokens == want);
      CHECK(r.text == ref["greedy_text"].get<std::string>());
      CHECK(r.prompt == vocab.encode(ref["prompt"].get<std::string>()));
      CHECK(r.ms_per_token() > 0);
      CHECK(!r.hit_context_limit);
      // generate() keeps the states on the device in buffers of its own and gives the sessions theirs
      // back: a second generation starts from zero state again, and a host-side run_once still gives
      // PyTorch's logits.
      CHECK(gen.generate(vocab, ref["prompt"].get<std::string>(), opts(int(want.size()))).tokens == want);
      HostTensor tokens = read_npy(kLstm + "ref_tokens.npy");
      auto out = gen.run_once(std::as_const(tokens).span<int64_t>());
      CHECK(max_abs_diff(out.at("logits"), read_npy(kLstm + "ref_logits.npy")) < 2e-4);
    }
  }

  TEST_CASE("char LSTM: every RNN strategy gives the same greedy tokens") {
    auto ref = read_json(kLstm + "reference.json");
    auto want = reference_greedy();
    for (std::string s : {"sequential", "time", "layer", "data", "wave"}) {
      CAPTURE(s);
      GeneratorOptions go;
      go.compile.rnn_strategy = s;
      auto generate = [&] {
        Generator gen(test::shared_ctx(), kLstm + "model.onnx", go);
        return gen.generate(Vocab::load(kLstm + "vocab.json"), ref["prompt"].get<std::string>(),
                            opts(int(want.size())));
      };
      if (s == "wave" && !test::rnn_tiles_layout(*test::shared_ctx())) {
        // GPUs keep LSTM weights k-major; the wavefront is refused there, naming why.
        CHECK_THROWS_WITH(generate(), doctest::Contains("tiles weight layout"));
        continue;
      }
      CHECK(generate().tokens == want);
    }
  }

  TEST_CASE("generator: max_positions from metadata stops generation; sampling; top-k 1 is greedy") {
    auto ref = read_json(kLstm + "reference.json");
    auto want = reference_greedy();
    Vocab vocab = Vocab::load(kLstm + "vocab.json");
    const std::string prompt = ref["prompt"].get<std::string>();
    const std::string dir = test::temp_dir("zoo");
    Graph g = import_onnx_file(kLstm + "model.onnx");
    const int64_t limit = int64_t(prompt.size()) + 5;
    g.metadata["max_positions"] = std::to_string(limit);
    export_onnx_file(g, dir + "/limited.onnx");
    {
      Generator gen(test::shared_ctx(), dir + "/limited.onnx");
      REQUIRE(gen.max_positions() == limit);
      auto r = gen.generate(vocab, prompt, opts(40));
      CHECK(r.hit_context_limit);
      // Calls feed positions 0 .. limit-1; the last of them predicts one more token.
      REQUIRE(r.tokens.size() == size_t(limit - int64_t(prompt.size()) + 1));
      CHECK(std::equal(r.tokens.begin(), r.tokens.end(), want.begin()));
      auto msg = test::error_of([&] { gen.generate(vocab, prompt + prompt, opts(1)); });
      CHECK(msg.find("max_positions") != std::string::npos);
    }
    g.metadata["max_positions"] = "many";
    export_onnx_file(g, dir + "/bad_meta.onnx");
    CHECK(test::error_of([&] { Generator(test::shared_ctx(), dir + "/bad_meta.onnx"); }).find("max_positions") !=
          std::string::npos);
    fs::remove_all(dir);

    Generator gen(test::shared_ctx(), kLstm + "model.onnx");
    auto k1 = gen.generate(vocab, prompt, opts(30, 1.0f, 1, 7));
    CHECK(k1.tokens == std::vector<int64_t>(want.begin(), want.begin() + 30));
    auto s1 = gen.generate(vocab, prompt, opts(30, 1.0f, 0, 42));
    auto s2 = gen.generate(vocab, prompt, opts(30, 1.0f, 0, 42));
    auto s3 = gen.generate(vocab, prompt, opts(30, 1.0f, 0, 43));
    CHECK(s1.tokens == s2.tokens);
    CHECK(s1.tokens != s3.tokens);
    CHECK(s1.tokens.size() == 30);
    CHECK(gen.generate(vocab, prompt, opts(0)).tokens.empty());
    // Stop tokens end the continuation after the first one emitted.
    auto stop = gen.generate(std::span<const int64_t>(vocab.encode(prompt)), opts(80, 0, 0, 0, {want[3]}));
    CHECK(stop.tokens.size() <= 4);
    CHECK(stop.tokens.back() == want[3]);
  }

  TEST_CASE("vocab and generator errors name the thing at fault") {
    Vocab vocab = Vocab::load(kLstm + "vocab.json");
    CHECK(vocab.decode(vocab.encode("In the beginning")) == "In the beginning");
    auto msg = test::error_of([&] { vocab.encode("caf\xc3\xa9"); });
    CHECK(msg.find("'\xc3\xa9' at byte 3") != std::string::npos);
    CHECK(msg.find("vocab.json") != std::string::npos);
    CHECK(test::error_of([&] { vocab.token(int64_t(vocab.size())); }).find("out of range") != std::string::npos);
    CHECK(test::error_of([] { Vocab({"a", "b", "a"}); }).find("appears twice") != std::string::npos);
    CHECK(test::error_of([] { Vocab::load("/nonexistent/vocab.json"); }).find("/nonexistent/vocab.json") !=
          std::string::npos);
    // The CNN is not a language model.
    msg = test::error_of([] { Generator(test::shared_ctx(), kCnn + "model.onnx"); });
    CHECK(msg.find("no input 'tokens'") != std::string::npos);
    CHECK(msg.find("digits_cnn/model.onnx") != std::string::npos);
    Generator gen(test::shared_ctx(), kLstm + "model.onnx");
    CHECK(test::error_of([&] {
            gen.generate(Vocab({"a", "b"}), "ab", {});
          }).find("vocabulary 2 tokens") != std::string::npos);
    std::vector<int64_t> bad{1, 999};
    CHECK(test::error_of([&] { gen.generate(bad, {}); }).find("prompt token 999") != std::string::npos);
    CHECK(test::error_of([&] { gen.generate(std::vector<int64_t>{}, {}); }).find("no tokens") != std::string::npos);
  }

  TEST_CASE("cldl classify and cldl generate") {
    std::string out;
    auto ref = read_json(kCnn + "reference.json");
    std::string cli = CLDL_CLI_PATH;
    REQUIRE(test::run_command(cli + " classify " + kCnn + "model.onnx --input " + kCnn + "x_test.npy --labels " + kCnn +
                                  "y_test.npy --batch 64 --runs 1",
                              out) == 0);
    INFO(out);
    CHECK(out.find(fmt::format("accuracy {:.4f} ({}/{})", ref["accuracy"].get<double>(), ref["correct"].get<int64_t>(),
                               ref["count"].get<int64_t>())) != std::string::npos);
    CHECK(out.find("ms/sample") != std::string::npos);

    auto lref = read_json(kLstm + "reference.json");
    const std::string prompt = lref["prompt"].get<std::string>(), text = lref["greedy_text"].get<std::string>();
    REQUIRE(test::run_command(cli + " generate " + kLstm + "model.onnx --prompt '" + prompt + "' --tokens 40", out) ==
            0);
    CHECK(out.find(prompt + text.substr(0, 40)) == 0);
    CHECK(out.find("ms/token") != std::string::npos);
    CHECK(test::run_command(cli + " generate " + kLstm + "model.onnx --prompt 'caf\xc3\xa9' --tokens 4", out) == 1);
    CHECK(out.find("not in the vocabulary") != std::string::npos);
  }

}  // TEST_SUITE("zoo")
