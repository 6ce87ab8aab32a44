// `cldl generate model.onnx --vocab vocab.json --prompt TEXT`: runs a language model that follows the
// convention of models/generate.hpp (tokens, optional pos, <s>_in / <s>_out state, logits) and prints the
// prompt with its continuation, the time per token and the device.
#include <nlohmann/json.hpp>

#include "models/generate.hpp"
#include "tools/cldl/commands.hpp"
#include "tools/cldl/model_cli.hpp"

namespace cldl::cli {

void add_generate_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "Generate text with an ONNX language model (greedy or sampled)");
  static std::string model, vocab_path, prompt, device, rnn_strategy = "auto";
  static int tokens = 100, top_k = 0;
  static float temperature = 0;
  static uint64_t seed = 0;
  static bool json = false, one_by_one = false;
  static std::vector<std::string> place;
  cmd->add_option("model", model, "ONNX language model (input tokens, output logits)")->required();
  cmd->add_option("--vocab", vocab_path, "vocab.json (default: vocab.json beside the model)");
  cmd->add_option("-p,--prompt", prompt, "Text to continue")->required();
  cmd->add_option("-n,--tokens", tokens, "New tokens to generate")->check(CLI::NonNegativeNumber);
  cmd->add_option("-t,--temperature", temperature, "0: greedy (argmax); > 0: sample")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-k", top_k, "Sample only from the k most likely tokens (0: all)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", seed, "Random seed for sampling");
  cmd->add_option("-d,--device", device, "Device spec (cpu, gpu, P:D, name)")->envname("CLDL_DEVICE");
  cmd->add_option("--rnn-strategy", rnn_strategy, "RNN/LSTM/GRU nodes: auto, sequential, time, layer, data")
      ->check(CLI::IsMember({"auto", "sequential", "time", "layer", "data"}));
  cmd->add_option("--place", place, "NODE=DEV: run those nodes on device DEV of --device (see cldl run --place)");
  cmd->add_flag("--prompt-token-by-token", one_by_one, "Feed the prompt one token a call instead of in one call");
  cmd->add_flag("--json", json, "One JSON object on stdout");
  cmd->callback([] {
    if (vocab_path.empty()) vocab_path = (std::filesystem::path(model).parent_path() / "vocab.json").string();
    auto vocab = graph::Vocab::load(vocab_path);
    auto t0 = std::chrono::steady_clock::now();
    graph::GeneratorOptions go;
    go.compile.rnn_strategy = rnn_strategy;
    for (auto& p : place) go.compile.placement.push_back(graph::parse_placement_rule(p));
    go.prompt_token_by_token = one_by_one;
    graph::Generator gen(Context::create(device), model, go);
    if (const auto n = int64_t(vocab.encode(prompt).size());
        n > 1 && !one_by_one && n <= gen.max_positions().value_or(n))
      gen.model_for(n);  // compile for the prompt length now
    double load_ms = elapsed_ms(t0);
    graph::GenerateOptions o;
    o.max_new_tokens = tokens, o.temperature = temperature, o.top_k = top_k, o.seed = seed;
    auto r = gen.generate(vocab, prompt, o);
    if (json) {
      nlohmann::json j{{"model", model},           {"device", gen.device_name()},
                       {"prompt", prompt},         {"text", r.text},
                       {"tokens", r.tokens},       {"ms_per_token", r.ms_per_token()},
                       {"prompt_ms", r.prompt_ms}, {"decode_ms_per_token", r.decode_ms_per_token()},
                       {"load_ms", load_ms},       {"hit_context_limit", r.hit_context_limit}};
      fmt::print("{}\n", j.dump());
      return;
    }
    fmt::print("{}{}\n", prompt, r.text);
    fmt::print(
        "{} tokens on {}: {:.3f} ms/token (prompt of {} tokens {:.3f} ms, then {:.3f} ms/token), load {:.0f} ms{}\n",
        r.tokens.size(), gen.device_name(), r.ms_per_token(), r.prompt.size(), r.prompt_ms, r.decode_ms_per_token(),
        load_ms,
        r.hit_context_limit ? fmt::format(" (stopped at the model's max_positions {})", *gen.max_positions()) : "");
  });
}

}  // namespace cldl::cli
