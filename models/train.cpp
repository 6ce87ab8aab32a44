// The training session of models/train.hpp: the training graph, the per-step bindings that keep the weights and
// optimizer states on the device, batching along an axis, and writing the trained ONNX file.
#include "models/train.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <set>

#include "models/autodiff.hpp"
#include "models/control_flow.hpp"
#include "models/model.hpp"
#include "models/onnx_import.hpp"
#include "models/onnx_proto.hpp"
#include "models/op_registry.hpp"
#include "models/passes.hpp"
#include "models/rnn_time_chunks.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

constexpr const char* kTrainingDomain = "ai.onnx.preview.training";

ValueInfo info(const std::string& name, DType t, ValueShape s) {
  ValueInfo v;
  v.name = name;
  v.dtype = t;
  v.shape = std::move(s);
  return v;
}

ValueInfo unknown(const std::string& name, DType t) {
  ValueInfo v;
  v.name = name;
  v.dtype = t;
  v.shape.known = false;
  return v;
}

Node fused(Graph& g, const std::string& base, const std::string& op, std::vector<std::string> in,
           std::vector<std::string> out, std::map<std::string, AttrValue> attrs = {}) {
  Node n = make_node(g, base, op, std::move(in), std::move(out), std::move(attrs));
  n.domain = kFusedDomain;
  return n;
}

// ConvTranspose whose W is trained (a graph input now) reads it at run time: ConvTransposeDynamic
// (models/ops_backward.cpp), its bias B (when there is one) added after it as B reshaped to [C_out, 1, ...].
size_t make_conv_transpose_weights_dynamic(Graph& g) {
  std::vector<Node> added;
  size_t count = 0;
  for (auto& n : g.nodes) {
    if (!n.domain.empty() || n.op_type != "ConvTranspose" || n.inputs.size() < 2 || g.is_constant(n.inputs[1])) continue;
    const ValueInfo* w = g.info(n.inputs[1]);
    for (auto& in : g.inputs)
      if (!w && in.name == n.inputs[1]) w = &in;
    if (!w || !w->shape.known || w->shape.dims.size() < 3)
      fail("train: {}: its weights '{}' have no known rank", n.describe(), n.inputs[1]);
    n.op_type = "ConvTransposeDynamic";
    n.domain = kFusedDomain;
    ++count;
    if (n.inputs.size() < 3 || n.inputs[2].empty()) {
      n.inputs.resize(2);
      continue;
    }
    const std::string bias = n.inputs[2], y = n.outputs[0], base = n.name.empty() ? "cldl.train/convt" : n.name;
    n.inputs.resize(2);
    n.outputs[0] = g.unique_name(y + ".no_bias");
    std::vector<int64_t> dims(w->shape.dims.size() - 1, 1);
    dims[0] = -1;
    const std::string shape = add_constant(g, base + "/bias_shape", HostTensor::from<int64_t>(Shape{int64_t(dims.size())}, dims));
    const std::string b = g.unique_name(base + "/bias");
    added.push_back(fused(g, base + "/bias", "Reshape", {bias, shape}, {b}));
    added.push_back(fused(g, base + "/add_bias", "Add", {n.outputs[0], b}, {y}));
  }
  for (auto& n : added) g.nodes.push_back(std::move(n));
  if (count) log::debug("{} ConvTranspose nodes with trained weights run as ConvTransposeDynamic", count);
  return count;
}

}  // namespace

HostTensor take_along(const HostTensor& t, int64_t axis, const std::vector<int64_t>& index) {
  const Shape& s = t.shape();
  if (axis < 0 || axis >= int64_t(s.rank())) fail("batch axis {} is outside the rank of shape {}", axis, s.str());
  int64_t outer = 1, inner = int64_t(dtype_size(t.dtype()));
  for (int64_t i = 0; i < axis; ++i) outer *= s[size_t(i)];
  for (size_t i = size_t(axis) + 1; i < s.rank(); ++i) inner *= s[i];
  const int64_t rows = s[size_t(axis)];
  Shape os = s;
  os[size_t(axis)] = int64_t(index.size());
  HostTensor out(t.dtype(), os);
  auto* dst = static_cast<std::byte*>(out.data());
  const auto* src = static_cast<const std::byte*>(t.data());
  for (int64_t o = 0; o < outer; ++o)
    for (size_t j = 0; j < index.size(); ++j) {
      if (index[j] < 0 || index[j] >= rows) fail("row {} is outside [0, {}) of shape {}", index[j], rows, s.str());
      std::memcpy(dst + (o * int64_t(index.size()) + int64_t(j)) * inner, src + (o * rows + index[j]) * inner,
                  size_t(inner));
    }
  return out;
}

struct Trainer::Impl {
  std::shared_ptr<Context> ctx;
  TrainOptions opts;
  std::shared_ptr<Model> model;
  std::string x_name, labels_name, lr_name, step_name, step_next_name, loss_name;
  DType x_dtype = DType::f32;
  size_t x_rank = 0, labels_rank = 0;
  int64_t labels_axis = 0;  // the labels' batch axis (labels_batch_axis in train.hpp)
  std::vector<std::string> weights;
  // Carried but not trained: BatchNormalization's running mean and var, at carried_in[running_at...].
  std::vector<std::string> running;
  size_t running_at = 0;
  // Carried from step to step: the weights, the optimizer states, the step count T; their updates.
  std::vector<std::string> carried_in, carried_out;
  // Two sets of their device buffers: a step of parity p reads set p and writes set 1 - p.
  std::array<std::vector<Tensor>, 2> set;
  // Per batch shape (signature key) and parity, a session bound to its sets once.
  struct Plan {
    std::shared_ptr<CompiledModel> plan;
    std::array<std::unique_ptr<Session>, 2> session;
  };
  std::map<std::string, Plan> plans;
  cl::Event last;  // the last step's run
  Tensor losses;   // one float per step of an epoch (the loss outputs are bound to its elements)

  // Data parallel (two or more devices): per device a replica with its own carried sets; the gradient graph
  // writes the replica's weighted gradients, the update graph sums every replica's and updates its own set.
  struct Replica {
    int device = 0;
    std::shared_ptr<Model> grad_model, update_model;
    std::array<std::vector<Tensor>, 2> set;  // as Impl::set
    std::vector<Tensor> grads;               // per weight: this shard's share of the batch gradient
    std::map<std::string, Plan> plans;       // gradient sessions per shard shape and parity
    std::map<const Session*, float> scale;   // the shard / batch weight last written into a gradient session
    std::shared_ptr<CompiledModel> update_plan;
    std::map<std::pair<size_t, int>, std::unique_ptr<Session>> update;  // per (devices taking part, parity)
    Tensor losses;                           // per step: this shard's weighted loss
    cl::Event done;                          // its last update
  };
  std::vector<Replica> replicas;
  std::string scale_name, scaled_loss_name;
  std::vector<std::string> grad_names;                  // outputs of the gradient graph, per weight
  std::vector<std::vector<std::string>> replica_grads;  // inputs of the update graph, per replica and weight
  std::vector<Tensor> zeros;  // per weight: the gradient of a replica whose shard is empty
  std::vector<std::vector<size_t>> active;  // per step of the running epoch: the replicas that took part

