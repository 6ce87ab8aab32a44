// The RNN strategies: sequential, time-step parallel, layer parallel (wavefront) and data parallel,
// scheduled over the queues and devices of a Context with events; plus RnnLayer::enqueue and RnnStack.
// Every strategy runs the same kernels with the same per-element arithmetic, so results agree with the
// sequential path to fp32 rounding (in practice bit for bit).
#include <algorithm>
#include <bit>

#include "layers/rnn.hpp"
#include "runtime/log.hpp"

namespace cldl {

namespace {

struct Strides {
  int64_t st = 0, sb = 0, sd = 0;
};

// Element strides of ONNX tensors. X: [T,B,I] / [B,T,I]; Y: [T,D,B,H] / [B,T,D,H]; states: [D,B,H] / [B,D,H].
Strides x_strides(int layout, int64_t T, int64_t B, int64_t I) {
  return layout == 0 ? Strides{B * I, I, 0} : Strides{I, T * I, 0};
}
Strides y_strides(int layout, int64_t T, int64_t B, int64_t D, int64_t H) {
  return layout == 0 ? Strides{D * B * H, H, B * H} : Strides{D * H, T * D * H, H};
}
Strides state_strides(int layout, int64_t B, int64_t D, int64_t H) {
  return layout == 0 ? Strides{0, H, B * H} : Strides{0, D * H, H};
}

// Everything one copy of the whole stack needs on one device: views of batch extent Bx.
struct Placement {
  int dev = 0;
  int64_t Bx = 0;
  Tensor x;
  Strides xs;
  Tensor lens;
  std::vector<Tensor> h0, c0, yh, yc;
  Strides ss;
  Tensor y;
  Strides ys;
  std::string key;
};

cl::Event barrier(cl::CommandQueue& q, const std::vector<cl::Event>& waits) {
  cl::Event e;
  check(q.enqueueBarrierWithWaitList(waits.empty() ? nullptr : &waits, &e), "clEnqueueBarrierWithWaitList", "RNN join");
  return e;
}

// Copies batch items [sb0, sb0 + nb) of a tensor viewed as [outer, Bsrc, inner] into items
// [db0, db0 + nb) of one viewed as [outer, Bdst, inner] (the runtime has whole-tensor copies only).
cl::Event copy_slab(cl::CommandQueue& q, const Tensor& src, int64_t Bsrc, int64_t sb0, const Tensor& dst, int64_t Bdst,
                    int64_t db0, int64_t nb, int64_t outer, int64_t inner, const std::vector<cl::Event>& waits) {
  const size_t es = dtype_size(src.dtype);
  cl::array<size_t, 3> so{src.offset_bytes + size_t(sb0 * inner) * es, 0, 0};
  cl::array<size_t, 3> dO{dst.offset_bytes + size_t(db0 * inner) * es, 0, 0};
  cl::array<size_t, 3> region{size_t(nb * inner) * es, size_t(outer), 1};
  cl::Event e;
  check(q.enqueueCopyBufferRect(src.buffer, dst.buffer, so, dO, region, size_t(Bsrc * inner) * es, 0,
                                size_t(Bdst * inner) * es, 0, waits.empty() ? nullptr : &waits, &e),
        "clEnqueueCopyBufferRect", "RNN shard copy");
  return e;
}

struct Scheduler {
  Context& ctx;
  int device;
  std::span<RnnLayer* const> layers;
  const RnnStackIO& io;
  detail::RnnSchedState& state;
  const Tensor* workspace;
  int64_t T, B;
  int layout;
  Profiler* profiler = nullptr;  // the caller's, handed to every queue's commands
  ExecutionContext make_ec(const cl::CommandQueue& q) const {
    ExecutionContext e(q);
    e.profiler = profiler;
    return e;
  }

  const RnnConfig& cfg(size_t l) const { return layers[l]->config(); }
  int64_t out_width(size_t l) const { return cfg(l).dirs() * cfg(l).hidden_size; }

  Tensor scratch(const std::string& key, Shape s, DType dt, int dev) { return state.scratch_tensor(ctx, key, s, dt, dev); }

  // The full-batch placement on the device of the inputs.
  Placement full() {
    Placement p;
    p.dev = device;
    p.Bx = B;
    p.x = io.x;
    p.xs = x_strides(layout, T, B, cfg(0).input_size);
    p.lens = io.lens;
    p.h0 = io.h0;
    p.c0 = io.c0;
    p.yh = io.yh;
    p.yc = io.yc;
    p.ss = state_strides(layout, B, cfg(0).dirs(), 0);
    p.y = io.y;
    p.key = "full";
    return p;
  }

  static Tensor at(const std::vector<Tensor>& v, size_t l) { return l < v.size() ? v[l] : Tensor{}; }

  RnnLayerIO layer_io(const Placement& p, size_t l, bool allow_ws_override) {
    const RnnConfig& c = cfg(l);
    const int64_t D = c.dirs(), H = c.hidden_size, Bx = p.Bx;
    RnnLayerIO r;
    r.B = Bx;
    if (l == 0) {
      r.x = p.x;
      r.x_st = p.xs.st;
      r.x_sb = p.xs.sb;
    } else {
      const int64_t Din = out_width(l - 1);
      r.x = input_of(p, l);
      r.x_st = Bx * Din;
      r.x_sb = Din;
    }
    r.lens = p.lens;
    Strides ss = state_strides(layout, Bx, D, H);
    r.h0 = at(p.h0, l);
    r.c0 = at(p.c0, l);
    r.h0_sd = ss.sd;
    r.h0_sb = ss.sb;
    r.yh = at(p.yh, l);
    r.yc = at(p.yc, l);
    r.yh_sd = ss.sd;
    r.yh_sb = ss.sb;
    if (l + 1 == layers.size()) {
      r.y = p.y;
      Strides ys = y_strides(layout, T, Bx, D, H);
      r.y_st = ys.st;
      r.y_sb = ys.sb;
      r.y_sd = ys.sd;
    } else {
      // Intermediate layers write Y with directions concatenated: the next layer's X rows.
      r.y = inter(p, l);
      r.y_st = Bx * D * H;
      r.y_sb = D * H;
      r.y_sd = H;
    }
    const size_t wsb = layers[l]->workspace_bytes(Bx);
    if (allow_ws_override && workspace && workspace->bytes() >= wsb && workspace->device == p.dev)
      r.ws = *workspace;
    else
      r.ws = scratch(fmt::format("ws{} {}", l, p.key), Shape{int64_t(wsb / 4)}, DType::f32, p.dev);
    return r;
  }
  Tensor inter(const Placement& p, size_t l) {
    return scratch(fmt::format("y{} {}", l, p.key), Shape{T * p.Bx * out_width(l)}, DType::f32, p.dev);
  }
  // Layer l's input: the previous layer's Y (a local copy when the layers sit on different devices).
  std::map<size_t, Tensor> input_override;
  Tensor input_of(const Placement& p, size_t l) {
    auto it = input_override.find(l);
    return it != input_override.end() ? it->second : inter(p, l - 1);
  }

