// Vocab (vocab.json, longest-match encoding) and Generator (prompt call, then T = 1 steps carrying the
// <s>_in / <s>_out state; greedy or temperature / top-k sampling).
#include "models/generate.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "models/onnx_import.hpp"
#include "models/passes.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {

namespace {

const char* kStateIn = "_in";
const char* kStateOut = "_out";

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The UTF-8 character starting at byte i of s, for error messages.
std::string char_at(const std::string& s, size_t i) {
  size_t n = 1;
  auto c = static_cast<unsigned char>(s[i]);
  if (c >= 0xF0)
    n = 4;
  else if (c >= 0xE0)
    n = 3;
  else if (c >= 0xC0)
    n = 2;
  std::string ch = s.substr(i, n);
  if (c < 0x20 || c == 0x7F) return fmt::format("\\x{:02x}", unsigned(c));
  return ch;
}

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

int64_t pick_token(std::span<const float> logits, const GenerateOptions& o, std::mt19937_64& rng) {
  if (o.temperature <= 0) return std::max_element(logits.begin(), logits.end()) - logits.begin();
  std::vector<int64_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  size_t k = o.top_k > 0 ? std::min(size_t(o.top_k), ids.size()) : ids.size();
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  ids.resize(k);
  double top = logits[ids[0]];
  std::vector<double> w(k);
  for (size_t i = 0; i < k; ++i) w[i] = std::exp((double(logits[ids[i]]) - top) / o.temperature);
  std::discrete_distribution<size_t> d(w.begin(), w.end());
  return ids[d(rng)];
}

}  // namespace

// ---------------------------------------------------------------------------------------------- Vocab

Vocab::Vocab(std::vector<std::string> tokens, std::string what) : tokens_(std::move(tokens)), what_(std::move(what)) {
  if (tokens_.empty()) fail("{}: no tokens", what_);
  for (size_t i = 0; i < tokens_.size(); ++i) {
    if (tokens_[i].empty()) fail("{}: token {} is an empty string", what_, i);
    if (!ids_.emplace(tokens_[i], int64_t(i)).second) fail("{}: token {} ('{}') appears twice", what_, i, tokens_[i]);
    longest_ = std::max(longest_, tokens_[i].size());
  }
}

Vocab Vocab::load(const std::string& path) {
  std::ifstream f(path);
  if (!f) fail("vocab '{}': cannot open the file", path);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("vocab '{}': not valid JSON ({})", path, e.what());
  }
  const nlohmann::json* list = &j;
  if (j.is_object()) {
    if (j.contains("chars"))
      list = &j["chars"];
    else if (j.contains("tokens"))
      list = &j["tokens"];
    else
      fail("vocab '{}': expected a \"chars\" or \"tokens\" list", path);
  }
  if (!list->is_array()) fail("vocab '{}': the token list is not a JSON array", path);
  std::vector<std::string> tokens;
  for (auto& t : *list) {
    if (!t.is_string()) fail("vocab '{}': token {} is not a string", path, tokens.size());
    tokens.push_back(t.get<std::string>());
  }
  return Vocab(std::move(tokens), "vocab '" + path + "'");
}

const std::string& Vocab::token(int64_t id) const {
  if (id < 0 || size_t(id) >= tokens_.size())
    fail("{}: token id {} is out of range [0, {})", what_, id, tokens_.size());
  return tokens_[size_t(id)];
}

std::vector<int64_t> Vocab::encode(const std::string& text) const {
  std::vector<int64_t> ids;
  for (size_t i = 0; i < text.size();) {
    size_t n = std::min(longest_, text.size() - i);
    for (; n > 0; --n) {
      auto it = ids_.find(text.substr(i, n));
      if (it != ids_.end()) {
        ids.push_back(it->second);
        break;
      }
    }
    if (n == 0) fail("{}: character '{}' at byte {} of the text is not in the vocabulary", what_, char_at(text, i), i);
    i += n;
  }
  return ids;
}

std::string Vocab::decode(std::span<const int64_t> ids) const {
  std::string s;
  for (int64_t id : ids) s += token(id);
  return s;
}

// ------------------------------------------------------------------------------------------ Generator