  // A gradient session of replica `r` for a shard of these shapes, bound to the replica's weights of `parity`
  // and its gradient buffers.
  Session& grad_session(Replica& r, const Shape& x, const Shape& labels, int parity) {
    std::map<std::string, Shape> shapes{{x_name, x}, {labels_name, labels}, {scale_name, Shape{}}};
    for (size_t k = 0; k < weights.size(); ++k) shapes[weights[k]] = r.set[0][k].shape;
    const Signature sig = r.grad_model->signature(shapes, {});
    Plan& p = r.plans[sig.key];
    if (!p.plan) p.plan = r.grad_model->plan(sig);
    auto& s = p.session[size_t(parity)];
    if (!s) {
      s = p.plan->session();
      for (size_t k = 0; k < weights.size(); ++k) {
        s->bind_input(weights[k], r.set[size_t(parity)][k]);
        s->bind_output(grad_names[k], r.grads[k]);
      }
    }
    return *s;
  }

  // The update session of replica `r` when the first `n` replicas took part (the others' gradients read as zero).
  Session& update_session(Replica& r, size_t n, int parity) {
    auto& s = r.update[{n, parity}];
    if (s) return *s;
    if (!r.update_plan) {
      std::map<std::string, Shape> shapes{{lr_name, Shape{1}}};
      for (size_t k = 0; k < carried_in.size(); ++k) shapes[carried_in[k]] = r.set[0][k].shape;
      for (auto& names : replica_grads)
        for (size_t k = 0; k < weights.size(); ++k) shapes[names[k]] = r.set[0][k].shape;
      r.update_plan = r.update_model->plan(r.update_model->signature(shapes, {}));
    }
    s = r.update_plan->session();
    for (size_t k = 0; k < carried_in.size(); ++k) {
      s->bind_input(carried_in[k], r.set[size_t(parity)][k]);
      s->bind_output(carried_out[k], r.set[size_t(1 - parity)][k]);
    }
    for (size_t q = 0; q < replicas.size(); ++q)
      for (size_t k = 0; k < weights.size(); ++k) {
        if (q >= n && !zeros[k].valid()) {
          HostTensor h(DType::f32, r.set[0][k].shape);
          std::memset(h.data(), 0, h.bytes());
          zeros[k] = ctx->upload(h, replicas[0].device);
        }
        s->bind_input(replica_grads[q][k], q < n ? replicas[q].grads[k] : zeros[k]);
      }
    return *s;
  }

  // The learning rate of step `step` into session `s`'s lr input, when it differs from what `s` holds (a
  // constant schedule writes it once per session).
  std::map<const Session*, float> lr_held;
  void write_lr(Session& s, int64_t step) {
    const float lr = lr_at(opts, step);
    auto it = lr_held.find(&s);
    if (it != lr_held.end() && it->second == lr) return;
    s.write_input(lr_name, HostTensor::from<float>(Shape{1}, std::vector<float>{lr}));
    lr_held[&s] = lr;
  }

  Session& session_for(const Shape& x, const Shape& labels, int parity) {
    std::map<std::string, Shape> shapes{{x_name, x}, {labels_name, labels}, {lr_name, Shape{1}}};
    for (size_t k = 0; k < carried_in.size(); ++k) shapes[carried_in[k]] = set[0][k].shape;
    const Signature sig = model->signature(shapes, {});
    Plan& p = plans[sig.key];
    if (!p.plan) p.plan = model->plan(sig);
    auto& s = p.session[size_t(parity)];
    if (!s) {
      s = p.plan->session();
      for (size_t k = 0; k < carried_in.size(); ++k) {
        s->bind_input(carried_in[k], set[size_t(parity)][k]);
        s->bind_output(carried_out[k], set[size_t(1 - parity)][k]);
      }
    }
    return *s;
  }

  // The data and labels of a step or an epoch: types, ranks, equal sample counts along the batch axis (not 0).
  int64_t check_samples(const HostTensor& x, const HostTensor& labels) const {
    const size_t axis = size_t(opts.batch_axis);
    check_types(x, labels);
    if (x.shape().rank() != x_rank)
      fail("train: the data has shape {}, input '{}' has rank {}", x.shape().str(), x_name, x_rank);
    if (labels.shape().rank() != labels_rank)
      fail("train: the labels have shape {}, expected rank {}", labels.shape().str(), labels_rank);
    const int64_t count = x.shape()[axis];
    const size_t la = size_t(labels_axis);
    if (labels.shape()[la] != count) {
      if (la == axis)
        fail("train: the data has {} samples along axis {}, the labels {}", count, axis, labels.shape()[la]);
      fail("train: the data has {} samples along axis {}, the labels {} along their axis {} (labels of rank {} "
           "have their batch on axis 0 when the batch axis is {})",
           count, axis, labels.shape()[la], la, labels_rank, axis);
    }
    if (count == 0) fail("train: no samples");
    return count;
  }

  void check_types(const HostTensor& x, const HostTensor& labels) const {
    if (x.dtype() != x_dtype)
      fail("train: the data for input '{}' is {}, the model takes {}", x_name, to_string(x.dtype()), to_string(x_dtype));
    const DType lt = opts.loss == TrainLoss::cross_entropy ? DType::i64 : DType::f32;
    if (labels.dtype() != lt)
      fail("train: the labels are {}; {} takes {}", to_string(labels.dtype()),
           opts.loss == TrainLoss::cross_entropy ? "cross_entropy" : "mse", to_string(lt));
  }
};

int64_t labels_batch_axis(int64_t batch_axis, size_t labels_rank) {
  return size_t(batch_axis) < labels_rank ? batch_axis : 0;
}

