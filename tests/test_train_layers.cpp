// Layer-parallel training of recurrent stacks (TrainOptions::parallel = layers, models/rnn_time_chunks.hpp): every
// LSTM / GRU layer's forward and backward in time chunks, the layers in groups over the devices. Against training
// the same model with whole layers on one device (itself checked against PyTorch in test_train.cpp and
// test_rnn_backward.cpp): every step's loss and the final weights within 1e-5 relative + 1e-6 absolute (the weight
// gradients are sums of the chunks' in another order). The plans are read too: the number of chunk nodes, the
// chunks of adjacent layers joined chunk to chunk (no Concat between them: what makes the schedule a wavefront,
// forward and, in the backward, in reverse), and the device of each. Suite multi-device puts the layers on two PoCL
// devices (ctest multi_device).
#include <cmath>
#include <cstring>
#include <random>

#include "models/builder.hpp"
#include "models/executor.hpp"
#include "models/npy.hpp"
#include "models/op_registry.hpp"
#include "models/onnx_import.hpp"
#include "models/train.hpp"
#include "tests/support/onnx_util.hpp"
#include "tests/support/test_util.hpp"
#include "tests/support/train_cli.hpp"
#include "tests/support/two_devices.hpp"

using namespace cldl;
using namespace cldl::graph;

namespace {

struct Stack {
  std::string cell = "LSTM";
  int layers = 2;
  int64_t steps = 7, input = 5, hidden = 6, classes = 4;
  std::string first_direction = "forward";  // layer 0's
};

// x [T, N, I] (N symbolic) -> `layers` layers of `cell` (ONNX nodes rnn0, rnn1, ...), each Y [T, 1, N, H] squeezed
// to [T, N, H] as torch.onnx exports nn.LSTM(num_layers = L) -> MatMul H x classes + bias: logits [T, N, classes].
Graph stack_model(const Stack& s) {
  GraphBuilder b("rnn_stack");
  ValueShape xs(Shape{s.steps, 1, s.input});
  xs.dims[1] = -1;
  xs.symbols[1] = "N";
  Value x = b.input("x", DType::f32, xs);
  uint32_t seed = 17;
  auto rand = [&](Shape sh) { return test::random_tensor(sh, seed++, -0.45f, 0.45f); };
  const int64_t G = (s.cell == "LSTM" ? 4 : 3) * s.hidden;
  Value axes = b.constant("axes1", HostTensor::from<int64_t>(Shape{1}, std::vector<int64_t>{1}));
  int64_t in = s.input;
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "rnn" + std::to_string(l);
    Value w = b.constant(p + ".W", rand(Shape{1, G, in})), r = b.constant(p + ".R", rand(Shape{1, G, s.hidden})),
          bias = b.constant(p + ".B", rand(Shape{1, 2 * G}));
    Node n;
    n.name = p;
    n.op_type = s.cell;
    n.inputs = {x.name, w.name, r.name, bias.name};
    n.outputs = {p + ".Y"};
    n.attrs["hidden_size"] = s.hidden;
    if (l == 0) n.attrs["direction"] = s.first_direction;
    if (s.cell == "GRU") n.attrs["linear_before_reset"] = int64_t(1);
    b.graph().nodes.push_back(n);
    x = b.op1("Squeeze", {Value{&b, p + ".Y"}, axes});
    in = s.hidden;
  }
  Value wf = b.constant("fc.W", rand(Shape{s.hidden, s.classes})), bf = b.constant("fc.B", rand(Shape{s.classes}));
  b.output(b.add(b.matmul(x, wf), bf), "logits");
  Graph g = b.build();
  ValueShape os(Shape{s.steps, 1, s.classes});
  os.dims[1] = -1;
  os.symbols[1] = "N";
  g.outputs[0].shape = os;
  return g;
}

struct Data {
  HostTensor x, y;  // x [T, 5, I], labels [T, 5] (one class per step and sequence)
};
Data data(const Stack& s) {
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  Data d{HostTensor(DType::f32, Shape{s.steps, 5, s.input}), HostTensor(DType::i64, Shape{s.steps, 5})};
  for (auto& v : d.x.span<float>()) v = u(rng);
  for (auto& v : d.y.span<int64_t>()) v = int64_t(rng() % uint64_t(s.classes));
  return d;
}

TrainOptions options() {
  TrainOptions o;
  o.batch = 3;  // 5 sequences: batches of 3 and 2
  o.batch_axis = 1;
  o.shuffle = false;
  o.lr = 0.2f;
  return o;
}