  // All layers on one placement, batch items [b0, b0 + nb): per layer the projection GEMM (unless
  // fused) and the steps; the second direction on q1 when given.
  cl::Event run_layers_on(const Placement& p, int64_t b0, int64_t nb, cl::CommandQueue q0, cl::CommandQueue* q1,
                          bool fuse, std::vector<cl::Event> waits, bool allow_ws_override) {
    cl::Event last;
    for (size_t l = 0; l < layers.size(); ++l) {
      RnnLayer& L = *layers[l];
      RnnLayerIO lio = layer_io(p, l, allow_ws_override && layers.size() == 1);
      ExecutionContext e0 = make_ec(q0);
      e0.wait_for = std::move(waits);
      waits.clear();
      e0.signal = &last;
      if (!fuse) L.enqueue_projection(p.dev, lio, b0, nb, 0, T, e0);
      if (cfg(l).dirs() == 2 && q1) {
        ExecutionContext e1 = make_ec(*q1);
        cl::Event ev1;
        e1.signal = &ev1;
        e1.wait_for = fuse ? e0.wait_for : std::vector<cl::Event>{last};
        L.enqueue_steps(p.dev, lio, 1, b0, nb, 0, T, fuse, e1);
        L.enqueue_steps(p.dev, lio, 0, b0, nb, 0, T, fuse, e0);
        last = barrier(q0, {ev1});
      } else {
        for (int d = 0; d < cfg(l).dirs(); ++d) L.enqueue_steps(p.dev, lio, d, b0, nb, 0, T, fuse, e0);
      }
    }
    return last;
  }

  std::string sequential(cl::CommandQueue q, std::vector<cl::Event> waits, cl::Event& done) {
    done = run_layers_on(full(), 0, B, q, nullptr, true, std::move(waits), true);
    return "sequential: one queue, input projection fused into each step";
  }

  std::string time_parallel(cl::CommandQueue q, std::vector<cl::Event> waits, cl::Event& done) {
    cl::CommandQueue q1 = ctx.queue(device, 1, profiler != nullptr);
    done = run_layers_on(full(), 0, B, q, &q1, false, std::move(waits), true);
    bool bidir = std::any_of(layers.begin(), layers.end(), [](RnnLayer* l) { return l->config().dirs() == 2; });
    return fmt::format("time_parallel: projection GEMM over T={}{}", T, bidir ? ", directions on 2 queues" : "");
  }

  std::string layer_parallel(cl::CommandQueue q, std::vector<cl::Event> waits0, int64_t chunk, const RnnWaveParams& wp,
                             cl::Event& done) {
    const int ndev = int(ctx.device_count());
    const size_t L = layers.size();
    // Several devices and a stack the wavefront kernels run: one wavefront per device's group of layers.
    if (ndev > 1 && L > 1) {
      const size_t G = std::min<size_t>(L, size_t(ndev));
      bool waves = true;
      for (size_t gi = 0; gi < G && waves; ++gi)
        waves = wave_unsupported(gi * L / G, (gi + 1) * L / G, (device + int(gi)) % ndev).empty();
      // Unless every layer runs a chunk of steps in one launch (batch shards): then the chunked form below
      // takes two launches per layer and chunk (projection, steps), fewer than the wavefronts' per-step
      // launches. PoCL 3.1, POCL_DEVICES="pthread pthread" on 2 Zen 4 cores, T100 B1 H256 L4, median of 9:
      // chunked 4.51 ms, wavefronts 5.81 ms (sequential 13.2 ms).
      bool one_launch = true;
      for (size_t l = 0; l < L && one_launch; ++l) one_launch = layers[l]->steps_in_one_launch(dev_of(l), B);
      if (waves && !one_launch) return layer_parallel_waves(q, std::move(waits0), chunk, wp, done);
    }
    if (chunk <= 0) chunk = std::max<int64_t>(1, (T + 7) / 8);
    Placement home = full();
    std::vector<std::vector<cl::Event>> ev(L);
    std::vector<cl::Event> finals;
    for (size_t l = 0; l < L; ++l) {
      const int dev = dev_of(l);
      cl::CommandQueue ql = (l == 0) ? q : ctx.queue(dev, 10 + int(l), profiler != nullptr);
      const RnnConfig& c = cfg(l);
      const int64_t D = c.dirs();
      const bool chunked = c.direction == RnnDirection::forward;
      const bool prev_chunked = l > 0 && cfg(l - 1).direction == RnnDirection::forward;
      // A placement for this layer on its device: inputs and outputs of other devices get local copies.
      Placement p = home;
      p.dev = dev;
      p.key = fmt::format("lp{}", l);
      std::vector<cl::Event> start = waits0;
      std::vector<std::pair<Tensor, Tensor>> copy_back;  // (local, home) after the last chunk
      if (dev != device) {
        auto local = [&](const Tensor& t, const std::string& name) {
          return scratch(fmt::format("{}{} {}", name, l, p.key), t.shape, t.dtype, dev);
        };
        auto copy_in = [&](const Tensor& src, const Tensor& dst) {
          ExecutionContext e = make_ec(ql);
          e.wait_for = start;
          cl::Event ce;
          e.signal = &ce;
          ctx.copy_async(src, dst, e);
          start = {ce};
        };
        if (io.lens.valid()) {
          p.lens = local(io.lens, "lens");
          copy_in(io.lens, p.lens);
        }
        for (auto* v : {&p.h0, &p.c0}) {
          std::vector<Tensor> nv = *v;
          if (l < nv.size() && nv[l].valid()) {
            nv[l] = local(nv[l], v == &p.h0 ? "h0" : "c0");
            copy_in((*v)[l], nv[l]);
          }
          *v = nv;
        }
        for (auto* v : {&p.yh, &p.yc}) {
          std::vector<Tensor> nv = *v;
          if (l < nv.size() && nv[l].valid()) {
            nv[l] = local(nv[l], v == &p.yh ? "yh" : "yc");
            copy_back.push_back({nv[l], (*v)[l]});
          }
          *v = nv;
        }
        if (l + 1 == L && io.y.valid()) {
          p.y = local(io.y, "y");
          copy_back.push_back({p.y, io.y});
        }
      }
      // Layer l reads layer l-1's Y: in place on the same device, else a copy made chunk by chunk.
      const bool cross = l > 0 && dev_of(l - 1) != dev;
      if (l > 0) input_override[l] = cross ? scratch(fmt::format("xin{} {}", l, p.key), Shape{T * B * out_width(l - 1)},
                                                     DType::f32, dev)
                                           : inter_of_layer(l - 1);
      RnnLayerIO lio = layer_io(p, l, false);
      const int64_t nchunks = chunked ? (T + chunk - 1) / chunk : 1;
      for (int64_t ci = 0; ci < nchunks; ++ci) {
        const int64_t t0 = chunked ? ci * chunk : 0, t1 = chunked ? std::min(T, t0 + chunk) : T;
        ExecutionContext e = make_ec(ql);
        cl::Event sig;
        e.signal = &sig;
        e.wait_for = ci == 0 ? start : std::vector<cl::Event>{};
        if (l > 0) {
          // Step t of layer l needs step t of layer l-1 (all of it when either runs backwards).
          const auto& pe = ev[l - 1];
          e.wait_for.push_back(chunked && prev_chunked ? pe[size_t(std::min<int64_t>(ci, int64_t(pe.size()) - 1))]
                                                       : pe.back());
          if (cross) {
            Tensor src = inter_of_layer(l - 1);
            const int64_t row = B * out_width(l - 1);
            ctx.copy_async(src.slice_elems(t0 * row, (t1 - t0) * row, Shape{(t1 - t0) * row}),
                           input_override[l].slice_elems(t0 * row, (t1 - t0) * row, Shape{(t1 - t0) * row}), e);
          }
        }
        layers[l]->enqueue_projection(dev, lio, 0, B, t0, t1, e);
        for (int d = 0; d < D; ++d) layers[l]->enqueue_steps(dev, lio, d, 0, B, t0, t1, false, e);
        ev[l].push_back(sig);
      }
      for (auto& [local, home_t] : copy_back) {
        ExecutionContext e = make_ec(ql);
        cl::Event ce;
        e.signal = &ce;
        ctx.copy_async(local, home_t, e);
        ev[l].back() = ce;  // in-order: covers the steps too
      }
      finals.push_back(ev[l].back());
    }
    done = barrier(q, finals);
    return fmt::format("layer_parallel: {} layers on {} device(s), chunk {} steps", L, std::min<size_t>(L, size_t(ndev)),
                       chunk);
  }
  // Why the wavefront cannot run this stack (empty: it can).
  // Layers [l0, l1) on device dev (-1: all layers on the caller's device).
  std::string wave_unsupported(size_t l0 = 0, size_t l1 = ~size_t(0), int dev = -1) const {
    for (size_t l = l0; l < std::min(l1, layers.size()); ++l) {
      const RnnConfig& c = cfg(l);
      if (c.cell != RnnCell::lstm) return fmt::format("layer {} is {}; the wavefront kernels are LSTM's", l, to_string(c.cell));
      if (c.direction != RnnDirection::forward) return fmt::format("layer {} is not forward", l);
      const int tw = layers[l]->tile_weights(dev < 0 ? device : dev).tw;
      if (!tw) return fmt::format("layer {} does not use the tiles weight layout (the CPU default; CLDL_RNN_WEIGHT_LAYOUT=tiles)", l);
      const int tw0 = layers[l0]->tile_weights(dev < 0 ? device : dev).tw;
      if (tw != tw0) return fmt::format("layer {} has tiles {} units wide, layer {} {} (one wave kernel serves one width)", l, tw, l0, tw0);
    }
    return {};
  }

