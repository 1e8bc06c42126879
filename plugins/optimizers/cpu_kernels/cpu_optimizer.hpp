// cpu_optimizer.hpp: CpuOptimizer, the object behind every CPU optimizer plugin (cpu_adam,
// cpu_lion, cpu_adagrad): its state buffers, its thread pool, and the submit/wait protocol of
// zf_optimizer_api. Plugins differ only in their declared parameters and the Algorithm.
//
// A step is split into chunks of kChunkElements (64-byte aligned in the flat buffer's element
// space, 32 KiB per fp32 stream) that the pool runs; state is first touched by the same workers
// that later update it. Errors are thrown as zf::Failure and turned into statuses by the entries
// in optimizer_entries.cpp.
#pragma once

#include <zf/zf_plugin.h>

#include <cstdint>
#include <string>
#include <vector>

#include "thread_pool.hpp"
#include "update_kernel.hpp"

namespace zf::cpu_kernels {

struct CpuOptimizerOptions {
  Algorithm algorithm = Algorithm::adamw;
  SimdLevel simd = SimdLevel::scalar;
  unsigned threads = 0;  // 0: one per worker core the host gives
  MomentFormat moments = MomentFormat::f32;
  float initial_accumulator = 0.0f;  // Adagrad's starting sum
  double lr_decay = 0.0;             // Adagrad
};

class CpuOptimizer {
 public:
  static constexpr uint64_t kChunkElements = 8192;
  // Steps smaller than this run on the calling thread: waking workers would cost more.
  static constexpr uint64_t kInlineElements = 2 * kChunkElements;

  CpuOptimizer(const zf_host *host, const CpuOptimizerOptions &options);
  ~CpuOptimizer();
  CpuOptimizer(const CpuOptimizer &) = delete;
  CpuOptimizer &operator=(const CpuOptimizer &) = delete;

  void init_state(uint64_t numel);
  // ABI 1.3: the state tensors this algorithm keeps (name, dtype), and host-owned state.
  bool state_spec(uint32_t index, const char **name, zf_dtype *dtype) const;
  void bind_state(uint64_t numel, const zf_tensor_view *state, uint32_t count);
  // Validates args, copies what the step needs and starts it; throws on bad arguments or when a
  // step is already in flight.
  void submit(const zf_optimizer_step_args &args);
  void wait();  // returns at once when nothing is in flight
  bool state_tensor(uint32_t index, const char **name, zf_tensor_view *view) const;

  const CpuOptimizerOptions &options() const { return options_; }
  unsigned threads() const { return pool_.size(); }

 private:
  struct Chunk {
    uint64_t begin, end;
    uint32_t group;
  };
  struct StateSlot {
    void *data = nullptr;
    const char *name = nullptr;
  };
  static void run_chunk(void *self, uint64_t chunk);
  static void fill_chunk(void *self, uint64_t chunk);
  void validate(const zf_optimizer_step_args &args) const;
  GroupCoefficients coefficients(const zf_optimizer_group &group, float grad_scale,
                                 int64_t step) const;
  void build_chunks(const zf_optimizer_range *ranges, uint32_t range_count);
  size_t moment_bytes() const { return options_.moments == MomentFormat::f32 ? 4 : 2; }
  zf_dtype moment_dtype() const {
    return options_.moments == MomentFormat::f32 ? ZF_DTYPE_F32 : ZF_DTYPE_BF16;
  }
  void fill_state();

  const zf_host *host_;
  CpuOptimizerOptions options_;
  ThreadPool pool_;
  uint64_t numel_ = 0;
  bool initialized_ = false;
  bool owns_state_ = false;  // init_state allocated it (bind_state: the host did)
  StateSlot m_, v_;

  // The step in flight (or the state fill of init_state).
  UpdateFn kernel_ = nullptr;
  UpdateOperands operands_{};
  std::vector<GroupCoefficients> coefficients_;
  std::vector<Chunk> chunks_;
  bool in_flight_ = false;
  bool on_pool_ = false;
  bool prefetch_ = software_prefetch_default();
};

// Threads for a pool: `requested`, or one per worker core when 0; the cores come from the host.
std::vector<int> host_worker_cores(const zf_host *host);

}  // namespace zf::cpu_kernels
