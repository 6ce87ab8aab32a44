// One call from an .onnx file to a runnable model: import, prepare (passes), compile for a device.
#pragma once
#include <memory>
#include <string>

#include "models/executor.hpp"
#include "models/passes.hpp"

namespace cldl::graph {

struct LoadOptions {
  PrepareOptions prepare;
  CompileOptions compile;
};

std::shared_ptr<CompiledModel> load_onnx_model(std::shared_ptr<Context> ctx, const std::string& path,
                                               const LoadOptions& opts = {});

}  // namespace cldl::graph
