// MemoryPool: size-class free lists over clCreateBuffer, shared with the blocks it hands out.
#include "runtime/memory.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

namespace cldl {

struct MemoryPool::State {
  cl::Context ctx;
  std::string device_name;
  uint64_t max_alloc = 0;
  mutable std::mutex m;
  std::multimap<size_t, cl::Buffer> free_blocks;
  MemoryStats stats;
  bool closed = false;  // pool destroyed: returned blocks are released instead of cached
};

namespace {
struct Block {
  std::shared_ptr<MemoryPool::State> st;  // NOLINT: declared in the pool
  cl::Buffer buf;
  size_t bytes;
};
}  // namespace

MemoryPool::MemoryPool(cl::Context ctx, std::string device_name, uint64_t max_alloc)
    : state_(std::make_shared<State>()) {
  state_->ctx = std::move(ctx);
  state_->device_name = std::move(device_name);
  state_->max_alloc = max_alloc;
}

MemoryPool::~MemoryPool() {
  std::lock_guard lock(state_->m);
  state_->closed = true;
  state_->free_blocks.clear();
}

size_t MemoryPool::size_class(size_t bytes) {
  if (bytes == 0) bytes = 1;
  // 256-byte granules up to 1 MiB, then 1/8 steps of the power of two, which bounds waste to 12.5%.
  if (bytes <= (1u << 20)) return (bytes + 255) & ~size_t(255);
  size_t p = 1;
  while (p < bytes) p <<= 1;
  size_t step = p / 16;
  return (bytes + step - 1) / step * step;
}

std::pair<cl::Buffer, std::shared_ptr<void>> MemoryPool::allocate(size_t bytes) {
  auto st = state_;
  size_t cls = size_class(bytes);
  if (st->max_alloc && cls > st->max_alloc)
    fail("cannot allocate {} bytes on {}: the device's largest allocation is {} bytes", bytes, st->device_name,
         st->max_alloc);
  cl::Buffer buf;
  {
    std::lock_guard lock(st->m);
    auto it = st->free_blocks.find(cls);
    if (it != st->free_blocks.end()) {
      buf = it->second;
      st->free_blocks.erase(it);
      st->stats.reuses++;
    }
  }
  if (!buf()) {
    cl_int err = CL_SUCCESS;
    buf = cl::Buffer(st->ctx, CL_MEM_READ_WRITE, cls, nullptr, &err);
    if (err == CL_MEM_OBJECT_ALLOCATION_FAILURE || err == CL_OUT_OF_RESOURCES || err == CL_OUT_OF_HOST_MEMORY) {
      log::warn("allocation of {} bytes on {} failed ({}); trimming the pool and retrying", cls, st->device_name,
                cl_error_name(err));
      trim();
      buf = cl::Buffer(st->ctx, CL_MEM_READ_WRITE, cls, nullptr, &err);
    }
    check(err, "clCreateBuffer", fmt::format("{} bytes on {}", cls, st->device_name));
    std::lock_guard lock(st->m);
    st->stats.allocations++;
    st->stats.reserved_bytes += cls;
  }
  {
    std::lock_guard lock(st->m);
    st->stats.live_bytes += cls;
    st->stats.peak_bytes = std::max(st->stats.peak_bytes, st->stats.live_bytes);
  }
  auto* block = new Block{st, buf, cls};
  std::shared_ptr<void> keep(block, [](void* p) {
    auto* b = static_cast<Block*>(p);
    {
      std::lock_guard lock(b->st->m);
      b->st->stats.live_bytes -= b->bytes;
      if (b->st->closed) {
        b->st->stats.reserved_bytes -= b->bytes;
      } else {
        b->st->free_blocks.emplace(b->bytes, b->buf);
      }
    }
    delete b;
  });
  return {buf, keep};
}

MemoryStats MemoryPool::stats() const {
  std::lock_guard lock(state_->m);
  return state_->stats;
}

void MemoryPool::reset_peak() {
  std::lock_guard lock(state_->m);
  state_->stats.peak_bytes = state_->stats.live_bytes;
}

void MemoryPool::trim() {
  std::lock_guard lock(state_->m);
  for (auto& [bytes, buf] : state_->free_blocks) state_->stats.reserved_bytes -= bytes;
  state_->free_blocks.clear();
}

}  // namespace cldl
