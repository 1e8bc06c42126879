// limits.hpp: upper bounds of the core's numeric keys and the checks a run makes on the whole
// config before it starts (the products of keys, and the same config on every rank).
#pragma once

#include "config/config.hpp"

#include <cstdint>
#include <string>

namespace zf {

class Communicator;

// Far above any real run, low enough that the products the core forms from them (step x
// grad_accum x micro_batch, hidden x hidden x layers, ...) stay within 64 bits;
// check_run_limits() checks the products that still could not.
constexpr uint32_t kRange = ZF_PARAM_HAS_MIN | ZF_PARAM_HAS_MAX;
constexpr double kMaxSteps = double(int64_t(1) << 40);      // steps, step intervals, warm-up
constexpr double kMaxBatch = double(int64_t(1) << 20);      // micro_batch, grad_accum, batches, kept checkpoints
constexpr double kMaxSeqLen = double(int64_t(1) << 24);     // seq_len, max_seq, sample tokens
constexpr double kMaxWidth = double(int64_t(1) << 18);      // hidden, heads
constexpr double kMaxLayers = double(int64_t(1) << 14);
constexpr double kMaxVocab = double(int64_t(1) << 31) - 1;  // token ids are int32 in the tokenizers
constexpr double kMaxThreads = 1024;

// Throws a located error when the tokens a run reads (steps x grad_accum x micro_batch x ranks x
// seq_len) would overflow its 64-bit counters.
void check_run_limits(const RunConfig &config, int world_size);

// Every effective value, one "table.key = value" line each, sorted: defaults, the file and --set
// overrides included (the same on two ranks exactly when their runs would agree).
std::string canonical_config_text(const RunConfig &config);

// Under MPI: compares a digest of canonical_config_text() across ranks and throws, on every
// rank, an error naming the keys where a rank's config differs from rank 0's.
void check_same_config_on_all_ranks(const RunConfig &config, Communicator &comm);

}  // namespace zf
