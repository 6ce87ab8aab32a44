// RNN, LSTM and GRU in ONNX semantics (one op = one ONNX node: one layer, one or two directions), the
// stacked network API (RnnStack), and the three parallel strategies that schedule them:
// time-step parallel, layer parallel (wavefront) and data parallel, plus the sequential baseline.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "layers/activation.hpp"
#include "layers/gemm.hpp"
#include "layers/op.hpp"

namespace cldl {

namespace detail {
// Scratch buffers and the last completion event of an op's calls: a call's first commands wait for the
// previous call's end, so reused scratch is never overwritten while in use, whatever queues ran it.
struct RnnSchedState {
  std::mutex m;
  std::map<std::string, Tensor> scratch;
  cl::Event last;
  // Wavefront: the stack's weights in one buffer and its per-layer table, built on first use (keyed by
  // device and batch), and its kernels (used under `m` only).
  std::map<std::string, Tensor> wave_consts;
  std::map<std::string, cl::Kernel> kernels;
  Tensor scratch_tensor(Context& ctx, const std::string& key, Shape shape, DType dt, int dev);
};
}  // namespace detail

enum class RnnCell { rnn, lstm, gru };
enum class RnnDirection { forward, reverse, bidirectional };
// How a call is scheduled. All give the same numbers as `sequential` to fp32 rounding.
//  sequential:     one queue; per step one kernel that also computes x_t W^T (no up-front GEMM);
//                  directions and layers one after another.
//  time_parallel:  input projection of all steps (both directions) as one GEMM, then one fused kernel
//                  per step; the two directions of a layer on two queues joined by events.
//  layer_parallel: wavefront: layer l on its own queue (devices round-robin when the context has
//                  several), step chunk c of layer l starts when chunk c of layer l-1 is done. On
//                  several devices, a stack the wavefront kernels run (forward LSTM, tiles layout) is
//                  split into one contiguous group of layers per device instead, each group one
//                  wavefront (T + lag (Lg - 1) launches), group g+1 fed chunk by chunk by group g.
//  data_parallel:  batch split in shards over devices (or queues of one device), weights replicated
//                  once per device, outputs gathered in order.
//  wavefront:      one device, one queue: a stack of forward LSTM layers (tiles weight layout) runs as
//                  T + L - 1 launches, launch w computing step w - l of every layer l with its input
//                  projection fused (kernels/rnn.cl lstm_wave_tile_m*); for launch-bound stacks.
//  automatic:      data_parallel over devices when there are several and the batch allows, else
//                  wavefront for stacks of forward LSTM layers where it applies (RnnWaveParams), else
//                  layer_parallel for stacks of forward layers, else time_parallel.
enum class RnnStrategy { automatic, sequential, time_parallel, layer_parallel, data_parallel, wavefront };
std::string_view to_string(RnnStrategy s);
// "auto", "sequential", "time", "layer", "data", "wave" (long names too: time_parallel, ..., wavefront)
RnnStrategy parse_rnn_strategy(std::string_view s);
std::string_view to_string(RnnCell c);               // "RNN", "LSTM", "GRU" (the ONNX op names)

// Knobs of the step kernels and the LSTM tile projection (kernels/rnn.cl). Fields left at 0 / -1 come
// from the tuning database (family "rnn_step", key tuning::rnn_problem: cell, batch, input, hidden,
// directions), else from the device heuristic; CLDL_RNN_WEIGHT_LAYOUT and CLDL_RNN_MR override both
// (for measurements). Every setting is correct on any device; only the speed changes.
struct RnnKernelParams {
  int layout = -1;   // weights: 0 ONNX rows, 1 k-major, 2 gate-interleaved tiles (LSTM only; GRU / RNN use rows)
  int mr = 0;        // tiles: batch rows per work-item of a step, 1, 2 or 4 (0: by the batch of each call)
  int rg = 0;        // tiles: row groups of mr rows per work-item of a step, 1..kRnnMaxRowGroups, run k-block by
                     // k-block (0: rnn_step_row_groups for each call)
  int kb = 0;        // tiles: k-block of a step's products, the k each row group takes before the next (0: 64,
                     // one block where the step fuses the input projection)
  int wg_m = 0;      // tiles: work-items along the batch per work-group of a step (0: 8; at most the call's)
  int wg_n = 0;      // tiles: tiles per work-group of a step (0: 1)
  int tw = 0;        // tiles: tile width, hidden units per tile and vector width, 8 or 16 (0: 16 where the
                     // device's preferred float vector width is 16 or more (AVX-512), else 8)
  int pmr = 0;       // tiles: rows per work-item of the projection, RNN_PMR 1, 2, 4 or 8 (0: 4)
  int prg = 0;       // tiles: row groups of pmr rows per work-item of the projection, 1..kRnnMaxRowGroups, in
                     // k-blocks of kb (0: rnn_step_row_groups over the call's rows)
  int proj_wg = 0;   // tiles: work-items along the rows per work-group of the projection (0: 16)
  int launch = 0;    // tiles, LSTM: 1 = one launch per step (tiles and row blocks over the work-items), 2 = one
                     // launch for all the call's steps (lstm_steps_tile_m*: a batch shard per work-item through
                     // every step); 0: 2 on CPU devices when the batch gives every compute unit a shard, else 1
  int local = 0;     // rows / k-major: work-group size along the hidden units (0: 64)
  int bt = 0;        // rows / k-major: batch items per work-item, RNN_BT 1, 2, 4 or 8 (0: 4)
};
// The heuristic rows per work-item of a tile step over `nb` batch items (RnnKernelParams::mr = 0).
int rnn_step_rows(int64_t nb);
// Row groups per work-item of a tile step (kernels/rnn.cl RNN_RGMAX private accumulators at most).
inline constexpr int kRnnMaxRowGroups = 8;
// The default k-block of the tile steps (RnnKernelParams::kb, RnnWaveParams::kb = 0).
inline constexpr int kRnnDefaultKBlock = 64;
// The heuristic row groups per work-item (RnnKernelParams::rg = 0) for `groups` row groups of a step over
// `tiles` tiles on `compute_units` compute units: as many as fit while the step keeps two work-items per
// compute unit, then evened out over the work-items (10 groups: 2 x 5, not 8 + 2 with 6 computed for nothing).
int rnn_step_row_groups(int64_t groups, int64_t tiles, int64_t compute_units);

struct RnnConfig {
  RnnCell cell = RnnCell::lstm;
  int64_t seq_length = 0, batch = 0, input_size = 0, hidden_size = 0;
  RnnDirection direction = RnnDirection::forward;
  int layout = 0;  // 0: X [T, B, I], Y [T, D, B, H]; 1: X [B, T, I], Y [B, T, D, H]
  // Per direction f (RNN), f, g (GRU) or f, g, h (LSTM), directions concatenated as in ONNX;
  // empty = ONNX defaults (Tanh; Sigmoid, Tanh; Sigmoid, Tanh, Tanh).
  std::vector<Activation> activations;
  float clip = 0.0f;  // > 0: gate pre-activations clipped to [-clip, clip]
  bool input_forget = false;         // LSTM: f = 1 - i
  bool linear_before_reset = false;  // GRU
  RnnKernelParams kernel;            // explicit settings win over the tuning database
  int gates() const { return cell == RnnCell::lstm ? 4 : cell == RnnCell::gru ? 3 : 1; }
  int dirs() const { return direction == RnnDirection::bidirectional ? 2 : 1; }
  int acts_per_dir() const { return cell == RnnCell::lstm ? 3 : cell == RnnCell::gru ? 2 : 1; }
  // The activations list with defaults filled in (acts_per_dir() * dirs() entries).
  std::vector<Activation> resolved_activations() const;
  double flops() const;  // multiply-adds x 2 of one inference (projection + recurrence)
};

// ONNX activation names + activation_alpha/beta lists to Activations. Alpha/beta values are consumed
// in order by the activations that take them (as ONNX Runtime does).
std::vector<Activation> rnn_activations_from_onnx(const std::vector<std::string>& names,
                                                  const std::vector<float>& alphas, const std::vector<float>& betas);

// Weights in ONNX layouts, on the host; re-laid out and uploaded once at create.
struct RnnWeights {
  HostTensor W;                 // [D, G*H, I]
  HostTensor R;                 // [D, G*H, H]
  std::optional<HostTensor> B;  // [D, 2*G*H] (Wb then Rb); absent = 0
  std::optional<HostTensor> P;  // LSTM peepholes [D, 3*H] (i, o, f); absent = 0
};

// Device views of one run of one layer: every tensor is indexed with explicit element strides, so the
// same kernels serve layout 0 and 1, batch shards and the concatenated inputs of stacked layers.
struct RnnLayerIO {
  int64_t B = 0;  // batch extent of these views
  Tensor x;
  int64_t x_st = 0, x_sb = 0;  // rows of I contiguous floats
  Tensor lens;                 // i32 [B], always present (the scheduler fills T when absent)
  Tensor h0, c0;               // optional
  int64_t h0_sd = 0, h0_sb = 0;
  Tensor y;  // optional
  int64_t y_st = 0, y_sb = 0, y_sd = 0;
  Tensor yh, yc;  // optional
  int64_t yh_sd = 0, yh_sb = 0;
  Tensor ws;  // RnnLayer::workspace_bytes(B)
};

// One ONNX RNN / LSTM / GRU node.
// enqueue inputs: X, sequence_lens (i32 [B]), initial_h, initial_c; outputs: Y, Y_h, Y_c. Absent ones
// are default-constructed Tensors (or the spans shorter). The values of sequence_lens must lie in
// [0, T]; the kernels clamp them for memory safety, `check_sequence_lens` reports violations.
class RnnLayer : public Op {
 public:
  // Returns the shapes of Y, Y_h, Y_c; with weights, checks their shapes too.
  static std::vector<Shape> validate(const RnnConfig& cfg, const RnnWeights* w = nullptr);
  static void check_sequence_lens(const RnnConfig& cfg, std::span<const int32_t> lens);
  static std::unique_ptr<RnnLayer> create(Context& ctx, int device, const RnnConfig& cfg, const RnnWeights& w);

