// disk_bandwidth.cpp: `zfcore bench disk PATH`: the sequential O_DIRECT write and read bandwidth of
// the filesystem under PATH, the ceiling an NVMe offload tier there is judged against (what fio's
// sequential O_DIRECT jobs or DeepSpeed's ds_io measure). A new, preallocated file is written block
// by block with several requests in flight, fsynced, then read back the same way; the engines
// that move the blocks are in disk_io.cpp.
#include "bench/bench.hpp"
#include "bench/bench_flags.hpp"
#include "bench/disk_io.hpp"
#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/error.hpp"
#include "runtime/json.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

namespace zf {
namespace {

const char *kDiskUsage =
    "usage: zfcore bench disk PATH [options]\n"
    "Writes a new file in the directory PATH with O_DIRECT, fsyncs it, reads it back, and prints both\n"
    "bandwidths (GB = 1e9 bytes): the ceiling of an NVMe offload tier there. The file is removed.\n"
    "  --size-gb N          GiB written and read (default 1; fractions allowed, whole blocks)\n"
    "  --block-mb N         MiB per request (default 1; a multiple of 4 KiB, e.g. 0.125)\n"
    "  --queue-depth N      requests in flight (default 16)\n"
    "  --engine E           auto | io_uring | threads (default auto: io_uring, or where the kernel\n"
    "                       refuses it, queue-depth threads doing pwrite/pread)\n"
    "  --json FILE          also write the results as JSON\n";

constexpr uint64_t kKiB = 1ull << 10, kMiB = 1ull << 20, kGiB = 1ull << 30;
constexpr uint64_t kAlign = 4096;              // O_DIRECT: buffers, offsets and lengths
constexpr uint64_t kMaxBuffers = 8 * kGiB;     // queue-depth x block-mb, all in memory at once
constexpr double kMaxFreeFraction = 0.9;       // of the free space, so that the disk never fills

struct DiskOptions {
  std::string path;
  uint64_t bytes = kGiB;   // whole blocks
  uint64_t block = kMiB;
  unsigned queue_depth = 16;
  std::string engine = "auto";
  std::string json;
};

DiskOptions parse_disk_options(const std::vector<std::string> &args) {
  DiskOptions o;
  double size_gb = 1;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &flag = args[i];
    if (flag == "--help" || flag == "-h") {
      std::fputs(kDiskUsage, stdout);
      std::exit(0);
    }
    if (flag.rfind("--", 0) != 0) {
      if (!o.path.empty())
        throw UsageError(format("unexpected argument '%s' (PATH is %s)\n%s", flag.c_str(), o.path.c_str(), kDiskUsage));
      o.path = flag;
      continue;
    }
    if (i + 1 >= args.size()) throw UsageError(flag + " needs a value\n" + kDiskUsage);
    const std::string &value = args[++i];
    if (flag == "--size-gb") {
      size_gb = bench::parse_number(flag, value, 0, 65536);
    } else if (flag == "--block-mb") {
      const double mb = bench::parse_number(flag, value, 0, 1024);
      o.block = uint64_t(std::llround(mb * double(kMiB)));
      if (o.block == 0 || o.block % kAlign != 0)
        throw UsageError(format("%s %s: a block must be a multiple of 4 KiB (O_DIRECT's alignment), e.g. 0.25",
                                flag.c_str(), value.c_str()));
    } else if (flag == "--queue-depth") {
      o.queue_depth = unsigned(bench::parse_int(flag, value, 1, 1024));
    } else if (flag == "--engine") {
      o.engine = bench::one_of(flag, value, {"auto", "io_uring", "threads"});
    } else if (flag == "--json") {
      o.json = value;
    } else {
      throw UsageError("unknown option '" + flag + "'\n" + kDiskUsage);
    }
  }
  if (o.path.empty()) throw UsageError(std::string("which directory? PATH is missing\n") + kDiskUsage);
  if (o.queue_depth * o.block > kMaxBuffers)
    throw UsageError(format("--queue-depth %u x --block-mb %g needs %.1f GiB of buffers; at most 8 GiB", o.queue_depth,
                            double(o.block) / kMiB, double(o.queue_depth * o.block) / kGiB));
  // Whole blocks, at least one: the size is rounded up.
  const uint64_t blocks = std::max<uint64_t>(1, uint64_t(std::ceil(size_gb * double(kGiB) / double(o.block))));
  o.bytes = blocks * o.block;
  return o;
}

// "1 GiB", "64 MiB", "256 KiB", or bytes.
std::string size_text(uint64_t bytes) {
  for (auto [unit, name] : {std::pair{kGiB, "GiB"}, std::pair{kMiB, "MiB"}, std::pair{kKiB, "KiB"}})
    if (bytes >= unit && bytes % unit == 0) return format("%llu %s", (unsigned long long)(bytes / unit), name);
  if (bytes >= kMiB) return format("%.2f MiB", double(bytes) / kMiB);
  return format("%llu bytes", (unsigned long long)bytes);
}

// PATH must be an existing directory we may write to, with room for the file.
void check_directory(const DiskOptions &o) {
  struct stat info {};
  ZF_REQUIRE(::stat(o.path.c_str(), &info) == 0, "%s: %s (PATH must be an existing directory)", o.path.c_str(),
             std::strerror(errno));
  ZF_REQUIRE(S_ISDIR(info.st_mode), "%s: not a directory", o.path.c_str());
  ZF_REQUIRE(::access(o.path.c_str(), W_OK | X_OK) == 0, "%s: not writable: %s", o.path.c_str(), std::strerror(errno));
  struct statvfs fs {};
  ZF_REQUIRE(::statvfs(o.path.c_str(), &fs) == 0, "%s: statvfs: %s", o.path.c_str(), std::strerror(errno));
  const double free_bytes = double(fs.f_bavail) * double(fs.f_frsize);
  ZF_REQUIRE(double(o.bytes) <= kMaxFreeFraction * free_bytes,
             "%s: not enough free space: the benchmark writes %s and %.2f GiB is free there (it uses at most 90%% "
             "of it); pass a smaller --size-gb",
             o.path.c_str(), size_text(o.bytes).c_str(), free_bytes / kGiB);
}

// The file the benchmark writes: a unique name in PATH, unlinked as soon as it is open, so that
// it is gone when the descriptor closes however the process ends (an error, Ctrl-C, SIGKILL).
// O_DIRECT is set where the filesystem takes it (fcntl refuses it with EINVAL where it does not:
// tmpfs before Linux 6.6, some FUSE and network filesystems).
struct TempFile {
  std::string name;
  int fd = -1;
  bool direct = false;

