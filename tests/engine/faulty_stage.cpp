// faulty: zero0 that fails on purpose, to test that one rank's failure ends every rank.
// fail_mode "error" returns an error from reduce_gradients; "exit" kills the process outright;
// "segv" and "abort" die of that signal inside reduce_gradients; "create" fails in create (so a
// test sees whether a plugin was created).
// It is built as an ABI 1.0 plugin (1.0 handshake, descriptor and the 1.0-sized stage table,
// without gather_block and reduce_block), so the tests also show that 1.0 stages load and run on
// a newer host.
#include <zf/zf_plugin.hpp>

#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace {

struct Faulty {
  const zf_host *host;
  int64_t fail_rank, fail_step;
  std::string mode;
};

zf_status create(const zf_host *host, const zf_config *config, zf_object **out, zf_error *error) {
  return zf::guard(error, [&] {
    zf::Config cfg(host, config);
    if (cfg.string("fail_mode") == "create") throw std::runtime_error("injected failure in create");
    *out = reinterpret_cast<zf_object *>(
        new Faulty{host, cfg.integer("fail_rank"), cfg.integer("fail_step"), cfg.string("fail_mode")});
  });
}

void destroy(zf_object *object) { delete reinterpret_cast<Faulty *>(object); }

zf_status plan(zf_object *, const zf_layout *layout, zf_stage_plan *plan, zf_error *) {
  plan->shard_begin = 0;
  plan->shard_end = layout->numel;
  return ZF_OK;
}

zf_status reduce_gradients(zf_object *object, const zf_step_buffers *buffers, zf_error *error) {
  auto *self = reinterpret_cast<Faulty *>(object);
  if (self->host->rank == self->fail_rank && buffers->step == self->fail_step) {
    if (self->mode == "exit") _exit(3);
    if (self->mode == "segv") std::raise(SIGSEGV);
    if (self->mode == "abort") std::abort();
    return zf::fail(error, ZF_ERROR, "injected failure on rank %d at step %lld", self->host->rank,
                    (long long)buffers->step);
  }
  return self->host->all_reduce(self->host, buffers->grads, ZF_REDUCE_SUM, buffers->stream, error);
}

const zf_param_decl params[] = {
    zf::param_int("fail_rank", "1", "rank that fails", zf::at_least(0)),
    zf::param_int("fail_step", "3", "step at which it fails", zf::at_least(1)),
    zf::param_string("fail_mode", "error",
                     "error: return an error; exit: die; segv, abort: that signal; create: fail in create",
                     "error|exit|segv|abort|create"),
};

constexpr uint32_t kAbi10 = ZF_ABI_MAKE(1, 0);
const zf_stage_api api = {offsetof(zf_stage_api, gather_block), create, destroy, plan, nullptr, nullptr, nullptr,
                          nullptr, reduce_gradients, nullptr, nullptr, nullptr};

const zf_descriptor descriptor = {sizeof(zf_descriptor), kAbi10, "faulty", ZF_KIND_STAGE, 3, params,
                                  "0.0.1", "zero0 that fails on purpose (tests only)", ZF_CAP_CPU, &api};

}  // namespace

extern "C" ZF_EXPORT uint32_t zf_plugin_negotiate(uint32_t host_version) {
  return zf::negotiate(host_version, kAbi10);
}
extern "C" ZF_EXPORT const zf_descriptor *zf_plugin_describe(void) { return &descriptor; }
