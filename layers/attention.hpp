// Scaled-dot-product attention (ONNX Attention, opsets 23/24 semantics) and the KV cache for
// incremental decoding. Two algorithms:
//   fused  online softmax, the Sq x Skv scores never reach global memory. Two kernels
//          (kernels/attention.cl): `attention_fused` tiles K/V through local memory with one query row
//          per work-item (GPUs, and decode steps with few rows); `attention_blocked` (CPUs) puts 16
//          query rows across the lanes of a vector against blocks of keys, so the online softmax
//          needs no horizontal reductions, with Q.K^T and P.V register-blocked like a GEMM;
//   plain  GEMM (layers/gemm.hpp) -> masked row softmax -> GEMM, scores in the workspace.
// `automatic` picks fused whenever it covers the configuration and says so in algorithm(); the plain
// path is only taken when asked for or when the fused kernel cannot serve (head size above 256, or the
// ONNX qk_matmul_output requested), logged at info level with the reason in algorithm().
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "layers/gemm.hpp"
#include "layers/op.hpp"

namespace cldl {

enum class AttentionLayout {
  bhsd,  // Q [B, Hq, Sq, D], K [B, Hkv, C, D], V [B, Hkv, C, Dv], Y [B, Hq, Sq, Dv] (C = kv_capacity)
  bshd,  // ONNX 3-D: Q [B, Sq, Hq*D], K [B, Skv, Hkv*D], V [B, Skv, Hkv*Dv], Y [B, Sq, Hq*Dv]
};
enum class AttentionMask { none, additive /* f32, added to the scores */, boolean /* u8/bool, true = attend */ };
enum class AttentionKvLens { none, i32, i64 };  // per-batch valid kv length (padding mask, static cache)
enum class AttentionAlgo { automatic, fused, plain };

struct AttentionConfig {
  int64_t batch = 1, q_heads = 1, kv_heads = 0 /* 0 = q_heads */;
  int64_t q_len = 1, kv_len = 1;  // kv_len: keys attended (with kv lengths: the upper bound)
  int64_t head_size = 0, v_head_size = 0 /* 0 = head_size */;
  AttentionLayout layout = AttentionLayout::bhsd;  // of Q and Y, and of K/V unless kv_layout says
  std::optional<AttentionLayout> kv_layout;       // K/V layout when it differs (ONNX 3-D Q with a 4-D cache)
  int64_t kv_capacity = 0;  // sequence extent of the K/V buffers (a KV cache's max_len); 0 = kv_len
  bool causal = false;
  // Causal: query i sees key j when j <= i + causal_offset (ONNX: the past length, 0 without a cache).
  int64_t causal_offset = 0;
  // Causal offset per batch = kv_lens[b] - q_len (ONNX nonpad_kv_seqlen without past, a static cache).
  bool causal_offset_from_lens = false;
  AttentionMask mask = AttentionMask::none;
  // Broadcastable to [B, Hq, Sq, Skv] (rank 2..4, right-aligned); the last dim may be shorter than
  // kv_len, the missing columns are masked out (ONNX pads with -inf / false).
  Shape mask_shape;
  AttentionKvLens kv_lens = AttentionKvLens::none;
  float scale = 0.0f;    // 0 = 1 / sqrt(head_size)
  float softcap = 0.0f;  // > 0: scores = softcap * tanh(scores / softcap), before the mask
  AttentionAlgo algo = AttentionAlgo::automatic;
  // ONNX qk_matmul_output as a second output [B, Hq, Sq, Skv]: -1 none, 0 scale*QK, 1 after softcap,
  // 2 after softcap + mask, 3 softmax. Needs the plain algorithm (the fused one never stores scores).
  int qk_output_mode = -1;
  // Fused kernel tiles (0 = the device heuristic); set by the tuner or `cldl bench --set block_m=..`.
  int block_m = 0, block_n = 0, vec = 0;
  int use_local = -1;  // K/V tiles through local memory: -1 = default (yes), 0 = read global memory directly
  // Fused algorithm on the blocked kernel (attention_blocked, 16 query rows across vector lanes, rg groups of them per work-item): -1 auto
  // (CPU devices, when a kv head has at least 8 query rows), 0 never, 1 always.
  int blocked = -1;
  // The blocked kernel's register blocks (0 = the device heuristic): keys per Q.K^T pass (kb), output
  // dims per P.V pass (cb), keys per block (bkv, a multiple of kb); set by the tuner or `--set kb=..`.
  int kb = 0, cb = 0, bkv = 0;
  // The blocked kernel's row groups: 16 * rg query rows per work-item, sharing each broadcast K/V value
  // (0 = the device heuristic, 1 or 2).
  int rg = 0;
  // The tile kernel over chunks of the keys, merged by a second kernel (flash-decoding): 0 auto (devices
  // other than CPUs, when a kv head has fewer query rows than a work-group, e.g. a decode step, and the
  // work-groups would not fill the compute units), 1 never, N >= 2 that many chunks. Needs a workspace
  // for the chunk states.
  int kv_splits = 0;