struct Generator::Compiled {
  std::shared_ptr<CompiledModel> model;
  std::unique_ptr<Session> session;
  std::map<std::string, Shape> state_shapes;
  std::map<std::string, DType> state_dtypes;
  // States whose input the model reads only in a TensorScatter that writes their output (a KV cache after
  // the kv-cache-scatter pass): one buffer serves as both, and the step writes the new rows alone.
  std::set<std::string> in_place;
};

Generator::Generator(std::shared_ptr<Context> ctx, const std::string& model_path, GeneratorOptions opts)
    : ctx_(std::move(ctx)), path_(model_path), opts_(std::move(opts)), graph_(import_onnx_file(model_path)) {
  const std::string what = "model '" + path_ + "'";
  const ValueInfo* tokens = nullptr;
  std::map<std::string, const ValueInfo*> ins, outs;
  for (auto& v : graph_.inputs) ins[v.name] = &v;
  for (auto& v : graph_.outputs) outs[v.name] = &v;
  if (!ins.count("tokens")) fail("{}: no input 'tokens' (int64 [B, T]): not a cldl language model", what);
  tokens = ins["tokens"];
  tokens_dtype_ = tokens->dtype;
  if (tokens->dtype != DType::i64 && tokens->dtype != DType::i32)
    fail("{}: input 'tokens' is {}, expected int64", what, to_string(tokens->dtype));
  if (!tokens->shape.known || tokens->shape.dims.size() != 2)
    fail("{}: input 'tokens' has shape {}, expected [B, T]", what, tokens->shape.str());
  if (tokens->shape.dims[0] >= 0 && tokens->shape.dims[0] != 1)
    fail("{}: input 'tokens' has batch {}; the generator runs batch 1", what, tokens->shape.dims[0]);
  if (tokens->shape.dims[0] < 0) batch_sym_ = tokens->shape.symbols[0];
  if (tokens->shape.dims[1] < 0)
    time_sym_ = tokens->shape.symbols[1];
  else
    static_t_ = tokens->shape.dims[1];
  if (tokens->shape.dims[0] < 0 && batch_sym_.empty()) fail("{}: input 'tokens' has an unnamed batch dimension", what);
  if (tokens->shape.dims[1] < 0 && time_sym_.empty())
    fail("{}: input 'tokens' has an unnamed sequence dimension", what);
  if (static_t_ > 1 && !time_sym_.empty()) fail("{}: internal: T both static and symbolic", what);
  if (static_t_ > 1)
    fail("{}: input 'tokens' has a fixed length {}; the generator needs T symbolic or 1", what, static_t_);
  if (!outs.count("logits")) fail("{}: no output 'logits' ([B, T, V])", what);
  for (auto& [name, v] : ins) {
    if (name == "tokens") continue;
    if (name == "pos") {
      if (v->dtype != DType::i64 && v->dtype != DType::i32)
        fail("{}: input 'pos' is {}, expected int64 [1]", what, to_string(v->dtype));
      has_pos_ = true;
      continue;
    }
    if (!ends_with(name, kStateIn))
      fail("{}: input '{}' is none of tokens, pos or <state>{}; the generator cannot feed it", what, name, kStateIn);
    std::string s = name.substr(0, name.size() - std::strlen(kStateIn));
    if (!outs.count(s + kStateOut)) fail("{}: state input '{}' has no output '{}{}'", what, name, s, kStateOut);
    states_.push_back(s);
  }
  if (auto it = graph_.metadata.find("max_positions"); it != graph_.metadata.end()) {
    try {
      max_positions_ = std::stoll(it->second);
    } catch (const std::exception&) {
      fail("{}: metadata max_positions '{}' is not an integer", what, it->second);
    }
    if (*max_positions_ < 1) fail("{}: metadata max_positions is {}", what, *max_positions_);
  }
  // The T = 1 model serves every step after the prompt; compiling it now checks the states' shapes.
  model_for(1);
}

Generator::~Generator() = default;

const std::string& Generator::device_name() const { return ctx_->device(opts_.compile.device).info.name; }

