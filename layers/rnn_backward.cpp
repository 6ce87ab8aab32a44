// RnnTrainForward and RnnBackward: shape checks, the GEMMs and the launches of kernels/rnn_backward.cl (see
// layers/rnn_backward.hpp).
#include "layers/rnn_backward.hpp"

#include "runtime/program_cache.hpp"

namespace cldl {
namespace {

void check(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s) {
  if (!t.valid()) invalid(op, "{} is missing", arg);
  if (t.shape.numel() != s.numel()) invalid(op, "{} has shape {}, expected {}", arg, t.shape.str(), s.str());
  if (t.dtype != DType::f32) invalid(op, "{} has dtype {}, expected float", arg, to_string(t.dtype));
}
void check_optional(std::string_view op, std::string_view arg, const Tensor& t, const Shape& s) {
  if (t.valid()) check(op, arg, t, s);
}
const Tensor& at(std::span<const Tensor> s, size_t i) {
  static const Tensor none;
  return i < s.size() ? s[i] : none;
}
// A buffer for a kernel argument that is not read (its flag is 0): any valid one.
const Tensor& or_any(const Tensor& t, const Tensor& any) { return t.valid() ? t : any; }

void validate_config(std::string_view op, const RnnTrainConfig& c) {
  if (c.seq_length < 1 || c.batch < 1 || c.input_size < 1 || c.hidden_size < 1)
    invalid(op, "sequence length, batch, input size and hidden size must be positive, got {}", c.str());
  if (c.dirs != 1 && c.dirs != 2) invalid(op, "{} directions, expected 1 or 2", c.dirs);
  if (c.layout != 0 && c.layout != 1) invalid(op, "layout {}, expected 0 or 1", c.layout);
  if (!c.lstm && !c.linear_before_reset)
    invalid(op, "GRU with linear_before_reset = 0 is not implemented for training (PyTorch's GRU is 1)");
  if (c.rows() > INT32_MAX / 4 || c.gates() * std::max(c.input_size, c.hidden_size) > INT32_MAX / 4)
    invalid(op, "{} is too large", c.str());
}

// Kernel arguments shared by every kernel but rnn_grad_bias: cell, T, B, H, G, layout, D, rev0.
template <typename... Rest>
void set_common(cl::Kernel& k, const RnnTrainConfig& c, const Rest&... rest) {
  set_args(k, cl_int(c.lstm ? 0 : 1), cl_int(c.seq_length), cl_int(c.batch), cl_int(c.hidden_size), cl_int(c.gates()),
           cl_int(c.layout), cl_int(c.dirs), cl_int(c.reverse), rest...);
}
cl::NDRange units(const RnnTrainConfig& c) {
  return cl::NDRange(size_t(c.hidden_size), size_t(c.batch), size_t(c.dirs));
}
cl_long off(const Tensor& t) { return cl_long(t.offset_elems()); }

}  // namespace

Shape RnnTrainConfig::x() const {
  return layout ? Shape{batch, seq_length, input_size} : Shape{seq_length, batch, input_size};
}
Shape RnnTrainConfig::y() const {
  return layout ? Shape{batch, seq_length, dirs, hidden_size} : Shape{seq_length, dirs, batch, hidden_size};
}
Shape RnnTrainConfig::state() const {
  return layout ? Shape{batch, dirs, hidden_size} : Shape{dirs, batch, hidden_size};
}
std::string RnnTrainConfig::str() const {
  return fmt::format("{} T={} B={} I={} H={} {} layout {}", lstm ? "LSTM" : "GRU", seq_length, batch, input_size,
                     hidden_size, dirs == 2 ? "bidirectional" : reverse ? "reverse" : "forward", layout);
}

void RnnTrainForward::validate(const RnnTrainConfig& cfg) { validate_config(cfg.lstm ? "LSTMTrain" : "GRUTrain", cfg); }

std::unique_ptr<RnnTrainForward> RnnTrainForward::create(Context& ctx, int device, const RnnTrainConfig& cfg) {
  validate(cfg);
  std::unique_ptr<RnnTrainForward> o(new RnnTrainForward());
  o->cfg_ = cfg;
  cl::Program p = ctx.program("rnn_backward.cl", "", device);
  o->init_ = make_kernel(p, "rnn_train_init");
  o->step_ = make_kernel(p, "rnn_train_step");
  // xw[d] = X W[d]^T: [rows, G] per direction.
  GemmConfig g;
  g.M = cfg.rows();
  g.N = cfg.gates();
  g.K = cfg.input_size;
  g.trans_b = true;
  g.batch = cfg.dirs;
  g.stride_a = 0;
  g.stride_b = cfg.gates() * cfg.input_size;
  g.stride_c = cfg.rows() * cfg.gates();
  o->project_ = Gemm::create(ctx, device, g);
  return o;
}

std::string RnnTrainForward::algorithm() const {
  return fmt::format("{}: x W^T of all steps as one GEMM ({}), one launch per step{}", cfg_.str(),
                     project_->algorithm(), cfg_.dirs == 2 ? " for both directions" : "");
}

size_t RnnTrainForward::workspace_bytes() const {
  return size_t(cfg_.dirs * cfg_.rows() * cfg_.gates()) * sizeof(float) + project_->workspace_bytes();
}

void RnnTrainForward::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                              ExecutionContext& ec) {
  const std::string_view op = type();
  const auto& c = cfg_;
  const Tensor &x = at(in, 0), &w = at(in, 1), &r = at(in, 2), &b = at(in, 3), &h0 = at(in, 4), &c0 = at(in, 5);
  check(op, "input X", x, c.x());
  check(op, "input W", w, c.w());
  check(op, "input R", r, c.r());
  if (c.bias) check(op, "input B", b, c.b());
  check_optional(op, "input initial_h", h0, c.state());
  check_optional(op, "input initial_c", c0, c.state());
  const size_t n_states = c.lstm ? 3 : 2;
  if (out.size() != n_states + 1)
    invalid(op, "expects {} outputs (the last: the saved states), got {}", n_states + 1, out.size());
  const Tensor &y = out[0], &yh = out[1], &yc = c.lstm ? out[2] : at(out, 99), &s = out[n_states];
  check_optional(op, "output Y", y, c.y());
  check_optional(op, "output Y_h", yh, c.state());
  check_optional(op, "output Y_c", yc, c.state());
  check(op, "output S (saved states)", s, c.saved());
  const int64_t xw_elems = c.dirs * c.rows() * c.gates();
  if (!ws || ws->bytes() < workspace_bytes()) invalid(op, "workspace of {} bytes is too small", ws ? ws->bytes() : 0);
  Tensor xw = ws->slice_elems(0, xw_elems, Shape{xw_elems});
  Tensor gemm_ws = ws->slice_elems(xw_elems, ws->numel() - xw_elems, Shape{ws->numel() - xw_elems});
  {
    Tensor o[1] = {xw};
    Tensor i[2] = {x, w};
    project_->enqueue(i, o, project_->workspace_bytes() ? &gemm_ws : nullptr, ec);
  }
  std::lock_guard lock(launch_mutex_);
  set_common(init_, c, or_any(h0, x).buffer, off(h0), cl_int(h0.valid()), or_any(c0, x).buffer, off(c0),
             cl_int(c0.valid()), s.buffer, off(s));
  ec.enqueue_kernel(init_, units(c), cl::NullRange, "rnn_train_init");
  for (int64_t t = 0; t < c.seq_length; ++t) {
    set_common(step_, c, cl_int(t), xw.buffer, off(xw), r.buffer, off(r), or_any(b, x).buffer, off(b),
               cl_int(c.bias), s.buffer, off(s), or_any(y, s).buffer, off(y), cl_int(y.valid()),
               or_any(yh, s).buffer, off(yh), cl_int(yh.valid()), or_any(yc, s).buffer, off(yc), cl_int(yc.valid()));
    ec.enqueue_kernel(step_, units(c), cl::NullRange, "rnn_train_step");
  }
}