  std::string_view type() const override { return to_string(cfg_.cell); }
  std::string algorithm() const override { return algorithm_; }
  size_t workspace_bytes() const override { return workspace_bytes(cfg_.batch); }
  size_t workspace_bytes(int64_t batch_extent) const;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  void set_strategy(RnnStrategy s) { strategy_ = s; }
  const RnnConfig& config() const { return cfg_; }
  Context& context() const { return *ctx_; }
  int device() const { return device_; }
  // The step-kernel knobs in use on device `dev` (-1: the layer's own device), every field resolved
  // except mr = 0 (rows per work-item by each call's batch); whether a database entry supplied them.
  const RnnKernelParams& kernel_params(int dev = -1) const { return replicas_.at(dev < 0 ? device_ : dev).kp; }
  bool kernel_params_tuned(int dev = -1) const { return replicas_.at(dev < 0 ? device_ : dev).tuned; }

  // Scheduling building blocks (used by the strategies). `dev` is the device of ec.queue; weights are
  // replicated to it on first use. Steps [s0, s1) of batch items [b0, b0 + nb).
  void enqueue_projection(int dev, const RnnLayerIO& io, int64_t b0, int64_t nb, int64_t s0, int64_t s1,
                          ExecutionContext& ec);
  void enqueue_steps(int dev, const RnnLayerIO& io, int d, int64_t b0, int64_t nb, int64_t s0, int64_t s1,
                     bool fuse_input, ExecutionContext& ec);
  void replicate(int dev);  // weights onto device `dev` (once)
  // Whether a call over nb batch items on device `dev` runs all its steps in one launch (LSTM tiles,
  // RnnKernelParams::launch: the knob, else the CPU heuristic); fused_input: the step computes the input
  // projection itself (sequential), so W counts too.
  bool steps_in_one_launch(int dev, int64_t nb, bool fused_input = false) {
    return one_launch_shards(dev, nb, fused_input) > 0;
  }
  // The batch shards (work-items) of that one launch; 0 where the call runs one launch per step.
  int64_t one_launch_shards(int dev, int64_t nb, bool fused_input = false);
  // The wavefront strategy's view of direction 0 on device `dev`: the gate-interleaved tiles of W and R,
  // the projection bias and the peepholes. All invalid when that replica does not use the tiles layout.
  struct TileWeights {
    Tensor W, RT, bx, P;
    int64_t w_elems = 0, rt_elems = 0;
    int tw = 0;  // tile width (kernels/rnn.cl RNN_TW)
  };
  TileWeights tile_weights(int dev);

