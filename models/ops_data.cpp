// ONNX data-movement ops mapped onto layers/data.hpp: Transpose, Concat, Split, Slice, Pad, Expand, Tile,
// Gather, Resize (and the deprecated Upsample), and DepthToSpace / SpaceToDepth as one Transpose of a
// 6-D view. Their shape / index arguments given as inputs (Split's split, Slice's starts / ends / axes /
// steps, Pad's pads / value / axes, Expand's shape, Tile's repeats, Resize's roi / scales / sizes) must
// be known at load (const_inputs): they decide the output shape. Gather's indices are ordinary data.
// Older opsets state some of them as attributes (Slice before 10, Pad before 11, Split before 13,
// Upsample before 9): the config functions read the form of the node's opset.
#include <cmath>

#include "layers/data.hpp"
#include "models/ops_cnn_common.hpp"

namespace cldl::graph {
namespace {

// Values of an optional load-time input (empty when absent or empty).
std::vector<int64_t> ints_of(const std::vector<const HostTensor*>& v, size_t i) {
  return i < v.size() && v[i] ? to_ints(*v[i]) : std::vector<int64_t>{};
}

std::vector<Shape> shapes_of(const InferCtx& c) {
  std::vector<Shape> s;
  for (size_t i = 0; i < c.in.size(); ++i) s.push_back(c.has_input(i) ? c.shape(i) : Shape{});
  return s;
}
std::vector<Shape> shapes_of(const LowerCtx& c) {
  std::vector<Shape> s;
  for (auto& v : c.in) s.push_back(v.name.empty() ? Shape{} : v.shape.to_shape());
  return s;
}

TransposeConfig transpose_cfg(const Node& n, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>&) {
  return {s[0], dt, n.attr_ints("perm")};
}
ConcatConfig concat_cfg(const Node& n, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>&) {
  if (n.opset >= 4 && !n.has("axis")) fail("{}: attribute axis is required (from opset 4)", n.describe());
  return {s, dt, n.attr_i("axis", 1)};  // Concat-1's default axis is 1
}
SplitConfig split_cfg(const Node& n, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>& v,
                      size_t outputs) {
  SplitConfig c{s[0], dt, n.attr_i("axis", 0), n.has("split") ? n.attr_ints("split") : ints_of(v, 1), 0};  // attr before 13
  c.num_outputs = int(n.attr_i("num_outputs", int64_t(outputs)));
  return c;
}
// Before opset 10 Slice's starts / ends / axes are attributes (no steps).
SliceConfig slice_cfg(const Node& n, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>& v) {
  if (n.opset < 10) {
    if (!n.has("starts") || !n.has("ends"))
      fail("{}: attributes starts and ends are required (opset {})", n.describe(), n.opset);
    return {s[0], dt, n.attr_ints("starts"), n.attr_ints("ends"), n.attr_ints("axes"), {}};
  }
  return {s[0], dt, ints_of(v, 1), ints_of(v, 2), ints_of(v, 3), ints_of(v, 4)};
}
// Before opset 11 Pad's pads and value are attributes (Pad-1 names pads "paddings").
PadConfig pad_cfg(const Node& n, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>& v) {
  PadConfig p;
  p.input = s[0];
  p.dtype = dt;
  if (n.opset < 11) {
    const char* name = n.opset < 2 ? "paddings" : "pads";
    if (!n.has(name)) fail("{}: attribute {} is required (opset {})", n.describe(), name, n.opset);
    p.pads = n.attr_ints(name);
    p.value = n.attr_f("value", 0.0f);
  } else {
    p.pads = ints_of(v, 1);
    p.axes = ints_of(v, 3);
  }
  std::string mode = n.attr_s("mode", "constant");
  if (mode == "reflect") p.mode = PadMode::reflect;
  else if (mode == "edge") p.mode = PadMode::edge;
  else if (mode == "wrap")
    p.mode = PadMode::wrap;
  else if (mode != "constant")
    fail("{}: attribute mode = '{}' is not one of constant, reflect, edge, wrap", n.describe(), mode);
  if (n.opset >= 11 && v.size() > 2 && v[2] && v[2]->numel() > 0) p.value = to_doubles(*v[2])[0];
  return p;
}
ExpandConfig expand_cfg(const Node&, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>& v) {
  return {s[0], dt, ints_of(v, 1)};
}
TileConfig tile_cfg(const Node&, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>& v) {
  return {s[0], dt, ints_of(v, 1)};
}
GatherConfig gather_cfg(const Node& n, const std::vector<Shape>& s, DType dt, DType idx) {
  return {s[0], dt, s[1], idx, n.attr_i("axis", 0)};
}
ResizeConfig upsample_cfg(const Node& n, const std::vector<Shape>& s, DType, const std::vector<const HostTensor*>& v);
// Resize 10 is Upsample 9 renamed (X, scales; asymmetric coordinates, floor for nearest: ONNX's 10 -> 11
// version converter sets exactly those); 11 added roi, sizes and the coordinate / rounding modes.
ResizeConfig resize_cfg(const Node& n, const std::vector<Shape>& s, DType dt, const std::vector<const HostTensor*>& v) {
  if (n.opset == 10) return upsample_cfg(n, s, dt, v);
  ResizeConfig r;
  r.input = s[0];
  auto flag = [&](const char* name) {
    int64_t f = n.attr_i(name, 0);
    if (f != 0 && f != 1) fail("{}: attribute {} = {} must be 0 or 1", n.describe(), name, f);
    return f != 0;
  };
  r.antialias = flag("antialias");
  r.exclude_outside = flag("exclude_outside");
  if (v.size() > 2 && v[2])
    for (double d : to_doubles(*v[2])) r.scales.push_back(float(d));
  r.sizes = ints_of(v, 3);
  std::string ct = n.attr_s("coordinate_transformation_mode", "half_pixel");
  static const std::map<std::string, ResizeCoord> kCoord = {
      {"half_pixel", ResizeCoord::half_pixel},
      {"asymmetric", ResizeCoord::asymmetric},
      {"align_corners", ResizeCoord::align_corners},
      {"pytorch_half_pixel", ResizeCoord::pytorch_half_pixel},
      {"tf_half_pixel_for_nearest", ResizeCoord::tf_half_pixel_for_nearest},
      {"half_pixel_symmetric", ResizeCoord::half_pixel_symmetric},
      {"tf_crop_and_resize", ResizeCoord::tf_crop_and_resize}};
  if (!kCoord.count(ct))
    fail(
        "{}: attribute coordinate_transformation_mode = '{}' is not one of half_pixel, half_pixel_symmetric, "
        "pytorch_half_pixel, align_corners, asymmetric, tf_half_pixel_for_nearest, tf_crop_and_resize",
        n.describe(), ct);
  r.coord = kCoord.at(ct);
  // roi (input 1) matters only to tf_crop_and_resize: starts then ends, of every dim or of `axes`.
  std::vector<float> roi;
  if (r.coord == ResizeCoord::tf_crop_and_resize) {
    if (v.size() < 2 || !v[1] || v[1]->numel() == 0)
      fail("{}: coordinate_transformation_mode tf_crop_and_resize needs the roi input", n.describe());
    for (double d : to_doubles(*v[1])) roi.push_back(float(d));
  }
  // axes (opset 18): scales / sizes / roi name only these dims; the others keep their size (roi [0, 1]).
  auto axes = n.attr_ints("axes");
  int64_t rank = int64_t(s[0].rank());
  size_t named = axes.empty() ? size_t(rank) : axes.size();
  if (!roi.empty() && roi.size() != 2 * named)
    fail("{}: input roi has {} values, expected {} (start and end of each of the {} {})", n.describe(), roi.size(),
         2 * named, named, axes.empty() ? "dims" : "axes");
  r.roi = roi;
  if (!axes.empty()) {
    std::vector<float> sc(size_t(rank), 1.0f);
    std::vector<int64_t> sz(s[0].dims);
    if (!roi.empty()) r.roi.assign(2 * size_t(rank), 0.0f), std::fill(r.roi.begin() + rank, r.roi.end(), 1.0f);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = axes[i] < 0 ? axes[i] + rank : axes[i];
      if (a < 0 || a >= rank)
        fail("{}: attribute axes[{}] = {} is out of range for rank {}", n.describe(), i, axes[i], rank);
      if (i < r.scales.size()) sc[size_t(a)] = r.scales[i];
      if (i < r.sizes.size()) sz[size_t(a)] = r.sizes[i];
      if (!roi.empty()) r.roi[size_t(a)] = roi[i], r.roi[size_t(a + rank)] = roi[i + axes.size()];
    }
    if (!r.scales.empty()) r.scales = sc;
    if (!r.sizes.empty()) r.sizes = sz;
  }
  // keep_aspect_ratio_policy (sizes only): one scale for the resized dims, the smallest (not_larger) or
  // largest (not_smaller) of sizes / input; output = round(scale * input).
  std::string policy = n.attr_s("keep_aspect_ratio_policy", "stretch");
  if (policy != "stretch" && !r.sizes.empty()) {
    if (policy != "not_larger" && policy != "not_smaller")
      fail("{}: attribute keep_aspect_ratio_policy = '{}' is not one of stretch, not_larger, not_smaller", n.describe(),
           policy);
    double sc = policy == "not_larger" ? 1e30 : 0.0;
    std::vector<bool> resized(size_t(rank), axes.empty());
    for (auto a : axes) resized[size_t(a < 0 ? a + rank : a)] = true;
    for (int64_t i = 0; i < rank; ++i)
      if (resized[size_t(i)]) {
        double q = double(r.sizes[size_t(i)]) / double(s[0][size_t(i)]);
        sc = policy == "not_larger" ? std::min(sc, q) : std::max(sc, q);
      }
    for (int64_t i = 0; i < rank; ++i)
      if (resized[size_t(i)]) r.sizes[size_t(i)] = int64_t(std::round(sc * double(s[0][size_t(i)])));
  }
  std::string mode = n.attr_s("mode", "nearest");
  if (mode != "linear" && mode != "cubic" && mode != "nearest")
    fail("{}: attribute mode = '{}' is not one of nearest, linear, cubic", n.describe(), mode);
  r.mode = mode == "linear" ? ResizeMode::linear : mode == "cubic" ? ResizeMode::cubic : ResizeMode::nearest;
  std::string nm = n.attr_s("nearest_mode", "round_prefer_floor");
  static const std::map<std::string, ResizeNearest> kNearest = {
      {"round_prefer_floor", ResizeNearest::round_prefer_floor}, {"round_prefer_ceil", ResizeNearest::round_prefer_ceil},
      {"floor", ResizeNearest::floor}, {"ceil", ResizeNearest::ceil}};
  if (!kNearest.count(nm))
    fail("{}: attribute nearest_mode = '{}' is not one of round_prefer_floor, round_prefer_ceil, floor, ceil",
         n.describe(), nm);
  r.nearest = kNearest.at(nm);
  r.cubic_coeff_a = n.attr_f("cubic_coeff_a", -0.75f);
  r.extrapolation_value = n.attr_f("extrapolation_value", 0.0f);
  return r;
}

// Upsample (opsets 7 to 9, deprecated from 10): Resize with scales (the attribute before opset 9, input 1
// from 9), asymmetric coordinates and floor rounding for nearest, as Upsample defines them.
ResizeConfig upsample_cfg(const Node& n, const std::vector<Shape>& s, DType, const std::vector<const HostTensor*>& v) {
  ResizeConfig r;
  r.input = s[0];
  if (n.opset < 9) {
    auto it = n.attrs.find("scales");
    auto* sc = it == n.attrs.end() ? nullptr : std::get_if<std::vector<float>>(&it->second);
    if (!sc) fail("{}: attribute scales (floats) is required (opset {})", n.describe(), n.opset);
    r.scales = *sc;
  } else if (v.size() > 1 && v[1]) {
    for (double d : to_doubles(*v[1])) r.scales.push_back(float(d));
  }
  std::string mode = n.attr_s("mode", "nearest");
  if (mode != "nearest" && mode != "linear") fail("{}: mode '{}' is not nearest or linear", n.describe(), mode);
  r.mode = mode == "linear" ? ResizeMode::linear : ResizeMode::nearest;
  r.coord = ResizeCoord::asymmetric;
  r.nearest = ResizeNearest::floor;
  return r;
}

// Single-output ops: infer validates and sets output 0 with the input's dtype (Resize: f32 only).
template <typename Layer, typename CfgFn>
OpDef single(const char* type, int64_t since, std::vector<size_t> consts, CfgFn cfg, std::vector<int> dev_inputs,
             std::vector<const char*> const_names = {}) {
  OpDef d;
  d.type = type;
  d.since = since;
  d.family = "data";
  d.const_inputs = consts;
  d.infer = [cfg, consts, const_names](InferCtx& c) {
    for (size_t k = 0; k < consts.size(); ++k)  // present shape / index inputs must be known at load
      if (c.has_input(consts[k])) c.constant(consts[k], k < const_names.size() ? const_names[k] : "shape argument");
    auto s = shapes_of(c);
    for (size_t i = 1; i < c.in.size(); ++i)
      if (c.has_input(i) && c.node.op_type == "Concat" && c.input(i).dtype != c.input(0).dtype)
        c.error("input '{}' is {}, input 0 is {}", c.input(i).name, to_string(c.input(i).dtype), to_string(c.input(0).dtype));
    if ((c.node.op_type == "Resize" || c.node.op_type == "Upsample") && c.input(0).dtype != DType::f32)
      c.error("unsupported: input '{}' is {}, only f32 is implemented", c.input(0).name, to_string(c.input(0).dtype));
    auto k = checked(c, [&] { return cfg(c.node, s, c.input(0).dtype, c.value); });
    c.set(0, c.input(0).dtype, checked(c, [&] { return Layer::validate(k); }));
  };
  d.lower = [cfg, dev_inputs](LowerCtx& c) {
    auto k = cfg(c.node, shapes_of(c), c.in[0].dtype, c.value);
    return wrap(Layer::create(c.ctx, c.device, k), c, dev_inputs);
  };
  return d;
}

// ONNX deprecated Upsample in opset 10 (Resize replaces it): cldl implements opsets 7 to 9.
OpDef upsample(OpDef d) {
  d.until = 9;
  return d;
}

void infer_split(InferCtx& c) {
  if (c.has_input(1)) c.constant(1, "split");
  auto k = checked(c, [&] { return split_cfg(c.node, shapes_of(c), c.input(0).dtype, c.value, c.out.size()); });
  auto outs = checked(c, [&] { return Split::validate(k); });
  if (outs.size() != c.out.size()) c.error("splits into {} parts but the node has {} outputs", outs.size(), c.out.size());
  for (size_t i = 0; i < outs.size(); ++i) c.set(i, k.dtype, outs[i]);
}
std::unique_ptr<NodeKernel> lower_split(LowerCtx& c) {
  auto k = split_cfg(c.node, shapes_of(c), c.in[0].dtype, c.value, c.out.size());
  return wrap(Split::create(c.ctx, c.device, k), c, {0});
}

void infer_gather(InferCtx& c) {
  DType idx = c.input(1).dtype;
  if (idx != DType::i32 && idx != DType::i64) c.error("indices must be int32 or int64, got {}", to_string(idx));
  auto k = gather_cfg(c.node, shapes_of(c), c.input(0).dtype, idx);
  c.set(0, k.dtype, checked(c, [&] { return Gather::validate(k); }));
}
std::unique_ptr<NodeKernel> lower_gather(LowerCtx& c) {
  return wrap(Gather::create(c.ctx, c.device, gather_cfg(c.node, shapes_of(c), c.in[0].dtype, c.in[1].dtype)), c);
}

GatherElementsConfig gather_elements_cfg(const Node& n, const std::vector<Shape>& s, DType dt, DType idx) {
  return {s[0], dt, s[1], idx, n.attr_i("axis", 0)};
}
void infer_gather_elements(InferCtx& c) {
  DType idx = c.input(1).dtype;
  if (idx != DType::i32 && idx != DType::i64) c.error("indices must be int32 or int64, got {}", to_string(idx));
  auto k = gather_elements_cfg(c.node, shapes_of(c), c.input(0).dtype, idx);
  c.set(0, k.dtype, checked(c, [&] { return GatherElements::validate(k); }));
}
std::unique_ptr<NodeKernel> lower_gather_elements(LowerCtx& c) {
  auto k = gather_elements_cfg(c.node, shapes_of(c), c.in[0].dtype, c.in[1].dtype);
  return wrap(GatherElements::create(c.ctx, c.device, k), c);
}

// DepthToSpace / SpaceToDepth: one Transpose of a 6-D view (the reshapes around it are free).
struct SpaceDepthPlan {
  Shape in6, out;
  std::vector<int64_t> perm;
};
SpaceDepthPlan space_depth_plan(const Node& n, const Shape& x) {
  if (x.rank() != 4) fail("{}: input must be 4-D (N, C, H, W), got {}", n.describe(), x.str());
  int64_t b = n.attr_i("blocksize", 0), N = x[0], C = x[1], H = x[2], W = x[3];
  if (b <= 0) fail("{}: blocksize must be positive, got {}", n.describe(), b);
  SpaceDepthPlan p;
  if (n.op_type == "DepthToSpace") {
    if (C % (b * b)) fail("{}: channels {} are not divisible by blocksize^2 = {}", n.describe(), C, b * b);
    std::string mode = n.attr_s("mode", "DCR");
    if (mode == "DCR") {
      p.in6 = Shape{N, b, b, C / (b * b), H, W};
      p.perm = {0, 3, 4, 1, 5, 2};
    } else if (mode == "CRD") {
      p.in6 = Shape{N, C / (b * b), b, b, H, W};
      p.perm = {0, 1, 4, 2, 5, 3};
    } else {
      fail("{}: mode '{}' is not DCR or CRD", n.describe(), mode);
    }
    p.out = Shape{N, C / (b * b), H * b, W * b};
  } else {
    if (H % b || W % b) fail("{}: H {} and W {} must be divisible by blocksize {}", n.describe(), H, W, b);
    p.in6 = Shape{N, C, H / b, b, W / b, b};
    p.perm = {0, 3, 5, 1, 2, 4};
    p.out = Shape{N, C * b * b, H / b, W / b};
  }
  return p;
}

void infer_space_depth(InferCtx& c) {
  auto p = checked(c, [&] { return space_depth_plan(c.node, c.shape(0)); });
  c.set(0, c.input(0).dtype, p.out);
}

class SpaceDepthKernel : public NodeKernel {
 public:
  std::unique_ptr<Transpose> op;
  Shape in6, mid6;
  std::string algorithm() const override { return "one transpose of a 6-D view, " + op->algorithm(); }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    Tensor x = in[0], y = out[0];
    x.shape = in6;
    y.shape = mid6;
    Tensor xs[] = {x}, ys[] = {y};
    op->enqueue(xs, ys, nullptr, ec);
  }
};

