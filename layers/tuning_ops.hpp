// What each op family exposes to the tuner: the database key of a problem, the parameter space, which
// configurations cannot run on a device (checked before anything is built), and how a found
// configuration is applied. One small block per family; the search itself is runtime/tuning.hpp, the
// timing and result checks are `cldl tune` (tools/cldl/cmd_tune.cpp).
//
// Database families: "gemm" (own kernel gemm_tile macros), "clblast_xgemm" (CLBlast's Xgemm
// parameters, one set per device, problem key "single"), "conv" (algorithm choice), "attention"
// (fused kernel tiles), "rnn_step" (RNN / LSTM / GRU step kernels: weight layout, register block,
// work-group shapes; with rows / k-major weights the input projection is a Gemm and uses "gemm").
#pragma once
#include <string>
#include <vector>

#include "layers/attention.hpp"
#include "layers/conv.hpp"
#include "layers/gemm.hpp"
#include "layers/rnn.hpp"
#include "runtime/tuning.hpp"

namespace cldl::tuning {

// ---- gemm: own kernel ----
std::string gemm_problem(const GemmConfig& c);  // "1024x1024x1024 b1 NN" (+ strides when not packed)
Space gemm_space(const DeviceInfo& info, const GemmConfig& c);
std::string gemm_invalid(const DeviceInfo& info, const GemmConfig& c, const Params& p);
Params gemm_params(const GemmOwnParams& resolved);
// Fills the fields of `own` still at auto (0 / -1) from `p`; explicit settings win.
void gemm_apply(const Params& p, GemmOwnParams& own);

// ---- clblast_xgemm: CLBlast's Xgemm kernel (single precision) ----
constexpr const char* kClblastProblem = "single";
Space clblast_space(const DeviceInfo& info);
std::string clblast_invalid(const DeviceInfo& info, const Params& p);
// Sets CLBlast's Xgemm parameters for the device (`p` empty = CLBlast's own defaults, as captured
// before the first override). CLBlast keeps one set per device for the whole process and recompiles
// on the next call after a change, so calls are cheap when nothing changes.
void clblast_apply(const Device& device, const Params& p);
// The parameters CLBlast uses for the device without overrides.
Params clblast_defaults(const Device& device);
// Applies the database's CLBlast entry (or the defaults when tuning is off / no entry); Gemm::create
// calls it for the CLBlast provider.
void clblast_use_database(const Device& device);

// ---- conv: algorithm choice ----
std::string conv_problem(const ConvGeometry& g);  // "n8 c64 64x56x56 k3x3 s1x1 d1x1 p1,1,1,1 g1"
Space conv_space(const ConvConfig& cfg);          // "algo": the applicable ConvAlgo values

// ---- attention: fused kernel choice (blocked / tile) and their knobs ----
std::string attention_problem(const AttentionConfig& c);
Space attention_space(const DeviceInfo& info, const AttentionConfig& c);
std::string attention_invalid(const DeviceInfo& info, const AttentionConfig& c, const Params& p);
void attention_apply(const Params& p, AttentionConfig& c);  // fields still at their defaults only
// The parameters that matter for `p`'s kernel (blocked: none; tile kernel: the tile knobs), so a
// search need not time the same kernel twice.
Params attention_relevant(const Params& p);

// ---- rnn_step: the step kernels of RnnLayer (RnnKernelParams) ----
// "LSTM b32 i512 h512 d1" (+ " lbr" for GRU linear_before_reset). The sequence length is not part of
// the key: the knobs set how one step (and the projection's rows) are cut into work-items, whatever T.
std::string rnn_problem(const RnnConfig& c);
Space rnn_space(const DeviceInfo& info, const RnnConfig& c);
std::string rnn_invalid(const DeviceInfo& info, const RnnConfig& c, const Params& p);
// The resolved knobs of a layer as parameters, mr filled in (the heuristic's rows for `batch` when 0).
Params rnn_params(const RnnKernelParams& resolved, int64_t batch);
void rnn_apply(const Params& p, RnnKernelParams& k);  // fields still at auto (0 / -1) only
// The parameters that matter for `p`'s layout (and batch / hidden size: work-group shapes clamped to
// what a call launches), so a search need not time the same kernel twice.
Params rnn_relevant(const RnnConfig& c, const Params& p);

// ---- problems a model runs (`cldl tune --model`) ----
// While a recorder is set, Gemm / ConvOp / Attention create() append their configs to it.
struct ProblemRecorder {
  std::vector<GemmConfig> gemm;
  std::vector<ConvConfig> conv;
  std::vector<AttentionConfig> attention;
  std::vector<RnnConfig> rnn;
};
void set_recorder(ProblemRecorder* r);  // nullptr = stop recording
void record(const GemmConfig& c);
void record(const ConvConfig& c);
void record(const AttentionConfig& c);
void record(const RnnConfig& c);

}  // namespace cldl::tuning
