// mmap_example: an offload tier written as a third party would, against the SDK only. The fp32
// master and the gradients the optimizer reads live in host memory and a CPU optimizer updates
// them (as with cpu_optimizer); the optimizer state lives in one file per state tensor under
// `path`, which the host streams tile by tile through write_tile / read_tile. Each tile is copied
// through a memory mapping of its range of the file (the kernel's page cache does the I/O). The
// files are unlinked once open, so they go with the run however it ends. estimate_memory says
// where the bytes go: master and copies in host memory, the state on disk.
#include <zf/zf_plugin.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace {

struct StateFile {
  int fd = -1;
  uint64_t size = 0;  // bytes the file holds (the ledger's disk figure)
};

struct MmapOffload {
  const zf_host *host = nullptr;
  std::string directory;
  uint64_t bucket_numel = 0;
  void *down = nullptr, *up = nullptr;  // streams: gradients to the host, parameters back
  std::vector<StateFile> files;         // per state tensor

  ~MmapOffload() {
    for (StateFile &file : files) {
      if (file.fd >= 0) ::close(file.fd);
      if (file.size) host->mem_account(host, ZF_TIER_NVME, "state", -int64_t(file.size));
    }
  }

  // The file of state tensor `tensor`, at least `bytes` long.
  StateFile &file(uint32_t tensor, uint64_t bytes) {
    if (files.size() <= tensor) files.resize(tensor + 1);
    StateFile &f = files[tensor];
    if (f.fd < 0) {
      std::string name = directory + "/mmap_example-rank" + std::to_string(host->rank) + "-pid" +
                         std::to_string(::getpid()) + "-state" + std::to_string(tensor);
      f.fd = ::open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
      if (f.fd < 0) throw zf::Failure(ZF_ERROR, "cannot create " + name + ": " + std::strerror(errno));
      ::unlink(name.c_str());
    }
    if (bytes > f.size) {
      if (::ftruncate(f.fd, off_t(bytes)) != 0)
        throw zf::Failure(ZF_ERROR, std::string("cannot grow a state file under ") + directory + ": " +
                                        std::strerror(errno));
      host->mem_account(host, ZF_TIER_NVME, "state", int64_t(bytes - f.size));
      f.size = bytes;
    }
    return f;
  }

  // Copies `bytes` between memory and the file range at `offset` through a mapping of that range.
  void transfer(uint32_t tensor, uint64_t offset, void *memory, uint64_t bytes, bool to_file) {
    if (offset % 4096 != 0) throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT, "tile offsets must be 4096-aligned");
    StateFile &f = file(tensor, to_file ? offset + bytes : 0);
    if (!to_file && offset + bytes > f.size)
      throw zf::Failure(ZF_ERROR_INVALID_ARGUMENT, "a tile read before it was written");
    void *mapped = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, f.fd, off_t(offset));
    if (mapped == MAP_FAILED) throw zf::Failure(ZF_ERROR, std::string("mmap: ") + std::strerror(errno));
    if (to_file) std::memcpy(mapped, memory, bytes);
    else std::memcpy(memory, mapped, bytes);
    ::munmap(mapped, bytes);
  }
};

MmapOffload &self_of(zf_object *object) { return *reinterpret_cast<MmapOffload *>(object); }

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  if (!ZF_HAS(zf_host, host, event_synchronize))
    return zf::fail(error, ZF_DECLINED, "needs a host of ABI 1.3 or later (streams and events)");
  return zf::guard(error, [&] {
    zf::Config table(host, config);
    auto *self = new MmapOffload();
    self->host = host;
    self->directory = table.string("path");
    self->bucket_numel = uint64_t(table.integer("bucket_size"));
    self->down = host->stream_create(host);
    self->up = host->stream_create(host);
    if (self->directory.empty()) self->directory = "/tmp";
    *out = reinterpret_cast<zf_object *>(self);
  });
}

void destroy(zf_object *object) { delete &self_of(object); }

// Master, gradients and the updated parameters' copy in (pinned) host memory; the state on disk.
zf_status plan(zf_object *object, const zf_layout *, uint64_t, zf_offload_plan *plan, zf_error *error) {
  if (!ZF_HAS(zf_offload_plan, plan, bucket_numel))
    return zf::fail(error, ZF_ERROR_UNSUPPORTED, "the host's offload plan is older than ABI 1.3");
  plan->master_tier = plan->grad_tier = plan->param_out_tier = ZF_TIER_PINNED_HOST;
  plan->state_tier = ZF_TIER_NVME;
  plan->overlap = 0;
  plan->bucket_numel = self_of(object).bucket_numel;
  return ZF_OK;
}