std::unique_ptr<NodeKernel> lower_space_depth(LowerCtx& c) {
  auto p = space_depth_plan(c.node, c.in[0].shape.to_shape());
  auto k = std::make_unique<SpaceDepthKernel>();
  TransposeConfig t{p.in6, c.in[0].dtype, p.perm};
  k->in6 = p.in6;
  k->mid6 = Transpose::validate(t);
  k->op = Transpose::create(c.ctx, c.device, t);
  return k;
}

const OpRegistration kDataOps{
    {.type = "DepthToSpace", .since = 1, .family = "data", .infer = infer_space_depth, .lower = lower_space_depth},
    {.type = "SpaceToDepth", .since = 1, .family = "data", .infer = infer_space_depth, .lower = lower_space_depth},
    single<Transpose>("Transpose", 1, {}, transpose_cfg, {0}),
    single<Concat>("Concat", 1, {}, concat_cfg, {}),
    {.type = "Split", .since = 2, .family = "data", .const_inputs = {1}, .infer = infer_split, .lower = lower_split},
    single<Slice>("Slice", 1, {1, 2, 3, 4}, slice_cfg, {0}, {"starts", "ends", "axes", "steps"}),
    single<Pad>("Pad", 2, {1, 2, 3}, pad_cfg, {0}, {"pads", "constant_value", "axes"}),
    single<Expand>("Expand", 8, {1}, expand_cfg, {0}, {"shape"}),
    single<Tile>("Tile", 6, {1}, tile_cfg, {0}, {"repeats"}),
    {.type = "Gather", .since = 1, .family = "data", .infer = infer_gather, .lower = lower_gather},
    {.type = "GatherElements", .since = 11, .family = "data", .infer = infer_gather_elements,
     .lower = lower_gather_elements},
    upsample(single<Resize>("Upsample", 7, {1}, upsample_cfg, {0}, {"scales"})),
    single<Resize>("Resize", 10, {1, 2, 3}, resize_cfg, {0}, {"roi", "scales", "sizes"}),
};

}  // namespace
}  // namespace cldl::graph