  // A chunked hand-over between two wave groups: the producer's top layer writes Y ([T][B][W] in `src`)
  // and records, per chunk of steps, the event after which those steps are written; the consumer
  // copies each chunk into `dst` on its own device (or, with `dst` invalid, reads `src` in place after
  // waiting for the event) just before its first layer needs those steps.
  struct WaveLink {
    int64_t chunk = 1, row = 0;  // steps per event; floats per step (B * W)
    Tensor src, dst;
    std::vector<cl::Event> ready;  // per chunk, filled by the producer
    int64_t fetched = 0;           // chunks the consumer has made available so far
  };
  // One wavefront: layers [l0, l1) of the stack on device `dev`, one queue. Layer l0 reads `x` (strides
  // `xs`, on `dev`; with `in`, chunk by chunk as the producer group writes it); the top layer writes Y
  // into `y` (strides `ys`; invalid: not stored) and, with `out`, publishes its chunk events there.
  struct WaveGroup {
    size_t l0 = 0, l1 = 0;
    int dev = 0;
    Tensor x;
    Strides xs;
    Tensor lens;
    Tensor y;
    Strides ys;
    WaveLink* in = nullptr;
    WaveLink* out = nullptr;
  };
  struct WaveRun {
    int64_t waves = 0, launches = 0;  // wave launches; all kernel launches (waves + projections)
    int mr = 0, rg = 0, lag = 0;
  };

