// load_onnx_model: import -> prepare -> compile.
#include "models/model.hpp"

#include "models/onnx_import.hpp"

namespace cldl::graph {

std::shared_ptr<CompiledModel> load_onnx_model(std::shared_ptr<Context> ctx, const std::string& path,
                                               const LoadOptions& opts) {
  Graph g = import_onnx_file(path);
  prepare(g, opts.prepare);
  return CompiledModel::compile(std::move(ctx), std::move(g), opts.compile);
}

}  // namespace cldl::graph