TrainOptions parse_train_options(const TrainOptionNames& n) {
  TrainOptions o;
  o.input = n.input;
  o.output = n.output;
  if (n.loss != "cross_entropy" && n.loss != "mse")
    fail("train: loss '{}' is not one of cross_entropy, mse", n.loss);
  o.loss = n.loss == "mse" ? TrainLoss::mse : TrainLoss::cross_entropy;
  if (n.optimizer != "sgd" && n.optimizer != "adam" && n.optimizer != "adamw")
    fail("train: optimizer '{}' is not one of sgd, adam, adamw", n.optimizer);
  o.optimizer = n.optimizer == "adam"    ? TrainOptimizer::adam
                : n.optimizer == "adamw" ? TrainOptimizer::adamw
                                         : TrainOptimizer::sgd;
  o.lr = n.lr.value_or(o.optimizer == TrainOptimizer::sgd ? 0.01f : 1e-3f);
  if (!(o.lr > 0)) fail("train: the learning rate must be positive, got {}", o.lr);
  if (!(n.momentum >= 0)) fail("train: momentum must not be negative, got {}", n.momentum);
  if (!(n.weight_decay >= 0)) fail("train: weight_decay must not be negative, got {}", n.weight_decay);
  if (n.batch < 1) fail("train: the batch must be at least 1, got {}", n.batch);
  if (n.batch_axis < 0) fail("train: the batch axis must not be negative, got {}", n.batch_axis);
  o.momentum = n.momentum;
  o.nesterov = n.nesterov;
  o.weight_decay = n.weight_decay;
  o.batch = n.batch;
  o.batch_axis = n.batch_axis;
  o.shuffle = n.shuffle;
  o.seed = n.seed;
  if (n.schedule != "constant" && n.schedule != "cosine")
    fail("train: schedule '{}' is not one of constant, cosine", n.schedule);
  o.schedule = n.schedule == "cosine" ? LrSchedule::cosine : LrSchedule::constant;
  if (n.warmup < 0) fail("train: warmup must not be negative, got {} steps", n.warmup);
  if (n.total_steps < 0) fail("train: total_steps must not be negative, got {}", n.total_steps);
  if (!(n.min_lr >= 0) || n.min_lr > o.lr)
    fail("train: min_lr must be in [0, lr = {}], got {}", o.lr, n.min_lr);
  if (!(n.clip_norm >= 0)) fail("train: clip_norm must not be negative, got {}", n.clip_norm);
  o.warmup = n.warmup;
  o.total_steps = n.total_steps;
  o.min_lr = n.min_lr;
  o.clip_norm = n.clip_norm;
  if (n.parallel != "data" && n.parallel != "layers")
    fail("train: parallel '{}' is not one of data, layers", n.parallel);
  o.parallel = n.parallel == "layers" ? TrainParallel::layers : TrainParallel::data;
  if (n.time_chunks < 0) fail("train: time_chunks must not be negative, got {}", n.time_chunks);
  if (n.time_chunks > 0 && o.parallel != TrainParallel::layers)
    fail("train: time_chunks {} is for parallel 'layers' (the recurrent layers over the devices)", n.time_chunks);
  o.time_chunks = n.time_chunks;
  return o;
}

