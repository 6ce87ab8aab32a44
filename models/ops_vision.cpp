// ONNX vision ops of detection and spatial-transformer models: RoiAlign (opsets 10 and 16+:
// coordinate_transformation_mode), GridSample (16: 4-D, bilinear / nearest / bicubic; 20+: 1 to 3 spatial
// dims, linear / nearest / cubic), AffineGrid (20), CenterCropPad (18), Col2Im (18), DeformConv (19: 2-D) on
// layers/vision.hpp; and NonMaxSuppression (10, 11), whose output shape is decided by its values. Inputs
// known when planning fold on the host. Otherwise NonMaxSuppression is a counted output (models/passes.hpp
// CountedValue): a host step inside the run (NmsHostStep below, a choice: the greedy walk over score order
// is sequential per class, and detection heads hand it a few thousand boxes) reads boxes, scores and the
// scalars back when the node's turn comes, selects on the host and writes the rows at the start of a
// bound-sized device buffer plus their count; the plan stops after the node and the rest is planned per
// count (docs/dynamic-shapes.md).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>

#include "layers/vision.hpp"
#include "models/ops_cnn_common.hpp"
#include "runtime/host_step.hpp"
#include "runtime/log.hpp"

namespace cldl::graph {
namespace {

void require_dtype(const InferCtx& c, size_t i, const char* what, std::initializer_list<DType> ok) {
  const DType t = c.input(i).dtype;
  for (DType d : ok)
    if (t == d) return;
  std::string names;
  for (DType d : ok) names += (names.empty() ? "" : ", ") + std::string(to_string(d));
  c.error("input '{}' ({}) has dtype {}, expected {}", c.input(i).name, what, to_string(t), names);
}

// ---------------------------------------------------------------- NonMaxSuppression
// Boxes and scores in the input's float type T (f32: float arithmetic, as ONNX Runtime and the ONNX
// reference under numpy 2), so that a threshold met exactly decides as theirs does.
template <typename T>
struct NmsBox {
  T x_min, x_max, y_min, y_max;
};

template <typename T>
NmsBox<T> nms_box(const T* b, bool center) {
  if (center) {  // [x_center, y_center, width, height]
    const T w = b[2] / T(2), h = b[3] / T(2);
    return {b[0] - w, b[0] + w, b[1] - h, b[1] + h};
  }
  // [y1, x1, y2, x2], corners in either order
  return {std::min(b[1], b[3]), std::max(b[1], b[3]), std::min(b[0], b[2]), std::max(b[0], b[2])};
}

// The boxes kept so far, for the test of each candidate against all of them (up to n^2 / 2 tests over n
// candidates: torchvision's detectors run one NMS over every class's boxes, offset apart; 27,000 boxes in
// SSDlite). A kept box suppresses the candidate when their IoU exceeds the threshold (the ONNX reference's
// suppress_by_iou); the conditions (the boxes intersect; positive intersection, areas and union) are a
// product of comparisons in the reference's arithmetic, so the decisions are the reference's, in a loop
// without branches that the compiler vectorises over a structure of arrays.
// Only boxes that can intersect the candidate are tested: the kept boxes sit in buckets by x_min (set per
// batch from the candidates' range), and a box intersects the candidate only if its x_min lies in
// (candidate x_min - the widest kept box, candidate x_max), a run of buckets (widened by a rounding
// margin; the bucket of a coordinate never decreases with it). Boxes with a NaN coordinate intersect
// nothing and are not stored; infinite ones widen the run to every bucket.
template <typename T>
class NmsKept {
 public:
  // Buckets over [lo, hi] of the candidates' x_min, about 32 boxes each.
  void reset(T lo, T hi, int64_t boxes) {
    count_ = 0;
    max_width_ = T(0);
    const size_t nb = size_t(std::clamp<int64_t>(boxes / 32, 1, 4096));
    lo_ = lo;
    scale_ = hi > lo && std::isfinite(hi - lo) ? T(double(nb) / double(hi - lo)) : T(0);
    if (!std::isfinite(scale_)) scale_ = T(0);
    buckets_.resize(nb);
    for (auto& bk : buckets_) bk.clear();
  }
  size_t size() const { return count_; }
  void push_back(const NmsBox<T>& b) {
    ++count_;
    if (std::isnan(b.x_min) || std::isnan(b.x_max) || std::isnan(b.y_min) || std::isnan(b.y_max)) return;
    max_width_ = std::max(max_width_, b.x_max - b.x_min);
    buckets_[bucket(b.x_min)].push_back(b);
  }
  bool suppresses(const NmsBox<T>& a, T iou_threshold) const {
    const T area_a = (a.x_max - a.x_min) * (a.y_max - a.y_min);
    if (!(area_a > T(0))) return false;  // also NaN coordinates
    const T margin = (std::abs(a.x_min) + max_width_) * T(1e-5);
    const size_t first = bucket(a.x_min - max_width_ - margin), last = bucket(a.x_max + margin);
    for (size_t k = first; k <= last; ++k)
      if (buckets_[k].suppresses(a, area_a, iou_threshold)) return true;
    return false;
  }