  explicit TempFile(const std::string &dir) {
    std::string pattern = dir + "/.zfcore-bench-disk-XXXXXX";
    fd = ::mkostemp(pattern.data(), O_CLOEXEC);
    ZF_REQUIRE(fd >= 0, "%s: cannot create a file there: %s", pattern.c_str(), std::strerror(errno));
    name = pattern;
    const int unlinked = ::unlink(name.c_str()) == 0 ? 0 : errno;
    if (unlinked != 0) {
      ::close(fd);
      throw Error(format("%s: cannot unlink the benchmark's file: %s", name.c_str(), std::strerror(unlinked)));
    }
    const int flags = ::fcntl(fd, F_GETFL);
    direct = ::fcntl(fd, F_SETFL, flags | O_DIRECT) == 0;
    if (!direct && errno != EINVAL) {
      const int error = errno;
      ::close(fd);
      throw Error(format("%s: fcntl(O_DIRECT): %s", name.c_str(), std::strerror(error)));
    }
  }
  ~TempFile() { ::close(fd); }
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;
};

// count buffers of bytes each, 4096-aligned, filled with bytes that do not compress.
struct AlignedBuffers {
  std::vector<char *> buffers;

  AlignedBuffers(size_t count, uint64_t bytes) {
    for (size_t b = 0; b < count; ++b) {
      void *memory = nullptr;
      const int rc = ::posix_memalign(&memory, kAlign, bytes);
      ZF_REQUIRE(rc == 0, "cannot allocate %zu buffers of %s: %s", count, size_text(bytes).c_str(), std::strerror(rc));
      buffers.push_back(static_cast<char *>(memory));
      uint64_t state = 0x9e3779b97f4a7c15ull * (b + 1);
      for (uint64_t i = 0; i < bytes; i += 8) {  // xorshift64
        state ^= state << 13, state ^= state >> 7, state ^= state << 17;
        std::memcpy(buffers.back() + i, &state, 8);
      }
    }
  }
  ~AlignedBuffers() {
    for (char *buffer : buffers) std::free(buffer);
  }
  AlignedBuffers(const AlignedBuffers &) = delete;
  AlignedBuffers &operator=(const AlignedBuffers &) = delete;
};

// The file at its full size before the timed write, as fio lays out its files: the writes then
// land inside the file instead of appending to it (an appending O_DIRECT write takes the inode
// lock on ext4 and XFS, so requests in flight would queue behind one another). Where the
// filesystem cannot preallocate (EOPNOTSUPP), the size alone.
void preallocate(const TempFile &file, uint64_t bytes) {
  if (::fallocate(file.fd, 0, 0, off_t(bytes)) == 0) return;
  const int error = errno;
  ZF_REQUIRE(error == EOPNOTSUPP, "%s: fallocate of %llu bytes at offset 0 failed: %s", file.name.c_str(),
             (unsigned long long)bytes, std::strerror(error));
  ZF_REQUIRE(::ftruncate(file.fd, off_t(bytes)) == 0, "%s: ftruncate to %llu bytes: %s", file.name.c_str(),
             (unsigned long long)bytes, std::strerror(errno));
}

double seconds_of(const std::function<void()> &work) {
  const auto start = std::chrono::steady_clock::now();
  work();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct DiskResult {
  std::string engine;
  bool direct = false;
  unsigned depth = 0;  // requests in flight: queue-depth, or fewer when the file has fewer blocks
  double write_seconds = 0, read_seconds = 0;
};

void write_json(const DiskOptions &o, const DiskResult &r) {
  JsonWriter json;
  json.begin_object();
  json.key("benchmark").value("disk");
  json.key("path").value(o.path);
  json.key("bytes").value(o.bytes);
  json.key("block_bytes").value(o.block);
  json.key("queue_depth").value(int64_t(r.depth));
  json.key("engine").value(r.engine);
  json.key("direct").value(r.direct);
  json.key("write_gbps").value(double(o.bytes) / r.write_seconds / 1e9);
  json.key("read_gbps").value(double(o.bytes) / r.read_seconds / 1e9);
  json.key("write_seconds").value(r.write_seconds);
  json.key("read_seconds").value(r.read_seconds);
  json.end_object();
  write_file_atomically(o.json, json.str() + "\n");
  std::printf("wrote %s\n", o.json.c_str());
}

}  // namespace

int bench_disk(const std::vector<std::string> &args) {
  const DiskOptions o = parse_disk_options(args);
  check_directory(o);
  const uint64_t blocks = o.bytes / o.block;
  DiskResult r;
  r.depth = unsigned(std::min<uint64_t>(o.queue_depth, blocks));

  // In this order so that they go in reverse: the file, the engine (its ring), then the buffers
  // the kernel may still be writing to.
  AlignedBuffers buffers(r.depth, o.block);
  std::unique_ptr<bench::DiskEngine> engine;
  if (o.engine != "threads") {
    std::string refused;
    engine = bench::make_uring_engine(r.depth, refused);
    ZF_REQUIRE(engine || o.engine == "auto",
               "--engine io_uring: io_uring is refused here (%s: seccomp, kernel.io_uring_disabled or an old "
               "kernel); --engine threads uses pwrite/pread instead",
               refused.c_str());
    if (!engine) std::printf("io_uring refused here (%s); %u threads doing pwrite/pread\n", refused.c_str(), r.depth);
  }
  if (!engine) engine = bench::make_thread_engine();
  r.engine = engine->name();
  TempFile file(o.path);
  r.direct = file.direct;
  if (!r.direct)
    std::printf("O_DIRECT refused by this filesystem; buffered: writes end with fsync and the page cache is "
                "dropped before reading (POSIX_FADV_DONTNEED)\n");

  preallocate(file, o.bytes);

  bench::DiskPass pass;
  pass.fd = file.fd;
  pass.file = file.name;
  pass.bytes = o.bytes;
  pass.block = o.block;
  pass.buffers = buffers.buffers;

  // The fsync counts: the write is done when the data is on the device (buffered: at all; O_DIRECT:
  // the device's volatile cache and the preallocated extents marked written).
  pass.write = true;
  r.write_seconds = seconds_of([&] {
    engine->run(pass);
    ZF_REQUIRE(::fsync(file.fd) == 0, "%s: fsync after writing %s: %s", file.name.c_str(), size_text(o.bytes).c_str(),
               std::strerror(errno));
  });
  if (!r.direct) {
    const int rc = ::posix_fadvise(file.fd, 0, 0, POSIX_FADV_DONTNEED);  // clean pages now: all of them go
    ZF_REQUIRE(rc == 0, "%s: posix_fadvise(DONTNEED): %s", file.name.c_str(), std::strerror(rc));
  }
  pass.write = false;
  r.read_seconds = seconds_of([&] { engine->run(pass); });

  std::printf("disk %s: write %.2f GB/s, read %.2f GB/s (%s, %s, %s, %s blocks, %u in flight)\n", o.path.c_str(),
              double(o.bytes) / r.write_seconds / 1e9, double(o.bytes) / r.read_seconds / 1e9,
              r.direct ? "O_DIRECT" : "buffered", r.engine.c_str(), size_text(o.bytes).c_str(),
              size_text(o.block).c_str(), r.depth);
  if (!o.json.empty()) write_json(o, r);
  return 0;
}

}  // namespace zf
