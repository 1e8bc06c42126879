// disk_io.cpp: the io_uring and thread-pool engines of `zfcore bench disk` (disk_io.hpp).
#include "bench/disk_io.hpp"

#include "runtime/error.hpp"

#include <liburing.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

namespace zf::bench {
namespace {

// The first 8 bytes of block i hold i mixed with a constant: a block left as zeros, or read
// from the wrong offset, does not match.
constexpr uint64_t kStampKey = 0x7a66636f72656469ull;  // "zfcoredi"

void stamp(char *buffer, uint64_t index) {
  const uint64_t word = index ^ kStampKey;
  std::memcpy(buffer, &word, sizeof word);
}

// "" when block index read back as written, else the message.
std::string check_stamp(const DiskPass &pass, const char *buffer, uint64_t index) {
  uint64_t word = 0;
  std::memcpy(&word, buffer, sizeof word);
  if (word == (index ^ kStampKey)) return "";
  return format("%s: the %llu bytes read at offset %llu are not the ones written there", pass.file.c_str(),
                (unsigned long long)pass.block, (unsigned long long)(index * pass.block));
}

// The message for a request that failed (error > 0: an errno) or moved nothing (error == 0).
std::string request_failed(const DiskPass &pass, uint64_t offset, uint64_t bytes, int error) {
  const char *what = pass.write ? "write" : "read";
  if (error != 0)
    return format("%s: %s of %llu bytes at offset %llu failed: %s", pass.file.c_str(), what,
                  (unsigned long long)bytes, (unsigned long long)offset, std::strerror(error));
  return format("%s: short %s: %s of %llu bytes at offset %llu moved 0 bytes", pass.file.c_str(), what, what,
                (unsigned long long)bytes, (unsigned long long)offset);
}

class UringEngine : public DiskEngine {
 public:
  // 0, or the negative errno of io_uring_queue_init. The ring stays where it was made: liburing
  // hands it around by pointer only.
  int init(unsigned depth) {
    const int rc = io_uring_queue_init(depth, &ring_, 0);
    ready_ = rc == 0;
    return rc;
  }
  ~UringEngine() override {
    if (ready_) io_uring_queue_exit(&ring_);
  }
  const char *name() const override { return "io_uring"; }
  void run(const DiskPass &pass) override;

