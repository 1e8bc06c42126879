#include "data/token_shard.hpp"

#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <utility>

#include <dirent.h>
#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace zf {
namespace {

constexpr char kMagic[8] = {'Z', 'F', 'T', 'O', 'K', 'E', 'N', 'S'};
constexpr uint32_t kLatestVersion = 2;
constexpr uint32_t kMaskFlag = 1;

template <typename T>
void put(unsigned char *out, T value) {
  std::memcpy(out, &value, sizeof value);  // the host is little-endian (x86-64, aarch64)
}
template <typename T>
T get(const unsigned char *in) {
  T value;
  std::memcpy(&value, in, sizeof value);
  return value;
}

}  // namespace

void write_token_shard(const std::string &path, const std::vector<int64_t> &ids, int64_t vocab) {
  write_token_shard(path, ids, vocab, {}, {});
}

void write_token_shard(const std::string &path, const std::vector<int64_t> &ids, int64_t vocab,
                       const std::vector<uint8_t> &mask, const std::vector<int64_t> &starts) {
  const bool v2 = !mask.empty() || !starts.empty();
  ZF_REQUIRE(mask.empty() || mask.size() == ids.size(), "%s: %zu loss flags for %zu ids", path.c_str(), mask.size(),
             ids.size());
  for (size_t d = 0; d < starts.size(); ++d)
    ZF_REQUIRE((d == 0 ? starts[d] == 0 : starts[d] > starts[d - 1]) && starts[d] < int64_t(ids.size()),
               "%s: document start %lld (document %zu) must be %s and below the %zu ids", path.c_str(),
               (long long)starts[d], d, d == 0 ? "0" : "above the one before", ids.size());
  int64_t largest = vocab > 0 ? vocab - 1 : 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    ZF_REQUIRE(ids[i] >= 0 && ids[i] <= int64_t(UINT32_MAX), "%s: id %lld at %zu does not fit a token shard",
               path.c_str(), (long long)ids[i], i);
    ZF_REQUIRE(vocab <= 0 || ids[i] < vocab, "%s: id %lld at %zu is not below the vocabulary size %lld", path.c_str(),
               (long long)ids[i], i, (long long)vocab);
    largest = std::max(largest, ids[i]);
  }
  uint32_t width = largest <= int64_t(UINT16_MAX) ? 2 : 4;
  unsigned char header[kTokenShardHeaderBytes] = {};
  std::memcpy(header, kMagic, sizeof kMagic);
  put<uint32_t>(header + 8, v2 ? 2 : 1);
  put<uint32_t>(header + 12, width);
  put<uint64_t>(header + 16, ids.size());
  put<uint64_t>(header + 24, uint64_t(std::max<int64_t>(vocab, 0)));
  put<uint64_t>(header + 32, starts.size());
  put<uint32_t>(header + 40, mask.empty() ? 0 : kMaskFlag);
  std::vector<unsigned char> body(ids.size() * width + mask.size() + starts.size() * 8);
  for (size_t i = 0; i < ids.size(); ++i) {
    if (width == 2)
      put<uint16_t>(body.data() + 2 * i, uint16_t(ids[i]));
    else
      put<uint32_t>(body.data() + 4 * i, uint32_t(ids[i]));
  }
  unsigned char *tail = body.data() + ids.size() * width;
  for (size_t i = 0; i < mask.size(); ++i) *tail++ = mask[i] ? 1 : 0;
  for (int64_t start : starts) put<uint64_t>(std::exchange(tail, tail + 8), uint64_t(start));
  const std::filesystem::path where(path);
  const Directory directory = Directory::open(where.has_parent_path() ? where.parent_path().string() : ".", false);
  PendingFile out(directory, where.filename().string());
  out.write(header, sizeof header);
  out.write(body.data(), body.size());
  out.commit();
}

