// tile_io.hpp: asynchronous positioned reads and writes of large aligned buffers, the NVMe tier's
// disk engine. A transfer is split into requests of `request_bytes`, at most `queue_depth` of them
// in flight; io_uring submits them from the calling thread, and where the kernel refuses io_uring
// (seccomp sandboxes, kernels before 5.1, kernel.io_uring_disabled) a pool of threads runs
// pread/pwrite instead. Nothing waits until wait(), which completes everything queued so far and
// throws the first failure with the file, offset and bytes of the request that failed.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace zf_nvme {

class TileIo {
 public:
  enum class Engine { automatic, io_uring, threads };
  // `note` receives one line when `automatic` falls back to threads (why io_uring was refused).
  TileIo(Engine engine, unsigned queue_depth, uint64_t request_bytes, std::string *note);
  ~TileIo();
  TileIo(const TileIo &) = delete;
  TileIo &operator=(const TileIo &) = delete;

  const char *engine_name() const;
  // `file` names fd in error messages. The buffer stays untouched by the caller until wait().
  void read(int fd, const std::string &file, uint64_t offset, void *buffer, uint64_t bytes);
  void write(int fd, const std::string &file, uint64_t offset, const void *buffer, uint64_t bytes);
  void wait();

  struct Request {
    int fd;
    std::string file;
    bool write;
    uint64_t offset;
    char *buffer;
    uint64_t bytes;
  };
  struct Backend;

 private:
  void queue(int fd, const std::string &file, bool write, uint64_t offset, char *buffer, uint64_t bytes);
  std::unique_ptr<Backend> backend_;
  uint64_t request_bytes_;
};

}  // namespace zf_nvme
