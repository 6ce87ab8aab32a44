// Text generation with any ONNX language model that follows cldl's LM convention, and the token
// vocabulary that goes with it.
//
// The convention (models/zoo/README.md):
//   input  `tokens`  int64 [B, T]   (B = 1; T may be symbolic: the prompt runs as one call, then T = 1)
//   input  `pos`     int64 [1]      optional: position of tokens[0] in the sequence
//   inputs `<s>_in`  paired with outputs `<s>_out` of the same shape: state carried from one call to the
//                    next, zeros at the start (LSTM h/c, Transformer KV caches)
//   output `logits`  [B, T, V] (or [B, V]); the last position gives the next token
//   metadata_props   optional `max_positions`: the context limit
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "models/executor.hpp"
#include "models/graph.hpp"

namespace cldl::graph {

// Token strings by id, read from vocab.json: {"chars": ["\n", " ", "!", ...]} (also {"tokens": [...]} or a
// bare array). Text is encoded by longest match, so tokens may be UTF-8 characters or longer strings.
class Vocab {
 public:
  Vocab() = default;
  explicit Vocab(std::vector<std::string> tokens, std::string what = "vocab");
  static Vocab load(const std::string& path);

  size_t size() const { return tokens_.size(); }
  const std::string& token(int64_t id) const;  // error naming the id when out of range
  // Error naming the character, its byte offset in `text` and the vocab file when a piece is unknown.
  std::vector<int64_t> encode(const std::string& text) const;
  std::string decode(std::span<const int64_t> ids) const;

 private:
  std::vector<std::string> tokens_;
  std::map<std::string, int64_t> ids_;
  size_t longest_ = 1;
  std::string what_;
};

struct GeneratorOptions {
  CompileOptions compile;
  // Values for symbolic input dims other than tokens' B and T (which the generator binds itself).
  std::map<std::string, int64_t> dims;
  // Run the prompt one token at a time through the T = 1 model instead of as one call.
  bool prompt_token_by_token = false;
};

struct GenerateOptions {
  int max_new_tokens = 100;
  float temperature = 0;  // 0: greedy (argmax); > 0: sample from softmax(logits / temperature)
  int top_k = 0;          // sampling: only the k most likely tokens (0: all)
  uint64_t seed = 0;      // sampling: the random stream
  // Stop after emitting any of these (it is included in the result).
  std::vector<int64_t> stop_tokens;
};

struct GenerateResult {
  std::vector<int64_t> prompt;     // the prompt's token ids
  std::vector<int64_t> tokens;     // the new tokens
  std::string text;                // the new tokens decoded (when a Vocab was given)
  bool hit_context_limit = false;  // stopped early at max_positions
  double prompt_ms = 0;            // the call(s) over the prompt, which give the first new token
  double decode_ms = 0;            // the T = 1 calls that give the other new tokens
  double ms_per_token() const { return tokens.empty() ? 0 : (prompt_ms + decode_ms) / double(tokens.size()); }
  // Mean time of one T = 1 step (0 when there was none).
  double decode_ms_per_token() const { return tokens.size() > 1 ? decode_ms / double(tokens.size() - 1) : 0; }
};

class Generator {
 public:
  // Imports the model and checks it follows the convention; errors name the file and what is missing.
  Generator(std::shared_ptr<Context> ctx, const std::string& model_path, GeneratorOptions opts = {});
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  GenerateResult generate(std::span<const int64_t> prompt, const GenerateOptions& opts);
  GenerateResult generate(const Vocab& vocab, const std::string& prompt, const GenerateOptions& opts);

  // Every output of one call over `tokens` from zero state (pos 0): logits and the states after it.
  std::map<std::string, HostTensor> run_once(std::span<const int64_t> tokens);

  int64_t vocab_size() const { return vocab_size_; }
  std::optional<int64_t> max_positions() const { return max_positions_; }
  const std::vector<std::string>& state_names() const { return states_; }  // "<s>" of each <s>_in / <s>_out
  const std::string& device_name() const;
  // The compiled model for T tokens a call (compiled on first use, then reused).
  CompiledModel& model_for(int64_t t);

 private:
  struct Compiled;
  std::map<std::string, HostTensor> call(int64_t t, std::span<const int64_t> tokens, int64_t pos,
                                         std::map<std::string, HostTensor>& state);
  std::map<std::string, HostTensor> zero_state(int64_t t);
  // tokens (and pos) of one call of the T = t model.
  std::map<std::string, HostTensor> step_inputs(int64_t t, std::span<const int64_t> tokens, int64_t pos);
  // Error naming the state when `carried` is not the T = t model's shape for it.
  void check_state_shape(int64_t t, const std::string& s, const Shape& carried) const;

  std::shared_ptr<Context> ctx_;
  std::string path_;
  GeneratorOptions opts_;
  Graph graph_;  // as imported
  std::string batch_sym_, time_sym_;
  int64_t static_t_ = -1;  // tokens' T when it is not symbolic
  DType tokens_dtype_ = DType::i64;
  bool has_pos_ = false;
  std::vector<std::string> states_;
  int64_t vocab_size_ = 0;
  std::optional<int64_t> max_positions_;
  std::map<int64_t, std::unique_ptr<Compiled>> compiled_;
};

}  // namespace cldl::graph
