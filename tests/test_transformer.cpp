// Transformer companions: LayerNorm / RMSNorm (with fused residual), rotary embedding, embedding lookup,
// SwiGLU and the feed-forward block against the C++ reference on odd shapes, the ONNX
// LayerNormalization / RMSNormalization / RotaryEmbedding node tests, and configuration errors.
// Tolerances: norms 1e-4 relative + 1e-5 absolute; rotary, SwiGLU 1e-5 + 1e-6; embedding exact;
// feed-forward 1e-4 + 1e-4 (two fp32 GEMMs over K up to 96).
#include <filesystem>
#include <optional>
#include <set>

#include "layers/rnn.hpp"
#include "reference/attention_ref.hpp"
#include "support/attn_onnx_data.hpp"
#include "support/test_util.hpp"

using namespace cldl;
using cldl::test::ctx;

namespace {

std::vector<float> download(const Tensor& t) {
  HostTensor h = ctx().download(t);
  return {h.as<float>(), h.as<float>() + h.numel()};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<float> run_norm(const LayerNormConfig& cfg, const std::vector<float>& x, const std::vector<float>* r,
                            const std::vector<float>& scale, const std::vector<float>* bias,
                            std::vector<float>* sum = nullptr, std::vector<float>* mean = nullptr,
                            std::vector<float>* inv = nullptr) {
  auto op = LayerNorm::create(ctx(), 0, cfg);
  std::vector<Tensor> in{ctx().upload(HostTensor::from<float>(cfg.input, x))};
  if (r) in.push_back(ctx().upload(HostTensor::from<float>(cfg.input, *r)));
  in.push_back(ctx().upload(HostTensor::from<float>({cfg.cols()}, scale)));
  if (bias) in.push_back(ctx().upload(HostTensor::from<float>({cfg.cols()}, *bias)));
  std::vector<Tensor> out{ctx().alloc(cfg.input, DType::f32)};
  if (cfg.residual_sum_output) out.push_back(ctx().alloc(cfg.input, DType::f32));
  if (cfg.stats_output) {
    out.push_back(ctx().alloc({cfg.rows()}, DType::f32));
    out.push_back(ctx().alloc({cfg.rows()}, DType::f32));
  }
  auto ec = ctx().exec();
  op->enqueue(in, out, nullptr, ec);
  ec.queue.finish();
  if (sum) *sum = download(out[1]);
  if (mean && cfg.stats_output) *mean = download(out[out.size() - 2]);
  if (inv && cfg.stats_output) *inv = download(out[out.size() - 1]);
  return download(out[0]);
}

}  // namespace

TEST_SUITE("transformer") {

TEST_CASE("LayerNorm and RMSNorm over the last axes, with and without a fused residual") {
  for (bool rms : {false, true})
    for (Shape s : {Shape{3, 7, 13}, Shape{1, 129}, Shape{5, 3, 80}}) {
      for (int64_t axis : {int64_t(-1), int64_t(1)}) {
        LayerNormConfig c;
        c.rms = rms, c.input = s, c.axis = axis, c.epsilon = 1e-3f;
        CAPTURE(rms);
        CAPTURE(s.str());
        CAPTURE(axis);
        auto x = test::random_floats(size_t(s.numel()), 1, -2.0f, 3.0f);  // a non-zero mean
        auto sc = test::random_floats(size_t(c.cols()), 2, 0.5f, 1.5f);
        auto b = test::random_floats(size_t(c.cols()), 3);
        auto want = ref::norm(c, x, nullptr, sc, &b);
        auto got = run_norm(c, x, nullptr, sc, rms ? nullptr : &b);
        CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-5);
      }
      LayerNormConfig c;
      c.rms = rms, c.input = s, c.residual = true, c.residual_sum_output = true;
      c.wg_size = 64;  // the GPU form (a work-group per row, local reductions), also on CPUs
      auto x = test::random_floats(size_t(s.numel()), 4), r = test::random_floats(size_t(s.numel()), 5);
      auto sc = test::random_floats(size_t(c.cols()), 6), b = test::random_floats(size_t(c.cols()), 7);
      auto want = ref::norm(c, x, &r, sc, &b);
      std::vector<float> sum;
      auto got = run_norm(c, x, &r, sc, rms ? nullptr : &b, &sum);
      CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-5);
      std::vector<float> want_sum(x.size());
      for (size_t i = 0; i < x.size(); ++i) want_sum[i] = x[i] + r[i];
      CLDL_CHECK_CLOSE(sum.data(), want_sum.data(), want_sum.size(), 0.0, 0.0);
    }
}

