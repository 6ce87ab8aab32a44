// Runtime layer: device selection, tensors and transfers, the program cache, errors, threads,
// and (suite multi-device) two PoCL devices in one context.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include <unistd.h>

#include "layers/launch.hpp"
#include "layers/strided.hpp"
#include "support/test_util.hpp"

using namespace cldl;
using cldl::test::ctx;

TEST_SUITE("runtime") {

TEST_CASE("device selection: every spec form, and a clear error for a bad one") {
  const auto& devs = all_devices();
  REQUIRE(!devs.empty());
  // The spec forms for the kind of device the suite runs on (cpu; accelerator on Intel's FPGA emulator).
  const std::string spec = test::device_spec();
  const std::string kind(to_string(select_device(spec).info.type));
  Device first = select_device(kind);
  CHECK(to_string(first.info.type) == kind);
  CHECK(select_device(kind + ":0").device() == first.device());
  CHECK(select_device(first.id()).device() == first.device());
  std::string upper = kind;
  for (auto& ch : upper) ch = static_cast<char>(std::toupper(ch));
  CHECK(select_device(upper).device() == first.device());
  // A case-insensitive substring of the name.
  std::string part = first.info.name.substr(0, std::min<size_t>(6, first.info.name.size()));
  for (auto& ch : part) ch = static_cast<char>(std::toupper(ch));
  CHECK(select_device(part).info.name.find(first.info.name.substr(0, 6)) == 0);
  // Default order: GPU, then accelerator, then CPU.
  unsetenv("CLDL_DEVICE");
  Device def = select_device();
  bool has_gpu = false, has_acc = false;
  for (auto& d : devs) {
    has_gpu |= d.info.type == DeviceType::gpu;
    has_acc |= d.info.type == DeviceType::accelerator;
  }
  CHECK(def.info.type == (has_gpu ? DeviceType::gpu : has_acc ? DeviceType::accelerator : DeviceType::cpu));
  setenv("CLDL_DEVICE", kind.c_str(), 1);
  CHECK(select_device().info.type == first.info.type);
  setenv("CLDL_DEVICE", spec.c_str(), 1);
  // Errors list the devices present.
  for (const std::string& bad : {std::string("nosuchdevice"), kind + ":99", std::string("7:7"), std::string("gpu:x")}) {
    try {
      select_device(bad);
      if (bad.rfind("gpu", 0) != 0 || !has_gpu) FAIL("spec '" << bad << "' should fail");
    } catch (const Error& e) {
      std::string msg = e.what();
      CHECK(msg.find(bad) != std::string::npos);
      CHECK(msg.find("devices present") != std::string::npos);
      CHECK(msg.find(first.info.name) != std::string::npos);
    }
  }
}

TEST_CASE("DeviceInfo carries the capabilities kernels need") {
  const auto& i = ctx().device().info;
  CHECK(!i.name.empty());
  CHECK(!i.driver_version.empty());
  CHECK(i.compute_units >= 1);
  CHECK(i.global_mem_bytes > 0);
  CHECK(i.local_mem_bytes > 0);
  CHECK(i.max_work_group_size >= 1);
  CHECK(i.max_work_item_sizes.size() >= 3);
  CHECK(i.preferred_vector_float >= 1);
  CHECK(i.opencl_c_major >= 1);
  CHECK(i.fp64 == i.has_extension("cl_khr_fp64"));
  CHECK_FALSE(i.has_extension("cl_khr_fp6"));  // whole words only
}

TEST_CASE("tensor round trips of every dtype and odd sizes") {
  for (DType dt : {DType::f32, DType::f16, DType::i32, DType::i64, DType::u8, DType::boolean}) {
    for (Shape s : {Shape{1}, Shape{7}, Shape{3, 5, 7}, Shape{1, 1, 13, 1}, Shape{1031}, Shape{0, 4}}) {
      HostTensor h(dt, s);
      auto* bytes = static_cast<unsigned char*>(h.data());
      for (size_t i = 0; i < h.bytes(); ++i) bytes[i] = static_cast<unsigned char>((i * 131 + 7) & (dt == DType::boolean ? 1 : 0xff));
      Tensor d = ctx().upload(h);
      CHECK(d.dtype == dt);
      CHECK(d.shape == s);
      HostTensor back = ctx().download(d);
      REQUIRE(back.bytes() == h.bytes());
      CHECK(std::memcmp(back.data(), h.data(), h.bytes()) == 0);
    }
  }
  CHECK(parse_dtype("float32") == DType::f32);
  CHECK_THROWS_WITH_AS(parse_dtype("complex64"), doctest::Contains("unknown dtype 'complex64'"), Error);
  CHECK_THROWS_AS(HostTensor(DType::f32, Shape{2, -1}), Error);
}

TEST_CASE("views: reshape and element slices keep storage and offsets") {
  auto h = cldl::test::random_tensor({4, 6}, 1);
  Tensor t = ctx().upload(h);
  Tensor row2 = t.slice_elems(12, 6, {6});
  CHECK(row2.offset_bytes == 48);
  HostTensor back = ctx().download(row2);
  for (int i = 0; i < 6; ++i) CHECK(back.as<float>()[i] == h.as<float>()[12 + i]);
  CHECK_THROWS_AS(t.reshaped({5, 5}), Error);
  CHECK_THROWS_AS(t.slice_elems(20, 6, {6}), Error);
}

TEST_CASE("asynchronous transfers are ordered by events across queues") {
  const int n = 100003;
  std::vector<float> src(n), dst(n, -1.0f);
  for (int i = 0; i < n; ++i) src[i] = float(i) * 0.5f;
  Tensor t = ctx().alloc({n}, DType::f32);
  // Write on queue 1, a kernel on queue 2 that waits for it, the read on queue 3 that waits for that.
  ExecutionContext w(ctx().queue(0, 1));
  cl::Event written, computed, read;
  w.signal = &written;
  ctx().write_async(t, src.data(), n * sizeof(float), w);
  cl::Kernel k = make_kernel(ctx().program("selftest.cl"), "axpy_f32");
  set_args(k, t.buffer, cl_int(0), t.buffer, cl_int(0), 1.0f, cl_int(n));  // y = x + y = 2x
  ExecutionContext c(ctx().queue(0, 2));
  c.wait_for = {written};
  c.signal = &computed;
  c.enqueue_kernel(k, cl::NDRange(n), cl::NullRange, "axpy");
  ExecutionContext r(ctx().queue(0, 3));
  r.wait_for = {computed};
  r.signal = &read;
  ctx().read_async(t, dst.data(), n * sizeof(float), r);
  REQUIRE(read.wait() == CL_SUCCESS);
  for (int i = 0; i < n; i += 997) CHECK(dst[i] == src[i] * 2.0f);
  CHECK(dst[n - 1] == src[n - 1] * 2.0f);
}

TEST_CASE("upload returns a tensor that every queue sees complete") {
  // A blocking clEnqueueWriteBuffer only promises that the host memory may be reused (OpenCL 1.2,
  // 5.2.2). Intel's FPGA emulator returns with the write still CL_SUBMITTED, and a command on another
  // queue then read the buffer's previous contents (suites threads and elementwise failed there).
  // Each round: upload on queue 0 into the buffer the pool hands back, read it on queue 9, then
  // overwrite it on queue 9 so a late write would show as -1.
  const Shape s{437};
  ExecutionContext other = ctx().exec(0, 9);
  Tensor y = ctx().alloc(s, DType::f32);
  Tensor stale = ctx().upload(HostTensor::from<float>(s, std::vector<float>(437, -1.0f)));
  int bad = 0;
  for (int round = 0; round < 40; ++round) {
    Tensor x = ctx().upload(HostTensor::from<float>(s, std::vector<float>(437, float(round))));
    ctx().copy_async(x, y, other);
    ctx().copy_async(stale, x, other);
    REQUIRE(other.queue.finish() == CL_SUCCESS);
    HostTensor got = ctx().download(y);
    if (got.as<float>()[0] != float(round) || got.as<float>()[436] != float(round)) {
      MESSAGE("round " << round << ": read " << got.as<float>()[0]);
      bad++;
    }
  }
  CHECK(bad == 0);
}

TEST_CASE("memory pool: reuse and live / peak counters") {
  MemoryPool& pool = ctx().pool();
  pool.trim();
  auto before = pool.stats();
  {
    Tensor a = ctx().alloc({1000}, DType::f32);
    Tensor b = ctx().alloc({3000}, DType::f32);
    auto s = pool.stats();
    CHECK(s.live_bytes >= before.live_bytes + 16000);
    CHECK(s.peak_bytes >= s.live_bytes);
  }
  auto after = pool.stats();
  CHECK(after.live_bytes == before.live_bytes);
  Tensor c = ctx().alloc({1000}, DType::f32);  // served from the free list
  CHECK(pool.stats().reuses == after.reuses + 1);
  CHECK(MemoryPool::size_class(1) == 256);
  CHECK(MemoryPool::size_class(3 << 20) >= (3u << 20));
  CHECK(MemoryPool::size_class(3 << 20) <= (3u << 20) * 1.125);
  // A request above the device limit is a clear error naming the size and device.
  uint64_t too_big = ctx().device().info.max_alloc_bytes * 2;
  CHECK_THROWS_WITH_AS(pool.allocate(too_big), doctest::Contains("largest allocation"), Error);
}

TEST_CASE("program cache: memory hit, corrupted disk entry rebuilt, cache off") {
  std::string dir = cldl::test::temp_dir("pcache");
  ProgramCache cache(dir, true);
  const auto& dev = ctx().device();
  std::string opts = "-DCLDL_TEST_TAG=" + std::to_string(::getpid());
  cache.get(ctx().cl(), dev, "selftest.cl", opts);
  CHECK(cache.stats().builds == 1);
  cache.get(ctx().cl(), dev, "selftest.cl", opts);
  CHECK(cache.stats().memory_hits == 1);
  std::string file = dir + "/" + cache.key_hash(dev, "selftest.cl", opts) + ".bin";
  REQUIRE(std::filesystem::exists(file));

  // A fresh cache object (as a new process) hits the disk.
  ProgramCache second(dir, true);
  auto p = second.get(ctx().cl(), dev, "selftest.cl", opts);
  CHECK(second.stats().disk_hits == 1);
  CHECK(second.stats().builds == 0);
  CHECK_NOTHROW(make_kernel(p, "fill_f32"));

  // Truncate the entry: it is rejected and rebuilt silently.
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  ProgramCache third(dir, true);
  auto p3 = third.get(ctx().cl(), dev, "selftest.cl", opts);
  CHECK(third.stats().disk_rejects == 1);
  CHECK(third.stats().builds == 1);
  CHECK_NOTHROW(make_kernel(p3, "axpy_f32"));
  // Garbage bytes too.
  { std::ofstream(file, std::ios::binary | std::ios::trunc) << "not a program"; }
  ProgramCache fourth(dir, true);
  fourth.get(ctx().cl(), dev, "selftest.cl", opts);
  CHECK(fourth.stats().disk_rejects == 1);
  // And the rebuilt entry is good again.
  ProgramCache fifth(dir, true);
  fifth.get(ctx().cl(), dev, "selftest.cl", opts);
  CHECK(fifth.stats().disk_hits == 1);

  // Disk cache off: nothing is written.
  std::string off_dir = cldl::test::temp_dir("pcache-off");
  ProgramCache off(off_dir, false);
  off.get(ctx().cl(), dev, "selftest.cl", opts);
  CHECK(off.stats().builds == 1);
  CHECK(std::filesystem::is_empty(off_dir));
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(off_dir);
}

TEST_CASE("program cache: disk hit across two processes, and CLDL_CACHE=0") {
  std::string dir = cldl::test::temp_dir("pcache-proc");
  std::string cmd = "CLDL_CACHE_DIR=" + dir + " CLDL_LOG=debug " + CLDL_CLI_PATH + " selftest -d " + test::device_spec() + " -m 9 -n 7 -k 5";
  std::string out;
  REQUIRE(cldl::test::run_command(cmd, out) == 0);
  CHECK(out.find("built in") != std::string::npos);
  CHECK(out.find("disk cache hit") == std::string::npos);
  REQUIRE(cldl::test::run_command(cmd, out) == 0);
  INFO(out);
  CHECK(out.find("disk cache hit") != std::string::npos);
  CHECK(out.find("built in") == std::string::npos);
  REQUIRE(cldl::test::run_command("CLDL_CACHE=0 " + cmd, out) == 0);
  CHECK(out.find("built in") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a kernel that fails to build reports the file, options and build log") {
  ProgramCache cache(cldl::test::temp_dir("pcache-bad"), false);
  std::string src = "__kernel void broken(__global float* x) { x[0] = undefined_symbol_xyz; }";
  try {
    cache.get_source(ctx().cl(), ctx().device(), "broken.cl", src, "-DFOO=1");
    FAIL("build should fail");
  } catch (const Error& e) {
    std::string msg = e.what();
    CHECK(msg.find("broken.cl") != std::string::npos);
    CHECK(msg.find("-DFOO=1") != std::string::npos);
    CHECK(msg.find("CL_BUILD_PROGRAM_FAILURE") != std::string::npos);
    CHECK(msg.find("undefined_symbol_xyz") != std::string::npos);  // from the build log
    CHECK(e.call() == "clBuildProgram");
  }
  CHECK_THROWS_WITH_AS(make_kernel(ctx().program("selftest.cl"), "no_such_kernel"), doctest::Contains("no_such_kernel"), Error);
  CHECK_THROWS_WITH_AS(kernel_source("nonexistent.cl"), doctest::Contains("nonexistent.cl"), Error);
}

TEST_CASE("CLDL_KERNEL_DIR loads kernel sources from disk") {
  std::string dir = cldl::test::temp_dir("kdir");
  { std::ofstream(dir + "/common.cl") << kernel_source("common.cl"); }
  { std::ofstream(dir + "/selftest.cl") << "__kernel void from_disk(__global float* x) { x[get_global_id(0)] = 42.0f; }"; }
  setenv("CLDL_KERNEL_DIR", dir.c_str(), 1);
  std::string src = kernel_source("selftest.cl");
  unsetenv("CLDL_KERNEL_DIR");
  CHECK(src.find("from_disk") != std::string::npos);
  CHECK(kernel_source("selftest.cl").find("from_disk") == std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("errors carry the OpenCL error name and the failing call") {
  try {
    check(CL_OUT_OF_RESOURCES, "clEnqueueNDRangeKernel", "gemm");
    FAIL("no throw");
  } catch (const Error& e) {
    CHECK(std::string(e.what()) == "clEnqueueNDRangeKernel failed: CL_OUT_OF_RESOURCES (-5) [gemm]");
    CHECK(e.cl_code() == CL_OUT_OF_RESOURCES);
  }
  CHECK(cl_error_name(-9999) == "CL_UNKNOWN_ERROR");
  // A real failure from the driver: a work-group larger than the device allows.
  cl::Kernel k = make_kernel(ctx().program("selftest.cl"), "fill_f32");
  Tensor t = ctx().alloc({16}, DType::f32);
  set_args(k, t.buffer, cl_int(0), 1.0f, cl_int(16));
  auto ec = ctx().exec();
  size_t too_big = ctx().device().info.max_work_group_size * 2;
  CHECK_THROWS_WITH_AS(ec.enqueue_kernel(k, cl::NDRange(too_big), cl::NDRange(too_big), "fill"),
                       doctest::Contains("fill"), Error);
}

TEST_CASE("plane_batch_local_size keeps every dimension within the device's work-item sizes") {
  cl::Kernel k = make_kernel(ctx().program("selftest.cl"), "fill_f32");
  Device dev = ctx().device();
  dev.info.max_work_item_sizes = {1024, 1024, 64};  // NVIDIA's limits
  // 1x1 planes, 128 of them: 128 would fit the group size but not the third dimension.
  cl::NDRange l = plane_batch_local_size(k, dev, 1, 1, 128);
  REQUIRE(l.dimensions() == 3);
  CHECK(l[2] == 64);
  CHECK(plane_batch_local_size(k, dev, 1, 1, 96)[2] == 48);  // a divisor of the planes, at most 64
  CHECK(plane_batch_local_size(k, dev, 2, 2, 480)[2] == 60);
  dev.info.max_work_item_sizes = {8, 1024, 64};
  CHECK(plane_batch_local_size(k, dev, 9, 1, 4).dimensions() == 0);  // a row wider than dimension 0 allows
  // Gather's group covers the indices and the outer dim up to these powers of two.
  dev.info.max_work_item_sizes = {1024, 1000, 64};
  CHECK(pow2_work_items(dev, 0) == 1024);
  CHECK(pow2_work_items(dev, 1) == 512);
  CHECK(pow2_work_items(dev, 2) == 64);
  CHECK(pow2_work_items(dev, 3) == 1);
}

TEST_CASE("profiler records kernels and writes Chrome trace JSON") {
  Profiler prof;
  ExecutionContext ec(ctx().queue(0, 0, true));
  ec.profiler = &prof;
  ec.label = "node0";
  Tensor t = ctx().alloc({1024}, DType::f32);
  cl::Kernel k = make_kernel(ctx().program("selftest.cl"), "fill_f32");
  set_args(k, t.buffer, cl_int(0), 3.0f, cl_int(1024));
  ec.enqueue_kernel(k, cl::NDRange(1024), cl::NullRange, "fill");
  ec.enqueue_kernel(k, cl::NDRange(1024), cl::NullRange, "fill_again");
  auto recs = prof.records();
  REQUIRE(recs.size() == 2);
  CHECK(recs[0].name == "node0/fill");
  CHECK(recs[0].end_ns >= recs[0].start_ns);
  std::string json = prof.chrome_trace_json();
  CHECK(json.find("\"traceEvents\"") != std::string::npos);
  CHECK(json.find("node0/fill_again") != std::string::npos);
}

TEST_CASE("threads: programs and allocations from several threads on one context") {
  const int threads = 4, iters = 6;
  std::atomic<int> bad{0};
  ProgramCache::global().clear_memory();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        auto q = ctx().queue(0, 10 + t);
        for (int i = 0; i < iters; ++i) {
          int n = 1000 + 37 * t + i;
          Tensor x = ctx().alloc({n}, DType::f32);
          cl::Kernel k = make_kernel(ctx().program("selftest.cl"), "fill_f32");  // same program, all threads
          set_args(k, x.buffer, cl_int(0), float(t * 100 + i), cl_int(n));
          ExecutionContext ec(q);
          ec.enqueue_kernel(k, cl::NDRange(n), cl::NullRange, "fill");
          std::vector<float> out(n);
          check(q.enqueueReadBuffer(x.buffer, CL_TRUE, 0, n * 4, out.data()), "read");
          for (float v : out)
            if (v != float(t * 100 + i)) { bad++; break; }
        }
      } catch (...) {
        bad++;
      }
    });
  for (auto& th : pool) th.join();
  CHECK(bad == 0);
}

}  // TEST_SUITE runtime