CompiledModel& Generator::model_for(int64_t t) {
  if (static_t_ == 1 && t != 1)
    fail("model '{}': input 'tokens' has a fixed length 1; cannot run {} tokens a call", path_, t);
  auto it = compiled_.find(t);
  if (it != compiled_.end()) return *it->second->model;
  const std::string what = fmt::format("model '{}' (T = {})", path_, t);
  Graph g = graph_;
  PrepareOptions po;
  po.dims = opts_.dims;
  if (!batch_sym_.empty()) po.dims[batch_sym_] = 1;
  if (!time_sym_.empty()) po.dims[time_sym_] = t;
  prepare(g, po);
  auto c = std::make_unique<Compiled>();
  for (auto& s : states_) {
    const ValueInfo* in = nullptr;
    for (auto& v : g.inputs)
      if (v.name == s + kStateIn) in = &v;
    const ValueInfo* out = g.info(s + kStateOut);
    if (!in) fail("{}: state input '{}{}' is no longer a graph input after binding", what, s, kStateIn);
    if (!out || !out->shape.known || !out->shape.is_static())
      fail("{}: the shape of state output '{}{}' is not known after shape inference", what, s, kStateOut);
    if (out->shape.to_shape() != in->shape.to_shape() || out->dtype != in->dtype)
      fail("{}: state '{}': output {} {} differs from input {} {}", what, s, to_string(out->dtype), out->shape.str(),
           to_string(in->dtype), in->shape.str());
    c->state_shapes[s] = in->shape.to_shape();
    c->state_dtypes[s] = in->dtype;
  }
  const ValueInfo* logits = g.info("logits");
  if (!logits || !logits->shape.known || !logits->shape.is_static() || logits->shape.dims.size() < 2)
    fail("{}: output 'logits' has shape {}, expected [B, T, V]", what, logits ? logits->shape.str() : "unknown");
  if (logits->dtype != DType::f32) fail("{}: output 'logits' is {}, expected f32", what, to_string(logits->dtype));
  int64_t v = logits->shape.dims.back();
  if (vocab_size_ && v != vocab_size_) fail("{}: logits have {} entries, the T = 1 model {}", what, v, vocab_size_);
  vocab_size_ = v;
  c->model = CompiledModel::compile(ctx_, std::move(g), opts_.compile);
  {
    const Graph& cg = c->model->graph();
    for (auto& s : states_) {
      std::vector<const Node*> readers;
      for (auto& n : cg.nodes)
        if (std::find(n.inputs.begin(), n.inputs.end(), s + kStateIn) != n.inputs.end()) readers.push_back(&n);
      const bool outputs_elsewhere = std::any_of(cg.outputs.begin(), cg.outputs.end(), [&](const ValueInfo& o) {
        return o.name == s + kStateIn;  // the input passed through as an output too
      });
      if (readers.size() == 1 && !outputs_elsewhere && readers[0]->op_type == "TensorScatter" &&
          readers[0]->input_count() >= 2 && readers[0]->input(0) == s + kStateIn && readers[0]->input(1) != s + kStateIn &&
          readers[0]->outputs.size() == 1 && readers[0]->outputs[0] == s + kStateOut) {
        c->in_place.insert(s);
        log::debug("{}: state '{}' is updated in place (read only by {})", what, s, readers[0]->describe());
      }
    }
  }
  c->session = c->model->session();
  compiled_.emplace(t, std::move(c));
  // One call on zeros, so the first real call (and its timing) does not pay for first-run set-up.
  std::vector<int64_t> zeros(size_t(t), 0);
  auto state = zero_state(t);
  call(t, zeros, 0, state);
  return *compiled_.at(t)->model;
}

std::map<std::string, HostTensor> Generator::zero_state(int64_t t) {
  model_for(t);
  auto& c = *compiled_.at(t);
  std::map<std::string, HostTensor> state;
  for (auto& s : states_) {
    HostTensor z(c.state_dtypes[s], c.state_shapes[s]);
    std::memset(z.data(), 0, z.bytes());
    state[s] = std::move(z);
  }
  return state;
}