TEST_CASE("rotary embedding: half-split and interleaved, partial rotary dims, both layouts") {
  for (bool interleaved : {false, true})
    for (bool seq_first : {false, true})
      for (int64_t rot : {int64_t(0), int64_t(6)})
        for (bool pos : {false, true}) {
          RotaryConfig c;
          c.batch = 3, c.heads = 2, c.seq = 7, c.head_size = 10, c.rotary_dim = rot;
          c.interleaved = interleaved, c.seq_first = seq_first, c.position_ids = pos, c.max_pos = 11;
          CAPTURE(interleaved);
          CAPTURE(seq_first);
          CAPTURE(rot);
          CAPTURE(pos);
          const int64_t half = (rot ? rot : c.head_size) / 2, rows = pos ? c.max_pos : c.batch * c.seq;
          auto x = test::random_floats(size_t(c.batch * c.heads * c.seq * c.head_size), 10);
          auto cs = test::random_floats(size_t(rows * half), 11), sn = test::random_floats(size_t(rows * half), 12);
          std::vector<int64_t> ids;
          for (int64_t i = 0; i < c.batch * c.seq; ++i) ids.push_back((i * 5 + 3) % c.max_pos);
          auto want = ref::rotary(c, x, cs, sn, pos ? &ids : nullptr);
          auto op = Rotary::create(ctx(), 0, c);
          Shape xs = Rotary::validate(c);
          std::vector<Tensor> in{ctx().upload(HostTensor::from<float>(xs, x)),
                                 ctx().upload(HostTensor::from<float>({rows, half}, cs)),
                                 ctx().upload(HostTensor::from<float>({rows, half}, sn))};
          if (pos) in.push_back(ctx().upload(HostTensor::from<int64_t>({c.batch, c.seq}, ids)));
          Tensor y = ctx().alloc(xs, DType::f32);
          Tensor out[1] = {y};
          auto ec = ctx().exec();
          op->enqueue(in, out, nullptr, ec);
          auto got = download(y);
          CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
        }
}

TEST_CASE("embedding lookup with int32 and int64 ids, negative ids wrap") {
  const int64_t V = 37, E = 13;
  auto table = test::random_floats(size_t(V * E), 20);
  std::vector<int64_t> ids{0, 36, 5, -1, 17, 17, -37};
  auto want = ref::embedding(table, V, E, ids);
  for (DType dt : {DType::i32, DType::i64}) {
    EmbeddingConfig c;
    c.vocab = V, c.dim = E, c.ids = {7}, c.id_type = dt;
    auto op = Embedding::create(ctx(), 0, c);
    Tensor t = ctx().upload(HostTensor::from<float>({V, E}, table));
    Tensor i = dt == DType::i64 ? ctx().upload(HostTensor::from<int64_t>({7}, ids))
                                : ctx().upload(HostTensor::from<int32_t>({7}, std::vector<int32_t>(ids.begin(), ids.end())));
    Tensor y = ctx().alloc(Embedding::validate(c), DType::f32);
    CHECK(y.shape == Shape{7, E});
    Tensor in[2] = {t, i}, out[1] = {y};
    auto ec = ctx().exec();
    op->enqueue(in, out, nullptr, ec);
    auto got = download(y);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 0.0, 0.0);
  }
}