  // Wavefront (RnnStrategy::wavefront): launch w runs step w - lag * l of every layer l of the group.
  WaveRun wave_group(const WaveGroup& g, cl::CommandQueue q, std::vector<cl::Event> waits, const RnnWaveParams& wp0,
                     cl::Event& done) {
    const size_t L = g.l1 - g.l0;
    const int dev = g.dev;
    const RnnWaveParams wp = wp0.resolved(B, L);
    constexpr int LW = 24;  // RNN_WAVE_LW in kernels/rnn.cl
    std::vector<RnnLayer::TileWeights> tw;
    std::vector<int64_t> table(L * LW, 0);
    int64_t wt_total = 0, st_total = 0, max_nt = 0;
    auto bits = [](float f) { return int64_t(std::bit_cast<int32_t>(f)); };
    for (size_t l = 0; l < L; ++l) {
      const RnnConfig& c = cfg(g.l0 + l);
      const int64_t H = c.hidden_size;
      tw.push_back(layers[g.l0 + l]->tile_weights(dev));
      int64_t* t = &table[l * LW];
      t[0] = H;
      t[1] = c.input_size;
      t[2] = wt_total;
      t[3] = t[2] + tw[l].w_elems;
      t[4] = t[3] + tw[l].rt_elems;
      t[5] = t[4] + 4 * H;
      wt_total = t[5] + 3 * H;
      t[6] = st_total;
      t[7] = st_total + 2 * B * H;
      st_total += 4 * B * H;
      t[8] = at(io.h0, g.l0 + l).valid();
      t[9] = at(io.c0, g.l0 + l).valid();
      const std::vector<Activation> acts = c.resolved_activations();
      for (int i = 0; i < 3; ++i) {
        t[10 + i] = int64_t(acts[size_t(i)].kind);
        t[13 + 2 * i] = bits(acts[size_t(i)].alpha);
        t[14 + 2 * i] = bits(acts[size_t(i)].beta);
      }
      t[19] = bits(c.clip);
      t[20] = c.input_forget;
      t[21] = t[22] = -1;
      max_nt = std::max(max_nt, (H + tw[l].tw - 1) / tw[l].tw);
    }
    // Projected form: per layer xw [T][B][4H] and, below the top, Y [T][B][H], after the states.
    const int64_t lag = wp.lag;
    if (lag > 1)
      for (size_t l = 0; l < L; ++l) {
        int64_t* t = &table[l * LW];
        t[21] = st_total;
        st_total += T * B * 4 * t[0];
        if (l + 1 < L) {
          t[22] = st_total;
          st_total += T * B * t[0];
        }
      }
    ExecutionContext e = make_ec(q);
    e.wait_for = std::move(waits);
    cl::Event last;
    e.signal = &last;
    // The weights of the group's layers in one buffer, once (they never change after create); the table per batch.
    const std::string range = fmt::format("d{} l{}-{}", dev, g.l0, g.l1);
    const std::string wkey = "weights " + range, tkey = fmt::format("table {} B{} lag{}", range, B, lag);
    if (!state.wave_consts.count(wkey)) {
      Tensor all = ctx.alloc(Shape{wt_total}, DType::f32, dev);
      for (size_t l = 0; l < L; ++l) {
        const int64_t* t = &table[l * LW];
        const int64_t H = t[0];
        ctx.copy_async(tw[l].W.slice_elems(0, tw[l].w_elems, Shape{tw[l].w_elems}), all.slice_elems(t[2], tw[l].w_elems, Shape{tw[l].w_elems}), e);
        ctx.copy_async(tw[l].RT.slice_elems(0, tw[l].rt_elems, Shape{tw[l].rt_elems}), all.slice_elems(t[3], tw[l].rt_elems, Shape{tw[l].rt_elems}), e);
        ctx.copy_async(tw[l].bx.slice_elems(0, 4 * H, Shape{4 * H}), all.slice_elems(t[4], 4 * H, Shape{4 * H}), e);
        ctx.copy_async(tw[l].P.slice_elems(0, 3 * H, Shape{3 * H}), all.slice_elems(t[5], 3 * H, Shape{3 * H}), e);
      }
      state.wave_consts[wkey] = all;
    }
    if (!state.wave_consts.count(tkey))
      state.wave_consts[tkey] = ctx.upload(HostTensor::from<int64_t>({int64_t(table.size())}, table), dev);
    const Tensor& wts = state.wave_consts[wkey];
    const Tensor& lt = state.wave_consts[tkey];
    Tensor st = scratch(fmt::format("wave state l{}-{}", g.l0, g.l1), Shape{st_total}, DType::f32, dev);
    // initial_h / initial_c into slot 1, which step 0 reads as the previous state (from the caller's
    // device when the group runs on another one).
    for (size_t l = 0; l < L; ++l) {
      const int64_t* t = &table[l * LW];
      const int64_t BH = B * t[0];
      if (t[8]) ctx.copy_async(at(io.h0, g.l0 + l), st.slice_elems(t[6] + BH, BH, at(io.h0, g.l0 + l).shape), e);
      if (t[9]) ctx.copy_async(at(io.c0, g.l0 + l), st.slice_elems(t[7] + BH, BH, at(io.c0, g.l0 + l).shape), e);
    }
    // The kernel indexes these three from their buffers' starts (whole allocations of this op).
    if (wts.offset_bytes || lt.offset_bytes || st.offset_bytes)
      fail("RNN wavefront: its weight, table and state buffers must start at offset 0");
    const size_t mr = size_t(wp.mr);
    const std::string kname = fmt::format("lstm_wave_tile_m{}", mr);
    // The layers' tile width (wave_unsupported checked that they share one); the options as the layers build them.
    const std::string options = tw[0].tw != 8 ? fmt::format("-DRNN_KMAJOR=0 -DRNN_TW={}", tw[0].tw) : "-DRNN_KMAJOR=0";
    const std::string kkey = fmt::format("{} d{} tw{}", kname, dev, tw[0].tw);
    auto kit = state.kernels.find(kkey);
    if (kit == state.kernels.end())
      kit = state.kernels.emplace(kkey, make_kernel(ctx.program("rnn.cl", options, dev), kname.c_str())).first;
    cl::Kernel& k = kit->second;
    const Tensor& y = g.y.valid() ? g.y : st;
    // Row groups per work-item: the layers of a wave run side by side, so their tiles count together.
    const int rg = wp.rg > 0 ? wp.rg
                             : rnn_step_row_groups((B + int64_t(mr) - 1) / int64_t(mr), max_nt * int64_t(L),
                                                   std::max<int64_t>(1, ctx.device(dev).info.compute_units));
    set_args(k, cl_int(0), cl_int(lag), cl_int(T), cl_int(B), g.lens.buffer, cl_long(g.lens.offset_elems()), g.x.buffer,
             cl_long(g.x.offset_elems()), cl_long(g.xs.st), cl_long(g.xs.sb), wts.buffer, lt.buffer, st.buffer, y.buffer,
             cl_long(y.offset_elems()), cl_long(g.ys.st), cl_long(g.ys.sb), cl_int(g.y.valid()), cl_int(rg), cl_int(wp.kb));
    const size_t rows = mr * size_t(rg), groups = (size_t(B) + rows - 1) / rows,
                 tlx = std::min<size_t>(size_t(wp.wg_m), groups);
    const cl::NDRange global{round_up(groups, tlx), size_t(max_nt), L}, local{tlx, 1, 1};
    WaveRun run;
    run.mr = int(mr);
    run.rg = rg;
    run.lag = int(lag);
    // Input steps [0, t_end) of the first layer made available: each chunk of the link not yet fetched
    // is copied to this device (or, read in place, waited for) on this queue, after its producer event.
    auto need = [&](int64_t t_end) {
      if (!g.in) return;
      WaveLink& k = *g.in;
      while (k.fetched * k.chunk < std::min(t_end, T)) {
        const int64_t c = k.fetched++, t0 = c * k.chunk, n = (std::min(T, t0 + k.chunk) - t0) * k.row;
        e.wait_for.push_back(k.ready.at(size_t(c)));
        if (k.dst.valid())
          ctx.copy_async(k.src.slice_elems(t0 * k.row, n, Shape{n}), k.dst.slice_elems(t0 * k.row, n, Shape{n}), e);
      }
    };
    // Projected form: steps [t0, t1) of layer l's input projection (layer 0 from x, layer l > 0 from layer
    // l-1's Y in `st`) into its xw.
    auto project = [&](size_t l, int64_t t0, int64_t t1) {
      const int64_t* t = &table[l * LW];
      RnnLayerIO lio;
      lio.B = B;
      if (l == 0) {
        need(t1);
        lio.x = g.x;
        lio.x_st = g.xs.st;
        lio.x_sb = g.xs.sb;
      } else {
        const int64_t Hp = table[(l - 1) * LW];
        lio.x = st.slice_elems(table[(l - 1) * LW + 22], T * B * Hp, Shape{T * B * Hp});
        lio.x_st = B * Hp;
        lio.x_sb = Hp;
      }
      lio.ws = st.slice_elems(t[21], T * B * 4 * t[0], Shape{T * B * 4 * t[0]});
      layers[g.l0 + l]->enqueue_projection(dev, lio, 0, B, t0, t1, e);
      ++run.launches;
    };
    // Layer 0's projection at once, or chunk by chunk when its input arrives that way.
    if (lag > 1 && !g.in) project(0, 0, T);
    run.waves = T + lag * (int64_t(L) - 1);
    const int64_t nchunks = (T + lag - 1) / lag;
    for (int64_t w = 0; w < run.waves; ++w) {
      if (w < T) {
        if (lag == 1) need(w + 1);
        else if (g.in && w % lag == 0) project(0, w, std::min(T, w + lag));
      }
      detail::check_arg(k.setArg(0, cl_int(w)), k, 0);
      e.enqueue_kernel(k, global, local, "lstm_wave");
      ++run.launches;
      // After wave (c + l) * lag - 1, layer l-1 has written chunk c of its Y; layer l reads it from the next wave.
      if (lag > 1 && (w + 1) % lag == 0)
        for (size_t l = 1; l < L; ++l) {
          const int64_t c = (w + 1) / lag - int64_t(l);
          if (c >= 0 && c < nchunks) project(l, c * lag, std::min(T, (c + 1) * lag));
        }
      // The top layer has written steps [0, w - lag (L - 1)] of its Y.
      if (g.out) {
        WaveLink& o = *g.out;
        const int64_t done_steps = w - lag * (int64_t(L) - 1) + 1;
        while (int64_t(o.ready.size()) * o.chunk < T && std::min(T, (int64_t(o.ready.size()) + 1) * o.chunk) <= done_steps)
          o.ready.push_back(last);
      }
    }
    // Y_h / Y_c: the states after the last step (slot (T - 1) & 1).
    for (size_t l = 0; l < L; ++l) {
      const int64_t* t = &table[l * LW];
      const int64_t BH = B * t[0], slot = ((T - 1) & 1) * BH;
      const Tensor yh = at(io.yh, g.l0 + l), yc = at(io.yc, g.l0 + l);
      if (yh.valid()) ctx.copy_async(st.slice_elems(t[6] + slot, BH, yh.shape), yh, e);
      if (yc.valid()) ctx.copy_async(st.slice_elems(t[7] + slot, BH, yc.shape), yc, e);
    }
    done = last;
    return run;
  }

