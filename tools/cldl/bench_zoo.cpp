// `cldl bench zoo`: the model zoo's models end to end (models/zoo, run from the repository root or
// --set zoo=DIR): the digits CNN per image at batch 1 and at the whole test split, the char LSTM's
// generation per token with each RNN strategy, and tiny_gpt's generation when that model is there.
// Peer: the same cases on ONNX Runtime (tools/bench/zoo_onnxruntime.py) when python3 has onnxruntime.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "models/generate.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {
namespace {

// The peer's JSON lines keyed by case name (empty when python3 or onnxruntime is missing).
std::map<std::string, nlohmann::json> run_onnxruntime(const Options& o, const std::string& zoo) {
  std::map<std::string, nlohmann::json> out;
  // The script sits in the source tree: beside the zoo's repository, or next to this file's folder.
  std::string script = (std::filesystem::path(zoo) / ".." / ".." / "tools" / "bench" / "zoo_onnxruntime.py").string();
  if (!std::filesystem::exists(script)) script = peer_script("zoo_onnxruntime.py");
  if (!o.compare || !std::filesystem::exists(script)) return out;
  for (auto& j : peer_json_lines(
           fmt::format("python3 {} --zoo '{}' --runs {} --warmup {}", script, zoo, o.runs, o.warmup), "case"))
    out[j["case"].get<std::string>()] = j;
  return out;
}

void add_peer(Reporter& rep, const std::map<std::string, nlohmann::json>& peer, const std::string& name) {
  auto it = peer.find(name);
  if (it == peer.end()) return;
  Result r;
  r.family = "zoo", r.name = name, r.impl = "onnxruntime";
  r.wall.min_ms = it->second["min_ms"], r.wall.median_ms = it->second["median_ms"],
  r.wall.max_ms = it->second["max_ms"];
  r.wall.runs = it->second["runs"];
  r.note = it->second.value("note", "");
  rep.add(r);
}

void run_zoo(Context&, const Options& opts, Reporter& rep) {
  std::string zoo = "models/zoo";
  for (const auto& a : opts.args) {
    if (a.rfind("zoo=", 0) != 0) fail("bench zoo: unknown setting '{}' (zoo=DIR)", a);
    zoo = a.substr(4);
  }
  if (!std::filesystem::exists(zoo + "/digits_cnn/model.onnx"))
    fail("bench zoo: no '{}/digits_cnn/model.onnx': run from the repository root or pass --set zoo=DIR", zoo);
  auto ctx = Context::create(opts.device);  // models keep a shared context alive
  const std::string dev = ctx->device().info.name;
  const auto peer = run_onnxruntime(opts, zoo);

  HostTensor x = graph::read_npy(zoo + "/digits_cnn/x_test.npy");
  for (int64_t b : {int64_t(1), x.shape()[0]}) {
    const std::string name = fmt::format("digits_cnn batch {}", b);
    if (!opts.selected(name)) continue;
    graph::LoadOptions lo;
    lo.prepare.dims["N"] = b;
    auto session = graph::load_onnx_model(ctx, zoo + "/digits_cnn/model.onnx", lo)->session();
    HostTensor part(DType::f32, Shape{b, 1, 8, 8});
    std::memcpy(part.data(), x.data(), part.bytes());
    Result r;
    r.family = "zoo", r.name = name, r.impl = "cldl";
    r.wall = time_runs([&] { session->run({{"image", part}}); }, opts.runs, opts.warmup);
    r.note = fmt::format("{:.4f} ms/image on {}", r.wall.median_ms / double(b), dev);
    rep.add(r);
    add_peer(rep, peer, name);
  }

  const int tokens = 64;
  auto lm = [&](const std::string& model, const std::string& strategy) {
    const std::string name = fmt::format("{} {} tokens ({})", model, tokens, strategy);
    if (!opts.selected(name)) return;
    graph::GeneratorOptions go;
    go.compile.rnn_strategy = strategy;
    graph::Generator gen(ctx, zoo + "/" + model + "/model.onnx", go);
    auto vocab = graph::Vocab::load(zoo + "/" + model + "/vocab.json");
    graph::GenerateOptions o;
    o.max_new_tokens = tokens;
    graph::GenerateResult last;
    Result r;
    r.family = "zoo", r.name = name, r.impl = "cldl";
    r.wall = time_runs([&] { last = gen.generate(vocab, "And God said", o); }, std::max(1, opts.runs / 5), 1);
    r.note = fmt::format("{:.3f} ms/token (last run: prompt {:.2f} ms, then {:.3f} ms/token) on {}",
                         r.wall.median_ms / tokens, last.prompt_ms, last.decode_ms_per_token(), dev);
    rep.add(r);
  };
  for (const char* s : {"auto", "sequential", "time", "layer", "data", "wave"}) lm("char_lstm", s);
  if (opts.selected("char_lstm")) add_peer(rep, peer, fmt::format("char_lstm {} tokens", tokens));
  if (std::filesystem::exists(zoo + "/tiny_gpt/model.onnx")) {
    lm("tiny_gpt", "auto");
    if (opts.selected("tiny_gpt")) add_peer(rep, peer, fmt::format("tiny_gpt {} tokens", tokens));
  }
}

const Registration kZooBench("zoo", "the model zoo end to end: CNN ms/image, LSTM (each RNN strategy) and GPT ms/token",
                             run_zoo);

}  // namespace
}  // namespace cldl::bench
