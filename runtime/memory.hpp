// Pool allocator for device buffers with live / peak byte counters. Thread-safe.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/cl.hpp"

namespace cldl {

struct MemoryStats {
  uint64_t live_bytes = 0;      // in tensors now
  uint64_t peak_bytes = 0;      // most live at once
  uint64_t reserved_bytes = 0;  // live + cached free blocks
  uint64_t allocations = 0;     // clCreateBuffer calls
  uint64_t reuses = 0;          // requests served from the free list
};

// Serves buffers of a context for one device. Freed blocks return to a free list keyed by size
// class and are reused; trim() gives cached blocks back to the driver.
class MemoryPool {
 public:
  MemoryPool(cl::Context ctx, std::string device_name, uint64_t max_alloc_bytes);
  ~MemoryPool();
  MemoryPool(const MemoryPool&) = delete;
  MemoryPool& operator=(const MemoryPool&) = delete;

  // A buffer of at least `bytes` and a keepalive handle that returns it to the pool when released.
  std::pair<cl::Buffer, std::shared_ptr<void>> allocate(size_t bytes);
  MemoryStats stats() const;
  void reset_peak();
  void trim();

  static size_t size_class(size_t bytes);

 struct State;  // shared with the blocks handed out, so a block may outlive the pool

 private:
  std::shared_ptr<State> state_;
};

}  // namespace cldl