 private:
  io_uring ring_{};
  bool ready_ = false;
};

void UringEngine::run(const DiskPass &pass) {
  // A slot is a buffer and the block it carries; user_data is the slot's number.
  struct Slot {
    uint64_t index = 0, offset = 0, done = 0;
  };
  const uint64_t blocks = pass.bytes / pass.block;
  std::vector<Slot> slots(pass.buffers.size());
  std::vector<size_t> idle;
  for (size_t s = slots.size(); s-- > 0;) idle.push_back(s);

  // Queues what is left of slot s's block (all of it, or the rest after a short transfer).
  auto queue = [&](size_t s) {
    io_uring_sqe *sqe = io_uring_get_sqe(&ring_);
    ZF_REQUIRE(sqe, "%s: io_uring submission queue full", pass.file.c_str());  // never: depth slots at most
    const Slot &slot = slots[s];
    char *at = pass.buffers[s] + slot.done;
    const unsigned length = unsigned(pass.block - slot.done);
    if (pass.write)
      io_uring_prep_write(sqe, pass.fd, at, length, slot.offset + slot.done);
    else
      io_uring_prep_read(sqe, pass.fd, at, length, slot.offset + slot.done);
    io_uring_sqe_set_data64(sqe, s);
  };

  uint64_t next = 0;  // the next block to queue
  size_t in_flight = 0;
  std::string error;  // the first failure; no new requests after it
  while (in_flight > 0 || (error.empty() && next < blocks)) {
    while (error.empty() && next < blocks && !idle.empty()) {
      const size_t s = idle.back();
      idle.pop_back();
      slots[s] = Slot{next, next * pass.block, 0};
      if (pass.write) stamp(pass.buffers[s], next);
      queue(s);
      ++next;
      ++in_flight;
    }
    const int submitted = io_uring_submit_and_wait(&ring_, 1);
    if (submitted < 0 && submitted != -EINTR && submitted != -EAGAIN && submitted != -EBUSY)
      // The requests in flight cannot be waited for: leave at once (the ring closes with the engine).
      throw Error(format("%s: io_uring_submit: %s", pass.file.c_str(), std::strerror(-submitted)));

    io_uring_cqe *cqe = nullptr;
    unsigned head = 0, seen = 0;
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      const size_t s = size_t(io_uring_cqe_get_data64(cqe));
      Slot &slot = slots[s];
      const int result = cqe->res;
      if (result == -EINTR || result == -EAGAIN) {
        queue(s);  // not an I/O error: ask again
        continue;
      }
      if (result > 0) slot.done += uint64_t(result);
      if (result > 0 && slot.done < pass.block) {
        queue(s);  // a short transfer: the rest, as a pwrite loop would (a full disk then says ENOSPC)
        continue;
      }
      --in_flight;
      idle.push_back(s);
      if (result <= 0) {
        if (error.empty())
          error = request_failed(pass, slot.offset + slot.done, pass.block - slot.done, -result);
        continue;
      }
      if (!pass.write && error.empty()) error = check_stamp(pass, pass.buffers[s], slot.index);
    }
    io_uring_cq_advance(&ring_, seen);
  }
  if (!error.empty()) throw Error(error);
}

class ThreadEngine : public DiskEngine {
 public:
  const char *name() const override { return "threads"; }
  void run(const DiskPass &pass) override;
};

// Moves one whole block with pwrite/pread, looping over short transfers; "" or the message.
std::string transfer_block(const DiskPass &pass, char *buffer, uint64_t offset) {
  uint64_t done = 0;
  while (done < pass.block) {
    const size_t length = size_t(pass.block - done);
    const off_t at = off_t(offset + done);
    const ssize_t moved = pass.write ? ::pwrite(pass.fd, buffer + done, length, at)
                                     : ::pread(pass.fd, buffer + done, length, at);
    if (moved < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (moved <= 0) return request_failed(pass, offset + done, length, moved < 0 ? errno : 0);
    done += uint64_t(moved);
  }
  return "";
}

void ThreadEngine::run(const DiskPass &pass) {
  const uint64_t blocks = pass.bytes / pass.block;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  std::string error;  // the first failure; the other threads stop at their next block
  auto worker = [&](char *buffer) {
    while (!failed.load(std::memory_order_relaxed)) {
      const uint64_t index = next.fetch_add(1, std::memory_order_relaxed);
      if (index >= blocks) return;
      if (pass.write) stamp(buffer, index);
      std::string problem = transfer_block(pass, buffer, index * pass.block);
      if (problem.empty() && !pass.write) problem = check_stamp(pass, buffer, index);
      if (!problem.empty()) {
        std::lock_guard<std::mutex> lock(mutex);
        if (error.empty()) error = problem;
        failed = true;
        return;
      }
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(pass.buffers.size());
  for (char *buffer : pass.buffers) threads.emplace_back(worker, buffer);
  for (std::thread &thread : threads) thread.join();
  if (!error.empty()) throw Error(error);
}

}  // namespace

std::unique_ptr<DiskEngine> make_uring_engine(unsigned depth, std::string &refused) {
  auto engine = std::make_unique<UringEngine>();
  const int rc = engine->init(depth);
  if (rc < 0) {
    refused = format("io_uring_queue_init: %s", std::strerror(-rc));
    return nullptr;
  }
  return engine;
}

std::unique_ptr<DiskEngine> make_thread_engine() { return std::make_unique<ThreadEngine>(); }

}  // namespace zf::bench