TEST_SUITE("multi-device") {
TEST_CASE("two devices: one context, a buffer moved between devices") {
  if (!std::getenv("CLDL_TEST_MULTI_DEVICE")) return;
  auto devs = select_devices("cpu:all");
  REQUIRE_MESSAGE(devs.size() >= 2, "run with POCL_DEVICES=\"pthread pthread\"");
  devs.resize(2);
  Context two(devs);
  CHECK(two.device_count() == 2);
  auto h = cldl::test::random_tensor({777}, 5);
  Tensor on0 = two.upload(h, 0);
  Tensor on1 = two.alloc(h.shape(), DType::f32, 1);
  ExecutionContext ec1(two.queue(1));
  cl::Event copied;
  ec1.signal = &copied;
  two.copy_async(on0, on1, ec1);
  // Device 1 doubles it (y = x + y on its own data).
  cl::Kernel k = make_kernel(two.program("selftest.cl", {}, 1), "axpy_f32");
  set_args(k, on1.buffer, cl_int(0), on1.buffer, cl_int(0), 1.0f, cl_int(777));
  ec1.wait_for = {copied};
  ec1.enqueue_kernel(k, cl::NDRange(777), cl::NullRange, "axpy");
  // Back to device 0, waiting on device 1's event from another queue.
  Tensor back = two.alloc(h.shape(), DType::f32, 0);
  ExecutionContext ec0(two.queue(0));
  ec0.wait_for = {copied};
  cl::Event done1;
  ec1.signal = &done1;
  two.queue(1).finish();
  two.copy_async(on1, back, ec0);
  HostTensor r = two.download(back);
  for (int i = 0; i < 777; ++i) CHECK(r.as<float>()[i] == 2.0f * h.as<float>()[i]);
  // Selection specs resolve both devices.
  CHECK(select_devices("cpu:0,cpu:1").size() == 2);
  CHECK(select_device("cpu:1").type_index == 1);
}
}

