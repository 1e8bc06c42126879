// nvme: ZeRO-Infinity's optimizer tier. Like cpu_optimizer, the fp32 master lives in pinned host
// memory, gradients come down and updated parameters go up per bucket, and a CPU optimizer does
// the math; the optimizer state (Adam's moments: 8 of the 16 bytes per parameter, or 4 with bf16
// moments) lives in files under `path` instead of RAM. The host streams it through a few tile
// buffers: while the CPU updates one tile, the next is read and the previous one written
// (read_tile / write_tile, completed by wait). Up to host_budget_gb of tiles stay in RAM instead.
// With offload_params (ZeRO-Infinity's offload_param) the working parameters live in host memory
// too, each block streamed to the GPU around its use as cpu_full does.
//
// The files are unlinked as soon as they are open, so they disappear when the run ends, however
// it ends (a kill -9 included); checkpoints hold the state (the host reads it back through here).
#include "../common/offload_estimate.hpp"
#include "../common/transfers.hpp"
#include "tile_io.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace {

constexpr uint64_t kAlignment = 4096;           // O_DIRECT: offsets, sizes and buffers
constexpr uint64_t kRequestBytes = 4ull << 20;  // one read or write request

struct File {
  int fd = -1;
  std::string name;
  uint64_t extent = 0;  // bytes written so far (the ledger's NVMe figure)
};

struct Tile {
  void *ram = nullptr;  // the tile's home in RAM (host budget), or NULL = on disk
  uint64_t bytes = 0;
};

struct NvmeOffload {
  const zf_host *host = nullptr;
  zf_tier tier = ZF_TIER_PINNED_HOST;
  bool overlap = false;
  zf_offload::HostRatio ratio;  // offload.ratio: the share of the shard whose state is on disk
  bool offload_params = false;  // the working parameters on `tier` too
  uint64_t prefetch_numel = 0;  // with offload_params: elements of the next blocks copied ahead
  uint64_t bucket_numel = 0;
  std::string directory;
  uint64_t budget = 0, budget_used = 0;  // bytes of tiles kept in RAM
  bool direct = true;                     // O_DIRECT (false where the filesystem refuses it)
  std::unique_ptr<zf_offload::Transfers> transfers;
  std::unique_ptr<zf_nvme::TileIo> io;
  std::vector<File> files;  // per state tensor
  std::map<std::pair<uint32_t, uint64_t>, Tile> tiles;

  ~NvmeOffload() {
    try {
      if (io) io->wait();
    } catch (...) {  // the run is ending; its error was reported where it happened
    }
    for (File &file : files) {
      if (file.fd >= 0) ::close(file.fd);
      if (file.extent) host->mem_account(host, ZF_TIER_NVME, "state", -int64_t(file.extent));
    }
    for (auto &[key, tile] : tiles)
      if (tile.ram) host->mem_free(host, tile.ram);
  }

  // Opens (creates and unlinks at once) the file of state tensor `tensor`.
  File &file(uint32_t tensor) {
    if (files.size() <= tensor) files.resize(tensor + 1);
    File &f = files[tensor];
    if (f.fd >= 0) return f;
    f.name = directory + "/zfcore-rank" + std::to_string(host->rank) + "-pid" + std::to_string(::getpid()) +
             "-state" + std::to_string(tensor);
    const int flags = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    f.fd = direct ? ::open(f.name.c_str(), flags | O_DIRECT, 0600) : -1;
    if (direct && f.fd < 0 && errno == EINVAL) {
      direct = false;
      zf::log(host, ZF_LOG_WARN,
              "the filesystem under %s refuses O_DIRECT: buffered reads and writes (the page cache keeps copies "
              "of the state)", directory.c_str());
    }
    if (f.fd < 0) f.fd = ::open(f.name.c_str(), flags, 0600);
    if (f.fd < 0)
      throw zf::Failure(ZF_ERROR, "offload.path = \"" + directory + "\": cannot create " + f.name + ": " +
                                      std::strerror(errno));
    ::unlink(f.name.c_str());  // gone when the run ends, however it ends
    return f;
  }

