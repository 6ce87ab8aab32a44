// Training a model (issue 28): one training graph made from the model, a loss and an optimizer, run step by
// step on batches fed from host arrays, the weights and the optimizer states staying on the device.
//
// The training graph: the model's graph with every float initializer turned into an input (the weights), Conv
// nodes reading them as ConvDynamic (autodiff.hpp), then the loss on the chosen output (cross_entropy:
// SoftmaxCrossEntropyLoss over the output's last axis with int64 class ids; mse: the mean of the squared
// differences), a Gradient node (ai.onnx.preview.training) of the loss over every weight, and the optimizer
// update (Momentum for SGD with momentum / Nesterov, or Adam) whose outputs are the new weights and states. Each
// weight, state and step count lives in two device buffers: a step of even parity reads the first and writes the
// second, an odd one the reverse, through two sessions bound once; the steps of an epoch are enqueued without the
// host waiting for them (only for the run two steps back before writing the next batch into its session), each
// loss goes to its element of a device array read once at the end of the epoch. The weights never leave the
// device between steps.
//
// Data parallel (TrainOptions::devices, two or more): each device holds its own copy of the weights, states and
// step count, and takes a contiguous shard of every batch (sizes as equal as possible; a device whose shard is
// empty on a small last batch skips the step's gradient). The training graph is then split in two: a gradient
// graph per device (the loss scaled by shard / batch, so that the shards' gradients sum to the full batch's mean
// gradient, and the Gradient node) and an update graph per device (a Sum of every device's gradient buffer, read
// in place through the one context's buffers and events, then the optimizer). Every device runs the same update
// on the same summed gradient, so the copies stay equal without copying weights back and forth.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/graph.hpp"
#include "runtime/context.hpp"