 private:
  struct Bucket {
    std::vector<T> x0, x1, y0, y1, area;
    void clear() { x0.clear(), x1.clear(), y0.clear(), y1.clear(), area.clear(); }
    void push_back(const NmsBox<T>& b) {
      x0.push_back(b.x_min), x1.push_back(b.x_max), y0.push_back(b.y_min), y1.push_back(b.y_max);
      area.push_back((b.x_max - b.x_min) * (b.y_max - b.y_min));
    }
    bool suppresses(const NmsBox<T>& a, T area_a, T iou_threshold) const {
      int hit = 0;
      for (size_t q = 0; q < x0.size(); ++q) {
        const T ix_min = std::max(a.x_min, x0[q]), ix_max = std::min(a.x_max, x1[q]);
        const T iy_min = std::max(a.y_min, y0[q]), iy_max = std::min(a.y_max, y1[q]);
        const T inter = (ix_max - ix_min) * (iy_max - iy_min);
        const T uni = area_a + area[q] - inter;
        hit |= int(ix_max > ix_min) & int(iy_max > iy_min) & int(inter > T(0)) & int(area[q] > T(0)) &
               int(uni > T(0)) & int(inter / uni > iou_threshold);
      }
      return hit != 0;
    }
  };
  size_t bucket(T x) const {
    const T f = std::floor((x - lo_) * scale_);
    if (!(f > T(0))) return 0;  // also NaN (-inf - -inf)
    return f >= T(buckets_.size() - 1) ? buckets_.size() - 1 : size_t(f);
  }
  std::vector<Bucket> buckets_;
  size_t count_ = 0;
  T lo_ = T(0), scale_ = T(0), max_width_ = T(0);
};

// Per batch and class: candidates (above score_threshold when given) by score, highest first, equal scores
// by the lower box index (NaN scores last); each is kept unless it overlaps a kept box of its class by more than
// iou_threshold, until max_per_class are kept. Rows (batch, class, box) in that order.
template <typename T>
std::vector<int64_t> nms_select(const std::vector<T>& boxes, const std::vector<T>& scores, int64_t batches,
                                int64_t classes, int64_t n, int64_t max_per_class, T iou_threshold,
                                const T* score_threshold, bool center) {
  std::vector<int64_t> rows;
  std::vector<NmsBox<T>> geo(static_cast<size_t>(n));
  std::vector<int64_t> cand;
  NmsKept<T> kept;
  for (int64_t b = 0; b < batches; ++b) {
    T lo = std::numeric_limits<T>::max(), hi = std::numeric_limits<T>::lowest();
    for (int64_t i = 0; i < n; ++i) {
      geo[size_t(i)] = nms_box(&boxes[size_t((b * n + i) * 4)], center);
      if (std::isfinite(geo[size_t(i)].x_min)) lo = std::min(lo, geo[size_t(i)].x_min), hi = std::max(hi, geo[size_t(i)].x_min);
    }
    for (int64_t k = 0; k < classes; ++k) {
      const T* s = &scores[size_t((b * classes + k) * n)];
      cand.clear();
      for (int64_t i = 0; i < n; ++i)
        if (!score_threshold || s[i] > *score_threshold) cand.push_back(i);
      // A NaN score orders below every number (a strict weak order, so the sort stays defined).
      std::stable_sort(cand.begin(), cand.end(),
                       [&](int64_t p, int64_t q) { return !std::isnan(s[p]) && (std::isnan(s[q]) || s[p] > s[q]); });
      kept.reset(lo, hi, int64_t(cand.size()));
      for (size_t j = 0; j < cand.size() && int64_t(kept.size()) < max_per_class; ++j) {
        const int64_t i = cand[j];
        if (kept.suppresses(geo[size_t(i)], iou_threshold)) continue;
        kept.push_back(geo[size_t(i)]);
        rows.insert(rows.end(), {b, k, i});
      }
    }
  }
  return rows;
}

template <typename T>
std::vector<T> as_vector(const HostTensor& t) {
  auto d = to_doubles(t);
  return std::vector<T>(d.begin(), d.end());
}

// The checks that need only shapes and dtypes; returns {batches, boxes, classes}.
std::array<int64_t, 3> check_nms_inputs(const InferCtx& c) {
  require_dtype(c, 0, "boxes", {DType::f32, DType::f64, DType::f16});
  if (c.input(1).dtype != c.input(0).dtype)
    c.error("input '{}' (scores) has dtype {}, but boxes has {}", c.input(1).name, to_string(c.input(1).dtype),
            to_string(c.input(0).dtype));
  const Shape bs = c.shape(0), ss = c.shape(1);
  if (bs.rank() != 3 || bs[2] != 4)
    c.error("input '{}' (boxes) must have shape [batches, boxes, 4], got {}", c.input(0).name, bs.str());
  if (ss.rank() != 3 || ss[0] != bs[0] || ss[2] != bs[1])
    c.error("input '{}' (scores) must have shape [{}, classes, {}] for boxes of shape {}, got {}", c.input(1).name,
            bs[0], bs[1], bs.str(), ss.str());
  const int64_t center = c.node.attr_i("center_point_box", 0);
  if (center != 0 && center != 1) c.error("attribute center_point_box must be 0 or 1, got {}", center);
  const char* names[] = {"", "", "max_output_boxes_per_class", "iou_threshold", "score_threshold"};
  for (size_t i = 2; i < 5; ++i) {
    if (!c.has_input(i)) continue;
    const Shape s = c.shape(i);
    if (s.numel() > 1)
      c.error("input '{}' ({}) must hold one value, got shape {}", c.input(i).name, names[i], s.str());
    const DType t = c.input(i).dtype;
    if (i == 2 && t != DType::i64)
      c.error("input '{}' ({}) must be int64, got {}", c.input(i).name, names[i], to_string(t));
    if (i > 2 && t != DType::f32 && t != DType::f64 && t != DType::f16)
      c.error("input '{}' ({}) must be a float tensor, got {}", c.input(i).name, names[i], to_string(t));
  }
  return {bs[0], bs[1], ss[1]};
}

void infer_nms(InferCtx& c) {
  bool known = true;
  for (size_t i = 0; i < 5; ++i) known = known && (!c.has_input(i) || c.value[i]);
  if (!known) {  // a counted output: the most rows it can select is the bound
    auto [batches, n, classes] = check_nms_inputs(c);
    int64_t per_class = n;
    if (c.has_input(2) && c.value[2] && c.value[2]->numel() == 1)
      per_class = std::clamp<int64_t>(to_ints(*c.value[2])[0], 0, n);
    const int64_t bound = bounded_numel({batches, classes, per_class, 3}, kMaxHostFoldElements);
    if (bound < 0)
      c.error("it can select {} x {} x {} rows, past the {} elements a host step makes", batches, classes, per_class,
              kMaxHostFoldElements);
    c.set_counted(0, DType::i64, Shape{batches * classes * per_class, 3}, 0);
    return;
  }
  const HostTensor& boxes = c.constant(0, "boxes: its values decide NonMaxSuppression's output shape");
  const HostTensor& scores = c.constant(1, "scores: its values decide NonMaxSuppression's output shape");
  require_dtype(c, 0, "boxes", {DType::f32, DType::f64, DType::f16});
  if (scores.dtype() != boxes.dtype())
    c.error("input '{}' (scores) has dtype {}, but boxes has {}", c.input(1).name, to_string(scores.dtype()),
            to_string(boxes.dtype()));
  const Shape& bs = boxes.shape();
  const Shape& ss = scores.shape();
  if (bs.rank() != 3 || bs[2] != 4)
    c.error("input '{}' (boxes) must have shape [batches, boxes, 4], got {}", c.input(0).name, bs.str());
  if (ss.rank() != 3 || ss[0] != bs[0] || ss[2] != bs[1])
    c.error("input '{}' (scores) must have shape [{}, classes, {}] for boxes of shape {}, got {}", c.input(1).name,
            bs[0], bs[1], bs.str(), ss.str());
  const int64_t center = c.node.attr_i("center_point_box", 0);
  if (center != 0 && center != 1) c.error("attribute center_point_box must be 0 or 1, got {}", center);
  // Optional scalars (an empty tensor counts as absent, as in the reference).
  auto scalar = [&](size_t i, const char* name, bool integer) -> const HostTensor* {
    if (!c.has_input(i)) return nullptr;
    const HostTensor& t = c.constant(i, name);
    if (t.numel() == 0) return nullptr;
    if (t.numel() != 1)
      c.error("input '{}' ({}) must hold one value, got shape {}", c.input(i).name, name, t.shape().str());
    if (integer && t.dtype() != DType::i64)
      c.error("input '{}' ({}) must be int64, got {}", c.input(i).name, name, to_string(t.dtype()));
    if (!integer && t.dtype() != DType::f32 && t.dtype() != DType::f64 && t.dtype() != DType::f16)
      c.error("input '{}' ({}) must be a float tensor, got {}", c.input(i).name, name, to_string(t.dtype()));
    return &t;
  };
  const HostTensor* max_t = scalar(2, "max_output_boxes_per_class", true);
  const int64_t max_per_class = max_t ? std::max<int64_t>(to_ints(*max_t)[0], 0) : 0;
  const HostTensor* iou_t = scalar(3, "iou_threshold", false);
  const HostTensor* score_t = scalar(4, "score_threshold", false);
  const std::optional<double> iou = iou_t ? std::optional(to_doubles(*iou_t)[0]) : std::nullopt;
  const std::optional<double> score = score_t ? std::optional(to_doubles(*score_t)[0]) : std::nullopt;
  const int64_t batches = bs[0], n = bs[1], classes = ss[1];
  // The most rows it can select: refused before the work when that is past what host folding makes.
  check_host_fold_size(c, {batches, classes, std::min(n, max_per_class), 3});
  std::vector<int64_t> rows;
  if (boxes.dtype() == DType::f64) {
    const double st = score.value_or(0.0);
    rows = nms_select<double>(to_doubles(boxes), to_doubles(scores), batches, classes, n, max_per_class,
                              iou.value_or(0.0), score ? &st : nullptr, center == 1);
  } else {  // f32, and f16 widened to float exactly
    const float st = float(score.value_or(0.0));
    rows = nms_select<float>(as_vector<float>(boxes), as_vector<float>(scores), batches, classes, n, max_per_class,
                             float(iou.value_or(0.0)), score ? &st : nullptr, center == 1);
  }
  c.fold(0, from_ints(Shape{int64_t(rows.size() / 3), 3}, rows));
}

// NonMaxSuppression on run-time inputs, as a host step inside the run: when the node's turn comes it
// waits for its inputs, reads them back (boxes and scores: 20 bytes per box and class for f32), selects
// on the host as the folding above does, and writes the [count, 3] rows at the start of its bound-sized
// output and count to its count output. The run blocks there (the one sync a counted op costs anyway,
// moved from after the node into it); its inputs need not be known when planning.
class NmsHostStep : public NodeKernel {
 public:
  NmsHostStep(Context& ctx, bool center) : ctx_(&ctx), center_(center) {}
  std::string algorithm() const override { return "host step (inputs read back, greedy NMS on the host)"; }
  void enqueue(std::span<const Tensor> in, std::span<const Tensor> out, ExecutionContext& ec) override {
    host_step_wait(ec);
    auto host = [&](size_t i) -> std::optional<HostTensor> {
      if (i >= in.size() || in[i].buffer() == nullptr || in[i].numel() == 0) return std::nullopt;
      return ctx_->download(in[i]);
    };
    const HostTensor boxes = *host(0), scores = *host(1);
    const auto max_t = host(2), iou_t = host(3), score_t = host(4);
    const int64_t batches = boxes.shape()[0], n = boxes.shape()[1], classes = scores.shape()[1];
    int64_t max_per_class = max_t ? std::max<int64_t>(to_ints(*max_t)[0], 0) : 0;
    const int64_t bound = out[0].shape[0];
    const double iou = iou_t ? to_doubles(*iou_t)[0] : 0.0;
    const std::optional<double> score = score_t ? std::optional(to_doubles(*score_t)[0]) : std::nullopt;
    std::vector<int64_t> rows;
    if (boxes.dtype() == DType::f64) {
      const double st = score.value_or(0.0);
      rows = nms_select<double>(to_doubles(boxes), to_doubles(scores), batches, classes, n, max_per_class, iou,
                                score ? &st : nullptr, center_);
    } else {
      const float st = float(score.value_or(0.0));
      rows = nms_select<float>(as_vector<float>(boxes), as_vector<float>(scores), batches, classes, n, max_per_class,
                               float(iou), score ? &st : nullptr, center_);
    }
    const int64_t count = int64_t(rows.size() / 3);
    if (count > bound)  // a max_output_boxes_per_class larger at run time than when planning
      fail("NonMaxSuppression selected {} rows, more than the {} planned for (max_output_boxes_per_class known "
           "when planning)",
           count, bound);
    ExecutionContext wc(ec.queue);
    cl::Event wrote;
    wc.signal = &wrote;
    if (count) {
      ctx_->write_async(out[0], rows.data(), rows.size() * sizeof(int64_t), wc);
      check(wrote.wait(), "clWaitForEvents", ec.label);
    }
    // The count is a local: its write completes here; a marker is the step's event.
    ExecutionContext cc(ec.queue);
    cl::Event counted;
    cc.signal = &counted;
    ctx_->write_async(out[1], &count, sizeof(count), cc);
    check(counted.wait(), "clWaitForEvents", ec.label);
    host_step_done(ec, "nms");
  }