 private:
  std::string algorithm_;
  RnnLayer(Context& ctx, int device, RnnConfig cfg) : ctx_(&ctx), device_(device), cfg_(std::move(cfg)) {}
  struct Replica {
    Tensor W, bx;                      // all directions: [D*G*H, I], [D*G*H]
    std::vector<Tensor> RT, rbh, P;    // per direction
    bool kmajor = false;               // weight layout (kernels/rnn.cl RNN_KMAJOR)
    bool tiles = false;                // gate-interleaved tiles + register-blocked kernels (*_tile)
    cl::Kernel step, gates, project;
    cl::Kernel tile_steps[3];          // tiles: step kernels with 1, 2, 4 batch rows per work-item
    cl::Kernel tile_all[3];            // tiles: the all-steps kernels (launch 2), 1, 2, 4 rows per row group
    RnnKernelParams kp;                // resolved knobs (layout, work-group shapes, ...)
    bool tuned = false;                // kp came (partly) from the tuning database
    std::map<std::string, std::unique_ptr<Gemm>> gemms;
  };
  Replica& replica(int dev);
  Context* ctx_;
  int device_;
  RnnConfig cfg_;
  RnnStrategy strategy_ = RnnStrategy::automatic;
  // Host weights kept for replication to other devices.
  std::vector<float> W_, R_, bx_, rbh_, P_;  // W_, R_ in ONNX layout
  std::map<int, Replica> replicas_;
  std::vector<Activation> acts_;
  std::unique_ptr<detail::RnnSchedState> sched_;
};

// Knobs of the wavefront strategy (kernels/rnn.cl lstm_wave_tile_m*); 0 = the heuristic default
// (resolved()): the tuning database may fill them later.
struct RnnWaveParams {
  int mr = 0;          // batch rows per work-item: 1, 2 or 4 (heuristic: 4 from batch 8, 2 from 2, else 1)
  int rg = 0;          // row groups per work-item, k-blocked (heuristic: rnn_step_row_groups)
  int kb = 0;          // k-block of the products (heuristic: 64)
  int wg_m = 0;        // work-items along the batch per work-group (heuristic: up to 8)
  int lag = 0;          // steps between layers: 1 = input projection fused into each step (W streamed per
                       // step); K > 1 = projection GEMM per K-step chunk, T + K (L - 1) waves (heuristic:
                       // 16 below batch 16 or for one layer, else 1)
  int auto_max_batch = 0;  // `auto` picks wavefront up to this batch (heuristic: no limit)
  RnnWaveParams resolved(int64_t batch, size_t layers) const;
};

struct RnnRunOptions {
  RnnStrategy strategy = RnnStrategy::automatic;
  RnnWaveParams wave;  // wavefront knobs
  int64_t chunk = 0;   // layer parallel: steps per event (0 = about T/8; between wavefront groups: the lag, or T/8 at lag 1)
  int shards = 0;      // data parallel: batch shards (0 = devices of the context, at least 2)
};

// Stacked layers: layer l+1 reads layer l's Y with its directions concatenated ([T, B, D*H]).
// Layer 0 reads X in its config's layout; Y is the last layer's Y (ONNX layout); Y_h / Y_c per layer.
struct RnnStackIO {
  Tensor x, lens;                   // lens optional (i32 [B])
  std::vector<Tensor> h0, c0;       // per layer, optional (empty vector or invalid tensors)
  Tensor y;                         // optional
  std::vector<Tensor> yh, yc;       // per layer, optional
};

class RnnStack {
 public:
  // Layers share seq_length, batch and layout; layer l > 0 has input_size = D(l-1) * H(l-1).
  static std::unique_ptr<RnnStack> create(Context& ctx, int device, const std::vector<RnnConfig>& layers,
                                          const std::vector<RnnWeights>& weights);
  void enqueue(const RnnStackIO& io, const RnnRunOptions& opts, ExecutionContext& ec);
  size_t size() const { return layers_.size(); }
  RnnLayer& layer(size_t i) { return *layers_[i]; }
  // What the last enqueue did ("layer_parallel: 4 layers on 2 devices, chunk 13").
  const std::string& last_schedule() const { return schedule_; }
  double flops() const;