  Tile &tile(uint32_t tensor, uint64_t offset, uint64_t bytes, const void *buffer, bool writing) {
    if (offset % kAlignment || bytes % kAlignment || reinterpret_cast<uintptr_t>(buffer) % kAlignment)
      throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT,
                        "tiles must be 4096-byte aligned (tensor " + std::to_string(tensor) + ", offset " +
                            std::to_string(offset) + ", " + std::to_string(bytes) + " bytes)");
    auto found = tiles.find({tensor, offset});
    if (found == tiles.end()) {
      if (!writing)
        throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT, "tile at offset " + std::to_string(offset) + " of tensor " +
                                                         std::to_string(tensor) + " was never written");
      Tile fresh{nullptr, bytes};
      if (budget_used + bytes <= budget) {
        zf_error error{};
        fresh.ram = host->mem_alloc(host, ZF_TIER_HOST, bytes, "host_budget", &error);
        if (!fresh.ram) throw zf::Failure(ZF_ERROR_OUT_OF_MEMORY, error.message);
        budget_used += bytes;
      }
      found = tiles.emplace(std::make_pair(tensor, offset), fresh).first;
    }
    if (found->second.bytes != bytes)
      throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT, "tile at offset " + std::to_string(offset) + " of tensor " +
                                                       std::to_string(tensor) + " was written with " +
                                                       std::to_string(found->second.bytes) + " bytes, now " +
                                                       std::to_string(bytes));
    return found->second;
  }
};

NvmeOffload &self_of(zf_object *object) { return *reinterpret_cast<NvmeOffload *>(object); }

zf_nvme::TileIo::Engine engine_of(const std::string &name) {
  if (name == "io_uring") return zf_nvme::TileIo::Engine::io_uring;
  if (name == "threads") return zf_nvme::TileIo::Engine::threads;
  return zf_nvme::TileIo::Engine::automatic;
}

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (!ZF_HAS(zf_host, host, event_synchronize))
    return zf::fail(error, ZF_DECLINED, "needs a host of ABI 1.3 or later (streams and events)");
  return zf::guard(error, [&] {
    zf::Config table(host, config);
    auto self = std::make_unique<NvmeOffload>();
    self->host = host;
    self->tier = table.boolean("pin_memory") ? ZF_TIER_PINNED_HOST : ZF_TIER_HOST;
    self->overlap = table.boolean("overlap");
    self->bucket_numel = uint64_t(table.integer("bucket_size"));
    self->directory = table.string("path");
    self->budget = uint64_t(table.real("host_budget_gb") * 1e9);
    self->ratio = zf_offload::read_ratio(table);
    self->offload_params = table.boolean("offload_params");
    self->prefetch_numel = uint64_t(table.integer("prefetch_size"));
    if (self->offload_params && ZF_ABI_MINOR_OF(host->abi_version) < 5)
      throw zf::Failure(ZF_DECLINED, "offload.offload_params needs a host of ABI 1.5 or later (parameters in host memory)");
    if (self->offload_params && (self->ratio.share < 1 || self->ratio.automatic))
      throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT,
                        "offload.offload_params = true needs offload.ratio = 1: with the parameters in host memory "
                        "the whole optimizer shard is updated there");
    if (self->directory.empty())
      throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT,
                        "offload.path is required: the directory for the optimizer state files (on a local NVMe SSD)");
    std::error_code ec;
    std::filesystem::create_directories(self->directory, ec);
    if (ec)
      throw zf::Failure(ZF_ERROR, "offload.path = \"" + self->directory + "\": cannot create it: " + ec.message());
    self->file(0);  // fails here, before the first step, if the directory is not writable
    std::string note;
    const std::string backend = table.string("io_backend");
    self->io = std::make_unique<zf_nvme::TileIo>(engine_of(backend), unsigned(table.integer("queue_depth")),
                                                 kRequestBytes, &note);
    if (!note.empty()) zf::log(host, ZF_LOG_WARN, "%s", note.c_str());
    else if (backend == "threads")
      zf::log(host, ZF_LOG_INFO, "io_backend = \"threads\": pread/pwrite on a thread pool instead of io_uring");
    self->transfers = std::make_unique<zf_offload::Transfers>(host);
    *out = reinterpret_cast<zf_object *>(self.release());
  });
}

void destroy(zf_object *object) { delete &self_of(object); }

zf_status plan(zf_object *object, const zf_layout *, uint64_t, zf_offload_plan *plan, zf_error *error) {
  NvmeOffload &self = self_of(object);
  zf_status status = zf_offload::plan_host_tiers(plan, self.tier, ZF_TIER_NVME, self.overlap, self.bucket_numel,
                                                 self.ratio, error);
  if (status == ZF_OK && self.offload_params) zf_offload::plan_params_on_host(plan, self.tier, self.prefetch_numel);
  return status;
}

using Entries = zf_offload::TransferEntries<NvmeOffload>;

// Completes the tile reads and writes queued so far (the host orders PCIe transfers with
// transfer_event, so nothing else is waited for here).
zf_status wait(zf_object *object, zf_error *error) {
  return zf::guard(error, [&] { self_of(object).io->wait(); });
}