  std::string wavefront(cl::CommandQueue q, std::vector<cl::Event> waits, const RnnWaveParams& wp, cl::Event& done) {
    if (std::string why = wave_unsupported(); !why.empty())
      invalid(to_string(cfg(0).cell), "strategy wavefront: {}", why);
    const size_t L = layers.size();
    WaveGroup g;
    g.l1 = L;
    g.dev = device;
    g.x = io.x;
    g.xs = x_strides(layout, T, B, cfg(0).input_size);
    g.lens = io.lens;
    g.y = io.y;
    g.ys = y_strides(layout, T, B, 1, cfg(L - 1).hidden_size);
    const WaveRun r = wave_group(g, q, std::move(waits), wp, done);
    if (r.lag == 1)
      return fmt::format("wavefront: {} layer(s) in {} launches of lstm_wave_tile_m{} ({} row group(s) per work-item), "
                         "input projection fused", L, r.waves, r.mr, r.rg);
    return fmt::format("wavefront: {} layer(s) in {} launches of lstm_wave_tile_m{} ({} row group(s) per work-item), lag {} "
                       "steps, input projection per {}-step chunk ({} launches)",
                       L, r.waves, r.mr, r.rg, r.lag, r.lag, r.launches - r.waves);
  }

  // Layer parallel over several devices for stacks the wavefront kernels run: the layers are split into
  // one contiguous group per device, each group runs as a wavefront on its device (T + lag (Lg - 1)
  // launches instead of T * Lg), and group g+1 starts on a chunk of steps as soon as group g's top layer
  // has written it (copied across, chunk by chunk). The groups overlap in time like the layers of the
  // per-queue form, with far fewer launches (batch 1 is launch-bound).
  std::string layer_parallel_waves(cl::CommandQueue q, std::vector<cl::Event> waits0, int64_t chunk,
                                   const RnnWaveParams& wp0, cl::Event& done) {
    const size_t L = layers.size(), G = std::min<size_t>(L, size_t(ctx.device_count()));
    std::vector<WaveLink> links(G - 1);
    std::vector<cl::Event> finals;
    std::string parts;
    int64_t join = 0;
    for (size_t gi = 0; gi < G; ++gi) {
      WaveGroup g;
      g.l0 = gi * L / G;
      g.l1 = (gi + 1) * L / G;
      g.dev = (device + int(gi)) % int(ctx.device_count());
      const RnnWaveParams wp = wp0.resolved(B, g.l1 - g.l0);
      // Steps per hand-over: the lag (a chunk feeds one projection of the next group), else about T/8.
      if (gi == 0) join = chunk > 0 ? chunk : wp.lag > 1 ? wp.lag : std::max<int64_t>(1, (T + 7) / 8);
      cl::CommandQueue qg = gi == 0 ? q : ctx.queue(g.dev, 10 + int(gi), profiler != nullptr);
      std::vector<cl::Event> waits = waits0;
      const std::string key = fmt::format("lpw{}", gi);
      auto copy = [&](const Tensor& src, const Tensor& dst) {
        ExecutionContext e = make_ec(qg);
        e.wait_for = std::move(waits);
        cl::Event ev;
        e.signal = &ev;
        ctx.copy_async(src, dst, e);
        waits = {ev};
      };
      g.lens = io.lens;
      if (g.dev != device) {
        g.lens = scratch("lens " + key, io.lens.shape, io.lens.dtype, g.dev);
        copy(io.lens, g.lens);
      }
      if (gi == 0) {
        g.x = io.x;
        g.xs = x_strides(layout, T, B, cfg(0).input_size);
      } else {
        WaveLink& in = links[gi - 1];
        const int prev = (device + int(gi) - 1) % int(ctx.device_count());
        if (prev != g.dev) in.dst = scratch("xin " + key, in.src.shape, DType::f32, g.dev);
        g.x = in.dst.valid() ? in.dst : in.src;
        g.xs = {in.row, cfg(g.l0).input_size, 0};
        g.in = &in;
      }
      const int64_t H = cfg(g.l1 - 1).hidden_size;
      Tensor y_home;  // the stack's Y when this group writes a local copy of it
      if (gi + 1 < G) {
        WaveLink& out = links[gi];
        out.chunk = join;
        out.row = B * H;
        out.src = scratch("yout " + key, Shape{T * B * H}, DType::f32, g.dev);
        g.y = out.src;
        g.ys = {B * H, H, 0};
        g.out = &out;
      } else {
        g.y = io.y;
        g.ys = y_strides(layout, T, B, 1, H);
        if (io.y.valid() && g.dev != device) {
          y_home = io.y;
          g.y = scratch("y " + key, io.y.shape, DType::f32, g.dev);
        }
      }
      cl::Event ev;
      const WaveRun r = wave_group(g, qg, std::move(waits), wp, ev);
      if (y_home.valid()) {
        ExecutionContext e = make_ec(qg);
        e.wait_for = {ev};
        e.signal = &ev;
        ctx.copy_async(g.y, y_home, e);
      }
      finals.push_back(ev);
      parts += fmt::format("{}layers {}-{} on device {} ({} launches, lag {})", gi ? "; " : "", g.l0, g.l1 - 1, g.dev,
                           r.launches, r.lag);
    }
    done = barrier(q, finals);
    return fmt::format("layer_parallel: {} layers as {} wavefronts on {} devices, joined every {} steps: {}", L, G, G,
                       join, parts);
  }

