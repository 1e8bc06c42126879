// read_ahead.hpp: asks the kernel to read part of a mapped file ahead, all of it at once (a hint
// only): reading a mapped file page fault by page fault brings in a few hundred kB at a time.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace zf {

inline void read_ahead(const unsigned char *p, uint64_t bytes) {
  if (bytes == 0) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE)), begin = uintptr_t(p) / page * page;
  madvise(reinterpret_cast<void *>(begin), size_t(uintptr_t(p) + bytes - begin), MADV_WILLNEED);
}

}  // namespace zf
