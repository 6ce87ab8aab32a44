// `cldl bench zoo`: the model zoo's models end to end (models/zoo, run from the repository root or
// --set zoo=DIR): the digits CNN per image at batch 1 and at the whole test split, the char LSTM's
// generation per token with each RNN strategy, and tiny_gpt's generation when that model is there.
#include <cstring>
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "models/generate.hpp"
#include "models/model.hpp"
#include "models/npy.hpp"
#include "tools/cldl/bench.hpp"

namespace cldl::bench {
namespace {

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
  for (const char* s : {"auto", "sequential", "time", "layer", "data"}) lm("char_lstm", s);
  if (std::filesystem::exists(zoo + "/tiny_gpt/model.onnx")) lm("tiny_gpt", "auto");
}

const Registration kZooBench("zoo", "the model zoo end to end: CNN ms/image, LSTM (each RNN strategy) and GPT ms/token",
                             run_zoo);

}  // namespace
}  // namespace cldl::bench