float lr_at(const TrainOptions& o, int64_t step) {
  double lr = o.lr;
  if (o.schedule == LrSchedule::cosine) {
    const double t = double(std::min(step, o.total_steps)) / double(std::max<int64_t>(o.total_steps, 1));
    lr = o.min_lr + (double(o.lr) - o.min_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  if (o.warmup > 0) lr *= std::min(1.0, double(step + 1) / double(o.warmup));
  return float(lr);
}

Trainer::Trainer(std::shared_ptr<Context> ctx, Graph g, TrainOptions opts) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.ctx = ctx;
  m.opts = opts;
  if (opts.batch < 1) fail("train: the batch must be at least 1, got {}", opts.batch);
  if (!(opts.lr > 0)) fail("train: the learning rate must be positive, got {}", opts.lr);
  if (opts.schedule == LrSchedule::cosine && opts.total_steps <= 0)
    fail("train: the cosine schedule needs total_steps (the steps it decays over), got {}", opts.total_steps);
  if (!(opts.clip_norm >= 0)) fail("train: clip_norm must not be negative, got {}", opts.clip_norm);
  std::vector<int> devices = opts.devices.empty() ? std::vector<int>{opts.device} : opts.devices;
  for (size_t i = 0; i < devices.size(); ++i) {
    if (devices[i] < 0 || size_t(devices[i]) >= ctx->device_count())
      fail("train: device {} of the device list is not in the context, which has {} device{} (0 to {})", devices[i],
           ctx->device_count(), ctx->device_count() == 1 ? "" : "s", ctx->device_count() - 1);
    for (size_t j = 0; j < i; ++j)
      if (devices[j] == devices[i]) {
        fail("train: device {} is in the device list twice", devices[i]);
      } else if (ctx->device(devices[j]).device() == ctx->device(devices[i]).device()) {
        fail("train: devices {} and {} of the context are the same OpenCL device {} '{}'; training on several "
             "devices takes distinct ones", devices[j], devices[i], ctx->device(devices[i]).id(), ctx->device(devices[i]).info.name);
      }
  }
  // Layer parallel: the recurrent layers in contiguous groups over the devices, in time chunks.
  const bool layers = opts.parallel == TrainParallel::layers;
  if (layers) {
    g.sort();
    std::vector<Node*> rnn;
    for (auto& n : g.nodes)
      if (n.domain.empty() && (n.op_type == "LSTM" || n.op_type == "GRU")) rnn.push_back(&n);
    if (rnn.empty())
      fail("train: parallel 'layers' splits the model's LSTM / GRU layers over the devices; graph '{}' has none",
           g.name);
    if (rnn.size() < devices.size())
      fail("train: parallel 'layers' over {} devices needs at least as many LSTM / GRU layers; graph '{}' has {}",
           devices.size(), g.name, rnn.size());
    const int64_t chunks = opts.time_chunks > 0 ? opts.time_chunks : devices.size() > 1 ? 8 : 1;
    std::vector<std::string> where;
    for (size_t l = 0; l < rnn.size(); ++l) {
      const int d = devices[l * devices.size() / rnn.size()];
      rnn[l]->attrs[kDeviceAttr] = int64_t(d);
      rnn[l]->attrs[kTimeChunksAttr] = chunks;
      where.push_back(fmt::format("{} on device {}", rnn[l]->describe(), d));
    }
    log::info("train: {} recurrent layer(s) over {} device(s) in {} time chunk(s): {}", rnn.size(), devices.size(),
              chunks, fmt::join(where, ", "));
  }
  // The data input and the output the loss reads.
  std::vector<const ValueInfo*> data_inputs;
  for (auto& in : g.inputs)
    if (!g.is_constant(in.name)) data_inputs.push_back(&in);
  const ValueInfo* xin = nullptr;
  for (auto* in : data_inputs)
    if (opts.input.empty() ? xin == nullptr : in->name == opts.input) xin = in;
  if (!xin) {
    if (opts.input.empty()) fail("train: the model has no input");
    fail("train: the model has no input '{}'", opts.input);
  }
  if (data_inputs.size() > 1)
    fail("train: the model has {} inputs; cldl train feeds one (--input names it), not '{}' too", data_inputs.size(),
         data_inputs[0] == xin ? data_inputs[1]->name : data_inputs[0]->name);
  m.x_name = xin->name;
  m.x_dtype = xin->dtype;
  m.x_rank = xin->shape.dims.size();
  const ValueInfo* out = nullptr;
  for (auto& o : g.outputs)
    if (opts.output.empty() ? out == nullptr : o.name == opts.output) out = &o;
  if (!out) {
    if (opts.output.empty()) fail("train: the model has no output");
    fail("train: the model has no output '{}'", opts.output);
  }
  if (out->dtype != DType::f32) fail("train: output '{}' is {}; the losses take float", out->name, to_string(out->dtype));
  if (!out->shape.known || out->shape.dims.empty())
    fail("train: output '{}' has no known rank (shape {})", out->name, out->shape.str());
  const ValueInfo output = *out;
  const size_t r = output.shape.dims.size();
  if (opts.batch_axis < 0 || size_t(opts.batch_axis) >= m.x_rank)
    fail("train: --batch-axis {} is outside the rank {} of input '{}'", opts.batch_axis, m.x_rank, m.x_name);
  if (opts.loss == TrainLoss::cross_entropy && r < 2)
    fail("train: cross_entropy needs an output of rank 2 or more ([..., classes]), '{}' has shape {}", output.name,
         output.shape.str());

  // BatchNormalization trains as PyTorch's module.train() has it: batch statistics (training_mode 1); its mean and
  // var initializers are state carried from step to step, not trained, updated with the node's momentum m (ONNX's:
  // PyTorch's is 1 - m): mean' = m mean + (1 - m) batch mean, var' = m var + (1 - m) n / (n - 1) batch variance
  // (PyTorch's unbiased running variance; the node's running_var output has the population variance, so
  // var' = k (running_var - m var) + m var with k = n / (n - 1), n = the values per channel, from x's shape).
  std::vector<std::string> running, running_new;
  std::set<std::string> not_trained;
  {
    std::map<std::string, int> reads;
    for (auto& n : g.nodes)
      for (auto& in : n.inputs) ++reads[in];
    std::vector<Node> added;
    for (auto& n : g.nodes) {
      if (!n.domain.empty() || n.op_type != "BatchNormalization" || n.attr_i("training_mode", 0) != 0) continue;
      if (n.inputs.size() != 5) fail("train: {} has {} inputs, expected 5", n.describe(), n.inputs.size());
      const std::string x = n.inputs[0], mean = n.inputs[3], var = n.inputs[4];
      for (const std::string* v : {&mean, &var}) {
        auto it = g.initializers.find(*v);
        if (it == g.initializers.end() || it->second.dtype() != DType::f32)
          fail("train: {}: its running statistic '{}' is not a float initializer", n.describe(), *v);
        if (reads[*v] != 1) fail("train: {}: its running statistic '{}' is read by other nodes too", n.describe(), *v);
      }
      const float momentum = n.attr_f("momentum", 0.9f);
      n.domain = kFusedDomain;  // the newest opset's BatchNormalization, whatever the model's opset
      for (const char* a : {"is_test", "spatial", "consumed_inputs"}) n.attrs.erase(a);
      n.attrs["training_mode"] = int64_t(1);
      n.outputs.resize(3);
      const std::string base = n.name.empty() ? "cldl.train/bn" : n.name;
      n.outputs[1] = g.unique_name(mean + ".new");
      n.outputs[2] = g.unique_name(var + ".population");
      auto v = [&](const std::string& what) { return g.unique_name(base + "/" + what); };
      auto scalar = [&](const std::string& what, float f) {
        const std::string c =
            add_constant(g, base + "/" + what, HostTensor::from<float>(Shape{}, std::vector<float>{f}));
        not_trained.insert(c);
        return c;
      };
      const std::string shape = v("shape"), shape_f = v("shape_f"), all = v("numel"), count = v("count"),
                        less = v("count_1"), k = v("unbiased"), mv = v("m_var"), diff = v("diff"), scaled = v("scaled"),
                        var_new = g.unique_name(var + ".new");
      const int64_t C = g.initializers.at(var).numel();
      added.push_back(fused(g, base + "/shape", "Shape", {x}, {shape}));
      added.push_back(fused(g, base + "/shape_f", "Cast", {shape}, {shape_f}, {{"to", int64_t(1)}}));
      added.push_back(fused(g, base + "/numel", "ReduceProd", {shape_f}, {all}, {{"keepdims", int64_t(0)}}));
      added.push_back(fused(g, base + "/count", "Div", {all, scalar("channels", float(C))}, {count}));
      added.push_back(fused(g, base + "/count_1", "Sub", {count, scalar("one", 1.0f)}, {less}));
      added.push_back(fused(g, base + "/unbiased", "Div", {count, less}, {k}));
      added.push_back(fused(g, base + "/m_var", "Mul", {var, scalar("momentum", momentum)}, {mv}));
      added.push_back(fused(g, base + "/diff", "Sub", {n.outputs[2], mv}, {diff}));
      added.push_back(fused(g, base + "/scaled", "Mul", {diff, k}, {scaled}));
      added.push_back(fused(g, base + "/var_new", "Add", {scaled, mv}, {var_new}));
      running.push_back(mean);
      running.push_back(var);
      running_new.push_back(n.outputs[1]);
      running_new.push_back(var_new);
      not_trained.insert(mean);
      not_trained.insert(var);
    }
    for (auto& n : added) g.nodes.push_back(std::move(n));
  }
  // Dropout trains as in module.train(): TrainingDropout (models/ops_backward.cpp) draws a mask per element from
  // (seed, the step count T, the element), keeps with probability 1 - ratio and scales by 1 / (1 - ratio). Ratio 0
  // stays the identity. Each Dropout node gets its own seed (opts.seed and its index).
  m.step_name = g.unique_name("cldl.train.step");
  {
    std::set<std::string> read_by_nodes;
    for (auto& n : g.nodes)
      for (auto& in : n.inputs) read_by_nodes.insert(in);
    for (auto& o : g.outputs) read_by_nodes.insert(o.name);
    uint32_t index = 0;
    for (auto& n : g.nodes) {
      if (!n.domain.empty() || n.op_type != "Dropout") continue;
      ++index;
      float ratio = n.attr_f("ratio", 0.5f);
      if (node_opset(g, n) >= 12) {
        ratio = 0.5f;
        if (!n.input(1).empty()) {
          const HostTensor* t = nullptr;  // an initializer, or a Constant node's value
          if (auto it = g.initializers.find(n.input(1)); it != g.initializers.end()) t = &it->second;
          for (auto& c : g.nodes)
            if (!t && c.domain.empty() && c.op_type == "Constant" && c.outputs.size() == 1 &&
                c.outputs[0] == n.input(1) && c.has("value"))
              t = std::get_if<HostTensor>(&c.attrs.at("value"));
          if (!t || t->numel() != 1)
            fail("train: {}: its ratio '{}' is not a constant scalar", n.describe(), n.input(1));
          ratio = float(to_doubles(*t)[0]);
          not_trained.insert(n.input(1));
        }
      }
      if (n.outputs.size() > 1 && !n.outputs[1].empty() && read_by_nodes.count(n.outputs[1]))
        fail("train: {}: its mask output '{}' is read; cldl trains Dropout without it", n.describe(), n.outputs[1]);
      if (ratio == 0.0f) continue;
      if (!(ratio > 0.0f && ratio < 1.0f)) fail("train: {}: ratio {} is outside [0, 1)", n.describe(), ratio);
      const std::string x = n.inputs.at(0), y = n.outputs.at(0);
      n = fused(g, (n.name.empty() ? "cldl.train/dropout" : n.name) + "/training", "TrainingDropout", {x, m.step_name},
                {y, g.unique_name(y + ".scale")},
                {{"ratio", ratio}, {"seed", int64_t(uint32_t(opts.seed * 0x9e3779b9ULL + index))}});
    }
  }

  // The weights: float initializers that no node reads where its op needs a value known at load (but Conv's
  // weights and bias, which ConvDynamic reads at run time, ConvTranspose's, which ConvTransposeDynamic reads at run
  // time, and LSTM / GRU's W, R and B, which LSTMTrain / GRUTrain read at run time).
  std::set<std::string> fixed;
  for (auto& n : g.nodes) {
    const bool rnn = n.domain.empty() && (n.op_type == "LSTM" || n.op_type == "GRU");
    const bool dynamic = n.domain.empty() && (n.op_type == "Conv" || n.op_type == "ConvTranspose");
    if (const OpDef* d = dynamic ? nullptr : find_op(n.op_type, n.domain))
      for (size_t i : d->const_inputs)
        if (i < n.inputs.size() && !(rnn && i >= 1 && i <= 3)) fixed.insert(n.inputs[i]);
  }
  std::set<std::string> read;
  for (auto& n : g.nodes)
    for (auto& in : n.inputs) read.insert(in);
  std::map<std::string, HostTensor> initial;
  for (auto& [name, t] : g.initializers)
    if (t.dtype() == DType::f32 && !fixed.count(name) && read.count(name) && !not_trained.count(name)) {
      m.weights.push_back(name);
      initial[name] = t;
    }
  if (m.weights.empty()) fail("train: the model has no float initializer to train");
  for (auto& w : m.weights) {
    g.inputs.erase(std::remove_if(g.inputs.begin(), g.inputs.end(), [&](auto& v) { return v.name == w; }),
                   g.inputs.end());
    g.inputs.push_back(info(w, DType::f32, initial[w].shape()));
    g.initializers.erase(w);
  }
  for (auto& w : running) {
    initial[w] = g.initializers.at(w);
    g.inputs.erase(std::remove_if(g.inputs.begin(), g.inputs.end(), [&](auto& v) { return v.name == w; }),
                   g.inputs.end());
    g.inputs.push_back(info(w, DType::f32, initial[w].shape()));
    g.initializers.erase(w);
  }
  make_conv_weights_dynamic(g);
  make_rnn_weights_dynamic(g);  // LSTM / GRU with their weights among the inputs
  make_conv_transpose_weights_dynamic(g);

  // The loss.
  m.labels_name = g.unique_name("cldl.train.labels");
  m.lr_name = g.unique_name("cldl.train.lr");
  m.loss_name = g.unique_name("cldl.train.loss");
  ValueShape ls = output.shape;
  if (opts.loss == TrainLoss::cross_entropy) {
    ls.dims.pop_back();
    ls.symbols.pop_back();
  }
  m.labels_rank = ls.dims.size();
  if (m.labels_rank == 0)
    fail("train: output '{}' has shape {}: the labels would have no batch axis", output.name, output.shape.str());
  m.labels_axis = labels_batch_axis(opts.batch_axis, m.labels_rank);
  g.inputs.push_back(info(m.labels_name, opts.loss == TrainLoss::cross_entropy ? DType::i64 : DType::f32, ls));
  g.inputs.push_back(info(m.lr_name, DType::f32, Shape{1}));
  g.inputs.push_back(info(m.step_name, DType::i64, Shape{1}));
  if (opts.loss == TrainLoss::cross_entropy) {
    std::string scores = output.name;
    if (r > 2) {  // classes last -> axis 1, as SoftmaxCrossEntropyLoss reads them
      std::vector<int64_t> perm{0, int64_t(r) - 1};
      for (size_t i = 1; i + 1 < r; ++i) perm.push_back(int64_t(i));
      scores = g.unique_name("cldl.train.scores");
      g.nodes.push_back(fused(g, "cldl.train/classes_to_axis_1", "Transpose", {output.name}, {scores}, {{"perm", perm}}));
    }
    // With its log_prob output, which the loss's backward reads instead of computing the log-softmax again.
    g.nodes.push_back(fused(g, "cldl.train/loss", "SoftmaxCrossEntropyLoss", {scores, m.labels_name},
                            {m.loss_name, g.unique_name("cldl.train.log_prob")}, {{"reduction", std::string("mean")}}));
  } else {
    const std::string d = g.unique_name("cldl.train.diff"), sq = g.unique_name("cldl.train.squared");
    g.nodes.push_back(fused(g, "cldl.train/diff", "Sub", {output.name, m.labels_name}, {d}));
    g.nodes.push_back(fused(g, "cldl.train/squared", "Mul", {d, d}, {sq}));
    g.nodes.push_back(fused(g, "cldl.train/loss", "ReduceMean", {sq}, {m.loss_name}, {{"keepdims", int64_t(0)}}));
  }

  // The gradients and the update.
  std::vector<std::string> grads, news, states, new_states;
  for (auto& w : m.weights) {
    grads.push_back(g.unique_name(w + ".grad"));
    news.push_back(g.unique_name(w + ".new"));
  }
  const bool adamw = opts.optimizer == TrainOptimizer::adamw, adam = opts.optimizer == TrainOptimizer::adam || adamw;
  for (int k = 0; k < (adam ? 2 : 1); ++k)
    for (auto& w : m.weights) {
      const char* what = adam ? (k == 0 ? ".m" : ".v") : ".momentum";
      states.push_back(g.unique_name(w + what));
      new_states.push_back(g.unique_name(w + what + ".new"));
    }
  std::map<std::string, AttrValue> attrs;
  if (adamw)  // cldl's AdamW (models/ops_training.cpp): Adam with x (1 - lr wd) before the step, as torch.optim.AdamW
    attrs = {
        {"alpha", opts.beta1}, {"beta", opts.beta2}, {"epsilon", opts.epsilon}, {"weight_decay", opts.weight_decay}};
  else if (adam)
    attrs = {{"alpha", opts.beta1}, {"beta", opts.beta2}, {"epsilon", opts.epsilon}, {"norm_coefficient", opts.weight_decay}};
  else  // PyTorch's SGD: v = momentum v + g (dampening 0), x -= lr v (Nesterov: x -= lr (g + momentum v))
    attrs = {{"alpha", opts.momentum}, {"beta", 1.0f}, {"norm_coefficient", opts.weight_decay},
             {"mode", std::string(opts.nesterov ? "nesterov" : "standard")}};
  std::vector<std::string> outs = news;
  outs.insert(outs.end(), new_states.begin(), new_states.end());
  m.step_next_name = g.unique_name("cldl.train.step.new");
  // The optimizer update of every weight from `grads` (names in `u`), the step count for the next step, the
  // states as inputs and the updates as outputs.
  auto add_update = [&](Graph& u) {
    std::vector<std::string> in{m.lr_name, m.step_name};
    in.insert(in.end(), m.weights.begin(), m.weights.end());
    if (opts.clip_norm > 0) {
      // clip_grad_norm_: the global L2 norm of all the gradients, each scaled by min(1, clip / (norm + 1e-6)).
      auto scalar = [&](const std::string& what, float f) {
        return add_constant(u, "cldl.train.clip/" + what, HostTensor::from<float>(Shape{}, std::vector<float>{f}));
      };
      std::vector<std::string> squares;
      for (size_t k = 0; k < grads.size(); ++k) {
        squares.push_back(u.unique_name(grads[k] + ".sumsq"));
        u.nodes.push_back(fused(u, "cldl.train.clip/sumsq_" + m.weights[k], "ReduceSumSquare", {grads[k]},
                                {squares.back()}, {{"keepdims", int64_t(0)}}));
      }
      const std::string total = u.unique_name("cldl.train.clip.sumsq"), norm = u.unique_name("cldl.train.clip.norm"),
                        den = u.unique_name("cldl.train.clip.den"), ratio = u.unique_name("cldl.train.clip.ratio"),
                        coef = u.unique_name("cldl.train.clip.coef");
      u.nodes.push_back(fused(u, "cldl.train.clip/sum", "Sum", squares, {total}));
      u.nodes.push_back(fused(u, "cldl.train.clip/norm", "Sqrt", {total}, {norm}));
      u.nodes.push_back(fused(u, "cldl.train.clip/den", "Add", {norm, scalar("eps", 1e-6f)}, {den}));
      u.nodes.push_back(fused(u, "cldl.train.clip/ratio", "Div", {scalar("max_norm", opts.clip_norm), den}, {ratio}));
      u.nodes.push_back(fused(u, "cldl.train.clip/coef", "Min", {ratio, scalar("one", 1.0f)}, {coef}));
      for (size_t k = 0; k < grads.size(); ++k) {
        const std::string clipped = u.unique_name(grads[k] + ".clipped");
        u.nodes.push_back(fused(u, "cldl.train.clip/scale_" + m.weights[k], "Mul", {grads[k], coef}, {clipped}));
        in.push_back(clipped);
      }
    } else {
      in.insert(in.end(), grads.begin(), grads.end());
    }
    in.insert(in.end(), states.begin(), states.end());
    Node update = make_node(u, "cldl.train/update", adamw ? "AdamW" : adam ? "Adam" : "Momentum", in, outs, attrs);
    update.domain = adamw ? kFusedDomain : kTrainingDomain;
    u.nodes.push_back(std::move(update));
    u.opsets[kTrainingDomain] = 1;
    // The step count for the next step, on the device.
    u.nodes.push_back(fused(u, "cldl.train/count", "Add",
                            {m.step_name, add_constant(u, "cldl.train.one",
                                                       HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{1}))},
                            {m.step_next_name}));
    for (size_t k = 0; k < states.size(); ++k)
      u.inputs.push_back(info(states[k], DType::f32, initial[m.weights[k % m.weights.size()]].shape()));
    for (auto& o : outs) u.outputs.push_back(unknown(o, DType::f32));
    u.outputs.push_back(unknown(m.step_next_name, DType::i64));
  };
  g.opsets[kTrainingDomain] = 1;
  if (devices.size() == 1 || layers) {
    Node grad = make_node(g, "cldl.train/gradient", "Gradient", m.weights, grads,
                          {{"xs", m.weights}, {"y", m.loss_name}});
    grad.domain = kTrainingDomain;
    g.nodes.push_back(std::move(grad));
    g.outputs.clear();
    g.outputs.push_back(unknown(m.loss_name, DType::f32));
    add_update(g);
    for (auto& o : running_new) g.outputs.push_back(unknown(o, DType::f32));
    g.sort();
    // A debugging aid: the training graph as an ONNX file (cldl profile / cldl run --stats read it).
    if (const char* dump = std::getenv("CLDL_TRAIN_GRAPH"); dump && *dump) {
      export_onnx_file(g, dump);
      log::info("train: the training graph written to '{}' (CLDL_TRAIN_GRAPH)", dump);
    }
    ModelOptions mo;
    mo.compile.device = devices[0];
    m.model = Model::create(ctx, std::move(g), mo);
  } else {
    // Not yet data parallel: state that each replica would compute from its own shard (BatchNormalization's running
    // statistics), and Dropout's mask, drawn from the step count the gradient graphs do not read.
    if (!running.empty())
      fail("train: BatchNormalization in training mode (running statistics '{}', ...) is not data parallel yet: "
           "train on one device", running[0]);
    for (auto& n : g.nodes)
      if (n.op_type == "TrainingDropout")
        fail("train: {}: Dropout is not data parallel yet: train on one device", n.describe());
    // The update graph: the model's opsets, the carried values, every replica's gradients summed, the update.
    Graph u = g;
    u.nodes.clear();
    u.inputs.clear();
    u.outputs.clear();
    u.initializers.clear();
    u.inputs.push_back(info(m.lr_name, DType::f32, Shape{1}));
    u.inputs.push_back(info(m.step_name, DType::i64, Shape{1}));
    for (auto& w : m.weights) u.inputs.push_back(info(w, DType::f32, initial[w].shape()));
    for (size_t r = 0; r < devices.size(); ++r) {
      m.replica_grads.emplace_back();
      for (auto& w : m.weights) {
        m.replica_grads[r].push_back(u.unique_name(w + ".grad.device" + std::to_string(r)));
        u.inputs.push_back(info(m.replica_grads[r].back(), DType::f32, initial[w].shape()));
      }
    }
    for (size_t k = 0; k < m.weights.size(); ++k) {
      std::vector<std::string> parts;
      for (auto& names : m.replica_grads) parts.push_back(names[k]);
      u.nodes.push_back(fused(u, "cldl.train/sum_" + m.weights[k], "Sum", parts, {grads[k]}));
    }
    add_update(u);
    u.sort();
    // The gradient graph: the loss scaled by the shard's share of the batch, its gradient over every weight.
    m.scale_name = g.unique_name("cldl.train.scale");
    m.scaled_loss_name = g.unique_name("cldl.train.loss.scaled");
    m.grad_names = grads;
    g.inputs.erase(std::remove_if(g.inputs.begin(), g.inputs.end(), [&](auto& v) { return v.name == m.step_name; }),
                   g.inputs.end());
    g.inputs.push_back(info(m.scale_name, DType::f32, Shape{}));
    g.nodes.push_back(fused(g, "cldl.train/scale", "Mul", {m.loss_name, m.scale_name}, {m.scaled_loss_name}));
    Node grad = make_node(g, "cldl.train/gradient", "Gradient", m.weights, grads,
                          {{"xs", m.weights}, {"y", m.scaled_loss_name}});
    grad.domain = kTrainingDomain;
    g.nodes.push_back(std::move(grad));
    g.inputs.erase(std::remove_if(g.inputs.begin(), g.inputs.end(), [&](auto& v) { return v.name == m.lr_name; }),
                   g.inputs.end());
    g.outputs.clear();
    g.outputs.push_back(unknown(m.scaled_loss_name, DType::f32));
    for (auto& gr : grads) g.outputs.push_back(unknown(gr, DType::f32));
    g.sort();
    for (int d : devices) {
      ModelOptions mo;
      mo.compile.device = d;
      auto& r = m.replicas.emplace_back();
      r.device = d;
      r.grad_model = Model::create(ctx, g, mo);
      r.update_model = Model::create(ctx, u, mo);
    }
  }

  // The device buffers: weights from the model, states zero; a second set the updates go to.
  m.carried_in = m.weights;
  m.carried_in.insert(m.carried_in.end(), states.begin(), states.end());
  m.running = running;
  m.running_at = m.carried_in.size();
  m.carried_in.insert(m.carried_in.end(), running.begin(), running.end());
  m.carried_in.push_back(m.step_name);
  m.carried_out = outs;
  m.carried_out.insert(m.carried_out.end(), running_new.begin(), running_new.end());
  m.carried_out.push_back(m.step_next_name);
  auto make_sets = [&](std::array<std::vector<Tensor>, 2>& set, int device) {
    for (size_t k = 0; k < m.carried_in.size(); ++k) {
      HostTensor h;
      if (k < m.weights.size() || (k >= m.running_at && k + 1 < m.carried_in.size())) {
        h = initial[m.carried_in[k]];
      } else if (k + 1 < m.carried_in.size()) {
        h = HostTensor(DType::f32, initial[m.weights[k % m.weights.size()]].shape());
        std::memset(h.data(), 0, h.bytes());
      } else {
        h = HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{1});  // T of the first step
      }
      set[0].push_back(ctx->upload(h, device));
      set[1].push_back(ctx->alloc(h.shape(), h.dtype(), device));
    }
  };
  if (m.replicas.empty()) {
    m.opts.device = devices[0];
    make_sets(m.set, devices[0]);
  }
  for (auto& r : m.replicas) {
    make_sets(r.set, r.device);
    for (auto& w : m.weights) r.grads.push_back(ctx->alloc(initial[w].shape(), DType::f32, r.device));
  }
  m.zeros.resize(m.weights.size());
  log::info("train: {} weights ({} values), {}, {} states, {} device{}", m.weights.size(),
            std::accumulate(m.weights.begin(), m.weights.end(), int64_t(0),
                            [&](int64_t s, auto& w) { return s + initial[w].numel(); }),
            adamw  ? "AdamW"
            : adam ? "Adam"
                   : "SGD",
            states.size(), devices.size(),
            devices.size() == 1 ? "" : layers ? "s (layer parallel)" : "s (data parallel)");
}