zf_status write_tile(zf_object *object, uint32_t tensor, uint64_t offset, const void *source, uint64_t bytes,
                     zf_error *error) {
  return zf::guard(error, [&] {
    NvmeOffload &self = self_of(object);
    Tile &tile = self.tile(tensor, offset, bytes, source, /*writing=*/true);
    if (tile.ram) {
      std::memcpy(tile.ram, source, bytes);
      return;
    }
    File &file = self.file(tensor);
    self.io->write(file.fd, file.name, offset, source, bytes);
    if (offset + bytes > file.extent) {
      self.host->mem_account(self.host, ZF_TIER_NVME, "state", int64_t(offset + bytes - file.extent));
      file.extent = offset + bytes;
    }
  });
}

zf_status read_tile(zf_object *object, uint32_t tensor, uint64_t offset, void *destination, uint64_t bytes,
                    zf_error *error) {
  return zf::guard(error, [&] {
    NvmeOffload &self = self_of(object);
    Tile &tile = self.tile(tensor, offset, bytes, destination, /*writing=*/false);
    if (tile.ram) {
      std::memcpy(destination, tile.ram, bytes);
      return;
    }
    File &file = self.file(tensor);
    self.io->read(file.fd, file.name, offset, destination, bytes);
  });
}

// The master (with offload_params the working parameters too) on the pin_memory tier, the state
// on disk but for host_budget_gb of it.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  return zf::guard(error, [&] {
    zf::Config table(shape);
    zf_offload::HostTiers how;
    how.tier = table.boolean("pin_memory") ? ZF_TIER_PINNED_HOST : ZF_TIER_HOST;
    how.state_on_disk = true;
    how.params_on_host = table.boolean("offload_params");
    how.ram_budget = uint64_t(table.real("host_budget_gb") * 1e9);
    how.ratio = zf_offload::read_ratio(table);
    zf::set_text(estimate->note, "pinned: plus 3 tiles of offload.bucket_size per state tensor");
    zf::set_text(estimate->advice, "offload.host_budget_gb = 0 keeps all of the optimizer state on disk");
    return zf_offload::estimate_host_tiers(*shape, how, estimate, error);
  });
}

const zf_param_decl params[] = {
    zf::param_string("path", "",
                     "directory for the optimizer state files (a local NVMe SSD; created if missing; required)"),
    zf::param_float("host_budget_gb", "0",
                    "optimizer state kept in RAM, in GB (1e9 bytes); the rest is on disk. 0 = all of it on disk",
                    zf::at_least(0)),
    zf::param_string("io_backend", "auto",
                     "auto = io_uring, or pread/pwrite threads where the kernel refuses io_uring (logged); io_uring; "
                     "threads",
                     "auto|io_uring|threads"),
    zf::param_int("queue_depth", "32", "disk requests of 4 MiB in flight (io_uring entries, or threads up to 16)",
                  zf::between(1, 4096)),
    zf::param_bool("pin_memory", "true",
                   "master, tile and transfer buffers in page-locked memory (PCIe at full speed); false = pageable"),
    zf::param_bool("overlap", "false",
                   "update buckets during the backward as their gradients land; off by default: the disk bounds the "
                   "update, and buckets in backward order defeat the read-ahead of the next tile"),
    zf::param_int("bucket_size", "16777216",
                  "elements per bucket of gradient copies, CPU updates and parameter uploads; also the state tile",
                  zf::at_least(1)),
    ZF_OFFLOAD_RATIO_PARAM,
    zf::param_bool("offload_params", "false",
                   "the working parameters in host memory too, each block copied to the GPU around its use as "
                   "cpu_full does (DeepSpeed's offload_param: {device: cpu}); needs ratio = 1"),
    ZF_OFFLOAD_PREFETCH_PARAM,
};

const zf_offload_api api = {.struct_size = sizeof(zf_offload_api),
                            .create = create,
                            .destroy = destroy,
                            .plan = plan,
                            .gradients_out = Entries::gradients_out,
                            .parameters_in = Entries::parameters_in,
                            .wait = wait,
                            .write_tile = write_tile,
                            .read_tile = read_tile,
                            .transfer_event = Entries::transfer_event,
                            .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "nvme", ZF_KIND_OFFLOAD, sizeof params / sizeof params[0], params,
    "1.0.0",
    "ZeRO-Infinity: fp32 master in pinned host memory, optimizer state in files on an NVMe SSD streamed tile by "
    "tile through io_uring, updated by a CPU optimizer",
    ZF_CAP_CPU | ZF_CAP_CUDA | ZF_CAP_NVME, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