std::map<std::string, HostTensor> Generator::step_inputs(int64_t t, std::span<const int64_t> tokens, int64_t pos) {
  auto& c = *compiled_.at(t);
  std::map<std::string, HostTensor> in;
  if (tokens_dtype_ == DType::i64) {
    in["tokens"] = HostTensor::from<int64_t>(Shape{1, t}, tokens);
  } else {
    std::vector<int32_t> t32(tokens.begin(), tokens.end());
    in["tokens"] = HostTensor::from<int32_t>(Shape{1, t}, std::span<const int32_t>(t32));
  }
  if (has_pos_) {
    const ValueInfo* p = c.model->graph().info("pos");
    if (p && p->dtype == DType::i32) {
      int32_t v = int32_t(pos);
      in["pos"] = HostTensor::from<int32_t>(Shape{1}, std::span<const int32_t>(&v, 1));
    } else {
      in["pos"] = HostTensor::from<int64_t>(Shape{1}, std::span<const int64_t>(&pos, 1));
    }
  }
  return in;
}

void Generator::check_state_shape(int64_t t, const std::string& s, const Shape& carried) const {
  const Shape& want = compiled_.at(t)->state_shapes.at(s);
  if (carried != want)
    fail("model '{}': state '{}' is {} for T = {} but {} was carried over", path_, s, want.str(), t, carried.str());
}

std::map<std::string, HostTensor> Generator::call(int64_t t, std::span<const int64_t> tokens, int64_t pos,
                                                  std::map<std::string, HostTensor>& state) {
  model_for(t);
  auto& c = *compiled_.at(t);
  std::map<std::string, HostTensor> in = step_inputs(t, tokens, pos);
  for (auto& s : states_) {
    const HostTensor& st = state.at(s);
    check_state_shape(t, s, st.shape());
    in[s + kStateIn] = st;
  }
  auto out = c.session->run(in);
  for (auto& s : states_) state[s] = std::move(out.at(s + kStateOut));
  return out;
}

std::map<std::string, HostTensor> Generator::run_once(std::span<const int64_t> tokens) {
  if (tokens.empty()) fail("model '{}': no tokens to run", path_);
  auto state = zero_state(int64_t(tokens.size()));
  auto out = call(int64_t(tokens.size()), tokens, 0, state);
  for (auto& s : states_) out[s + kStateOut] = state.at(s);
  return out;
}

