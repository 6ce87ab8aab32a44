// Shared by the CNN op families' registrations (ops_elementwise/pool/norm/softmax/data/reduce/conv.cpp):
// LayerKernel runs one cldl::Op as a graph node, passing it the node inputs it reads (constant shape /
// axes inputs are consumed at load and left out) and a workspace when the op asks for one.
#pragma once
#include "layers/auto_pad.hpp"
#include <map>
#include <mutex>
#include <optional>
#include <string_view>
#include <thread>

#include "layers/elementwise.hpp"
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

// Runs `inner` on views of the node's tensors with other shapes of the same element count (legacy forms
// such as Softmax's 2-D coercion before opset 13): nullopt keeps a tensor's shape.
class ReshapedKernel : public NodeKernel {
 public:
  ReshapedKernel(std::unique_ptr<NodeKernel> inner, std::vector<std::optional<Shape>> in,
                 std::vector<std::optional<Shape>> out, std::string note)
      : inner_(std::move(inner)), in_(std::move(in)), out_(std::move(out)), note_(std::move(note)) {}
  std::string algorithm() const override { return inner_->algorithm() + ", " + note_; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    std::vector<Tensor> x(in.begin(), in.end()), y(out.begin(), out.end());
    for (size_t i = 0; i < x.size() && i < in_.size(); ++i)
      if (in_[i]) x[i].shape = *in_[i];
    for (size_t i = 0; i < y.size() && i < out_.size(); ++i)
      if (out_[i]) y[i].shape = *out_[i];
    inner_->enqueue(x, y, ec);
  }

 private:
  std::unique_ptr<NodeKernel> inner_;
  std::vector<std::optional<Shape>> in_, out_;
  std::string note_;
};

// Softmax, LogSoftmax and Hardmax before opset 13 coerce their input to 2-D at `axis` (default 1; the
// dims before it are the rows) and run along the rows: the shape of that 2-D view.
inline Shape coerced_2d(const Node& n, const Shape& s) {
  int64_t r = int64_t(s.rank()), axis = n.attr_i("axis", 1);
  if (r == 0) fail("{}: the input must have rank >= 1 (opsets before 13 coerce it to 2-D)", n.describe());
  if (axis < -r || axis >= r)
    fail("{}: attribute axis = {} is out of range for rank {} (opsets before 13 coerce the input to 2-D at axis)",
         n.describe(), axis, r);
  if (axis < 0) axis += r;
  int64_t rows = 1, cols = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? rows : cols) *= s[size_t(i)];
  return Shape{rows, cols};
}

// Before opset 7 the arithmetic, comparison and logic ops broadcast only with attribute broadcast = 1,
// and then B onto A: B's dims line up with A's from `axis` (suffix matching without it; a dim of B may
// be 1), and a 1-element B goes anywhere. PRelu before 7 reads a 1-D slope of A's dim 1 per channel, as
// the exporters of that time (Caffe2, PyTorch) meant it. Returns the shape B is read as, so that numpy
// broadcasting computes it (A's shape is the output's); nullopt from opset 7 on and for other ops.
// Errors name the node. Defined in ops_elementwise.cpp; the load-time folding of ops_shape.cpp uses it too.
std::optional<Shape> legacy_broadcast(const Node& n, int64_t opset, const Shape& a, const Shape& b);

// How ops_elementwise.cpp reads element-wise nodes (also used by the element-wise fusion pass, so a fused
// step computes what the single op would): whether an op type is an activation, a unary node's config
// (op code, activation parameters; Clip's bounds from its constant inputs in `value`), and a binary or
// variadic node's BinaryOp.
bool is_activation(const std::string& op_type);
UnaryConfig unary_config(const Node& n, const std::vector<const HostTensor*>& value, DType dt, Shape s);
BinaryOp binary_of(const Node& n);

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
