// PluginInstance: binds a plugin to the runtime through a zf_host table whose callbacks never
// let an exception reach plugin code.
#include "plugin/plugin_instance.hpp"

#include "plugin/config_value.hpp"
#include "plugin/plugin_entry.hpp"

#include "runtime/tensors.hpp"
#include "runtime/device.hpp"
#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <cstring>

namespace zf {

struct HostCallbacks {
  static PluginInstance &self(const zf_host *host) {
    return *static_cast<PluginInstance *>(host->context);
  }

  static zf_status fail(zf_error *error, zf_status status, const std::string &message) {
    if (error) std::snprintf(error->message, sizeof error->message, "%s", message.c_str());
    return status;
  }

  template <class Body>
  static zf_status guarded(zf_error *error, zf_status on_error, Body &&body) {
    try {
      body();
      return ZF_OK;
    } catch (const std::exception &exception) {
      return fail(error, on_error, exception.what());
    }
  }

  static void log(const zf_host *host, zf_log_level level, const char *message) {
    PluginInstance &p = self(host);
    log_message(level, format("[%s %s] %s", kind_name(p.file_.descriptor->kind), p.name(),
                              message ? message : ""));
  }

  static uint32_t timer_id(const zf_host *host, const char *name) {
    try {
      return self(host).runtime_.timers.id(name ? name : "unnamed");
    } catch (...) {
      return 0;
    }
  }
  static void timer_start(const zf_host *host, uint32_t timer, void *stream) {
    self(host).runtime_.timers.start(timer, stream);
  }
  static void timer_stop(const zf_host *host, uint32_t timer, void *stream) {
    self(host).runtime_.timers.stop(timer, stream);
  }

  static void *mem_alloc(const zf_host *host, zf_tier tier, uint64_t bytes, const char *tag,
                         zf_error *error) {
    PluginInstance &p = self(host);
    std::string label = format("%s.%s", p.name(), tag ? tag : "unnamed");
    try {
      ZF_REQUIRE(tier == ZF_TIER_HOST || tier == ZF_TIER_PINNED_HOST || p.runtime_.memory.has_allocator(tier),
                 "mem_alloc: tier %s is not available in this build (device memory comes with the CUDA "
                 "path; NVMe space is recorded with mem_account)",
                 tier_name(tier));
      return p.runtime_.memory.allocate(tier, bytes, label);
    } catch (const std::exception &exception) {
      fail(error, ZF_ERROR_OUT_OF_MEMORY, exception.what());
      return nullptr;
    }
  }
  // Device memory goes back to the compute stream's pool: collectives still queued on the
  // communication stream may read it, so they finish first (plugins free rarely: teardown, growth).
  static void mem_free(const zf_host *host, void *pointer) {
    Runtime &runtime = self(host).runtime_;
    if (runtime.comm_stream) synchronize_stream(runtime.comm_stream);
    runtime.memory.release(pointer);
  }
  static void mem_account(const zf_host *host, zf_tier tier, const char *tag, int64_t delta) {
    PluginInstance &p = self(host);
    p.runtime_.memory.account(tier, format("%s.%s", p.name(), tag ? tag : "unnamed"), delta);
  }

  template <class T>
  static zf_status config_value(const zf_host *, const zf_config *config, const char *key, T *out) {
    return zf::config_value(config, key, out);
  }
  static zf_status config_bool(const zf_host *h, const zf_config *c, const char *k, int32_t *v) {
    return config_value(h, c, k, v);
  }
  static zf_status config_int(const zf_host *h, const zf_config *c, const char *k, int64_t *v) {
    return config_value(h, c, k, v);
  }
  static zf_status config_float(const zf_host *h, const zf_config *c, const char *k, double *v) {
    return config_value(h, c, k, v);
  }
  static zf_status config_string(const zf_host *h, const zf_config *c, const char *k, const char **v) {
    return config_value(h, c, k, v);
  }

