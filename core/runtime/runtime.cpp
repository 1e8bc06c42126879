#include "runtime/runtime.hpp"

#include "runtime/affinity.hpp"

namespace zf {

std::unique_ptr<Runtime> Runtime::single_cpu() {
  auto runtime = std::make_unique<Runtime>();
  runtime->comm = make_cpu_communicator();
  runtime->worker_cores = allowed_cores();
  return runtime;
}

}  // namespace zf
