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
  if (c.rows() > INT32_MAX / 4 || c.gates() * std::max(c.input_size, c.hidden_size) > INT32_MAX / 4)
    invalid(op, "{} is too large", c.str());
}

// The kernels' cell: 0 LSTM, 1 GRU with linear_before_reset, 2 GRU without.
cl_int cell_of(const RnnTrainConfig& c) { return c.lstm ? 0 : c.linear_before_reset ? 1 : 2; }
// Kernel arguments shared by the kernels: cell, T, B, H, G, layout, D, rev0.
template <typename... Rest>
void set_common(cl::Kernel& k, const RnnTrainConfig& c, const Rest&... rest) {
  set_args(k, cell_of(c), cl_int(c.seq_length), cl_int(c.batch), cl_int(c.hidden_size), cl_int(c.gates()),
           cl_int(c.layout), cl_int(c.dirs), cl_int(c.reverse), rest...);
}
cl::NDRange units(const RnnTrainConfig& c) {
  return cl::NDRange(size_t(c.hidden_size), size_t(c.batch), size_t(c.dirs));
}
cl_long off(const Tensor& t) { return cl_long(t.offset_elems()); }
// The row (of X, S, dG) of batch item 0 at the step-th step of direction d; the batch's rows are 1 (layout 0) or
// T (layout 1) apart.
int64_t step_row(const RnnTrainConfig& c, int d, int64_t step) {
  const int64_t t = d == 1 || c.reverse ? c.seq_length - 1 - step : step;
  return c.layout ? t : t * c.batch;
}

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
  o->transpose_ = make_kernel(p, "rnn_transpose_r");
  const bool reset_first = !cfg.lstm && !cfg.linear_before_reset;
  if (reset_first) o->reset_ = make_kernel(p, "rnn_gru_reset");
  const int64_t G = cfg.gates(), H = cfg.hidden_size;
  // xw[d] = X W[d]^T: [rows, G] per direction.
  GemmConfig g;
  g.M = cfg.rows();
  g.N = G;
  g.K = cfg.input_size;
  g.trans_b = true;
  g.batch = cfg.dirs;
  g.stride_a = 0;
  g.stride_b = G * cfg.input_size;
  g.stride_c = cfg.rows() * G;
  o->project_ = Gemm::create(ctx, device, g);
  // One step of one direction: rec [B, G] = H_prev [B, H] (rows of S) x R^T [H, G].
  GemmConfig r;
  r.M = cfg.batch;
  r.N = G;
  r.K = H;
  r.lda = (cfg.layout ? cfg.seq_length : 1) * (G + 2 * H);
  o->recurrent_ = Gemm::create(ctx, device, r);
  if (reset_first) {  // rec's h~ block = (r h) [B, H] (S's last block) x Rh^T [H, H] (R^T's last columns)
    r.N = H;
    r.ldb = G;
    r.ldc = G;
    o->reset_product_ = Gemm::create(ctx, device, r);
  }
  return o;
}

std::string RnnTrainForward::algorithm() const {
  return fmt::format("{}: x W^T of all steps as one GEMM ({}), per step R h as a GEMM per direction ({}) and one "
                     "launch for the gates", cfg_.str(), project_->algorithm(), recurrent_->algorithm());
}

namespace {
// Forward workspace (floats): xw [D, rows, G], rec [D, B, G], Rt [D, H, G], then the GEMMs' packing.
int64_t forward_scratch(const RnnTrainConfig& c) {
  return c.dirs * (c.rows() * c.gates() + c.batch * c.gates() + c.hidden_size * c.gates());
}
Tensor part(const Tensor& ws, int64_t& at, int64_t n) {
  Tensor t = ws.slice_elems(at, n, Shape{n});
  at += n;
  return t;
}
// The view of t from element `start` to its end (GEMM operands addressed by their first element).
Tensor from(const Tensor& t, int64_t start) { return t.slice_elems(start, t.numel() - start, Shape{t.numel() - start}); }
// C = A B by `m`, packing (when it packs) in the op's workspace after its own buffers.
void run_gemm(Gemm& m, const Tensor& a, const Tensor& b, const Tensor& c, const Tensor& gemm_ws, ExecutionContext& ec) {
  Tensor i[2] = {a, b}, o[1] = {c};
  m.enqueue(i, o, m.workspace_bytes() ? &gemm_ws : nullptr, ec);
}
}  // namespace