Trainer::~Trainer() {
  for (auto& r : impl_->replicas)  // the updates read every replica's gradient buffers
    if (r.done()) r.done.wait();
}

const std::vector<std::string>& Trainer::weights() const { return impl_->weights; }

std::vector<std::shared_ptr<CompiledModel>> Trainer::plans() const {
  std::vector<std::shared_ptr<CompiledModel>> r;
  for (auto& [key, p] : impl_->replicas.empty() ? impl_->plans : impl_->replicas[0].plans)
    if (p.plan) r.push_back(p.plan);
  return r;
}

// Enqueues one step whose loss goes to element `slot` of m.losses; waits only for the run two steps back (whose
// session this one reuses), so the host stays ahead of the device.
void Trainer::enqueue_step(const HostTensor& x, const HostTensor& labels, int64_t slot) {
  Impl& m = *impl_;
  m.check_types(x, labels);
  Session& s = m.session_for(x.shape(), labels.shape(), int(step_ % 2));
  m.write_lr(s, step_);
  s.write_input(m.x_name, x);
  s.write_input(m.labels_name, labels);
  s.bind_output(m.loss_name, m.losses.slice_elems(slot, 1, Shape{}));
  m.last = m.last() ? s.enqueue({m.last}) : s.enqueue();
  ++step_;
}

