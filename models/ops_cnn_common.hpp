// Shared by the CNN op families' registrations (ops_elementwise/pool/norm/softmax/data/reduce/conv.cpp):
// LayerKernel runs one cldl::Op as a graph node, passing it the node inputs it reads (constant shape /
// axes inputs are consumed at load and left out) and a workspace when the op asks for one.
#pragma once
#include "layers/auto_pad.hpp"
#include <map>
#include <mutex>
#include <string_view>
#include <thread>

#include "models/op_registry.hpp"

namespace cldl::graph {

class LayerKernel : public NodeKernel {
 public:
  // `inputs`: node input indices handed to the op, in order (empty = all of them).
  LayerKernel(std::unique_ptr<Op> op, Context& ctx, int device, std::vector<int> inputs = {}, std::string note = {})
      : op_(std::move(op)), ctx_(&ctx), device_(device), inputs_(std::move(inputs)), note_(std::move(note)) {}
  std::string algorithm() const override { return note_.empty() ? op_->algorithm() : op_->algorithm() + ", " + note_; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    std::vector<Tensor> ins;
    if (inputs_.empty()) ins.assign(in.begin(), in.end());
    else
      for (int i : inputs_) ins.push_back(size_t(i) < in.size() ? in[size_t(i)] : Tensor{});
    size_t n_out = out.size();  // left-out optional outputs at the end are not the op's business
    while (n_out > 1 && out[n_out - 1].buffer() == nullptr) --n_out;
    op_->enqueue(ins, out.first(n_out), workspace(), ec);
  }

 private:
  // One workspace per calling thread: a session runs from one thread and waits for its outputs before
  // run() returns, so a thread's earlier use of its workspace has finished; concurrent sessions on other
  // threads get their own.
  const Tensor* workspace() {
    size_t bytes = op_->workspace_bytes();
    if (bytes == 0) return nullptr;
    std::lock_guard lock(ws_mutex_);
    auto it = ws_.find(std::this_thread::get_id());
    if (it == ws_.end())
      it = ws_.emplace(std::this_thread::get_id(), ctx_->alloc(Shape{int64_t((bytes + 3) / 4)}, DType::f32, device_)).first;
    return &it->second;
  }
  std::unique_ptr<Op> op_;
  Context* ctx_;
  int device_;
  std::vector<int> inputs_;
  std::string note_;
  std::mutex ws_mutex_;
  std::map<std::thread::id, Tensor> ws_;
};

inline std::unique_ptr<NodeKernel> wrap(std::unique_ptr<Op> op, LowerCtx& c, std::vector<int> inputs = {},
                                       std::string note = {}) {
  return std::make_unique<LayerKernel>(std::move(op), c.ctx, c.device, std::move(inputs), std::move(note));
}

// Runs a layer's static validate and rethrows its error with the node named.
template <typename F>
auto checked(const InferCtx& c, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    if (std::string_view(e.what()).starts_with(c.node.describe())) throw;  // already names the node
    c.error("{}", e.what());
  }
}

// ONNX auto_pad attribute (Conv, ConvTranspose, pooling).
inline AutoPad auto_pad_of(const Node& n) {
  std::string s = n.attr_s("auto_pad", "NOTSET");
  if (s == "SAME_UPPER") return AutoPad::same_upper;
  if (s == "SAME_LOWER") return AutoPad::same_lower;
  if (s == "VALID") return AutoPad::valid;
  if (s != "NOTSET") fail("{}: auto_pad '{}' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID", n.describe(), s);
  return AutoPad::notset;
}

}  // namespace cldl::graph