namespace cldl::graph {

class CompiledModel;

enum class TrainLoss { cross_entropy, mse };
enum class TrainOptimizer { sgd, adam, adamw };  // adamw: weight_decay decoupled (torch.optim.AdamW)
enum class LrSchedule { constant, cosine };
// How the devices of TrainOptions::devices share the work. data: each takes a shard of every batch (see above).
// layers: the model's LSTM / GRU layers are split into contiguous groups, one per device in the list's order (the
// other nodes on the first device), and each layer's forward and backward run in time chunks
// (models/rnn_time_chunks.hpp): the forward a wavefront over the devices, the backward a wavefront in reverse.
enum class TrainParallel { data, layers };

struct TrainOptions {
  std::string input;   // the model input fed with the data; empty: the model's only (first) input
  std::string output;  // the model output the loss reads; empty: the first output
  TrainLoss loss = TrainLoss::cross_entropy;
  TrainOptimizer optimizer = TrainOptimizer::sgd;
  float lr = 0.01f;
  float momentum = 0.9f;  // sgd (PyTorch's SGD momentum with dampening 0); 0 = plain SGD
  bool nesterov = false;  // sgd
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;  // adam
  float weight_decay = 0.0f;  // L2 added to the gradient (PyTorch's weight_decay of SGD and Adam); adamw: decoupled
  int64_t batch = 32;
  int64_t batch_axis = 0;  // of the input; the labels' and the output's: labels_batch_axis()
  bool shuffle = true;     // a permutation per epoch from `seed`
  uint64_t seed = 0;
  int device = 0;
  // Data parallel: the context's devices that share each batch (indices, no repeats). Empty: `device` alone.
  std::vector<int> devices = {};
  TrainParallel parallel = TrainParallel::data;
  // layers: time chunks per recurrent layer (0: 8 over several devices, none on one; at most the steps).
  int64_t time_chunks = 0;
  // The learning rate of step s (0-based, counted over the trainer's life): lr_at(). cosine decays from lr to
  // min_lr over total_steps (then stays at min_lr); warmup > 0 scales the first steps by (s + 1) / warmup, as
  // LambdaLR(min(1, (s + 1) / W) * 0.5 (1 + cos(pi s / T))) does in PyTorch when min_lr is 0.
  LrSchedule schedule = LrSchedule::constant;
  int64_t warmup = 0;
  int64_t total_steps = 0;  // cosine: required (> 0)
  float min_lr = 0.0f;
  // > 0: every step's gradients scaled by min(1, clip_norm / (||g|| + 1e-6)), ||g|| the L2 norm over all the
  // weights' gradients together (torch.nn.utils.clip_grad_norm_), before the optimizer.
  float clip_norm = 0.0f;
};

// The learning rate of step `step` (0-based) under opts' schedule.
float lr_at(const TrainOptions& opts, int64_t step);

// The options as `cldl train` (tools/cldl/cmd_train.cpp) and Python's cldl.Trainer (python/cldl_module.cpp) take
// them, by name: one parser and one set of checks for both. loss: cross_entropy | mse; optimizer: sgd | adam |
// adamw; lr unset: 0.01 with sgd, 0.001 with adam / adamw. Errors name the option and its choices or range.
struct TrainOptionNames {
  std::string input, output;
  std::string loss = "cross_entropy", optimizer = "sgd";
  std::optional<float> lr;
  float momentum = 0.9f, weight_decay = 0.0f;
  bool nesterov = false, shuffle = true;
  int64_t batch = 32, batch_axis = 0;
  uint64_t seed = 0;
  std::string schedule = "constant";  // constant | cosine
  std::string parallel = "data";      // data | layers
  int64_t time_chunks = 0;
  int64_t warmup = 0, total_steps = 0;
  float min_lr = 0.0f, clip_norm = 0.0f;
};
TrainOptions parse_train_options(const TrainOptionNames& names);

// The labels' batch axis (and the loss output's): the batch axis when the labels have more axes than it, else
// axis 0. So time-major data [T, B, ...] (batch axis 1) trains with labels [T, B] (one per step, e.g. a language
// model) or [B] (one per sequence, e.g. a classifier of the last hidden state). A sample count that differs is an
// error naming both axes.
int64_t labels_batch_axis(int64_t batch_axis, size_t labels_rank);

// Per step (1-based), its loss; per epoch, the mean of its steps' losses weighted by their batch sizes.
struct EpochResult {
  std::vector<float> step_losses;
  double mean_loss = 0;
  double seconds = 0;
};

class Trainer {
 public:
  // `model`: an imported graph (import_onnx_file). Errors name the option, the input or the output at fault.
  Trainer(std::shared_ptr<Context> ctx, Graph model, TrainOptions opts);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The trained weights (float initializers of the model), in the model's order.
  const std::vector<std::string>& weights() const;
  // The plans of the training graph made so far, one per batch shape (their nodes and devices: what the passes
  // made of the graph, e.g. the time chunks of layer parallel); data parallel: the first device's gradient plans.
  std::vector<std::shared_ptr<CompiledModel>> plans() const;
  // One step on a batch: x of the input's shape with any batch extent, labels (cross_entropy: int64 class ids
  // of the output's shape without its last axis; mse: the output's shape). Returns the batch's loss.
  float step(const HostTensor& x, const HostTensor& labels);
  // One pass over the data in batches along batch_axis (the last one smaller when the batch does not divide
  // the count), shuffled when opts.shuffle; `progress(done, total, NaN)` after enqueueing each step (the losses
  // are read at the end).
  EpochResult epoch(const HostTensor& x, const HostTensor& labels,
                    const std::function<void(int64_t, int64_t, float)>& progress = {});
  int64_t steps_done() const { return step_; }
  // The current weights, read back from the device (data parallel: from the copy of the `copy`-th device of the
  // list; every copy holds the same).
  std::map<std::string, HostTensor> read_weights(size_t copy = 0);
  // The model file `source` (ONNX) with each trained initializer's data replaced by the current weights, written
  // to `path`: the same graph, nothing else changed.
  void save_onnx(const std::string& source, const std::string& path);

 private:
  void enqueue_step(const HostTensor& x, const HostTensor& labels, int64_t slot);
  // Data parallel: the rows `rows` of x and labels along the batch axis as one step; returns how many devices
  // took part (the first ones).
  size_t enqueue_step_dp(const HostTensor& x, const HostTensor& labels, const std::vector<int64_t>& rows,
                         int64_t slot);
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t step_ = 0;
};

// Rows `index` of `t` along `axis` (a batch of the data), in that order.
HostTensor take_along(const HostTensor& t, int64_t axis, const std::vector<int64_t>& index);

}  // namespace cldl::graph