GenerateResult Generator::generate(std::span<const int64_t> prompt, const GenerateOptions& o) {
  GenerateResult r;
  r.prompt.assign(prompt.begin(), prompt.end());
  if (prompt.empty()) fail("model '{}': the prompt has no tokens", path_);
  if (o.max_new_tokens < 0) fail("generate: max_new_tokens is {}", o.max_new_tokens);
  if (o.temperature < 0 || !std::isfinite(o.temperature))
    fail("generate: temperature {} (0 = greedy, > 0 samples)", o.temperature);
  for (int64_t id : prompt)
    if (id < 0 || id >= vocab_size_)
      fail("model '{}': prompt token {} is out of range [0, {})", path_, id, vocab_size_);
  const int64_t limit = max_positions_.value_or(INT64_MAX);
  if (int64_t(prompt.size()) > limit)
    fail("model '{}': the prompt has {} tokens, more than the model's max_positions {}", path_, prompt.size(), limit);
  if (o.max_new_tokens == 0) return r;

  std::mt19937_64 rng(o.seed);
  const bool whole = !opts_.prompt_token_by_token && static_t_ != 1 && prompt.size() > 1;
  const int64_t t0 = whole ? int64_t(prompt.size()) : 1;
  model_for(t0);
  model_for(1);

  // The states (KV caches, RNN states) stay on the device from call to call: two buffers per state, the
  // call reads one and writes the other, then they swap. A step moves only its token(s) and the logits
  // between host and device, not every state twice (on a discrete GPU, two bus transfers of the whole
  // cache per token). A state updated in place (Compiled::in_place) uses one of its two buffers as both.
  std::map<std::string, std::array<Tensor, 2>> dev_state;
  for (auto& [name, z] : zero_state(t0)) {
    const int dev = compiled_.at(t0)->session->device_tensor(name + kStateIn).device;  // where the model reads it
    dev_state[name] = {ctx_->upload(z, dev), ctx_->alloc(z.shape(), z.dtype(), dev)};  // zeros in, first output
  }
  std::map<std::string, int> cur;  // per state: the buffer the next call reads
  std::vector<Session*> bound;
  struct Unbind {  // the sessions get their own buffers back, also when a call throws
    const std::vector<std::string>& states;
    std::vector<Session*>& sessions;
    ~Unbind() {
      for (Session* ss : sessions) {
        try {
          for (auto& s : states) {
            ss->bind_input(s + kStateIn, Tensor{});
            ss->bind_output(s + kStateOut, Tensor{});
          }
        } catch (const std::exception& e) {
          log::warn("generate: unbinding the states: {}", e.what());
        }
      }
    }
  } unbind{states_, bound};
  std::map<std::string, HostTensor> step_in;
  auto step = [&](int64_t t, std::span<const int64_t> tokens, int64_t pos) {
    Compiled& cm = *compiled_.at(t);
    Session& ss = *cm.session;
    for (auto& s : states_) {
      const int in = cur[s], out = cm.in_place.count(s) ? in : 1 - in;
      check_state_shape(t, s, dev_state[s][in].shape);
      ss.bind_input(s + kStateIn, dev_state[s][in]);
      ss.bind_output(s + kStateOut, dev_state[s][out]);
      cur[s] = out;
    }
    if (std::find(bound.begin(), bound.end(), &ss) == bound.end()) bound.push_back(&ss);
    // The token (and position) go without a host wait: writes on the run's queue whose events the run waits
    // for (Session::write_input waits for each: 136 us of a 410 us char_lstm token on PoCL). Their host copies
    // live in `step_in` until the run has ended: read_output below waits for it, and a throw waits for them.
    step_in = step_inputs(t, tokens, pos);
    std::vector<cl::Event> writes;
    try {
      for (auto& [name, h] : step_in) {
        const Tensor dst = ss.device_tensor(name);
        if (dst.dtype != h.dtype() || dst.shape != h.shape())
          fail("model '{}': input '{}' is {} {}, the step feeds {} {}", path_, name, to_string(dst.dtype),
               dst.shape.str(), to_string(h.dtype()), h.shape().str());
        ExecutionContext ec = ctx_->exec(dst.device);
        cl::Event ev;
        ec.signal = &ev;
        ec.label = "input " + name;
        ctx_->write_async(dst, h.data(), h.bytes(), ec);
        check(ec.queue.flush(), "clFlush", ec.label);  // the run may wait for it from another queue
        writes.push_back(ev);
      }
      ss.enqueue(writes);
    } catch (...) {
      if (!writes.empty()) cl::WaitForEvents(writes);
      throw;
    }
    return ss.read_output("logits");
  };

  auto start = std::chrono::steady_clock::now();
  HostTensor logits;
  if (whole) {
    logits = step(t0, prompt, 0);
  } else {
    for (size_t i = 0; i < prompt.size(); ++i) logits = step(1, prompt.subspan(i, 1), int64_t(i));
  }
  auto next = [&](const HostTensor& l) {
    auto all = l.span<float>();
    return pick_token(all.subspan(all.size() - size_t(vocab_size_)), o, rng);
  };
  int64_t tok = next(logits);
  r.prompt_ms = elapsed_ms(start);
  r.tokens.push_back(tok);
  auto decode_start = std::chrono::steady_clock::now();
  int64_t pos = int64_t(prompt.size());
  while (int(r.tokens.size()) < o.max_new_tokens &&
         std::find(o.stop_tokens.begin(), o.stop_tokens.end(), tok) == o.stop_tokens.end()) {
    if (pos >= limit) {  // the next call would feed a token at position `pos`, past the model's context
      r.hit_context_limit = true;
      break;
    }
    tok = next(step(1, std::span<const int64_t>(&tok, 1), pos));
    r.tokens.push_back(tok);
    ++pos;
  }
  r.decode_ms = elapsed_ms(decode_start);
  return r;
}

GenerateResult Generator::generate(const Vocab& vocab, const std::string& prompt, const GenerateOptions& o) {
  if (int64_t(vocab.size()) != vocab_size_)
    fail("model '{}' has {} logits but the vocabulary {} tokens", path_, vocab_size_, vocab.size());
  auto ids = vocab.encode(prompt);
  GenerateResult r = generate(ids, o);
  r.text = vocab.decode(r.tokens);
  return r;
}

}  // namespace cldl::graph