// Layer parallel against whole layers: 1e-6 absolute + 1e-5 relative.
void check_close(const HostTensor& got, const HostTensor& want, const std::string& what) {
  test::largest_difference(got, want, what, 1e-6, 1e-5);
}
HostTensor losses(const std::vector<float>& v) { return HostTensor::from<float>(Shape{int64_t(v.size())}, v); }

// Two epochs (4 steps) with whole layers on device 0 and with `layered`; every loss and weight compared. Returns
// the layered trainer's plans.
std::vector<std::shared_ptr<CompiledModel>> whole_vs_layered(const std::shared_ptr<Context>& ctx, const Stack& s,
                                                             TrainOptions layered) {
  const Data d = data(s);
  TrainOptions whole = options();
  whole.optimizer = layered.optimizer;
  whole.lr = layered.lr;
  Trainer a(ctx, stack_model(s), whole), b(ctx, stack_model(s), layered);
  std::vector<float> la, lb;
  for (int e = 0; e < 2; ++e) {
    auto ra = a.epoch(d.x, d.y), rb = b.epoch(d.x, d.y);
    la.insert(la.end(), ra.step_losses.begin(), ra.step_losses.end());
    lb.insert(lb.end(), rb.step_losses.begin(), rb.step_losses.end());
  }
  REQUIRE(la.size() == 4);
  REQUIRE(lb.size() == 4);
  check_close(losses(lb), losses(la), "step losses");
  auto wa = a.read_weights(), wb = b.read_weights();
  const Graph init = stack_model(s);
  bool moved = false;
  for (auto& name : a.weights()) {
    REQUIRE(wb.at(name).shape() == wa.at(name).shape());
    check_close(wb.at(name), wa.at(name), name);
    moved |= std::memcmp(wa.at(name).data(), init.initializers.at(name).data(), wa.at(name).bytes()) != 0;
  }
  CHECK(moved);
  return b.plans();
}

// What a plan made of the stack: per layer its forward and backward chunk nodes, and how the layers' chunks meet.
struct Schedule {
  std::map<int, std::vector<size_t>> forward, backward;  // layer -> node indices
  int forward_links = 0, backward_links = 0;  // chunks reading a chunk of the adjacent layer (through a Reshape)
  int concats_between = 0;                    // RNN chunks reading a value that waits for a whole layer
  std::vector<int> start;                     // per node: see schedule()
};
int layer_of(const std::string& name) {  // "rnn1/t3" -> 1
  if (name.rfind("rnn", 0) != 0) return -1;
  return std::atoi(name.c_str() + 3);
}
Schedule schedule(const CompiledModel& p) {
  const Graph& g = p.graph();
  Schedule s;
  auto pr = g.producers();
  auto source = [&](const std::string& v) -> const Node* {  // the producer, looking through one Reshape
    auto it = pr.find(v);
    if (it == pr.end()) return nullptr;
    const Node* n = &g.nodes[it->second];
    if (n->op_type == "Reshape" || n->op_type == "Squeeze") {
      auto jt = pr.find(n->input(0));
      return jt == pr.end() ? n : &g.nodes[jt->second];
    }
    return n;
  };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.op_type == "LSTMTrain" || n.op_type == "GRUTrain") {
      s.forward[layer_of(n.name)].push_back(i);
      const Node* x = source(n.input(0));
      if (x && (x->op_type == "LSTMTrain" || x->op_type == "GRUTrain")) ++s.forward_links;
      if (x && x->op_type == "Concat") ++s.concats_between;
    } else if (n.op_type == "RNNGrad") {
      const Node* f = source(n.input(3));  // its saved states: the forward chunk it differentiates
      REQUIRE(f);
      s.backward[layer_of(f->name)].push_back(i);
      CHECK(p.node_devices()[i] == p.node_devices()[pr.at(n.input(3))]);  // on its forward's device
      const Node* dy = source(n.input(4));
      if (dy && dy->op_type == "RNNGrad") ++s.backward_links;
      if (dy && dy->op_type == "Concat") ++s.concats_between;
    }
  }
  // The chunks' weight gradients are summed on their device (an element-wise fusion across devices put the Sum on
  // the first device, where it waited for the whole layer ahead of the layer below).
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (auto& in : g.nodes[i].inputs) {
      auto it = pr.find(in);
      if (it == pr.end() || g.nodes[it->second].op_type != "RNNGrad") continue;
      const auto& outs = g.nodes[it->second].outputs;
      const size_t k = size_t(std::find(outs.begin(), outs.end(), in) - outs.begin());
      if (k >= 1 && k <= 3) CHECK(p.node_devices()[i] == p.node_devices()[it->second]);
    }
  // Each node's start when every node with a kernel takes one unit, after its inputs' producers and after the node
  // before it on its device (the executor enqueues in this order on one in-order queue per CPU device); a view
  // (Reshape, Identity...) enqueues nothing: it is ready when its input is.
  std::map<int, int> free;
  std::vector<int> end(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const OpDef* d = find_op(g.nodes[i].op_type, g.nodes[i].domain);
    const bool view = d && d->view_of >= 0;
    int start = view ? 0 : free[p.node_devices()[i]];
    for (auto& in : g.nodes[i].inputs)
      if (auto it = pr.find(in); it != pr.end()) start = std::max(start, end[it->second]);
    s.start.push_back(start);
    end[i] = view ? start : start + 1;
    if (!view) free[p.node_devices()[i]] = end[i];
  }
  return s;
}