TEST_CASE("SwiGLU and the feed-forward block (GEMM + bias + GELU epilogue)") {
  {
    Shape s{3, 7, 26};
    auto x = test::random_floats(size_t(s.numel()), 30, -3.0f, 3.0f);
    auto want = ref::swiglu(x, 21, 13);
    auto op = SwiGlu::create(ctx(), 0, s);
    Tensor y = ctx().alloc(SwiGlu::validate(s), DType::f32);
    Tensor in[1] = {ctx().upload(HostTensor::from<float>(s, x))}, out[1] = {y};
    auto ec = ctx().exec();
    op->enqueue(in, out, nullptr, ec);
    auto got = download(y);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-5, 1e-6);
  }
  for (Act act : {Act::gelu, Act::gelu_tanh, Act::silu}) {
    FeedForwardConfig c;
    c.rows = 7, c.model_dim = 24, c.hidden_dim = 96, c.act = Activation(act);
    auto x = test::random_floats(size_t(c.rows * c.model_dim), 40), w1 = test::random_floats(size_t(24 * 96), 41, -0.3f, 0.3f);
    auto b1 = test::random_floats(96, 42), w2 = test::random_floats(size_t(96 * 24), 43, -0.3f, 0.3f);
    auto b2 = test::random_floats(24, 44);
    std::vector<float> want(size_t(c.rows * 24));
    for (int64_t r = 0; r < c.rows; ++r) {
      std::vector<double> h(96);
      for (int64_t j = 0; j < 96; ++j) {
        double a = b1[size_t(j)];
        for (int64_t k = 0; k < 24; ++k) a += double(x[size_t(r * 24 + k)]) * w1[size_t(k * 96 + j)];
        h[size_t(j)] = act == Act::gelu        ? 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)))
                       : act == Act::gelu_tanh ? 0.5 * a * (1 + std::tanh(0.7978845608028654 * (a + 0.044715 * a * a * a)))
                                               : a / (1 + std::exp(-a));
      }
      for (int64_t n = 0; n < 24; ++n) {
        double a = b2[size_t(n)];
        for (int64_t j = 0; j < 96; ++j) a += h[size_t(j)] * w2[size_t(j * 24 + n)];
        want[size_t(r * 24 + n)] = float(a);
      }
    }
    auto op = FeedForward::create(ctx(), 0, c);
    Tensor ws = ctx().alloc({int64_t(op->workspace_bytes() / 4)}, DType::f32);
    Tensor in[5] = {ctx().upload(HostTensor::from<float>({7, 24}, x)), ctx().upload(HostTensor::from<float>({24, 96}, w1)),
                    ctx().upload(HostTensor::from<float>({96}, b1)), ctx().upload(HostTensor::from<float>({96, 24}, w2)),
                    ctx().upload(HostTensor::from<float>({24}, b2))};
    Tensor y = ctx().alloc({7, 24}, DType::f32);
    Tensor out[1] = {y};
    auto ec = ctx().exec();
    op->enqueue(in, out, &ws, ec);
    auto got = download(y);
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-4);
  }
}

TEST_CASE("ONNX LayerNormalization, RMSNormalization and RotaryEmbedding node tests") {
  namespace fs = std::filesystem;
  namespace ox = cldl::test::attn_onnx;
  const fs::path root = fs::path(CLDL_CONFORMANCE_DIR) / "onnx-node";
  REQUIRE(fs::exists(root));
  int run = 0;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root)) {
    std::string n = e.path().filename().string();
    if (n.rfind("test_layer_normalization", 0) == 0 || n.rfind("test_rms_normalization", 0) == 0 ||
        n.rfind("test_rotary_embedding", 0) == 0)
      dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  for (const auto& dir : dirs) {
    const std::string name = dir.filename().string();
    CAPTURE(name);
    ox::NodeTest t = ox::load_node_test(dir.string());
    const auto& n = t.node;
    auto in = [&](size_t i) -> const ox::Tensor* {
      if (i >= n.inputs.size() || n.inputs[i].empty()) return nullptr;
      return &t.inputs.at(n.inputs[i]);
    };
    std::vector<float> got, stats_mean, stats_inv;
    if (n.op_type == "LayerNormalization" || n.op_type == "RMSNormalization") {
      LayerNormConfig c;
      c.rms = n.op_type == "RMSNormalization";
      c.input = in(0)->shape();
      c.axis = n.get_i("axis", -1);
      c.epsilon = n.get_f("epsilon", 1e-5f);
      c.bias = in(2) != nullptr;
      c.stats_output = t.outputs.size() == 3;
      got = run_norm(c, in(0)->f, nullptr, in(1)->f, in(2) ? &in(2)->f : nullptr, nullptr, &stats_mean, &stats_inv);
    } else {
      REQUIRE(n.op_type == "RotaryEmbedding");
      const ox::Tensor *X = in(0), *C = in(1), *S = in(2), *P = in(3);
      RotaryConfig c;
      c.batch = X->dims[0];
      if (X->dims.size() == 3) {
        c.heads = n.get_i("num_heads", 0), c.seq = X->dims[1], c.head_size = X->dims[2] / c.heads;
        c.seq_first = true;
      } else {  // [B, H, S, D]
        c.heads = X->dims[1], c.seq = X->dims[2], c.head_size = X->dims[3];
      }
      c.rotary_dim = n.get_i("rotary_embedding_dim", 0);
      c.interleaved = n.get_i("interleaved", 0) != 0;
      c.position_ids = P != nullptr;
      if (P) c.max_pos = C->dims[0];
      auto op = Rotary::create(ctx(), 0, c);
      std::vector<Tensor> ins{ctx().upload(HostTensor::from<float>(Rotary::validate(c), X->f)),
                              ctx().upload(HostTensor::from<float>(C->shape(), C->f)),
                              ctx().upload(HostTensor::from<float>(S->shape(), S->f))};
      if (P) ins.push_back(ctx().upload(HostTensor::from<int64_t>(P->shape(), P->i)));
      Tensor y = ctx().alloc(Rotary::validate(c), DType::f32);
      Tensor out[1] = {y};
      auto ec = ctx().exec();
      op->enqueue(ins, out, nullptr, ec);
      got = download(y);
    }
    ++run;
    const auto& want = t.outputs[0].f;
    REQUIRE(got.size() == want.size());
    CLDL_CHECK_CLOSE(got.data(), want.data(), want.size(), 1e-4, 1e-5);
    if (t.outputs.size() == 3) {  // LayerNormalization's Mean and InvStdDev
      REQUIRE(stats_mean.size() == t.outputs[1].f.size());
      REQUIRE(stats_inv.size() == t.outputs[2].f.size());
      CLDL_CHECK_CLOSE(stats_mean.data(), t.outputs[1].f.data(), stats_mean.size(), 1e-4, 1e-5);
      CLDL_CHECK_CLOSE(stats_inv.data(), t.outputs[2].f.data(), stats_inv.size(), 1e-4, 1e-5);
    }
  }
  CHECK(run == int(dirs.size()));
  CHECK(run >= 30);
}