// The shard sizes of a batch of n rows over d devices: contiguous, as equal as possible (the first n % d one
// larger), zero for the last devices when n < d.
static std::vector<int64_t> shard_sizes(int64_t n, size_t d) {
  std::vector<int64_t> sizes(d, n / int64_t(d));
  for (size_t i = 0; i < size_t(n % int64_t(d)); ++i) ++sizes[i];
  return sizes;
}

// Each replica with a non-empty shard runs its gradient graph on its rows, after every replica's previous update
// (their gradient buffers are read by every update); then every replica's update sums the gradients of those
// that ran (zeros for the others) and writes its next set. The host waits only for a session's run two steps
// back (write_input), as on one device.
size_t Trainer::enqueue_step_dp(const HostTensor& x, const HostTensor& labels, const std::vector<int64_t>& rows,
                                int64_t slot) {
  Impl& m = *impl_;
  const int parity = int(step_ % 2);
  const auto sizes = shard_sizes(int64_t(rows.size()), m.replicas.size());
  std::vector<cl::Event> prev, grads;
  for (auto& r : m.replicas)
    if (r.done()) prev.push_back(r.done);
  size_t n = 0;
  int64_t lo = 0;
  for (size_t i = 0; i < m.replicas.size() && sizes[i] > 0; ++i, ++n) {
    auto& r = m.replicas[i];
    const std::vector<int64_t> idx(rows.begin() + lo, rows.begin() + lo + sizes[i]);
    lo += sizes[i];
    const HostTensor xs = take_along(x, m.opts.batch_axis, idx), ys = take_along(labels, m.labels_axis, idx);
    Session& s = m.grad_session(r, xs.shape(), ys.shape(), parity);
    s.write_input(m.x_name, xs);
    s.write_input(m.labels_name, ys);
    const float scale = float(double(sizes[i]) / double(rows.size()));
    if (auto it = r.scale.find(&s); it == r.scale.end() || it->second != scale) {
      s.write_input(m.scale_name, HostTensor::from<float>(Shape{}, std::vector<float>{scale}));
      r.scale[&s] = scale;
    }
    s.bind_output(m.scaled_loss_name, r.losses.slice_elems(slot, 1, Shape{}));
    grads.push_back(s.enqueue(prev));
  }
  for (auto& r : m.replicas) {
    Session& u = m.update_session(r, n, parity);
    m.write_lr(u, step_);
    r.done = u.enqueue(grads);
  }
  m.last = m.replicas[0].done;
  ++step_;
  return n;
}