void RnnBackward::validate(const RnnTrainConfig& cfg) { validate_config("RNNGrad", cfg); }

std::unique_ptr<RnnBackward> RnnBackward::create(Context& ctx, int device, const RnnTrainConfig& cfg) {
  validate(cfg);
  std::unique_ptr<RnnBackward> o(new RnnBackward());
  o->cfg_ = cfg;
  cl::Program p = ctx.program("rnn_backward.cl", "", device);
  o->step_ = make_kernel(p, "rnn_grad_step");
  o->initial_ = make_kernel(p, "rnn_grad_initial");
  o->bias_ = make_kernel(p, "rnn_grad_bias");
  const int64_t G = cfg.gates(), H = cfg.hidden_size, I = cfg.input_size, rows = cfg.rows();
  // dW[d] = dG[d]^T X: [G, I] over all rows.
  GemmConfig w;
  w.M = G;
  w.N = I;
  w.K = rows;
  w.trans_a = true;
  w.batch = cfg.dirs;
  w.stride_a = rows * G;
  w.stride_b = 0;
  w.stride_c = G * I;
  o->dw_ = Gemm::create(ctx, device, w);
  // dR[d] = dGR[d]^T H_prev[d]: H_prev is S's second block (ld G + 2H).
  GemmConfig r = w;
  r.N = H;
  r.ldb = G + 2 * H;
  r.stride_b = rows * (G + 2 * H);
  r.stride_c = G * H;
  o->dr_ = Gemm::create(ctx, device, r);
  // dX = sum_d dG[d] W[d]: [rows, I].
  GemmConfig x;
  x.M = rows;
  x.N = I;
  x.K = G;
  o->dx_first_ = Gemm::create(ctx, device, x);
  if (cfg.dirs == 2) {
    x.beta = 1.0f;
    o->dx_add_ = Gemm::create(ctx, device, x);
  }
  return o;
}