TEST_CASE("bad configurations name the op, argument and value") {
  LayerNormConfig n;
  n.input = {3, 5}, n.axis = 2;
  auto msg = error_of([&] { LayerNorm::validate(n); });
  CHECK(msg.find("LayerNormalization: axis 2 is out of range for rank 2") != std::string::npos);
  RotaryConfig r;
  r.head_size = 10, r.rotary_dim = 7;
  msg = error_of([&] { Rotary::validate(r); });
  CHECK(msg.find("RotaryEmbedding: rotary_dim 7 must be even") != std::string::npos);
  EmbeddingConfig e;
  e.vocab = 10, e.dim = 4, e.ids = {3}, e.id_type = DType::f32;
  msg = error_of([&] { Embedding::validate(e); });
  CHECK(msg.find("Embedding: ids must be i32 or i64, got f32") != std::string::npos);
  msg = error_of([&] { SwiGlu::validate(Shape{2, 5}); });
  CHECK(msg.find("SwiGLU: the last dim of input [2, 5] must be even") != std::string::npos);
}

}  // TEST_SUITE

TEST_SUITE("transformer") {

TEST_CASE("the registered default variants of attention.cl and transformer.cl build") {
  int built = 0;
  for (const auto& spec : registered_programs()) {
    if (spec.file != "attention.cl" && spec.file != "transformer.cl") continue;
    CAPTURE(spec.options);
    CHECK_NOTHROW(ctx().program(spec.file, spec.options));
    ++built;
  }
  CHECK(built == 16);  // 12 attention.cl (layers/attention.cpp) + 4 transformer.cl
}

// `cldl compile` builds registered_programs(device): every default program create() makes on this
// device is among them, and the variants for other kinds of device are not.
TEST_CASE("registered variants per device: this device's defaults are in, other devices' are out") {
  std::set<std::pair<std::string, std::string>> mine;
  for (const auto& p : registered_programs(ctx().device().info)) mine.insert({p.file, p.options});
  auto& cache = ProgramCache::global();
  cache.start_recording();
  std::vector<ProgramSpec> made;
  try {
    AttentionConfig a;  // prefill: 32 and 16 query rows per head (CPUs: the blocked kernel), then with a mask
    a.batch = 1, a.q_heads = 2, a.q_len = 32, a.kv_len = 32, a.head_size = 64;
    Attention::create(ctx(), 0, a);
    a.q_len = 16, a.kv_len = 16;
    Attention::create(ctx(), 0, a);
    a.mask = AttentionMask::additive, a.mask_shape = Shape{16, 16};
    Attention::create(ctx(), 0, a);
    a.mask = AttentionMask::none, a.mask_shape = Shape{};
    a.q_len = 1, a.kv_len = 32;  // a decode step over a cache with kv lengths (CPUs) / without (others)
    if (ctx().device().info.type == DeviceType::cpu) a.kv_lens = AttentionKvLens::i32;
    Attention::create(ctx(), 0, a);
    for (RnnCell cell : {RnnCell::lstm, RnnCell::gru, RnnCell::rnn}) {
      RnnConfig r;
      r.cell = cell, r.seq_length = 3, r.batch = 2, r.input_size = 5, r.hidden_size = 7;
      RnnWeights w;
      w.W = test::random_tensor({1, r.gates() * 7, 5}, 1);
      w.R = test::random_tensor({1, r.gates() * 7, 7}, 2);
      RnnLayer::create(ctx(), 0, r, w);
    }
    made = cache.stop_recording();
  } catch (...) {
    cache.stop_recording();
    throw;
  }
  int checked = 0;
  const DeviceInfo& info = ctx().device().info;
  for (const auto& m : made) {
    if (m.file != "rnn.cl" && m.file != "attention.cl") continue;
    // The registered local-tile form assumes >= 32 KiB of local memory and work-groups of 64; on smaller
    // devices create() shrinks its tiles to a variant nobody registered.
    if (m.options.find("-DUSE_LOCAL=1") != std::string::npos &&
        (info.local_mem_bytes < 32768 || info.max_work_group_size < 64))
      continue;
    CAPTURE(m.file);
    CAPTURE(m.options);
    CHECK(mine.count({m.file, m.options}));
    ++checked;
  }
  CHECK(checked >= 3);  // the blocked / tile kernels, their masked form, rnn.cl

  auto has = [](const DeviceInfo& d, const std::string& file, const std::string& options) {
    for (const auto& p : registered_programs(d))
      if (p.file == file && p.options.find(options) != std::string::npos) return true;
    return false;
  };
  DeviceInfo gpu;
  gpu.type = DeviceType::gpu;
  gpu.preferred_vector_float = 1;
  DeviceInfo avx512 = gpu, avx2 = gpu, fpga = gpu;
  avx512.type = avx2.type = DeviceType::cpu;
  avx512.preferred_vector_float = 16, avx2.preferred_vector_float = 8;
  fpga.type = DeviceType::accelerator;
  CHECK(has(gpu, "rnn.cl", "-DRNN_KMAJOR=1"));
  CHECK_FALSE(has(gpu, "rnn.cl", "-DRNN_KMAJOR=0"));
  CHECK(has(gpu, "attention.cl", "-DUSE_LOCAL=1"));
  CHECK_FALSE(has(gpu, "attention.cl", "-DATT_KERNEL=2"));
  CHECK(has(avx512, "rnn.cl", "-DRNN_TW=16"));
  CHECK_FALSE(has(avx512, "rnn.cl", "-DRNN_KMAJOR=1"));
  CHECK(has(avx512, "attention.cl", "-DATT_KB=8"));
  CHECK_FALSE(has(avx512, "attention.cl", "-DATT_KB=6"));
  CHECK_FALSE(has(avx512, "attention.cl", "-DUSE_LOCAL=1"));
  CHECK(has(avx2, "rnn.cl", "-DRNN_KMAJOR=0"));
  CHECK_FALSE(has(avx2, "rnn.cl", "-DRNN_TW=16"));
  CHECK(has(avx2, "attention.cl", "-DATT_KB=6"));
  CHECK_FALSE(has(fpga, "rnn.cl", "-DRNN_TW=16"));
  CHECK(has(fpga, "rnn.cl", "-DRNN_KMAJOR=0"));
  CHECK(has(fpga, "attention.cl", "-DUSE_LOCAL=1"));
  for (const DeviceInfo* d : {&gpu, &avx512, &avx2, &fpga}) {
    CHECK(has(*d, "attention.cl", "-DATT_KERNEL=3"));  // the plain path and the KV cache: everywhere
    CHECK(registered_programs(*d).size() < registered_programs().size());
  }
}

}  // TEST_SUITE
