#include "tile_io.hpp"

#include <liburing.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace zf_nvme {

namespace {

std::string describe(const TileIo::Request &r, int error) {
  std::string why = error ? std::strerror(error) : "unexpected end of file";
  if (error == ENOSPC || error == EFBIG || error == EDQUOT) why += " (the disk is full or over its quota)";
  return std::string(r.write ? "write" : "read") + " of " + std::to_string(r.bytes) + " bytes at offset " +
         std::to_string(r.offset) + " of " + r.file + " failed: " + why;
}

}  // namespace

struct TileIo::Backend {
  virtual ~Backend() = default;
  virtual const char *name() const = 0;
  virtual void submit(const Request &request) = 0;
  virtual std::string wait() = 0;  // until all is done; the first failure since the last wait, or ""
};

namespace {

// io_uring, driven from the caller's thread: requests beyond the queue depth wait in `pending_`
// and go in as earlier ones complete (at the next submit or in wait).
class UringBackend : public TileIo::Backend {
 public:
  UringBackend(unsigned depth, int *error) : depth_(depth) {
    *error = -io_uring_queue_init(depth, &ring_, 0);
    ready_ = *error == 0;
  }
  ~UringBackend() override {
    if (!ready_) return;
    try {
      wait();  // a failure nobody waited for: the run is ending anyway
    } catch (...) {  // io_uring_wait_cqe itself failed
    }
    io_uring_queue_exit(&ring_);
  }
  const char *name() const override { return "io_uring"; }

  void submit(const TileIo::Request &request) override {
    pending_.push_back(request);
    reap(/*block=*/false);
    fill();
  }

  std::string wait() override {
    while (!pending_.empty() || in_flight_ > 0) {
      fill();
      reap(/*block=*/true);
    }
    return std::exchange(failure_, std::string());
  }

 private:
  void fill() {
    unsigned queued = 0;
    while (!pending_.empty() && in_flight_ < depth_) {
      io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
      if (!sqe) break;
      auto *request = new TileIo::Request(std::move(pending_.front()));
      pending_.pop_front();
      if (request->write)
        io_uring_prep_write(sqe, request->fd, request->buffer, unsigned(request->bytes), request->offset);
      else
        io_uring_prep_read(sqe, request->fd, request->buffer, unsigned(request->bytes), request->offset);
      io_uring_sqe_set_data(sqe, request);
      ++in_flight_;
      ++queued;
    }
    if (queued) {
      int submitted;
      do submitted = io_uring_submit(&ring_);
      while (submitted == -EINTR);
      if (submitted < 0) throw std::runtime_error(std::string("io_uring_submit: ") + std::strerror(-submitted));
    }
  }

  void reap(bool block) {
    io_uring_cqe *cqe = nullptr;
    while (in_flight_ > 0) {
      int status = block ? io_uring_wait_cqe(&ring_, &cqe) : io_uring_peek_cqe(&ring_, &cqe);
      if (status == -EINTR) continue;
      if (status == -EAGAIN || !cqe) return;
      if (status < 0) throw std::runtime_error(std::string("io_uring_wait_cqe: ") + std::strerror(-status));
      std::unique_ptr<TileIo::Request> request(static_cast<TileIo::Request *>(io_uring_cqe_get_data(cqe)));
      const int result = cqe->res;
      io_uring_cqe_seen(&ring_, cqe);
      --in_flight_;
      finished(*request, result);
      block = false;  // one blocking wait per call; then take what else is ready
    }
  }

  // A short transfer goes on from where it stopped; an error is kept (the first one).
  void finished(TileIo::Request &request, int result) {
    if (result == -EINTR || result == -EAGAIN) {
      pending_.push_front(request);
    } else if (result <= 0) {
      if (failure_.empty()) failure_ = describe(request, -result);
    } else if (uint64_t(result) < request.bytes) {
      request.offset += uint64_t(result);
      request.buffer += result;
      request.bytes -= uint64_t(result);
      pending_.push_front(request);
    }
  }