  int dev_of(size_t l) const { return (device + int(l)) % int(ctx.device_count()); }
  Tensor inter_of_layer(size_t l) {
    Placement p = full();
    p.dev = dev_of(l);
    p.key = fmt::format("lp{}", l);
    return inter(p, l);
  }

  std::string data_parallel(cl::CommandQueue q, std::vector<cl::Event> waits0, int shards, cl::Event& done) {
    const int ndev = int(ctx.device_count());
    int S = shards > 0 ? shards : std::max(2, ndev);
    S = int(std::min<int64_t>(S, B));
    Placement home = full();
    std::vector<cl::Event> finals;
    for (int i = 0; i < S; ++i) {
      const int64_t b0 = B * i / S, nb = B * (i + 1) / S - b0;
      const int dev = (device + i) % ndev;
      cl::CommandQueue qi = i == 0 ? q : ctx.queue(dev, 20 + i, profiler != nullptr);
      if (dev == device) {
        // Same device: index the shared tensors by batch range, no copies.
        finals.push_back(run_layers_on(home, b0, nb, qi, nullptr, false, waits0, false));
        continue;
      }
      // Another device: gather this shard's inputs there, run, scatter the outputs back in order.
      Placement p;
      p.dev = dev;
      p.Bx = nb;
      p.key = fmt::format("dp{}", i);
      const RnnConfig& c0 = cfg(0);
      const int64_t I = c0.input_size;
      std::vector<cl::Event> w = waits0;
      auto gather = [&](const Tensor& src, Shape shape, int64_t outer, int64_t inner, const std::string& name) {
        Tensor dst = scratch(fmt::format("{} {}", name, p.key), shape, src.dtype, dev);
        w = {copy_slab(qi, src, B, b0, dst, nb, 0, nb, outer, inner, w)};
        return dst;
      };
      p.x = layout == 0 ? gather(io.x, {T, nb, I}, T, I, "x") : gather(io.x, {nb, T, I}, 1, T * I, "x");
      p.xs = x_strides(layout, T, nb, I);
      p.lens = gather(io.lens, {nb}, 1, 1, "lens");
      std::vector<std::tuple<Tensor, Tensor, int64_t, int64_t>> scatter;  // local, home, outer, inner
      for (size_t l = 0; l < layers.size(); ++l) {
        const int64_t D = cfg(l).dirs(), H = cfg(l).hidden_size;
        const int64_t so = layout == 0 ? D : 1, si = layout == 0 ? H : D * H;
        Shape sshape = layout == 0 ? Shape{D, nb, H} : Shape{nb, D, H};
        auto state_in = [&](const std::vector<Tensor>& v, const char* name) {
          Tensor t = at(v, l);
          return t.valid() ? gather(t, sshape, so, si, fmt::format("{}{}", name, l)) : Tensor{};
        };
        p.h0.push_back(state_in(io.h0, "h0"));
        p.c0.push_back(state_in(io.c0, "c0"));
        for (auto [v, pv, name] : {std::tuple{&io.yh, &p.yh, "yh"}, std::tuple{&io.yc, &p.yc, "yc"}}) {
          Tensor t = at(*v, l), loc;
          if (t.valid()) {
            loc = scratch(fmt::format("{}{} {}", name, l, p.key), sshape, DType::f32, dev);
            scatter.emplace_back(loc, t, so, si);
          }
          pv->push_back(loc);
        }
        if (l + 1 == layers.size() && io.y.valid()) {
          Shape ys = layout == 0 ? Shape{T, D, nb, H} : Shape{nb, T, D, H};
          p.y = scratch(fmt::format("y {}", p.key), ys, DType::f32, dev);
          scatter.emplace_back(p.y, io.y, layout == 0 ? T * D : 1, layout == 0 ? H : T * D * H);
        }
      }
      cl::Event e = run_layers_on(p, 0, nb, qi, nullptr, false, w, false);
      for (auto& [loc, t, outer, inner] : scatter) e = copy_slab(qi, loc, nb, 0, t, B, b0, nb, outer, inner, {e});
      finals.push_back(e);
    }
    done = barrier(q, finals);
    return fmt::format("data_parallel: {} shards on {} device(s)", S, std::min(S, ndev));
  }
};

}  // namespace

RnnWaveParams RnnWaveParams::resolved(int64_t batch, size_t layers) const {
  RnnWaveParams r = *this;
  if (r.mr == 0) r.mr = batch >= 8 ? 4 : batch >= 2 ? 2 : 1;
  if (r.mr != 1 && r.mr != 2 && r.mr != 4) fail("RNN wavefront: mr must be 1, 2 or 4 (0 = auto), got {}", r.mr);
  if (r.wg_m == 0) r.wg_m = 8;
  if (r.wg_m < 0) fail("RNN wavefront: wg_m must be positive (0 = auto), got {}", r.wg_m);
  if (r.rg < 0 || r.rg > kRnnMaxRowGroups)
    fail("RNN wavefront: rg must be 1..{} (0 = auto), got {}", kRnnMaxRowGroups, r.rg);
  if (r.kb == 0) r.kb = kRnnDefaultKBlock;
  if (r.kb < 0) fail("RNN wavefront: kb must be positive (0 = auto), got {}", r.kb);
  if (r.auto_max_batch == 0) r.auto_max_batch = 1 << 30;
  // Measured with `cldl bench rnn` on PoCL (2-core EPYC, busy; see the RnnWaveParams comment): per-chunk
  // projections win where the fused step would stream W for few rows (small batch) or where there is no
  // layer to overlap with (one layer); with 2+ layers and a batch of 16+ the fused form is as good or better.
  if (r.lag == 0) r.lag = batch < 16 || layers == 1 ? 16 : 1;
  if (r.lag < 0) fail("RNN wavefront: lag must be positive (0 = auto), got {}", r.lag);
  return r;
}

std::string detail::run_rnn_layers(Context& ctx, int device, std::span<RnnLayer* const> layers, const RnnStackIO& io,
                                   const RnnRunOptions& opts, RnnSchedState& state, ExecutionContext& ec,
                                   const Tensor* workspace) {
  if (layers.empty()) fail("RNN: no layers to run");
  const RnnConfig& c0 = layers[0]->config();
  const char* op = c0.cell == RnnCell::lstm ? "LSTM" : c0.cell == RnnCell::gru ? "GRU" : "RNN";
  const int64_t T = c0.seq_length, B = c0.batch;
  const RnnConfig& clast = layers.back()->config();
  // Input / output checks (the configs were validated at create).
  auto expect = [&](const Tensor& t, const char* name, Shape s, DType dt) {
    if (!t.valid()) return;
    if (t.dtype != dt) invalid(op, "{} must be {}, got {}", name, to_string(dt), to_string(t.dtype));
    if (t.numel() != s.numel()) invalid(op, "{} has shape {}, expected {}", name, t.shape.str(), s.str());
    if (t.device != device) invalid(op, "{} lives on device {}, the op runs on device {}", name, t.device, device);
  };
  if (!io.x.valid()) invalid(op, "X is required");
  expect(io.x, "X", c0.layout == 0 ? Shape{T, B, c0.input_size} : Shape{B, T, c0.input_size}, DType::f32);
  expect(io.lens, "sequence_lens", Shape{B}, DType::i32);
  expect(io.y, "Y", RnnLayer::validate(clast)[0], DType::f32);
  for (size_t l = 0; l < layers.size(); ++l) {
    Shape s = RnnLayer::validate(layers[l]->config())[1];
    for (auto [v, name] : {std::pair{&io.h0, "initial_h"}, std::pair{&io.c0, "initial_c"}, std::pair{&io.yh, "Y_h"},
                           std::pair{&io.yc, "Y_c"}})
      if (l < v->size()) expect((*v)[l], name, s, DType::f32);
  }
  std::lock_guard lock(state.m);
  RnnStackIO full = io;
  if (!full.lens.valid()) {
    // ONNX: no sequence_lens = every sequence has length T. Built once per device and batch.
    std::string key = fmt::format("lens-full T{} B{}", T, B);
    auto it = state.scratch.find(key);
    if (it == state.scratch.end()) {
      std::vector<int32_t> v(static_cast<size_t>(B), static_cast<int32_t>(T));
      it = state.scratch.emplace(key, ctx.upload(HostTensor::from<int32_t>({B}, v), device)).first;
    }
    full.lens = it->second;
  }
  std::vector<cl::Event> waits = std::move(ec.wait_for);
  ec.wait_for.clear();
  if (state.last()) waits.push_back(state.last);

  RnnStrategy s = opts.strategy;
  const bool all_forward =
      std::all_of(layers.begin(), layers.end(), [](RnnLayer* l) { return l->config().direction == RnnDirection::forward; });
  Scheduler sch{ctx, device, layers, full, state, workspace, T, B, c0.layout, ec.profiler, {}};
  std::string why_auto;
  if (s == RnnStrategy::automatic) {
    const RnnWaveParams wp = opts.wave.resolved(B, layers.size());
    if (ctx.device_count() > 1 && B >= 2 * int64_t(ctx.device_count())) {
      s = RnnStrategy::data_parallel;
      why_auto = "several devices and batch >= 2 per device";
    } else if (B <= wp.auto_max_batch && sch.wave_unsupported().empty()) {
      auto every = [&](bool fused, auto pred) {
        return std::all_of(layers.begin(), layers.end(),
                           [&](RnnLayer* l) { return pred(l->one_launch_shards(device, B, fused)); });
      };
      const int64_t cu = std::max<int64_t>(1, ctx.device(device).info.compute_units);
      const auto one = [](int64_t shards) { return shards > 0; };
      if (every(true, one)) {
        // Every layer runs its fused steps (input projection included) in one launch: one launch per layer,
        // no projection GEMM and no xw round trip. PoCL 3.1, 2 Zen 4 cores, median ms sequential vs the next
        // best (bench rnn --runs 7): T100 B32 H512 L2 130.2 vs 139.8 (wavefront), T200 B64 H256 L2 133.4 vs
        // 139.1 (wavefront), B4 H128 L2 1.42 vs 1.67 (time parallel), B8 H128 L4 4.95 vs 6.39 (layer
        // parallel), T50 B8 H64 L3 0.76 vs 0.89 (time parallel), B12 H128 L1 2.37 vs 2.75 (time parallel).
        s = RnnStrategy::sequential;
        why_auto = "forward LSTM layers, each layer's fused steps in one launch";
      } else if (layers.size() > 1 && every(false, [&](int64_t shards) { return shards > 0 && shards < cu; })) {
        // Each layer's steps in one launch leave compute units idle: the layers' launches (chunks of steps)
        // overlap on their own queues. Same host, T100 B1 H256 L4: layer parallel 4.45 ms, time parallel
        // 6.85, wavefront 7.25, sequential (fused, W + R > 1 MiB: per step) 13.6.
        s = RnnStrategy::layer_parallel;
        why_auto = "forward LSTM layers, each layer's steps in one launch on fewer shards than compute units";
      } else if (every(false, one) && B < 16) {
        // Every layer runs its steps in one launch (batch shards): the projection GEMM and one launch per layer
        // beat the wavefront's T + K (L - 1) launches. PoCL / AVX-512, 2 Sapphire Rapids threads, T100, ms
        // time parallel vs wavefront, min of 15 runs: B4 H128 L2 1.81 vs 2.75, B8 H128 L4 5.95 vs 7.14, T50 B8
        // H64 L3 0.93 vs 1.59; median: B8 H256 L1 6.35 vs 6.73, B12 H128 L1 3.17 vs 3.91 (2 Zen 4 cores: B8
        // H256 L1 5.64 vs 6.72, sequential 6.09). From batch 16 no longer (min: B16 H256 L2 20.2 vs 19.2, T200
        // B64 H256 L2 128 vs 115; Zen 4, median: B16 H256 L2 23.1 vs 19.0).
        s = RnnStrategy::time_parallel;
        why_auto = "forward LSTM layers, batch < 16, each layer's steps in one launch";
      } else if (layers.size() == 1 && B >= 16) {
        // One layer has no layers to overlap; from batch 16 its fused step beat the wavefront's chunked
        // projection on PoCL / AVX-512 (median ms, sequential vs wavefront: T100 B16 H256 11.2 vs 11.6,
        // T100 B32 H512 62.5 vs 65.0, T200 B64 H256 60.3 vs 72.2; below batch 16 the wavefront won).
        s = RnnStrategy::sequential;
        why_auto = "one LSTM layer in the tiles layout, batch >= 16: input projection fused into each step";
      } else {
        s = RnnStrategy::wavefront;
        why_auto = fmt::format("forward LSTM layers in the tiles layout on one device, lag {}", wp.lag);
      }
    } else if (layers.size() > 1 && all_forward) {
      s = RnnStrategy::layer_parallel;
      why_auto = "stack of forward layers";
    } else {
      s = RnnStrategy::time_parallel;
      why_auto = "default";
    }
  }
  // The parallel strategies put work on other queues (shards, layers, the second direction). Those must also come
  // after everything already enqueued on the caller's in-order queue, which no event in `waits` names:
  // without this marker, data-parallel shards on Intel's CPU runtime read inputs and wrote outputs
  // before the caller's earlier commands finished (test_rnn failed intermittently there; PoCL happened
  // to serialise the queues).
  if (s != RnnStrategy::sequential && s != RnnStrategy::wavefront) waits.push_back(barrier(ec.queue, {}));
  cl::Event done;
  std::string what;
  switch (s) {
    case RnnStrategy::sequential: what = sch.sequential(ec.queue, waits, done); break;
    case RnnStrategy::time_parallel: what = sch.time_parallel(ec.queue, waits, done); break;
    case RnnStrategy::layer_parallel: what = sch.layer_parallel(ec.queue, waits, opts.chunk, opts.wave, done); break;
    case RnnStrategy::data_parallel: what = sch.data_parallel(ec.queue, waits, opts.shards, done); break;
    case RnnStrategy::wavefront: what = sch.wavefront(ec.queue, waits, opts.wave, done); break;
    case RnnStrategy::automatic: break;
  }
  if (!why_auto.empty()) what += fmt::format(" (auto: {})", why_auto);
  // The strategies on several queues: each queue's commands wait on other queues' events, so every queue
  // must be submitted, not only the caller's that the host will wait on.
  if (s != RnnStrategy::sequential && s != RnnStrategy::wavefront) ctx.flush();
  state.last = done;
  ec.record(done, "rnn_join");
  log::debug("{}: {}", op, what);
  return what;
}

void RnnLayer::enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
                       ExecutionContext& ec) {
  const char* op = cfg_.cell == RnnCell::lstm ? "LSTM" : cfg_.cell == RnnCell::gru ? "GRU" : "RNN";
  if (inputs.empty() || inputs.size() > 4) invalid(op, "expects 1 to 4 inputs (X, sequence_lens, initial_h, initial_c), got {}", inputs.size());
  if (outputs.size() > 3) invalid(op, "expects at most 3 outputs (Y, Y_h, Y_c), got {}", outputs.size());
  auto in = [&](size_t i) { return i < inputs.size() ? inputs[i] : Tensor{}; };
  auto out = [&](size_t i) { return i < outputs.size() ? outputs[i] : Tensor{}; };
  RnnStackIO io;
  io.x = in(0);
  io.lens = in(1);
  io.h0 = {in(2)};
  io.c0 = {in(3)};
  io.y = out(0);
  io.yh = {out(1)};
  io.yc = {out(2)};
  if (io.c0[0].valid() && cfg_.cell != RnnCell::lstm) invalid(op, "initial_c is an LSTM input");
  if (io.yc[0].valid() && cfg_.cell != RnnCell::lstm) invalid(op, "Y_c is an LSTM output");
  RnnRunOptions opts;
  opts.strategy = strategy_;
  RnnLayer* self = this;
  algorithm_ = algorithm_.substr(0, algorithm_.find(" | ")) + " | " +
               detail::run_rnn_layers(*ctx_, device_, std::span<RnnLayer* const>(&self, 1), io, opts, *sched_, ec, workspace);
}