  static zf_status all_reduce(const zf_host *host, zf_tensor_view buffer, zf_reduce_op op, void *stream,
                              zf_error *error) {
    return guarded(error, ZF_ERROR_COMMUNICATION,
                   [&] { self(host).runtime_.comm->all_reduce(buffer, op, on(host, stream)); });
  }
  static zf_status reduce_scatter(const zf_host *host, zf_tensor_view send, zf_tensor_view recv,
                                  zf_reduce_op op, void *stream, zf_error *error) {
    return guarded(error, ZF_ERROR_COMMUNICATION,
                   [&] { self(host).runtime_.comm->reduce_scatter(send, recv, op, on(host, stream)); });
  }
  static zf_status all_gather(const zf_host *host, zf_tensor_view send, zf_tensor_view recv, void *stream,
                              zf_error *error) {
    return guarded(error, ZF_ERROR_COMMUNICATION,
                   [&] { self(host).runtime_.comm->all_gather(send, recv, on(host, stream)); });
  }
  static zf_status broadcast(const zf_host *host, zf_tensor_view buffer, int32_t root, void *stream,
                             zf_error *error) {
    return guarded(error, ZF_ERROR_COMMUNICATION,
                   [&] { self(host).runtime_.comm->broadcast(buffer, root, on(host, stream)); });
  }
  static zf_status reduce(const zf_host *host, zf_tensor_view send, zf_tensor_view recv, zf_reduce_op op,
                          int32_t root, void *stream, zf_error *error) {
    return guarded(error, ZF_ERROR_COMMUNICATION,
                   [&] { self(host).runtime_.comm->reduce(send, recv, op, root, on(host, stream)); });
  }
  // The ABI's NULL stream is the compute stream.
  static void *on(const zf_host *host, void *stream) { return stream ? stream : self(host).runtime_.compute_stream; }

  static zf_status copy(const zf_host *host, zf_tensor_view dst, zf_tensor_view src, void *stream, zf_error *error) {
    return guarded(error, ZF_ERROR_INVALID_ARGUMENT, [&] {
      if (dst.dtype != src.dtype && floating(dst.dtype) && floating(src.dtype) && dst.numel == src.numel) {
        // ABI 1.6: a conversion (e.g. zero3 gathering bf16 parameters from the fp32 master).
        ZF_REQUIRE(dst.device == src.device, "copy: converting dtype %d to %d needs dst and src on one device",
                   int(src.dtype), int(dst.dtype));
        if (dst.device == ZF_DEVICE_CPU) tensor_of(dst).copy_(tensor_of(src));
        else device_convert(dst, src, on(host, stream));
        return;
      }
      same_shape(dst, src, "copy");
      uint64_t bytes = tensor_of(dst).nbytes();
      if (dst.device == ZF_DEVICE_CPU && src.device == ZF_DEVICE_CPU) std::memmove(dst.data, src.data, bytes);
      else device_copy(dst.data, src.data, bytes, on(host, stream));
    });
  }
  static zf_status accumulate(const zf_host *host, zf_tensor_view dst, zf_tensor_view src, void *stream,
                              zf_error *error) {
    return guarded(error, ZF_ERROR_INVALID_ARGUMENT, [&] {
      same_shape(dst, src, "accumulate");
      ZF_REQUIRE(dst.device == src.device, "accumulate: dst and src are on different devices");
      if (dst.device == ZF_DEVICE_CPU) tensor_of(dst).add_(tensor_of(src));
      else device_accumulate(dst, src, on(host, stream));
    });
  }
  static bool floating(zf_dtype dtype) { return dtype == ZF_DTYPE_F32 || dtype == ZF_DTYPE_BF16 || dtype == ZF_DTYPE_F16; }
  static void same_shape(const zf_tensor_view &dst, const zf_tensor_view &src, const char *what) {
    ZF_REQUIRE(dst.numel == src.numel && dst.dtype == src.dtype,
               "%s: dst has %llu elements of dtype %d, src %llu of dtype %d", what, (unsigned long long)dst.numel,
               int(dst.dtype), (unsigned long long)src.numel, int(src.dtype));
  }

  static zf_status barrier(const zf_host *host, zf_error *error) {
    return guarded(error, ZF_ERROR_COMMUNICATION, [&] { self(host).runtime_.comm->barrier(); });
  }

  // Streams and events exist on GPU runs only; on a CPU run they are NULL and the calls no-ops.
  static void *stream_create(const zf_host *host) {
    try {
      return self(host).runtime_.device == ZF_DEVICE_CUDA ? create_stream() : nullptr;
    } catch (const std::exception &exception) {
      log_message(ZF_LOG_ERROR, exception.what());
      return nullptr;
    }
  }
  // A CUDA failure here is fatal: no status goes back through these entries, so it ends the process
  // with the reason rather than letting an exception cross into plugin code.
  template <class Body>
  static auto fatal_on_error(Body &&body) noexcept {
    try {
      return body();
    } catch (const std::exception &exception) {
      log_message(ZF_LOG_ERROR, format("host event service: %s", exception.what()));
      std::fflush(nullptr);
      std::_Exit(1);
    }
  }
  static void *event_record(const zf_host *host, void *stream) {
    return fatal_on_error([&]() -> void * {
      return self(host).runtime_.device == ZF_DEVICE_CUDA ? record_event(on(host, stream)) : nullptr;
    });
  }
  static void event_wait(const zf_host *host, void *stream, void *event) {
    fatal_on_error([&] { wait_event(on(host, stream), event); });
  }
  static void event_synchronize(const zf_host *, void *event) {
    fatal_on_error([&] { synchronize_event(event); });
  }