  io_uring ring_{};
  bool ready_ = false;
  unsigned depth_, in_flight_ = 0;
  std::deque<TileIo::Request> pending_;
  std::string failure_;
};

// pread/pwrite on a pool of threads: the same requests, for kernels or sandboxes without io_uring.
class ThreadBackend : public TileIo::Backend {
 public:
  explicit ThreadBackend(unsigned threads) {
    for (unsigned i = 0; i < threads; ++i) workers_.emplace_back([this] { loop(); });
  }
  ~ThreadBackend() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    for (std::thread &worker : workers_) worker.join();
  }
  const char *name() const override { return "threads"; }

  void submit(const TileIo::Request &request) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(request);
      ++outstanding_;
    }
    changed_.notify_one();
  }

  std::string wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [&] { return outstanding_ == 0; });
    return std::exchange(failure_, std::string());
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      TileIo::Request request = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      int error = transfer(request);
      lock.lock();
      if (error >= 0 && failure_.empty()) failure_ = describe(request, error);
      if (--outstanding_ == 0) idle_.notify_all();
    }
  }

  // -1 when every byte moved; else the errno, or 0 for an end of file before the bytes asked for.
  static int transfer(TileIo::Request &r) {
    while (r.bytes > 0) {
      ssize_t n = r.write ? ::pwrite(r.fd, r.buffer, r.bytes, off_t(r.offset))
                          : ::pread(r.fd, r.buffer, r.bytes, off_t(r.offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return errno;
      if (n == 0) return 0;  // end of file before the bytes asked for
      r.offset += uint64_t(n);
      r.buffer += n;
      r.bytes -= uint64_t(n);
    }
    return -1;
  }

  std::mutex mutex_;
  std::condition_variable changed_, idle_;
  std::deque<TileIo::Request> queue_;
  uint64_t outstanding_ = 0;
  bool stopping_ = false;
  std::string failure_;
  std::vector<std::thread> workers_;  // last: they start once the members above exist
};

}  // namespace

TileIo::TileIo(Engine engine, unsigned queue_depth, uint64_t request_bytes, std::string *note)
    : request_bytes_(request_bytes) {
  if (engine != Engine::threads) {
    int error = 0;
    auto uring = std::make_unique<UringBackend>(queue_depth, &error);
    if (error == 0) {
      backend_ = std::move(uring);
      return;
    }
    if (engine == Engine::io_uring)
      throw std::runtime_error(std::string("io_backend = \"io_uring\", but this kernel refuses io_uring: ") +
                               std::strerror(error));
    if (note)
      *note = std::string("io_uring is not available here (") + std::strerror(error) + "): pread/pwrite on " +
              std::to_string(std::min(queue_depth, 16u)) + " threads instead";
  }
  backend_ = std::make_unique<ThreadBackend>(std::min(queue_depth, 16u));
}

TileIo::~TileIo() = default;

const char *TileIo::engine_name() const { return backend_->name(); }

void TileIo::queue(int fd, const std::string &file, bool write, uint64_t offset, char *buffer, uint64_t bytes) {
  for (uint64_t done = 0; done < bytes; done += request_bytes_) {
    const uint64_t part = std::min(request_bytes_, bytes - done);
    backend_->submit(Request{fd, file, write, offset + done, buffer + done, part});
  }
}

void TileIo::read(int fd, const std::string &file, uint64_t offset, void *buffer, uint64_t bytes) {
  queue(fd, file, false, offset, static_cast<char *>(buffer), bytes);
}

void TileIo::write(int fd, const std::string &file, uint64_t offset, const void *buffer, uint64_t bytes) {
  queue(fd, file, true, offset, static_cast<char *>(const_cast<void *>(buffer)), bytes);
}

void TileIo::wait() {
  std::string failure = backend_->wait();
  if (!failure.empty()) throw std::runtime_error(failure);
}

}  // namespace zf_nvme
