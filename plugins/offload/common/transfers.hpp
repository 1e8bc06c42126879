// transfers.hpp: the PCIe half of an offload plugin that keeps the master on the host: gradients
// go down on one stream and updated parameters go up on another, so both directions, the
// backward and the CPU update overlap. Shared by cpu_optimizer and nvme (header-only: plugins
// build against the SDK alone). On a CPU run every stream and event is NULL and copies are plain.
#pragma once

#include <zf/zf_plugin.hpp>

namespace zf_offload {

struct Transfers {
  const zf_host *host = nullptr;
  void *down = nullptr;  // device -> host: gradients
  void *up = nullptr;    // host -> device: parameters

  explicit Transfers(const zf_host *h) : host(h), down(h->stream_create(h)), up(h->stream_create(h)) {}

  // Queued on the gradient stream after what `stream` has queued so far (the bucket's reduction).
  zf_status gradients_out(zf_tensor_view device_grads, zf_tensor_view host_grads, void *stream, zf_error *error) {
    host->event_wait(host, down, host->event_record(host, stream));
    return host->copy(host, host_grads, device_grads, down, error);
  }
  // The host wrote host_params before this call; the copy needs no event on the way in.
  zf_status parameters_in(zf_tensor_view host_params, zf_tensor_view device_params, zf_error *error) {
    return host->copy(host, device_params, host_params, up, error);
  }
  zf_status transfer_event(int32_t direction, void **event, zf_error *error) {
    if (direction != ZF_TRANSFER_GRADIENTS_OUT && direction != ZF_TRANSFER_PARAMETERS_IN)
      return zf::fail(error, ZF_ERROR_INVALID_ARGUMENT, "unknown transfer direction %d", direction);
    *event = host->event_record(host, direction == ZF_TRANSFER_GRADIENTS_OUT ? down : up);
    return ZF_OK;
  }
  void synchronize() {
    for (void *stream : {down, up}) host->event_synchronize(host, host->event_record(host, stream));
  }
};

}  // namespace zf_offload