std::unique_ptr<RnnStack> RnnStack::create(Context& ctx, int device, const std::vector<RnnConfig>& layers,
                                           const std::vector<RnnWeights>& weights) {
  if (layers.empty()) fail("RnnStack: no layers");
  if (layers.size() != weights.size()) fail("RnnStack: {} layer configs but {} weight sets", layers.size(), weights.size());
  std::unique_ptr<RnnStack> s(new RnnStack());
  s->ctx_ = &ctx;
  s->device_ = device;
  for (size_t l = 0; l < layers.size(); ++l) {
    const RnnConfig& c = layers[l];
    if (l > 0) {
      const RnnConfig& p = layers[l - 1];
      if (c.seq_length != p.seq_length || c.batch != p.batch || c.layout != p.layout)
        fail("RnnStack: layer {} has seq_length/batch/layout {}/{}/{}, layer 0 has {}/{}/{}", l, c.seq_length, c.batch,
             c.layout, layers[0].seq_length, layers[0].batch, layers[0].layout);
      if (c.input_size != p.dirs() * p.hidden_size)
        fail("RnnStack: layer {} has input_size {}, expected directions x hidden_size of layer {} = {}", l, c.input_size,
             l - 1, p.dirs() * p.hidden_size);
    }
    s->layers_.push_back(RnnLayer::create(ctx, device, c, weights[l]));
  }
  return s;
}

void RnnStack::enqueue(const RnnStackIO& io, const RnnRunOptions& opts, ExecutionContext& ec) {
  std::vector<RnnLayer*> ls;
  for (auto& l : layers_) ls.push_back(l.get());
  schedule_ = detail::run_rnn_layers(*ctx_, device_, ls, io, opts, sched_, ec);
}

double RnnStack::flops() const {
  double f = 0;
  for (auto& l : layers_) f += l->config().flops();
  return f;
}

}  // namespace cldl
