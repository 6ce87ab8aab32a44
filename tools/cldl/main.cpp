// The cldl command-line tool: one binary, subcommands registered in commands.hpp.
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "runtime/error.hpp"
#include "tools/cldl/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"cldl - portable OpenCL deep-learning runtime"};
  app.set_version_flag("--version", std::string("cldl ") + CLDL_VERSION);
  app.require_subcommand(1);
  cldl::cli::register_commands(app);
  if (argc > 1 && argv[1][0] != '-') {
    bool known = false;
    for (auto* sub : app.get_subcommands([](CLI::App*) { return true; })) known |= sub->check_name(argv[1]);
    if (!known) {
      std::fprintf(stderr, "cldl: unknown command '%s' (see cldl --help)\n", argv[1]);
      return 2;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "cldl: %s (see cldl --help)\n", e.what());
    return 2;
  } catch (const cldl::Error& e) {
    std::fprintf(stderr, "cldl: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cldl: error: %s\n", e.what());
    return 1;
  }
  return cldl::cli::exit_code();
}