// Adjacent layers on different devices overlap: layer l + 1's first forward chunk starts before layer l's last one
// ends; layer l's backward of its last chunk (its first) starts before layer l + 1's backward of chunk 0 (its last)
// ends. Returns how many pairs were on different devices.
int check_wavefronts(const CompiledModel& p, const Schedule& s) {
  int pairs = 0;
  for (auto& [l, f] : s.forward) {
    if (!s.forward.count(l + 1) || p.node_devices()[f[0]] == p.node_devices()[s.forward.at(l + 1)[0]]) continue;
    ++pairs;
    CAPTURE(l);
    const auto &up = s.forward.at(l + 1), &bl = s.backward.at(l), &bu = s.backward.at(l + 1);
    CHECK(s.start[up.front()] < s.start[f.back()] + 1);
    CHECK(s.start[bl.front()] < s.start[bu.back()] + 1);
  }
  return pairs;
}

}  // namespace

TEST_SUITE("train") {
  TEST_CASE("layer parallel on one device: LSTM and GRU stacks in time chunks train as whole layers") {
    auto ctx = test::shared_ctx();
    for (std::string cell : {"LSTM", "GRU"})
      for (int64_t chunks : {3, 7, 20}) {  // 3, 2, 2 steps; one step each; more chunks than steps: 7
        CAPTURE(cell);
        CAPTURE(chunks);
        Stack s;
        s.cell = cell;
        TrainOptions o = options();
        o.parallel = TrainParallel::layers;
        o.time_chunks = chunks;
        if (cell == "GRU") o.optimizer = TrainOptimizer::adam, o.lr = 0.02f;
        auto plans = whole_vs_layered(ctx, s, o);
        REQUIRE(plans.size() == 2);  // batches of 3 and of 2
        const size_t c = size_t(std::min<int64_t>(chunks, s.steps));
        for (auto& p : plans) {
          const Schedule sc = schedule(*p);
          REQUIRE(sc.forward.size() == 2);
          CHECK(sc.forward.at(0).size() == c);
          CHECK(sc.forward.at(1).size() == c);
          CHECK(sc.backward.at(0).size() == c);
          CHECK(sc.backward.at(1).size() == c);
          CHECK(sc.forward_links == int(c));  // layer 1's chunk k reads layer 0's chunk k
          CHECK(sc.backward_links == int(c)); // layer 0's backward chunk k reads layer 1's dX of chunk k
          CHECK(sc.concats_between == 0);
        }
      }
  }

  TEST_CASE("layer parallel: a reverse layer runs whole (logged), the forward layers above it in chunks") {
    Stack s;
    s.layers = 3;
    s.first_direction = "reverse";
    s.steps = 5;
    TrainOptions o = options();
    o.parallel = TrainParallel::layers;
    o.time_chunks = 2;
    auto plans = whole_vs_layered(test::shared_ctx(), s, o);
    REQUIRE(!plans.empty());
    const Schedule sc = schedule(*plans[0]);
    CHECK(sc.forward.at(0).size() == 1);
    CHECK(sc.backward.at(0).size() == 1);
    CHECK(sc.forward.at(1).size() == 2);
    CHECK(sc.forward.at(2).size() == 2);
    CHECK(sc.forward_links == 2);   // layer 2 from layer 1, chunk by chunk
    CHECK(sc.backward_links == 2);  // layer 1 from layer 2
  }

  TEST_CASE("layer parallel: errors name the option and the model") {
    auto ctx = test::shared_ctx();
    TrainOptions o = options();
    o.parallel = TrainParallel::layers;
    o.batch_axis = 0;
    CHECK_THROWS_WITH_AS(Trainer(ctx, import_onnx_file(std::string(CLDL_SOURCE_DIR) + "/tests/data/train/model.onnx"), o),
                         doctest::Contains("parallel 'layers' splits the model's LSTM / GRU layers over the devices"),
                         Error);
    TrainOptionNames n;
    n.time_chunks = 4;
    CHECK_THROWS_WITH_AS(parse_train_options(n), "train: time_chunks 4 is for parallel 'layers' (the recurrent layers "
                                                 "over the devices)", Error);
    n.parallel = "pipeline";
    CHECK_THROWS_WITH_AS(parse_train_options(n), "train: parallel 'pipeline' is not one of data, layers", Error);
    n.parallel = "layers";
    n.time_chunks = -1;
    CHECK_THROWS_WITH_AS(parse_train_options(n), "train: time_chunks must not be negative, got -1", Error);
    n.time_chunks = 4;
    const TrainOptions p = parse_train_options(n);
    CHECK(p.parallel == TrainParallel::layers);
    CHECK(p.time_chunks == 4);
  }
}

