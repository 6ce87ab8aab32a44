// Embedding cldl in an app, part 2: continue a prompt with the zoo's character LSTM (or any model that
// follows the language-model convention of models/generate.hpp).
// Usage: cldl_example_generate models/zoo/char_lstm "And God said" [tokens]
#include <cstdio>
#include <exception>
#include <string>

#include "models/generate.hpp"

int main(int argc, char** argv) try {
  const std::string dir = argc > 1 ? argv[1] : "models/zoo/char_lstm";
  const std::string prompt = argc > 2 ? argv[2] : "And God said";
  const int tokens = argc > 3 ? std::stoi(argv[3]) : 60;

  auto vocab = cldl::graph::Vocab::load(dir + "/vocab.json");
  cldl::graph::Generator gen(cldl::Context::create(), dir + "/model.onnx");
  cldl::graph::GenerateOptions opts;
  opts.max_new_tokens = tokens;  // greedy; set opts.temperature (and top_k, seed) to sample
  auto r = gen.generate(vocab, prompt, opts);

  std::printf("%s%s\n", prompt.c_str(), r.text.c_str());
  std::printf("%zu tokens, %.3f ms/token on %s\n", r.tokens.size(), r.ms_per_token(), gen.device_name().c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "cldl_example_generate: %s\n", e.what());
  return 1;
}
