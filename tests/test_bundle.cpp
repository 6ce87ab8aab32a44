// Offline program bundles for one model (issue #8, the FPGA flow): `cldl compile model.onnx --out DIR`
// records exactly the programs the model requests, `cldl run --binaries DIR` loads them with no kernel
// source compiled, and a bundle for another device or driver is refused.
#include <doctest/doctest.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <unistd.h>

#include "layers/gemm.hpp"
#include "models/npy.hpp"
#include "runtime/bundle.hpp"
#include "tests/support/test_util.hpp"

using namespace cldl;
namespace fs = std::filesystem;

namespace {

const std::string kDigits = std::string(CLDL_SOURCE_DIR) + "/models/zoo/digits_cnn/";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return {(std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>()};
}

// "programs: B built from source, D from the disk cache, L from binaries" from `cldl run --stats`.
std::array<int, 3> program_counts(const std::string& out) {
  std::smatch m;
  std::regex re("programs: (\\d+) built from source, (\\d+) from the disk cache, (\\d+) from binaries");
  if (!std::regex_search(out, m, re)) return {-1, -1, -1};
  return {std::stoi(m[1]), std::stoi(m[2]), std::stoi(m[3])};
}

}  // namespace

TEST_SUITE("bundle") {
TEST_CASE("program cache records the kernel files and options it is asked for, once each, in order") {
  std::string dir = test::temp_dir("record");
  ProgramCache cache(dir, false);
  auto& c = test::ctx();
  cache.get(c.cl(), c.device(), "selftest.cl", "-DREC=1");  // before recording: not listed
  cache.start_recording();
  cache.get(c.cl(), c.device(), "selftest.cl", "-DREC=2");
  cache.get(c.cl(), c.device(), "selftest.cl", "-DREC=1");  // memory hit: still requested by the model
  cache.get(c.cl(), c.device(), "selftest.cl", "-DREC=2");  // duplicate
  auto rec = cache.stop_recording();
  cache.get(c.cl(), c.device(), "selftest.cl", "-DREC=3");  // after: not listed
  REQUIRE(rec.size() == 2);
  CHECK((rec[0].file == "selftest.cl" && rec[0].options == "-DREC=2" && rec[0].source.empty()));
  CHECK((rec[1].file == "selftest.cl" && rec[1].options == "-DREC=1"));
  CHECK(cache.source_builds() == 3);
  CHECK(cache.stop_recording().empty());
  fs::remove_all(dir);
}

TEST_CASE("while a bundle is recorded or used, no op picks a library that compiles kernels at run time") {
  GemmConfig g;
  g.M = 5, g.N = 7, g.K = 3;
  auto& cache = ProgramCache::global();
  CHECK_FALSE(cache.binaries_only());
  cache.start_recording();
  CHECK(cache.binaries_only());
  g.provider = GemmProvider::clblast;  // CLBlast builds its kernels from source: refused, naming why
  CHECK_THROWS_WITH_AS(Gemm::create(test::ctx(), 0, g), doctest::Contains("offline program bundle"), Error);
  g.provider = GemmProvider::automatic;  // automatic takes the own kernel, whose program is recorded
  auto gemm = Gemm::create(test::ctx(), 0, g);
  CHECK(gemm->algorithm().rfind("own:", 0) == 0);
  auto rec = cache.stop_recording();
  CHECK_FALSE(cache.binaries_only());
  bool has_gemm = false;
  for (auto& r : rec) has_gemm |= r.file == "gemm.cl";
  CHECK(has_gemm);
}

TEST_CASE("cldl compile model.onnx --out DIR; cldl run --binaries DIR compiles no source and matches") {
  const std::string cli = CLDL_CLI_PATH, dir = test::temp_dir("model-bundle");
  const std::string bundle = dir + "/bundle", model = kDigits + "model.onnx";
  // One test image (batch 1) and PyTorch's logits for it.
  HostTensor x = graph::read_npy(kDigits + "x_test.npy"), ref = graph::read_npy(kDigits + "ref_logits.npy");
  const int64_t per = x.numel() / x.shape()[0], classes = ref.shape()[1];
  const int64_t pick = 7;  // any sample
  HostTensor one(DType::f32, Shape{1, 1, 8, 8});
  REQUIRE(one.numel() == per);
  std::memcpy(one.as<float>(), x.as<float>() + pick * per, size_t(per) * sizeof(float));
  graph::write_npy(one, dir + "/image.npy");

  std::string out;
  REQUIRE_MESSAGE(test::run_command(cli + " compile " + model + " --dim N=1 --device " + test::device_spec() + " --out " + bundle, out) == 0,
                  out);
  std::smatch m;
  REQUIRE(std::regex_search(out, m, std::regex("uses (\\d+) programs")));
  const int used = std::stoi(m[1]);
  CHECK(used > 0);
  CHECK(out.find(fmt::format("wrote {} binaries", used)) != std::string::npos);
  // Fewer than the whole library's programs.
  CHECK(size_t(used) < registered_programs().size());
  auto manifest = slurp(bundle + "/manifest.json");
  CHECK(manifest.find(test::ctx().device().info.driver_version) != std::string::npos);
  CHECK(manifest.find("\"options\"") != std::string::npos);

  // Fresh processes, disk cache off: with the bundle nothing is built from source.
  const std::string run = "CLDL_CACHE=0 " + cli + " run " + model + " --dim N=1 --device " + test::device_spec() + " --stats --runs 1 -i image=" +
                          dir + "/image.npy ";
  REQUIRE_MESSAGE(test::run_command(run + "--binaries " + bundle + " -o " + dir + "/with", out) == 0, out);
  INFO(out);
  auto counts = program_counts(out);
  CHECK(counts[0] == 0);
  CHECK(counts[1] == 0);
  CHECK(counts[2] == used);
  std::string out_src;
  REQUIRE_MESSAGE(test::run_command(run + "-o " + dir + "/without", out_src) == 0, out_src);
  // Built from source this time (the same programs, plus CLBlast's on a device where Gemm picks it).
  CHECK(program_counts(out_src)[0] > 0);
  CHECK(program_counts(out_src)[0] <= used);

  HostTensor a = graph::read_npy(dir + "/with/logits.npy"), b = graph::read_npy(dir + "/without/logits.npy");
  REQUIRE(a.shape() == Shape{1, classes});
  REQUIRE(b.shape() == Shape{1, classes});
  CLDL_CHECK_CLOSE(a.as<float>(), b.as<float>(), size_t(classes), 1e-6, 1e-6);
  CLDL_CHECK_CLOSE(a.as<float>(), ref.as<float>() + pick * classes, size_t(classes), 1e-3, 1e-3);

  // Another batch size needs programs the bundle lacks for some ops or not; either way it must never
  // compile from source: it runs from binaries or fails naming the missing program.
  int rc = test::run_command("CLDL_CACHE=0 " + cli + " run " + model + " --dim N=3 --random --device " + test::device_spec() + " --stats "
                             "--runs 1 --binaries " + bundle, out);
  if (rc == 0) CHECK(program_counts(out)[0] == 0);
  else CHECK(out.find("is not in the binary bundle") != std::string::npos);

  // A bundle whose manifest names another device or driver is refused with a clear message.
  const std::string dev_name = test::ctx().device().info.name;
  for (auto [field, value] : {std::pair<std::string, std::string>{"device", "Other FPGA Device"},
                              {"driver_version", "99.9-other"}}) {
    std::string foreign = dir + "/foreign-" + field;
    fs::copy(bundle, foreign, fs::copy_options::recursive);
    std::string man = slurp(foreign + "/manifest.json");
    std::regex re("\"" + field + "\": \"[^\"]*\"");
    REQUIRE(std::regex_search(man, re));
    std::ofstream(foreign + "/manifest.json") << std::regex_replace(man, re, "\"" + field + "\": \"" + value + "\"");
    CHECK(test::run_command(run + "--binaries " + foreign, out) != 0);
    CHECK(out.find("was built for " + std::string(field == "device" ? "device '" : "driver ") + value) !=
          std::string::npos);
    CHECK(out.find(dev_name) != std::string::npos);
    CHECK(out.find("cldl compile") != std::string::npos);
  }
  CHECK(test::run_command(run + "--binaries " + dir + "/no-such-bundle", out) != 0);
  CHECK(out.find("no manifest.json") != std::string::npos);
  fs::remove_all(dir);
}
}