TEST_SUITE("multi-device") {
  TEST_CASE("layer parallel over two devices: the LSTM layers' chunks a wavefront on each, as one device") {
    auto ctx = test::two_devices();
    if (!ctx) return;
    for (int layers : {2, 3}) {
      CAPTURE(layers);
      Stack s;
      s.layers = layers;
      TrainOptions o = options();
      o.parallel = TrainParallel::layers;
      o.devices = {0, 1};
      o.time_chunks = 3;
      auto plans = whole_vs_layered(ctx, s, o);
      REQUIRE(!plans.empty());
      for (auto& p : plans) {
        const Schedule sc = schedule(*p);
        CHECK(sc.forward_links == 3 * (layers - 1));
        CHECK(sc.backward_links == 3 * (layers - 1));
        CHECK(sc.concats_between == 0);
        for (auto& [l, nodes] : sc.forward) {
          const int want = l * 2 / layers;  // contiguous groups: 2 layers 0 | 1, 3 layers 0 1 | 2
          for (size_t i : nodes) CHECK(p->node_devices()[i] == want);
          for (size_t i : sc.backward.at(l)) CHECK(p->node_devices()[i] == want);
        }
        CHECK(check_wavefronts(*p, sc) == 1);
      }
    }
    Stack gru;
    gru.cell = "GRU";
    gru.steps = 9;
    TrainOptions o = options();
    o.parallel = TrainParallel::layers;
    o.devices = {1, 0};  // the list's order: layer 0 on device 1
    auto plans = whole_vs_layered(ctx, gru, o);
    const Schedule sc = schedule(*plans.at(0));
    CHECK(sc.forward.at(0).size() == 8);  // the default: 8 chunks
    CHECK(plans[0]->node_devices()[sc.forward.at(0)[0]] == 1);
    CHECK(plans[0]->node_devices()[sc.backward.at(1)[0]] == 0);
    CHECK(check_wavefronts(*plans[0], sc) == 1);
  }

  TEST_CASE("cldl train --parallel layers -d cpu:0,cpu:1: the losses of whole layers on one device") {
    if (!test::two_devices()) return;
    Stack s;
    s.layers = 3;
    const Data d = data(s);
    const std::string cli = CLDL_CLI_PATH, dir = test::temp_dir("train-layers-cli");
    export_onnx_file(stack_model(s), dir + "/stack.onnx");
    write_npy(d.x, dir + "/x.npy");
    write_npy(d.y, dir + "/y.npy");
    const std::string base = cli + " train " + dir + "/stack.onnx --input x=" + dir + "/x.npy --labels " + dir +
                             "/y.npy --batch-axis 1 --epochs 2 --batch 3 --lr 0.2 --no-shuffle --json --out " + dir +
                             "/trained.onnx ";
    std::string one, two;
    REQUIRE_MESSAGE(test::run_command(base + "-d cpu:0", one) == 0, one);
    REQUIRE_MESSAGE(test::run_command(base + "-d cpu:0,cpu:1 --parallel layers --time-chunks 3", two) == 0, two);
    CHECK(two.find(" + ") != std::string::npos);  // both devices named
    const std::vector<float> a = test::cli_step_losses(one), b = test::cli_step_losses(two);
    REQUIRE(a.size() == 4);
    REQUIRE(b.size() == 4);
    check_close(losses(b), losses(a), "cldl train step losses");
  }

  TEST_CASE("layer parallel over more devices than layers is an error") {
    auto ctx = test::two_devices();
    if (!ctx) return;
    Stack s;
    s.layers = 1;
    TrainOptions o = options();
    o.parallel = TrainParallel::layers;
    o.devices = {0, 1};
    CHECK_THROWS_WITH_AS(Trainer(ctx, stack_model(s), o),
                         "train: parallel 'layers' over 2 devices needs at least as many LSTM / GRU layers; graph "
                         "'rnn_stack' has 1",
                         Error);
  }
}
