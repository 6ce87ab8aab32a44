// The list of subcommands.
#include "tools/cldl/commands.hpp"

namespace cldl::cli {
namespace {
int g_exit = 0;
}
int exit_code() { return g_exit; }
void set_exit_code(int code) { g_exit = code; }

void register_commands(CLI::App& app) {
  add_devices_command(app);
  add_selftest_command(app);
  add_bench_command(app);
  add_compile_command(app);
  add_run_command(app);
  add_profile_command(app);
  add_generate_command(app);
  add_classify_command(app);
  add_train_command(app);
  add_tune_command(app);
  add_ops_command(app);
}

}  // namespace cldl::cli
