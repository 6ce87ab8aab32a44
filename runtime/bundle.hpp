// Offline program bundles (the FPGA flow): every program a model or the library needs, built once
// for one device and written as binaries with a manifest, then loaded with no source compiled.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/context.hpp"
#include "runtime/program_cache.hpp"

namespace cldl {

struct BundleEntry {
  ProgramSpec spec;
  std::string key_hash;
};

// Builds `programs` for device d of ctx and writes DIR/<key hash>.bin plus DIR/manifest.json
// (device, platform, driver, library version, and each entry's file, options and hash).
// Returns the entries written. `progress` is called after each program (index, total).
std::vector<BundleEntry> write_bundle(Context& ctx, int d, const std::vector<ProgramSpec>& programs,
                                      const std::string& dir,
                                      const std::function<void(size_t, size_t)>& progress = {});

// Makes ProgramCache::global() load programs from the bundle at DIR and refuse to compile from
// source. Throws Error when the bundle was built for another device, driver or library version.
void use_bundle(const Device& device, const std::string& dir);

}  // namespace cldl