  static uint32_t worker_cores(const zf_host *host, int32_t *cores, uint32_t capacity) {
    const std::vector<int> &list = self(host).runtime_.worker_cores;
    for (uint32_t i = 0; i < capacity && i < list.size(); ++i) cores[i] = list[i];
    return uint32_t(list.size());
  }
};

PluginInstance::PluginInstance(const PluginFile &file, Runtime &runtime, const PluginConfig &config)
    : file_(file), runtime_(runtime), config_(config) {
  host_.struct_size = sizeof(zf_host);
  host_.abi_version = file.abi_version;
  host_.context = this;
  host_.rank = runtime.comm->rank();
  host_.world_size = runtime.comm->world_size();
  host_.local_rank = runtime.comm->local_rank();
  host_.local_size = runtime.comm->local_size();
  host_.device = runtime.device;
  host_.device_index = runtime.device_index;
  host_.compute_stream = runtime.compute_stream;
  host_.log = HostCallbacks::log;
  host_.timer_id = HostCallbacks::timer_id;
  host_.timer_start = HostCallbacks::timer_start;
  host_.timer_stop = HostCallbacks::timer_stop;
  host_.mem_alloc = HostCallbacks::mem_alloc;
  host_.mem_free = HostCallbacks::mem_free;
  host_.mem_account = HostCallbacks::mem_account;
  host_.config_bool = HostCallbacks::config_bool;
  host_.config_int = HostCallbacks::config_int;
  host_.config_float = HostCallbacks::config_float;
  host_.config_string = HostCallbacks::config_string;
  host_.all_reduce = HostCallbacks::all_reduce;
  host_.reduce_scatter = HostCallbacks::reduce_scatter;
  host_.all_gather = HostCallbacks::all_gather;
  host_.broadcast = HostCallbacks::broadcast;
  host_.barrier = HostCallbacks::barrier;
  host_.worker_cores = HostCallbacks::worker_cores;
  host_.reduce = HostCallbacks::reduce;
  host_.copy = HostCallbacks::copy;
  host_.accumulate = HostCallbacks::accumulate;
  host_.stream_create = HostCallbacks::stream_create;
  host_.event_record = HostCallbacks::event_record;
  host_.event_wait = HostCallbacks::event_wait;
  host_.event_synchronize = HostCallbacks::event_synchronize;

  // Every kind's table starts with struct_size, create, destroy (ZF_OBJECT_ENTRIES).
  const auto *api = static_cast<const zf_stage_api *>(file.descriptor->api);
  zf_error error{};
  const PluginEntry running(*this, "create");
  zf_status status = api->create(&host_, reinterpret_cast<const zf_config *>(&config_), &object_, &error);
  error.message[ZF_MESSAGE_CAPACITY - 1] = '\0';
  if (status == ZF_DECLINED)
    throw PluginDeclined(format("%s plugin '%s' declined: %s", kind_name(file.descriptor->kind), name(),
                                error.message[0] ? error.message : "no reason given"));
  if (status != ZF_OK)
    throw Error(format("%s plugin '%s' failed to start: %s", kind_name(file.descriptor->kind), name(),
                       error.message[0] ? error.message : "no reason given"));
  ZF_REQUIRE(object_ != nullptr, "%s plugin '%s': create returned ZF_OK but no object",
             kind_name(file.descriptor->kind), name());
}

PluginInstance::~PluginInstance() {
  const auto *api = static_cast<const zf_stage_api *>(file_.descriptor->api);
  if (!object_) return;
  const PluginEntry running(*this, "destroy");
  api->destroy(object_);
}

void PluginInstance::check(zf_status status, const zf_error &error, const char *entry) const {
  if (status == ZF_OK) return;
  std::string message(error.message, strnlen(error.message, ZF_MESSAGE_CAPACITY));
  throw Error(format("%s plugin '%s': %s failed: %s", kind_name(file_.descriptor->kind), name(), entry,
                     message.empty() ? "no reason given" : message.c_str()));
}

}  // namespace zf