// Gradients down on a stream of our own, after what `stream` queued so far.
zf_status gradients_out(zf_object *object, zf_tensor_view device_grads, zf_tensor_view host_grads, void *stream,
                        zf_error *error) {
  MmapOffload &self = self_of(object);
  self.host->event_wait(self.host, self.down, self.host->event_record(self.host, stream));
  return self.host->copy(self.host, host_grads, device_grads, self.down, error);
}

zf_status parameters_in(zf_object *object, zf_tensor_view host_params, zf_tensor_view device_params, void *,
                        zf_error *error) {
  MmapOffload &self = self_of(object);
  return self.host->copy(self.host, device_params, host_params, self.up, error);
}

zf_status transfer_event(zf_object *object, int32_t direction, void **event, zf_error *error) {
  MmapOffload &self = self_of(object);
  if (direction != ZF_TRANSFER_GRADIENTS_OUT && direction != ZF_TRANSFER_PARAMETERS_IN)
    return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "unknown transfer direction %d", direction);
  *event = self.host->event_record(self.host, direction == ZF_TRANSFER_GRADIENTS_OUT ? self.down : self.up);
  return ZF_OK;
}

// Tiles are copied before write_tile and read_tile return, so there is nothing left to wait for.
zf_status wait(zf_object *, zf_error *) { return ZF_OK; }

zf_status write_tile(zf_object *object, uint32_t tensor, uint64_t offset, const void *source, uint64_t bytes,
                     zf_error *error) {
  return zf::guard(error, [&] { self_of(object).transfer(tensor, offset, const_cast<void *>(source), bytes, true); });
}

zf_status read_tile(zf_object *object, uint32_t tensor, uint64_t offset, void *destination, uint64_t bytes,
                    zf_error *error) {
  return zf::guard(error, [&] { self_of(object).transfer(tensor, offset, destination, bytes, false); });
}

// The stage's bytes, moved: master, a host copy of the gradient shard (and, bf16/fp16, of the
// updated parameters) and the state leave the compute tier; a stage that shards parameters keeps
// a compute-precision shard of its own there once the master is gone.
zf_status estimate_memory(const zf_memory_shape *shape, zf_memory_estimate *estimate, zf_error *error) {
  const zf_memory_estimate *stage = shape->stage;
  if (!stage) return zf::fail(error, ZF_DECLINED, "the stage gives no estimate to move");
  const uint64_t c = shape->compute_bytes, shard = stage->master / 4;
  const bool shards_params = shape->stage_capabilities & ZF_CAP_SHARD_PARAMETERS;
  estimate->tier_bytes[ZF_TIER_DEVICE] =
      stage->params + stage->grads + stage->staging + stage->transient + (shards_params ? c * shard : 0);
  estimate->tier_bytes[ZF_TIER_PINNED_HOST] = stage->master + shard * c * (c == 4 ? 1 : 2);
  estimate->tier_bytes[ZF_TIER_NVME] = stage->state;
  zf::set_text(estimate->note, "pinned: plus 3 tiles of offload.bucket_size per state tensor; disk: page cache");
  zf::set_text(estimate->advice, "a smaller offload.bucket_size shrinks the tiles held in host memory");
  return ZF_OK;
}

const zf_param_decl params[] = {
    zf::param_string("path", "", "directory of the state files (created files are unlinked at once); \"\" = /tmp"),
    zf::param_int("bucket_size", "16777216", "elements per bucket of the update; also the state tile",
                  zf::at_least(1)),
};

const zf_offload_api api = {.struct_size = sizeof(zf_offload_api),
                            .create = create,
                            .destroy = destroy,
                            .plan = plan,
                            .gradients_out = gradients_out,
                            .parameters_in = parameters_in,
                            .wait = wait,
                            .write_tile = write_tile,
                            .read_tile = read_tile,
                            .transfer_event = transfer_event,
                            .estimate_memory = estimate_memory};

const zf_descriptor descriptor = {
    sizeof(zf_descriptor), ZF_ABI_VERSION, "mmap_example", ZF_KIND_OFFLOAD, sizeof params / sizeof params[0],
    params, "1.0.0", "optimizer state in memory-mapped files, master in host memory (an out-of-tree example)",
    ZF_CAP_CPU | ZF_CAP_CUDA | ZF_CAP_NVME, &api,
};

}  // namespace

ZF_PLUGIN_DEFINE(descriptor)