#include "runtime/bundle.hpp"

TEST_SUITE("runtime") {
TEST_CASE("offline bundles: programs load with no source compiled; foreign bundles are refused") {
  std::string dir = cldl::test::temp_dir("bundle");
  std::vector<ProgramSpec> progs{{"selftest.cl", "-DBUNDLE_TEST=1"}, {"gemm.cl", "-DTRANS_A=1"}};
  auto entries = write_bundle(ctx(), 0, progs, dir);
  REQUIRE(entries.size() == 2);
  ProgramCache cache(cldl::test::temp_dir("bundle-cache"), false);
  cache.set_binary_bundle(dir, true);
  auto p = cache.get(ctx().cl(), ctx().device(), "selftest.cl", "-DBUNDLE_TEST=1");
  CHECK_NOTHROW(make_kernel(p, "fill_f32"));
  cache.get(ctx().cl(), ctx().device(), "gemm.cl", "-DTRANS_A=1");
  CHECK(cache.stats().binary_loads == 2);
  CHECK(cache.stats().builds == 0);
  // A program the bundle lacks is refused rather than compiled.
  CHECK_THROWS_WITH_AS(cache.get(ctx().cl(), ctx().device(), "selftest.cl", "-DOTHER=1"),
                       doctest::Contains("not in the binary bundle"), Error);
  // A bundle for another device or driver is refused with a clear message.
  {
    std::ifstream in(dir + "/manifest.json");
    std::string m((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    auto pos = m.find(ctx().device().info.driver_version);
    REQUIRE(pos != std::string::npos);
    m.replace(pos, ctx().device().info.driver_version.size(), "99.9-other");
    std::ofstream(dir + "/manifest.json") << m;
  }
  CHECK_THROWS_WITH_AS(use_bundle(ctx().device(), dir), doctest::Contains("driver 99.9-other"), Error);
  CHECK_THROWS_WITH_AS(use_bundle(ctx().device(), "/nonexistent-bundle"), doctest::Contains("no manifest.json"), Error);
  std::filesystem::remove_all(dir);
}
}

TEST_SUITE("runtime") {
TEST_CASE("Shape: an index past the rank throws naming the shape and the rank") {
  Shape s{2, 3, 4};
  CHECK(s[0] == 2);
  CHECK(s[2] == 4);
  s[1] = 5;
  CHECK(s == Shape{2, 5, 4});
  const Shape& cs = s;
  CHECK_THROWS_WITH_AS(cs[3], doctest::Contains("Shape [2, 5, 4]: dimension index 3 is out of range (rank 3)"), Error);
  CHECK_THROWS_WITH_AS(s[3] = 1, doctest::Contains("index 3 is out of range"), Error);
  CHECK_THROWS_WITH_AS(cs[size_t(-1)], doctest::Contains("index -1 is out of range"), Error);
  CHECK_THROWS_AS(Shape{}[0], Error);
}
}