// m.losses holds at least n floats.
static void reserve_losses(Context& ctx, Tensor& losses, int64_t n, int device) {
  if (!losses.valid() || losses.numel() < n) losses = ctx.alloc(Shape{std::max<int64_t>(n, 16)}, DType::f32, device);
}

float Trainer::step(const HostTensor& x, const HostTensor& labels) {
  Impl& m = *impl_;
  if (!m.replicas.empty()) {
    std::vector<int64_t> rows(size_t(m.check_samples(x, labels)));
    std::iota(rows.begin(), rows.end(), 0);
    for (auto& r : m.replicas) reserve_losses(*m.ctx, r.losses, 1, r.device);
    const size_t n = enqueue_step_dp(x, labels, rows, 0);
    for (auto& r : m.replicas) check(r.done.wait(), "clWaitForEvents", "the training step");
    float loss = 0;
    for (size_t i = 0; i < n; ++i)
      loss += m.ctx->download(m.replicas[i].losses.slice_elems(0, 1, Shape{1})).as<float>()[0];
    return loss;
  }
  reserve_losses(*m.ctx, m.losses, 1, m.opts.device);
  enqueue_step(x, labels, 0);
  check(m.last.wait(), "clWaitForEvents", "the training step");
  return m.ctx->download(m.losses.slice_elems(0, 1, Shape{1})).as<float>()[0];
}

