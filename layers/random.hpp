// Random sampling in ONNX semantics: Bernoulli. Kernels: kernels/random.cl.
#pragma once
#include <atomic>
#include <memory>

#include "layers/op.hpp"

namespace cldl {

struct BernoulliConfig {
  Shape input;
  DType dtype = DType::f32;      // of the probabilities: f32 or f64 (cl_khr_fp64)
  DType out_dtype = DType::f32;  // f32, f64, f16, bf16, any integer type or bool
  uint64_t seed = 0;
};

// Input p (probabilities); output y of p's shape in out_dtype, 1 with probability p, else 0. Counter
// based: the numbers depend only on the seed, the run's index and the element's, so a run is
// reproducible for a seed; each enqueue takes the next run index, so repeated runs draw fresh numbers.
class Bernoulli : public Op {
 public:
  static Shape validate(const BernoulliConfig& cfg);
  static std::unique_ptr<Bernoulli> create(Context& ctx, int device, const BernoulliConfig& cfg);
  std::string_view type() const override { return "Bernoulli"; }
  std::string algorithm() const override { return "counter-based hash (SplitMix64 finaliser), 24-bit uniforms"; }
  void enqueue(std::span<const Tensor> inputs, std::span<const Tensor> outputs, const Tensor* workspace,
               ExecutionContext& ec) override;

 private:
  BernoulliConfig cfg_;
  std::atomic<uint64_t> stream_{0};
  cl::Kernel kernel_;
};

}  // namespace cldl