std::string RnnBackward::algorithm() const {
  return fmt::format("{}: one fused launch per step{}, dW and dR as one GEMM each over all {} rows ({}), dX ({})",
                     cfg_.str(), cfg_.dirs == 2 ? " for both directions" : "", cfg_.rows(), dw_->algorithm(),
                     dx_first_->algorithm());
}

size_t RnnBackward::workspace_bytes() const {
  const auto& c = cfg_;
  const size_t dg = size_t(c.dirs * c.rows() * c.gates());
  return (dg * (c.lstm ? 1 : 2) + size_t(c.dirs * c.batch * c.hidden_size)) * sizeof(float);
}

void RnnBackward::enqueue(std::span<const Tensor> in, std::span<const Tensor> out, const Tensor* ws,
                          ExecutionContext& ec) {
  const std::string_view op = type();
  const auto& c = cfg_;
  const Tensor &x = at(in, 0), &w = at(in, 1), &r = at(in, 2), &s = at(in, 3), &dy = at(in, 4), &dyh = at(in, 5),
               &dyc = at(in, 6);
  check(op, "input X", x, c.x());
  check(op, "input W", w, c.w());
  check(op, "input R", r, c.r());
  check(op, "input S (saved states)", s, c.saved());
  check_optional(op, "input dY", dy, c.y());
  check_optional(op, "input dY_h", dyh, c.state());
  check_optional(op, "input dY_c", dyc, c.state());
  if (!c.lstm && dyc.valid()) invalid(op, "input dY_c is given to a GRU");
  const Tensor &dx = at(out, 0), &dw = at(out, 1), &dr = at(out, 2), &db = at(out, 3), &dh0 = at(out, 4),
               &dc0 = at(out, 5);
  check_optional(op, "output dX", dx, c.x());
  check_optional(op, "output dW", dw, c.w());
  check_optional(op, "output dR", dr, c.r());
  check_optional(op, "output dB", db, c.b());
  check_optional(op, "output d initial_h", dh0, c.state());
  check_optional(op, "output d initial_c", dc0, c.state());
  if (!c.lstm && dc0.valid()) invalid(op, "output d initial_c is asked of a GRU");
  if (!ws || ws->bytes() < workspace_bytes()) invalid(op, "workspace of {} bytes is too small", ws ? ws->bytes() : 0);
  const int64_t n_dg = c.dirs * c.rows() * c.gates(), n_carry = c.dirs * c.batch * c.hidden_size;
  Tensor dg = ws->slice_elems(0, n_dg, Shape{c.dirs, c.rows(), c.gates()});
  Tensor dgr = c.lstm ? dg : ws->slice_elems(n_dg, n_dg, Shape{c.dirs, c.rows(), c.gates()});
  Tensor carry = ws->slice_elems(c.lstm ? n_dg : 2 * n_dg, n_carry, Shape{n_carry});
  {
    std::lock_guard lock(launch_mutex_);
    for (int64_t t = c.seq_length; t-- > 0;) {
      set_common(step_, c, cl_int(t), s.buffer, off(s), r.buffer, off(r), or_any(dy, s).buffer, off(dy),
                 cl_int(dy.valid()), or_any(dyh, s).buffer, off(dyh), cl_int(dyh.valid()), or_any(dyc, s).buffer,
                 off(dyc), cl_int(dyc.valid()), dg.buffer, off(dg), dgr.buffer, off(dgr), carry.buffer, off(carry));
      ec.enqueue_kernel(step_, units(c), cl::NullRange, "rnn_grad_step");
    }
    if (dh0.valid() || dc0.valid()) {
      set_common(initial_, c, r.buffer, off(r), dgr.buffer, off(dgr), carry.buffer, off(carry),
                 or_any(dh0, s).buffer, off(dh0), cl_int(dh0.valid()), or_any(dc0, s).buffer, off(dc0),
                 cl_int(dc0.valid()));
      ec.enqueue_kernel(initial_, units(c), cl::NullRange, "rnn_grad_initial");
    }
    if (db.valid()) {
      set_args(bias_, cl_int(c.rows()), cl_int(c.gates()), dg.buffer, off(dg), dgr.buffer, off(dgr), db.buffer,
               off(db));
      ec.enqueue_kernel(bias_, cl::NDRange(size_t(c.gates()), 2, size_t(c.dirs)), cl::NullRange, "rnn_grad_bias");
    }
  }
  if (dw.valid()) dw_->run(dg, x, dw, ec);
  if (dr.valid()) dr_->run(dgr, s.slice_elems(c.gates(), s.numel() - c.gates(), Shape{s.numel() - c.gates()}), dr, ec);
  if (dx.valid()) {
    const int64_t per_dg = c.rows() * c.gates(), per_w = c.gates() * c.input_size;
    for (int d = 0; d < c.dirs; ++d)
      (d == 0 ? dx_first_ : dx_add_)
          ->run(dg.slice_elems(d * per_dg, per_dg, Shape{c.rows(), c.gates()}),
                w.slice_elems(d * per_w, per_w, Shape{c.gates(), c.input_size}), dx, ec);
  }
}

}  // namespace cldl
