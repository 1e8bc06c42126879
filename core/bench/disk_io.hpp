// disk_io.hpp: the two ways `zfcore bench disk` keeps several block requests in flight on one
// file. io_uring: one thread submits and reaps, the kernel does the rest (what an NVMe offload
// tier uses). threads: one thread per request slot doing pwrite/pread, for where io_uring is
// refused (seccomp in containers, kernel.io_uring_disabled) or to compare against it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zf::bench {

// One sequential pass over bytes [0, bytes) of a file, block by block, block i at offset
// i * block. A write stamps each block with its index before it goes out; a read checks the
// stamp, so a pass that moved no data (or the wrong data) cannot pass for a fast one.
struct DiskPass {
  int fd = -1;
  std::string file;             // the file's name, for the messages
  uint64_t bytes = 0;           // a multiple of block
  uint64_t block = 0;           // a multiple of 4096
  std::vector<char *> buffers;  // one per request in flight: block bytes each, 4096-aligned
  bool write = true;
};

class DiskEngine {
 public:
  virtual ~DiskEngine() = default;
  virtual const char *name() const = 0;  // "io_uring" | "threads"
  // Runs the pass. A failed or short request, or a read whose stamp is wrong, throws zf::Error
  // naming the file, the offset and the bytes, once no request is in flight any more.
  virtual void run(const DiskPass &pass) = 0;
};

// io_uring with room for depth requests; nullptr and the kernel's reason in `refused` when it
// cannot be set up here (ENOSYS, EPERM under seccomp or kernel.io_uring_disabled, ENOMEM).
std::unique_ptr<DiskEngine> make_uring_engine(unsigned depth, std::string &refused);

// One thread per buffer of the pass, each taking the next block in turn.
std::unique_ptr<DiskEngine> make_thread_engine();

}  // namespace zf::bench
