// Writing and adopting offline program bundles.
#include "runtime/bundle.hpp"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace cldl {

std::vector<BundleEntry> write_bundle(Context& ctx, int d, const std::vector<ProgramSpec>& programs,
                                      const std::string& dir, const std::function<void(size_t, size_t)>& progress) {
  const Device& dev = ctx.device(d);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail("cannot create bundle folder '{}': {}", dir, ec.message());
  // Build with a private cache object so every program really comes from source, not the disk cache.
  ProgramCache builder(dir + "/.unused", false);
  std::vector<BundleEntry> out;
  nlohmann::json entries = nlohmann::json::array();
  for (size_t i = 0; i < programs.size(); ++i) {
    const auto& p = programs[i];
    cl::Program prog = p.source.empty() ? builder.get(ctx.cl(), dev, p.file, p.options)
                                        : builder.get_source(ctx.cl(), dev, p.file, p.source, p.options);
    std::string key = builder.disk_key_for(dev, p);
    std::string hash = hash_hex(key);
    ProgramCache::save_binary(prog, dev.device, dir + "/" + hash + ".bin", key);
    out.push_back({p, hash});
    entries.push_back({{"file", p.file}, {"options", p.options}, {"hash", hash}});
    if (progress) progress(i + 1, programs.size());
  }
  nlohmann::json manifest{{"format", "cldl-bundle-1"},
                          {"library_version", std::string(library_version())},
                          {"device", dev.info.name},
                          {"platform", dev.info.platform_name},
                          {"platform_version", dev.info.platform_version},
                          {"driver_version", dev.info.driver_version},
                          {"programs", entries}};
  std::ofstream f(dir + "/manifest.json");
  f << manifest.dump(2) << "\n";
  if (!f) fail("cannot write '{}/manifest.json'", dir);
  return out;
}

void use_bundle(const Device& device, const std::string& dir) {
  std::ifstream f(dir + "/manifest.json");
  if (!f) fail("'{}' is not a cldl program bundle: no manifest.json", dir);
  nlohmann::json m;
  try {
    m = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    fail("bundle manifest '{}/manifest.json' is not valid JSON: {}", dir, e.what());
  }
  auto field = [&](const char* k) { return m.contains(k) && m[k].is_string() ? m[k].get<std::string>() : std::string("?"); };
  if (field("format") != "cldl-bundle-1") fail("bundle '{}' has an unknown format '{}'", dir, field("format"));
  std::string why;
  if (field("device") != device.info.name) why = fmt::format("device '{}'", field("device"));
  else if (field("platform") != device.info.platform_name) why = fmt::format("platform '{}'", field("platform"));
  else if (field("driver_version") != device.info.driver_version) why = fmt::format("driver {}", field("driver_version"));
  else if (field("library_version") != library_version()) why = fmt::format("cldl {}", field("library_version"));
  if (!why.empty())
    fail("bundle '{}' was built for {}, not for this {} '{}' (driver {}, cldl {}); rebuild it with `cldl compile`", dir,
         why, to_string(device.info.type), device.info.name, device.info.driver_version, library_version());
  ProgramCache::global().set_binary_bundle(dir, true);
  log::info("using program bundle {} ({} programs)", dir, m["programs"].size());
}

}  // namespace cldl