 private:
  Context* ctx_;
  bool center_;
};

std::unique_ptr<NodeKernel> lower_nms(LowerCtx& c) {
  if (c.out.size() != 2) c.error("output '{}' has a shape decided by run-time data: plan it as a Model", c.out[0].name);
  log::info("{}: NonMaxSuppression runs as a host step inside the run (inputs read back when it runs)",
            c.node.describe());
  return std::make_unique<NmsHostStep>(c.ctx, c.node.attr_i("center_point_box", 0) == 1);
}

// ---------------------------------------------------------------- RoiAlign
RoiAlignConfig roi_align_config(const Node& n, int64_t opset, const Shape& x, int64_t num_rois,
                                const std::function<void(const std::string&)>& error) {
  RoiAlignConfig cfg;
  cfg.input = x;
  cfg.num_rois = num_rois;
  cfg.output_height = n.attr_i("output_height", 1);
  cfg.output_width = n.attr_i("output_width", 1);
  cfg.sampling_ratio = n.attr_i("sampling_ratio", 0);
  cfg.spatial_scale = n.attr_f("spatial_scale", 1.0f);
  const std::string mode = n.attr_s("mode", "avg");
  if (mode != "avg" && mode != "max") error(fmt::format("attribute mode must be 'avg' or 'max', got '{}'", mode));
  cfg.mode = mode == "max" ? RoiAlignMode::max : RoiAlignMode::avg;
  // coordinate_transformation_mode arrived in opset 16 (default half_pixel); opset 10 behaves as
  // output_half_pixel.
  const std::string ctm = opset >= 16 ? n.attr_s("coordinate_transformation_mode", "half_pixel") : "output_half_pixel";
  if (ctm != "half_pixel" && ctm != "output_half_pixel")
    error(fmt::format("attribute coordinate_transformation_mode must be 'half_pixel' or 'output_half_pixel', got '{}'",
                      ctm));
  cfg.half_pixel = ctm == "half_pixel";
  return cfg;
}

void infer_roi_align(InferCtx& c) {
  require_dtype(c, 0, "X", {DType::f32});
  require_dtype(c, 1, "rois", {DType::f32});
  require_dtype(c, 2, "batch_indices", {DType::i64});
  const Shape x = c.shape(0), rois = c.shape(1), bi = c.shape(2);
  if (rois.rank() != 2 || rois[1] != 4)
    c.error("input '{}' (rois) must have shape [num_rois, 4], got {}", c.input(1).name, rois.str());
  if (bi != Shape{rois[0]})
    c.error("input '{}' (batch_indices) must have shape [{}] (one per roi), got {}", c.input(2).name, rois[0],
            bi.str());
  auto cfg = roi_align_config(c.node, c.opset, x, rois[0], [&](const std::string& m) { c.error("{}", m); });
  Shape out = checked(c, [&] { return RoiAlign::validate(cfg); });
  if (c.value[2])
    for (int64_t v : to_ints(*c.value[2]))
      if (v < 0 || v >= x[0])
        c.error("input '{}' (batch_indices) holds {}, outside [0, {}) (the batch of X)", c.input(2).name, v, x[0]);
  c.set(0, DType::f32, out);
}

std::unique_ptr<NodeKernel> lower_roi_align(LowerCtx& c) {
  auto cfg = roi_align_config(c.node, c.node.opset, c.in[0].shape.to_shape(), c.in[1].shape.to_shape()[0],
                              [&](const std::string& m) { c.error("{}", m); });
  return wrap(RoiAlign::create(c.ctx, c.device, cfg), c);
}

// ---------------------------------------------------------------- GridSample
GridSampleConfig grid_sample_config(const Node& n, int64_t opset, Shape x, Shape grid,
                                    const std::function<void(const std::string&)>& error) {
  GridSampleConfig cfg;
  cfg.input = std::move(x);
  cfg.grid = std::move(grid);
  // Opset 16 names the modes bilinear / nearest / bicubic and takes 4-D input; opset 20 renamed them linear
  // / nearest / cubic and allows N-D.
  const bool v20 = opset >= 20;
  const std::string mode = n.attr_s("mode", v20 ? "linear" : "bilinear");
  if (mode == (v20 ? "linear" : "bilinear"))
    cfg.mode = GridSampleMode::linear;
  else if (mode == "nearest")
    cfg.mode = GridSampleMode::nearest;
  else if (mode == (v20 ? "cubic" : "bicubic"))
    cfg.mode = GridSampleMode::cubic;
  else
    error(fmt::format("attribute mode must be {} at opset {}, got '{}'",
                      v20 ? "'linear', 'nearest' or 'cubic'" : "'bilinear', 'nearest' or 'bicubic'", opset, mode));
  const std::string pad = n.attr_s("padding_mode", "zeros");
  if (pad == "zeros")
    cfg.padding = GridPadding::zeros;
  else if (pad == "border")
    cfg.padding = GridPadding::border;
  else if (pad == "reflection")
    cfg.padding = GridPadding::reflection;
  else
    error(fmt::format("attribute padding_mode must be 'zeros', 'border' or 'reflection', got '{}'", pad));
  cfg.align_corners = n.attr_i("align_corners", 0) != 0;
  if (!v20 && cfg.input.rank() != 4)
    error(fmt::format("input X must be 4-D at opset {} (N-D from opset 20), got shape {}", opset, cfg.input.str()));
  return cfg;
}

void infer_grid_sample(InferCtx& c) {
  require_dtype(c, 0, "X", {DType::f32});
  require_dtype(c, 1, "grid", {DType::f32});
  auto cfg =
      grid_sample_config(c.node, c.opset, c.shape(0), c.shape(1), [&](const std::string& m) { c.error("{}", m); });
  c.set(0, DType::f32, checked(c, [&] { return GridSample::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_grid_sample(LowerCtx& c) {
  auto cfg = grid_sample_config(c.node, c.node.opset, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(),
                                [&](const std::string& m) { c.error("{}", m); });
  return wrap(GridSample::create(c.ctx, c.device, cfg), c);
}

// ---------------------------------------------------------------- AffineGrid
void infer_affine_grid(InferCtx& c) {
  require_dtype(c, 0, "theta", {DType::f32});
  const HostTensor& size = c.constant(1, "size: it decides the output shape");
  if (size.dtype() != DType::i64 || size.shape().rank() != 1)
    c.error("input '{}' (size) must be a 1-D int64 tensor, got {} of shape {}", c.input(1).name,
            to_string(size.dtype()), size.shape().str());
  AffineGridConfig cfg{c.shape(0), to_ints(size), c.node.attr_i("align_corners", 0) != 0};
  c.set(0, DType::f32, checked(c, [&] { return AffineGrid::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_affine_grid(LowerCtx& c) {
  if (!c.value[1]) c.error("input size must be known at load");
  AffineGridConfig cfg{c.in[0].shape.to_shape(), to_ints(*c.value[1]), c.node.attr_i("align_corners", 0) != 0};
  return wrap(AffineGrid::create(c.ctx, c.device, cfg), c, {0});
}

// ---------------------------------------------------------------- CenterCropPad
void infer_center_crop_pad(InferCtx& c) {
  const HostTensor& shape = c.constant(1, "shape: it decides the output shape");
  if ((shape.dtype() != DType::i64 && shape.dtype() != DType::i32) || shape.shape().rank() != 1)
    c.error("input '{}' (shape) must be a 1-D int32 or int64 tensor, got {} of shape {}", c.input(1).name,
            to_string(shape.dtype()), shape.shape().str());
  CenterCropPadConfig cfg{c.shape(0), c.input(0).dtype, to_ints(shape), c.node.attr_ints("axes")};
  c.set(0, cfg.dtype, checked(c, [&] { return CenterCropPad::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_center_crop_pad(LowerCtx& c) {
  if (!c.value[1]) c.error("input shape must be known at load");
  CenterCropPadConfig cfg{c.in[0].shape.to_shape(), c.in[0].dtype, to_ints(*c.value[1]), c.node.attr_ints("axes")};
  return wrap(CenterCropPad::create(c.ctx, c.device, cfg), c, {0});
}

// ---------------------------------------------------------------- Col2Im
Col2ImConfig col2im_config(const Node& n, Shape x, const HostTensor& image, const HostTensor& block) {
  return {std::move(x),        to_ints(image),        to_ints(block), n.attr_ints("dilations"),
          n.attr_ints("pads"), n.attr_ints("strides")};
}

void infer_col2im(InferCtx& c) {
  require_dtype(c, 0, "input", {DType::f32});
  const HostTensor& image = c.constant(1, "image_shape: it decides the output shape");
  const HostTensor& block = c.constant(2, "block_shape");
  for (size_t i : {size_t(1), size_t(2)}) {
    const HostTensor& t = i == 1 ? image : block;
    if (t.dtype() != DType::i64 || t.shape().rank() != 1)
      c.error("input '{}' ({}) must be a 1-D int64 tensor, got {} of shape {}", c.input(i).name,
              i == 1 ? "image_shape" : "block_shape", to_string(t.dtype()), t.shape().str());
  }
  auto cfg = col2im_config(c.node, c.shape(0), image, block);
  c.set(0, DType::f32, checked(c, [&] { return Col2Im::validate(cfg); }));
}

std::unique_ptr<NodeKernel> lower_col2im(LowerCtx& c) {
  if (!c.value[1] || !c.value[2]) c.error("inputs image_shape and block_shape must be known at load");
  auto cfg = col2im_config(c.node, c.in[0].shape.to_shape(), *c.value[1], *c.value[2]);
  return wrap(Col2Im::create(c.ctx, c.device, cfg), c, {0});
}

// ---------------------------------------------------------------- DeformConv
DeformConvConfig deform_conv_config(const Node& n, Shape x, Shape w, bool has_bias, bool has_mask) {
  return {std::move(x),
          std::move(w),
          n.attr_i("group", 1),
          n.attr_i("offset_group", 1),
          n.attr_ints("strides"),
          n.attr_ints("pads"),
          n.attr_ints("dilations"),
          has_bias,
          has_mask};
}

void infer_deform_conv(InferCtx& c) {
  const char* names[] = {"X", "W", "offset", "B", "mask"};
  for (size_t i = 0; i < 5; ++i)
    if (c.has_input(i)) require_dtype(c, i, names[i], {DType::f32});
  const Shape x = c.shape(0), w = c.shape(1), off = c.shape(2);
  if (x.rank() != 4)
    c.error("input '{}' (X) must be 4-D [N, C, H, W] (2-D deformable convolution), got shape {}", c.input(0).name,
            x.str());
  if (w.rank() == 4 && c.node.has("kernel_shape") &&
      c.node.attr_ints("kernel_shape") != std::vector<int64_t>{w[2], w[3]})
    c.error("attribute kernel_shape does not match input W's spatial dims ({})", w.str());
  auto cfg = deform_conv_config(c.node, x, w, c.has_input(3), c.has_input(4));
  const Shape out = checked(c, [&] { return DeformConv::validate(cfg); });
  const int64_t taps = w[2] * w[3];
  if (off != Shape{x[0], cfg.offset_group * 2 * taps, out[2], out[3]})
    c.error(
        "input '{}' (offset) has shape {}, expected [{}, {}, {}, {}] (offset_group * 2 * kH * kW offsets per output)",
        c.input(2).name, off.str(), x[0], cfg.offset_group * 2 * taps, out[2], out[3]);
  if (c.has_input(3) && c.shape(3) != Shape{w[0]})
    c.error("input '{}' (B) has shape {}, expected [{}]", c.input(3).name, c.shape(3).str(), w[0]);
  if (c.has_input(4) && c.shape(4) != Shape{x[0], cfg.offset_group * taps, out[2], out[3]})
    c.error("input '{}' (mask) has shape {}, expected [{}, {}, {}, {}]", c.input(4).name, c.shape(4).str(), x[0],
            cfg.offset_group * taps, out[2], out[3]);
  c.set(0, DType::f32, out);
}

std::unique_ptr<NodeKernel> lower_deform_conv(LowerCtx& c) {
  const bool has_bias = c.in.size() > 3 && !c.in[3].name.empty(), has_mask = c.in.size() > 4 && !c.in[4].name.empty();
  auto cfg = deform_conv_config(c.node, c.in[0].shape.to_shape(), c.in[1].shape.to_shape(), has_bias, has_mask);
  std::vector<int> inputs{0, 1, 2};
  if (has_bias) inputs.push_back(3);
  if (has_mask) inputs.push_back(4);
  return wrap(DeformConv::create(c.ctx, c.device, cfg), c, inputs);
}

const OpRegistration kVisionOps{
    // NonMaxSuppression-10 and -11 differ only in the types they admit.
    {.type = "NonMaxSuppression", .since = 10, .family = "vision", .infer = infer_nms, .lower = lower_nms},
    // RoiAlign-16 added coordinate_transformation_mode, -22 more types.
    {.type = "RoiAlign", .since = 10, .family = "vision", .infer = infer_roi_align, .lower = lower_roi_align},
    // GridSample-20 renamed the modes and allowed N-D input; -22 added types.
    {.type = "GridSample", .since = 16, .family = "vision", .infer = infer_grid_sample, .lower = lower_grid_sample},
    {.type = "AffineGrid",
     .since = 20,
     .family = "vision",
     .const_inputs = {1},
     .infer = infer_affine_grid,
     .lower = lower_affine_grid},
    {.type = "CenterCropPad",
     .since = 18,
     .family = "vision",
     .const_inputs = {1},
     .infer = infer_center_crop_pad,
     .lower = lower_center_crop_pad},
    {.type = "Col2Im",
     .since = 18,
     .family = "vision",
     .const_inputs = {1, 2},
     .infer = infer_col2im,
     .lower = lower_col2im},
    // DeformConv-22 added types.
    {.type = "DeformConv", .since = 19, .family = "vision", .infer = infer_deform_conv, .lower = lower_deform_conv},
};

}  // namespace
}  // namespace cldl::graph
