// LSTM and GRU training (kernels/rnn_backward.cl): RnnTrainForward runs an ONNX LSTM / GRU whose weights are
// read at run time (a training graph's weights change every step; RnnLayer re-lays them out at create) and
// saves what the backward needs; RnnBackward runs backward through time from it.
//
// Forward: x W^T for all steps as one GEMM, then per step a GEMM per direction (R h of the batch: [B, H] x
// [H, G], R transposed once per call) and one launch for the gates and the states of both directions. Saved S
// [D, T * B, G + 2H] (rows in X's order): per step the gate activations, the hidden state the step read, and the
// cell state it read (LSTM) or Rh h + Rbh (GRU). Backward, per step from the last: a GEMM per direction (dGR of
// the later step times R: the gradient reaching this step's output state), then one fused launch (gate
// derivatives and the cell / hidden state gradient carried one step back); after the loop dW = dG^T X and
// dR = dGR^T H_prev as one GEMM each over all T * B rows (batched over directions), dX = dG W one GEMM per
// direction, the bias gradients as one GEMM each (ones x dG), the initial states' gradients from step 0.
//
// Supported: LSTM and GRU (linear_before_reset 1, PyTorch's GRU, and 0: per step r first, then Rh (r h) as a
// GEMM, forward and backward), forward / reverse / bidirectional, layout 0 and 1, initial_h / initial_c, the
// default activations, no clip, no input_forget, no peepholes, full sequences.
#pragma once
#include <memory>
#include <string>

#include "layers/gemm.hpp"
#include "layers/op.hpp"

namespace cldl {

struct RnnTrainConfig {
  bool lstm = true;  // else GRU
  int64_t seq_length = 0, batch = 0, input_size = 0, hidden_size = 0;
  int dirs = 1;          // 2: bidirectional
  bool reverse = false;  // direction "reverse" (dirs 1)
  int layout = 0;        // 0: X [T, B, I], Y [T, D, B, H], states [D, B, H]; 1: X [B, T, I], Y [B, T, D, H], states [B, D, H]
  bool linear_before_reset = true;  // GRU
  bool bias = false;                // input B [D, 2G]
  int64_t gates() const { return (lstm ? 4 : 3) * hidden_size; }  // G
  int64_t rows() const { return seq_length * batch; }
  Shape x() const;
  Shape y() const;
  Shape state() const;
  Shape w() const { return Shape{dirs, gates(), input_size}; }
  Shape r() const { return Shape{dirs, gates(), hidden_size}; }
  Shape b() const { return Shape{dirs, 2 * gates()}; }
  Shape saved() const { return Shape{dirs, rows(), gates() + 2 * hidden_size}; }
  std::string str() const;
};

// Inputs: X, W, R, B (or an empty tensor), initial_h (or empty), initial_c (or empty; LSTM).
// Outputs: Y, Y_h, Y_c (LSTM), each may be empty; S (saved, always).
class RnnTrainForward : public Op {
 public:
  static void validate(const RnnTrainConfig& cfg);
  static std::unique_ptr<RnnTrainForward> create(Context& ctx, int device, const RnnTrainConfig& cfg);
  std::string_view type() const override { return cfg_.lstm ? "LSTMTrain" : "GRUTrain"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;  // x W^T of all steps, R h of one step, R^T, the GEMMs' packing
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  RnnTrainConfig cfg_;
  cl::Kernel init_, step_, transpose_, reset_;
  std::unique_ptr<Gemm> project_, recurrent_, reset_product_;  // reset_*: GRU without linear_before_reset
};

// Inputs: X, W, R, S, dY, dY_h, dY_c (LSTM); the d* may be empty (no gradient reaches that output).
// Outputs: dX, dW, dR, dB, d initial_h, d initial_c (LSTM); each may be empty (not wanted).
class RnnBackward : public Op {
 public:
  static void validate(const RnnTrainConfig& cfg);
  static std::unique_ptr<RnnBackward> create(Context& ctx, int device, const RnnTrainConfig& cfg);
  std::string_view type() const override { return "RNNGrad"; }
  std::string algorithm() const override;
  size_t workspace_bytes() const override;  // dG, dGR (GRU), the carried state, dGR R of a step, ones, packing
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  RnnTrainConfig cfg_;
  cl::Kernel step_, initial_, fill_, reset_;
  std::unique_ptr<Gemm> recurrent_, dw_, dr_, dx_first_, dx_add_, db_, reset_product_, dr_reset_;
};

}  // namespace cldl