EpochResult Trainer::epoch(const HostTensor& x, const HostTensor& labels,
                           const std::function<void(int64_t, int64_t, float)>& progress) {
  Impl& m = *impl_;
  const int64_t axis = m.opts.batch_axis;
  const int64_t count = m.check_samples(x, labels);
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  if (m.opts.shuffle) {
    std::mt19937_64 rng(m.opts.seed + uint64_t(step_));  // a new permutation per epoch, reproducible
    std::shuffle(order.begin(), order.end(), rng);
  }
  EpochResult r;
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t steps = (count + m.opts.batch - 1) / m.opts.batch;
  std::vector<size_t> taking_part(static_cast<size_t>(steps));  // data parallel: the replicas each step used
  if (m.replicas.empty()) reserve_losses(*m.ctx, m.losses, steps, m.opts.device);
  for (auto& rep : m.replicas) reserve_losses(*m.ctx, rep.losses, steps, rep.device);
  for (int64_t i = 0; i < steps; ++i) {
    const int64_t lo = i * m.opts.batch, hi = std::min(count, lo + m.opts.batch);
    std::vector<int64_t> idx(order.begin() + lo, order.begin() + hi);
    if (m.replicas.empty())
      enqueue_step(take_along(x, axis, idx), take_along(labels, m.labels_axis, idx), i);
    else
      taking_part[size_t(i)] = enqueue_step_dp(x, labels, idx, i);
    if (progress) progress(i + 1, steps, std::nanf(""));  // the losses are read once, at the end
  }
  std::vector<float> step_losses(static_cast<size_t>(steps), 0.0f);
  if (m.replicas.empty()) {
    check(m.last.wait(), "clWaitForEvents", "the epoch's last step");
    const HostTensor losses = m.ctx->download(m.losses.slice_elems(0, steps, Shape{steps}));
    std::copy(losses.as<float>(), losses.as<float>() + steps, step_losses.begin());
  }
  for (size_t q = 0; q < m.replicas.size(); ++q) {  // each step's loss: the sum of its shards' weighted losses
    check(m.replicas[q].done.wait(), "clWaitForEvents", "the epoch's last step");
    const HostTensor losses = m.ctx->download(m.replicas[q].losses.slice_elems(0, steps, Shape{steps}));
    for (int64_t i = 0; i < steps; ++i)
      if (q < taking_part[size_t(i)]) step_losses[size_t(i)] += losses.as<float>()[i];
  }
  double total = 0;
  for (int64_t i = 0; i < steps; ++i) {
    const float loss = step_losses[size_t(i)];
    r.step_losses.push_back(loss);
    total += double(loss) * double(std::min(count, (i + 1) * m.opts.batch) - i * m.opts.batch);
  }
  r.mean_loss = total / double(count);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::map<std::string, HostTensor> Trainer::read_weights(size_t copy) {
  Impl& m = *impl_;
  if (copy >= std::max<size_t>(1, m.replicas.size()))
    fail("train: read_weights: no copy {}; the weights live on {} device{}", copy, std::max<size_t>(1, m.replicas.size()),
         m.replicas.size() > 1 ? "s" : "");
  const cl::Event& done = m.replicas.empty() ? m.last : m.replicas[copy].done;
  if (done()) check(done.wait(), "clWaitForEvents", "the last training step");
  auto& set = m.replicas.empty() ? m.set : m.replicas[copy].set;
  std::map<std::string, HostTensor> w;
  for (size_t k = 0; k < m.weights.size(); ++k) w[m.weights[k]] = m.ctx->download(set[size_t(step_ % 2)][k]);
  for (size_t k = 0; k < m.running.size(); ++k)
    w[m.running[k]] = m.ctx->download(set[size_t(step_ % 2)][m.running_at + k]);
  return w;
}

void Trainer::save_onnx(const std::string& source, const std::string& path) {
  onnx::ModelProto proto;
  {
    std::ifstream f(source, std::ios::binary);
    if (!f || !proto.ParseFromIstream(&f)) fail("train: cannot read the ONNX model '{}'", source);
  }
  auto weights = read_weights();
  auto fill = [](onnx::TensorProto& t, const HostTensor& h) {
    t.clear_float_data();
    t.clear_raw_data();
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    t.set_data_type(onnx::TensorProto::FLOAT);
    t.set_raw_data(std::string(static_cast<const char*>(h.data()), h.bytes()));
  };
  std::set<std::string> done;
  for (auto& t : *proto.mutable_graph()->mutable_initializer())
    if (auto it = weights.find(t.name()); it != weights.end()) fill(t, it->second), done.insert(t.name());
  for (auto& n : *proto.mutable_graph()->mutable_node())  // Constant nodes the importer made initializers
    if (n.op_type() == "Constant" && n.output_size() == 1)
      if (auto it = weights.find(n.output(0)); it != weights.end())
        for (auto& a : *n.mutable_attribute())
          if (a.name() == "value") fill(*a.mutable_t(), it->second), done.insert(n.output(0));
  for (auto& [name, t] : weights)
    if (!done.count(name)) fail("train: weight '{}' is neither an initializer nor a Constant of '{}'", name, source);
  std::ofstream f(path, std::ios::binary);
  if (!f || !proto.SerializeToOstream(&f)) fail("train: cannot write '{}'", path);
}

}  // namespace cldl::graph