 private:
  Context* ctx_ = nullptr;
  int device_ = 0;
  std::vector<std::unique_ptr<RnnLayer>> layers_;
  std::string schedule_;
  detail::RnnSchedState sched_;
};

// ONNX interop (serialized protobuf bytes in, so callers need no protobuf headers or libraries).
struct OnnxNodeInfo {
  std::string op_type;
  std::vector<std::string> inputs, outputs;              // node inputs / outputs ("" = skipped)
  std::vector<std::string> graph_inputs, graph_outputs;  // in graph order (test_data_set input_N order)
  std::map<std::string, HostTensor> initializers;
  std::map<std::string, int64_t> ints;
  std::map<std::string, float> floats;
  std::map<std::string, std::string> strings;
  std::map<std::string, std::vector<int64_t>> int_lists;
  std::map<std::string, std::vector<float>> float_lists;
  std::map<std::string, std::vector<std::string>> string_lists;
};
HostTensor onnx_tensor_from_bytes(const std::string& serialized_tensor_proto);
OnnxNodeInfo onnx_single_node_from_bytes(const std::string& serialized_model_proto);
// Attributes of an ONNX RNN / LSTM / GRU node + the shape of X -> RnnConfig.
RnnConfig rnn_config_from_onnx(const OnnxNodeInfo& node, const Shape& x_shape);

namespace detail {
// The scheduler behind RnnLayer::enqueue and RnnStack::enqueue.
std::string run_rnn_layers(Context& ctx, int device, std::span<RnnLayer* const> layers, const RnnStackIO& io,
                           const RnnRunOptions& opts, RnnSchedState& state, ExecutionContext& ec,
                           const Tensor* workspace = nullptr);
}  // namespace detail

}  // namespace cldl