  int64_t eff_kv_heads() const { return kv_heads ? kv_heads : q_heads; }
  int64_t eff_v_head_size() const { return v_head_size ? v_head_size : head_size; }
  int64_t eff_capacity() const { return kv_capacity ? kv_capacity : kv_len; }
  AttentionLayout eff_kv_layout() const { return kv_layout ? *kv_layout : layout; }
  float eff_scale() const;
  // 4*B*Hq*Sq*Skv*D-style count (QK and PV), halved for causal self-attention.
  double flops() const;
};

// Inputs: Q, K, V, [mask if cfg.mask != none], [kv_lens if cfg.kv_lens != none]; outputs: Y, and
// qk_matmul_output when cfg.qk_output_mode >= 0.
// Rows whose every key is masked give zeros (ONNX's reference yields NaN there).
class Attention : public Op {
 public:
  // Checks the config and, when given, the input shapes; returns Y's shape.
  static Shape validate(const AttentionConfig& cfg, std::span<const Shape> inputs = {});
  static std::unique_ptr<Attention> create(Context& ctx, int device, const AttentionConfig& cfg);
  std::string_view type() const override { return "Attention"; }
  std::string algorithm() const override { return algorithm_; }
  size_t workspace_bytes() const override;
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;
  const AttentionConfig& config() const { return cfg_; }
  bool fused() const { return fused_; }
  bool blocked() const { return blocked_; }
  int kv_splits() const { return splits_; }  // chunks of the keys the tile kernel covers (1: not split)
  // The tile kernel's key chunks for `cfg` at block_m rows per work-group and block_n keys per tile:
  // {chunks, keys per chunk} ({1, 0}: not split). cfg.kv_splits when set, else the device heuristic.
  static std::pair<int, int> key_chunks(const DeviceInfo& info, const AttentionConfig& cfg, size_t block_m,
                                        size_t block_n);
  // The device heuristic for the blocked kernel on `cfg` (its tuning fields ignored): whether the automatic
  // choice takes it, and its row groups and register blocks. create() and the tuner's start point use it.
  struct BlockedDefaults {
    bool use;
    int rg, kb, cb, bkv;
  };
  static BlockedDefaults blocked_defaults(const DeviceInfo& info, const AttentionConfig& cfg);

 private:
  Attention(Context& ctx, int device, AttentionConfig cfg) : ctx_(&ctx), device_(device), cfg_(std::move(cfg)) {}
  Context* ctx_;
  int device_;
  AttentionConfig cfg_;
  std::string algorithm_;
  bool fused_ = true;
  bool blocked_ = false;  // fused on attention_blocked
  size_t block_m_ = 32;   // attention_fused: rows per work-group; attention_blocked: rows per work-item (16 * rg)
  int splits_ = 1;        // attention_fused: chunks of the keys (> 1: SPLIT_KV, then attention_combine)
  int chunk_ = 0;         // keys per chunk
  cl::Kernel kernel_;  // fused kernel, or the plain path's softmax
  cl::Kernel combine_;  // SPLIT_KV: attention_combine
  cl::Kernel qk_out_;  // plain path: qk_matmul_output
  std::unique_ptr<Gemm> qk_, pv_;
};

// The mask's element strides for batch, q head and query row (0 on an axis it broadcasts) and its columns: cfg's
// mask_shape right-aligned to [B, Hq, Sq, cols] (the kernels of attention.cl and attention_backward.cl read it so).
struct AttentionMaskLayout {
  int64_t sb, sh, ss, cols;
};
AttentionMaskLayout attention_mask_layout(const AttentionConfig& cfg);

// ONNX Attention (opset 23/24) node -> AttentionConfig, for the importer. With past_key the importer
// builds present_key/value with a KvCache of max_len = past + new (append past, then K/V with
// `layout`) and feeds its keys()/values() as K and V; the config already says kv_layout = bhsd and
// kv_capacity = past + new for that case. Masks: bool -> boolean, float -> additive.
struct OnnxAttentionNode {
  Shape q, k, v;                      // as given (3-D [B, S, H*D] or 4-D [B, H, S, D])
  std::optional<Shape> attn_mask;     // and its element type
  bool attn_mask_bool = false;
  std::optional<Shape> past_key;      // [B, Hkv, P, D]
  bool nonpad_kv_seqlen = false;      // opset 24 input 6 (int64 [B])
  int64_t q_num_heads = 0, kv_num_heads = 0;  // attributes (needed for 3-D inputs)
  bool is_causal = false;
  std::optional<float> scale;
  float softcap = 0.0f;
  int qk_matmul_output_mode = -1;     // -1 when the node has no 4th output
};
AttentionConfig onnx_attention_config(const OnnxAttentionNode& node);

// Preallocated K/V cache [B, Hkv, max_len, D] (and [.., Dv] for V) plus a device int32 [B] of current
// lengths, for incremental decoding. Attend over it with an Attention whose config has
// kv_len = kv_capacity = max_len, kv_lens = i32, and (causal) causal_offset_from_lens = true: the kernel
// then reads keys [0, length) only.
class KvCache {
 public:
  KvCache(Context& ctx, int device, int64_t batch, int64_t kv_heads, int64_t max_len, int64_t head_size,
          int64_t v_head_size = 0);
  // Appends k_new [B, Hkv, S, D] and v_new [B, Hkv, S, Dv] (packed; with layout bshd: [B, S, Hkv*D])
  // at the current length.
  void append(const Tensor& k_new, const Tensor& v_new, ExecutionContext& ec,
              AttentionLayout layout = AttentionLayout::bhsd);
  void reset() { length_ = 0; }
  int64_t length() const { return length_; }
  int64_t max_len() const { return max_len_; }
  const Tensor& keys() const { return k_; }
  const Tensor& values() const { return v_; }
  const Tensor& lengths() const { return lens_; }  // i32 [B], updated on the device by append
  // The Attention config for `q_len` new queries over this cache.
  AttentionConfig attention_config(int64_t q_heads, int64_t q_len, bool causal = true) const;

 private:
  int64_t batch_, heads_, max_len_, d_, dv_, length_ = 0;
  Tensor k_, v_, lens_;
  cl::Kernel append_;
  std::mutex launch_mutex_;
};

}  // namespace cldl