size_t RnnTrainForward::workspace_bytes() const {
  return size_t(forward_scratch(cfg_)) * sizeof(float) +
         std::max({project_->workspace_bytes(), recurrent_->workspace_bytes(),
                   reset_product_ ? reset_product_->workspace_bytes() : size_t(0)});
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
  if (!ws || ws->bytes() < workspace_bytes()) invalid(op, "workspace of {} bytes is too small", ws ? ws->bytes() : 0);
  const int64_t G = c.gates(), H = c.hidden_size, B = c.batch, T = c.seq_length, W = G + 2 * H;
  int64_t used = 0;
  Tensor xw = part(*ws, used, c.dirs * c.rows() * G), rec = part(*ws, used, c.dirs * B * G),
         rt = part(*ws, used, c.dirs * H * G);
  Tensor gemm_ws = from(*ws, used);
  auto gemm = [&](Gemm& m, const Tensor& a, const Tensor& bm, const Tensor& cm) { run_gemm(m, a, bm, cm, gemm_ws, ec); };
  gemm(*project_, x, w, xw);
  {
    std::lock_guard lock(launch_mutex_);
    set_args(transpose_, cl_int(G), cl_int(H), r.buffer, off(r), rt.buffer, off(rt));
    ec.enqueue_kernel(transpose_, cl::NDRange(size_t(G), size_t(H), size_t(c.dirs)), cl::NullRange, "rnn_transpose_r");
    set_common(init_, c, or_any(h0, x).buffer, off(h0), cl_int(h0.valid()), or_any(c0, x).buffer, off(c0),
               cl_int(c0.valid()), s.buffer, off(s));
    ec.enqueue_kernel(init_, units(c), cl::NullRange, "rnn_train_init");
  }
  for (int64_t step = 0; step < T; ++step) {
    for (int d = 0; d < c.dirs; ++d) {
      const int64_t row0 = step_row(c, d, step);
      gemm(*recurrent_, from(s, (d * c.rows() + row0) * W + G), rt.slice_elems(d * H * G, H * G, Shape{H, G}),
           rec.slice_elems(d * B * G, B * G, Shape{B, G}));
    }
    if (reset_product_) {
      {
        std::lock_guard lock(launch_mutex_);
        set_args(reset_, cl_int(T), cl_int(B), cl_int(H), cl_int(G), cl_int(c.layout), cl_int(c.reverse), cl_int(step),
                 xw.buffer, off(xw), rec.buffer, off(rec), or_any(b, x).buffer, off(b), cl_int(c.bias), s.buffer, off(s));
        ec.enqueue_kernel(reset_, units(c), cl::NullRange, "rnn_gru_reset");
      }
      for (int d = 0; d < c.dirs; ++d) {
        const int64_t row0 = step_row(c, d, step);
        gemm(*reset_product_, from(s, (d * c.rows() + row0) * W + G + H), from(rt, d * H * G + 2 * H),
             from(rec, d * B * G + 2 * H));
      }
    }
    std::lock_guard lock(launch_mutex_);
    set_common(step_, c, cl_int(step), xw.buffer, off(xw), rec.buffer, off(rec), or_any(b, x).buffer, off(b),
               cl_int(c.bias), s.buffer, s.buffer, off(s), or_any(y, s).buffer, off(y), cl_int(y.valid()),
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
  o->fill_ = make_kernel(p, "rnn_fill");
  const bool reset_first = !cfg.lstm && !cfg.linear_before_reset;
  if (reset_first) o->reset_ = make_kernel(p, "rnn_gru_reset_grad");
  const int64_t G = cfg.gates(), H = cfg.hidden_size, I = cfg.input_size, rows = cfg.rows();
  // One step of one direction: dhrec [B, H] = dGR rows of the later step [B, G] x R [G, H].
  GemmConfig rec;
  rec.M = cfg.batch;
  rec.N = H;
  rec.K = reset_first ? 2 * H : G;  // without linear_before_reset h~'s part is q r (rnn_gru_reset_grad)
  rec.lda = (cfg.layout ? cfg.seq_length : 1) * G;
  o->recurrent_ = Gemm::create(ctx, device, rec);
  if (reset_first) {  // q [B, H] = dh~ rows [B, H] x Rh [H, H]
    rec.K = H;
    o->reset_product_ = Gemm::create(ctx, device, rec);
  }
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
  r.lda = G;  // dGR's rows, whatever M
  if (reset_first) {  // dRh = dh~^T (r h): S's last block
    r.M = H;
    o->dr_reset_ = Gemm::create(ctx, device, r);
    r.M = 2 * H;
  }
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
  // dB[d] = ones [1, rows] x dG[d] (Wb) and x dGR[d] (Rb): [1, G], into dB's halves (ld 2G between directions).
  GemmConfig bias;
  bias.M = 1;
  bias.N = G;
  bias.K = rows;
  bias.batch = cfg.dirs;
  bias.stride_a = 0;
  bias.stride_b = rows * G;
  bias.stride_c = 2 * G;
  o->db_ = Gemm::create(ctx, device, bias);
  return o;
}

std::string RnnBackward::algorithm() const {
  return fmt::format("{}: per step a GEMM per direction ({}) and one fused launch{}, dW and dR as one GEMM each over "
                     "all {} rows ({}), dX ({})", cfg_.str(), recurrent_->algorithm(),
                     cfg_.dirs == 2 ? " for both directions" : "", cfg_.rows(), dw_->algorithm(), dx_first_->algorithm());
}

namespace {
// Backward workspace (floats): dG [D, rows, G], dGR (GRU), carry, dhrec and q [D, B, H] each, ones [rows], packing.
int64_t backward_scratch(const RnnTrainConfig& c) {
  return c.dirs * c.rows() * c.gates() * (c.lstm ? 1 : 2) + 3 * c.dirs * c.batch * c.hidden_size + c.rows();
}
}  // namespace

size_t RnnBackward::workspace_bytes() const {
  size_t gemm = 0;
  for (const Gemm* g : {recurrent_.get(), dw_.get(), dr_.get(), dx_first_.get(), dx_add_.get(), db_.get(),
                        reset_product_.get(), dr_reset_.get()})
    if (g) gemm = std::max(gemm, g->workspace_bytes());
  return size_t(backward_scratch(cfg_)) * sizeof(float) + gemm;
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
  const int64_t G = c.gates(), H = c.hidden_size, B = c.batch, T = c.seq_length, rows = c.rows();
  const int64_t n_dg = c.dirs * rows * G, n_state = c.dirs * B * H;
  int64_t used = 0;
  Tensor dg = part(*ws, used, n_dg);
  Tensor dgr = c.lstm ? dg : part(*ws, used, n_dg);
  Tensor carry = part(*ws, used, n_state), dhrec = part(*ws, used, n_state), q = part(*ws, used, n_state),
         ones = part(*ws, used, rows);
  Tensor gemm_ws = from(*ws, used);
  auto gemm = [&](Gemm& m, const Tensor& a, const Tensor& bm, const Tensor& cm) { run_gemm(m, a, bm, cm, gemm_ws, ec); };
  // dhrec[d] = the rows of step `step` of dGR[d] x R[d].
  auto recurrent = [&](int64_t step) {
    for (int d = 0; d < c.dirs; ++d) {
      const int64_t row0 = step_row(c, d, step);
      gemm(*recurrent_, from(dgr, (d * rows + row0) * G), r.slice_elems(d * G * H, G * H, Shape{G, H}),
           dhrec.slice_elems(d * B * H, B * H, Shape{B, H}));
    }
  };
  for (int64_t step = T; step-- > 0;) {
    if (step + 1 < T) recurrent(step + 1);
    std::lock_guard lock(launch_mutex_);
    set_common(step_, c, cl_int(step), s.buffer, off(s), dhrec.buffer, off(dhrec), or_any(dy, s).buffer, off(dy),
               cl_int(dy.valid()), or_any(dyh, s).buffer, off(dyh), cl_int(dyh.valid()), or_any(dyc, s).buffer,
               off(dyc), cl_int(dyc.valid()), dg.buffer, off(dg), dgr.buffer, off(dgr), carry.buffer, off(carry));
    ec.enqueue_kernel(step_, units(c), cl::NullRange, "rnn_grad_step");
    if (reset_product_) {
      for (int d = 0; d < c.dirs; ++d) {
        const int64_t row0 = step_row(c, d, step);
        gemm(*reset_product_, from(dg, (d * rows + row0) * G + 2 * H), from(r, d * G * H + 2 * H * H),
             q.slice_elems(d * B * H, B * H, Shape{B, H}));
      }
      set_args(reset_, cl_int(T), cl_int(B), cl_int(H), cl_int(G), cl_int(c.layout), cl_int(c.reverse), cl_int(step),
               s.buffer, off(s), q.buffer, off(q), dg.buffer, off(dg), dgr.buffer, off(dgr), carry.buffer, off(carry));
      ec.enqueue_kernel(reset_, units(c), cl::NullRange, "rnn_gru_reset_grad");
    }
  }
  if (dh0.valid() || dc0.valid()) {
    if (dh0.valid()) recurrent(0);
    std::lock_guard lock(launch_mutex_);
    set_common(initial_, c, dhrec.buffer, off(dhrec), carry.buffer, off(carry), or_any(dh0, s).buffer, off(dh0),
               cl_int(dh0.valid()), or_any(dc0, s).buffer, off(dc0), cl_int(dc0.valid()));
    ec.enqueue_kernel(initial_, units(c), cl::NullRange, "rnn_grad_initial");
  }
  if (db.valid()) {
    {
      std::lock_guard lock(launch_mutex_);
      set_args(fill_, 1.0f, ones.buffer, off(ones));
      ec.enqueue_kernel(fill_, cl::NDRange(size_t(rows)), cl::NullRange, "rnn_fill");
    }
    gemm(*db_, ones, dg, db);
    gemm(*db_, ones, dgr, from(db, G));
  }
  if (dw.valid()) gemm(*dw_, dg, x, dw);
  if (dr.valid()) {
    gemm(*dr_, dgr, from(s, G), dr);
    if (dr_reset_) gemm(*dr_reset_, from(dgr, 2 * H), from(s, G + H), from(dr, 2 * H * H));
  }
  if (dx.valid()) {
    const int64_t per_dg = rows * G, per_w = G * c.input_size;
    for (int d = 0; d < c.dirs; ++d)
      gemm(d == 0 ? *dx_first_ : *dx_add_, dg.slice_elems(d * per_dg, per_dg, Shape{rows, G}),
           w.slice_elems(d * per_w, per_w, Shape{G, c.input_size}), dx);
  }
}

}  // namespace cldl