TokenShard::TokenShard(const std::string &path) : path_(path) {
  std::string why;
  fd_ = open_regular_file(path, &why);
  ZF_REQUIRE(fd_ >= 0, "%s: cannot open the token shard: %s", path.c_str(), why.c_str());
  struct stat info {};
  fstat(fd_, &info);
  map_bytes_ = size_t(info.st_size);
  modified_ns_ = int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec;
  if (map_bytes_ >= kTokenShardHeaderBytes) map_ = mmap(nullptr, map_bytes_, PROT_READ, MAP_PRIVATE, fd_, 0);
  int mapping_errno = errno;
  if (map_ == MAP_FAILED) map_ = nullptr;
  // The destructor does not run when the constructor throws: unmap and close before each error.
  auto fail = [&](const std::string &message) {
    if (map_) munmap(map_, map_bytes_);
    map_ = nullptr;
    close(fd_);
    throw Error(path + ": " + message);
  };
  if (map_bytes_ < kTokenShardHeaderBytes)
    fail(format("%zu bytes is too short for a token shard (the header alone is %zu)", map_bytes_,
                kTokenShardHeaderBytes));
  if (!map_) fail(format("cannot map the token shard: %s", std::strerror(mapping_errno)));
  auto *bytes = static_cast<const unsigned char *>(map_);
  if (std::memcmp(bytes, kMagic, sizeof kMagic) != 0)
    fail("not a zfcore token shard (the file does not start with \"ZFTOKENS\"; docs/data.md describes the format)");
  uint32_t version = get<uint32_t>(bytes + 8);
  if (version < 1 || version > kLatestVersion)
    fail(format("token shard format version %u; this zfcore reads versions 1 and %u", version, kLatestVersion));
  version_ = int(version);
  width_ = int(get<uint32_t>(bytes + 12));
  if (width_ != 2 && width_ != 4) fail(format("%d bytes per id in the header; must be 2 (uint16) or 4 (uint32)", width_));
  uint64_t count = get<uint64_t>(bytes + 16);
  vocab_ = int64_t(get<uint64_t>(bytes + 24));
  uint64_t documents = version == 2 ? get<uint64_t>(bytes + 32) : 0;
  bool masked = version == 2 && (get<uint32_t>(bytes + 40) & kMaskFlag);
  uint64_t expected = kTokenShardHeaderBytes + count * uint64_t(width_) + (masked ? count : 0) + documents * 8;
  if (count > (uint64_t(1) << 48) || documents > count || expected != map_bytes_)
    fail(format("the header promises %llu ids%s%s (%llu bytes) but the file has %zu bytes: truncated or corrupted",
                (unsigned long long)count, masked ? ", a loss mask" : "",
                documents ? format(", %llu document starts", (unsigned long long)documents).c_str() : "",
                (unsigned long long)expected, map_bytes_));
  count_ = int64_t(count);
  documents_ = int64_t(documents);
  ids_ = bytes + kTokenShardHeaderBytes;
  if (masked) mask_ = ids_ + count * width_;
  starts_ = ids_ + count * width_ + (masked ? count : 0);
  for (int64_t d = 0; d < documents_; ++d) {
    int64_t start = document_start(d), before = d > 0 ? document_start(d - 1) : -1;
    if ((d == 0 && start != 0) || start <= before || start >= count_)
      fail(format("document %lld starts at id %lld; the first must start at 0 and each after the one before, below "
                  "the %lld ids", (long long)d, (long long)start, (long long)count_));
  }
  // Batches read scattered windows; read-ahead of whole files would only waste page cache.
  madvise(map_, map_bytes_, MADV_RANDOM);
}

TokenShard::~TokenShard() {
  if (map_) munmap(map_, map_bytes_);
  if (fd_ >= 0) close(fd_);
}

void TokenShard::check_unchanged() const {
  struct stat info {};
  ZF_REQUIRE(fstat(fd_, &info) == 0 && size_t(info.st_size) >= map_bytes_,
             "%s: the token shard shrank from %zu to %lld bytes while in use (was it rewritten or truncated?); "
             "restore it and resume from the last checkpoint",
             path_.c_str(), map_bytes_, (long long)info.st_size);
  ZF_REQUIRE(int64_t(info.st_mtim.tv_sec) * 1000000000 + info.st_mtim.tv_nsec == modified_ns_,
             "%s: the token shard was written while in use (its modification time changed): the ids read from now "
             "on are not the ones the run started with; restore it and resume from the last checkpoint",
             path_.c_str());
}

int64_t TokenShard::document_start(int64_t d) const { return int64_t(get<uint64_t>(starts_ + 8 * d)); }

int64_t TokenShard::operator[](int64_t i) const {
  return width_ == 2 ? int64_t(get<uint16_t>(ids_ + 2 * i)) : int64_t(get<uint32_t>(ids_ + 4 * i));
}

std::vector<std::string> find_token_shards(const std::string &pattern) {
  std::vector<std::string> paths;
  struct stat info {};
  if (stat(pattern.c_str(), &info) == 0 && S_ISDIR(info.st_mode)) {
    DIR *directory = opendir(pattern.c_str());
    ZF_REQUIRE(directory, "%s: cannot list the directory: %s", pattern.c_str(), std::strerror(errno));
    while (dirent *entry = readdir(directory)) {
      std::string name = entry->d_name;
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".bin") == 0) paths.push_back(pattern + "/" + name);
    }
    closedir(directory);
    ZF_REQUIRE(!paths.empty(), "%s: the directory holds no .bin token shards", pattern.c_str());
  } else if (stat(pattern.c_str(), &info) == 0) {
    paths.push_back(pattern);
  } else {
    glob_t matches{};
    int status = glob(pattern.c_str(), 0, nullptr, &matches);
    for (size_t i = 0; status == 0 && i < matches.gl_pathc; ++i) paths.push_back(matches.gl_pathv[i]);
    globfree(&matches);
    ZF_REQUIRE(!paths.empty(), "%s: no such file, and no file matches it as a glob", pattern.c_str());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace zf
