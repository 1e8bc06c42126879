// check_run_limits() of config/limits.hpp; the checks across ranks are in run_checks.cpp (they need
// a communicator, which the parsers library, and so the fuzz targets, do without).
#include "config/limits.hpp"

#include "runtime/error.hpp"

namespace zf {

void check_run_limits(const RunConfig &config, int world_size) {
  // Tokens read over the whole run: steps x grad_accum x micro_batch x ranks x seq_len.
  int64_t tokens = config.integer("train", "steps");
  bool overflow = false;
  for (int64_t factor : {config.integer("train", "grad_accum"), config.integer("train", "micro_batch"),
                         int64_t(world_size), config.integer("data", "seq_len")})
    overflow = overflow || __builtin_mul_overflow(tokens, factor, &tokens);
  ZF_REQUIRE(!overflow && tokens <= (int64_t(1) << 62),
             "%s: train.steps = %lld with train.grad_accum = %lld, train.micro_batch = %lld, data.seq_len = %lld and "
             "%d rank(s) reads more tokens than 64-bit counters hold (2^62); lower train.steps",
             config.where("train", "steps").str().c_str(), (long long)config.integer("train", "steps"),
             (long long)config.integer("train", "grad_accum"), (long long)config.integer("train", "micro_batch"),
             (long long)config.integer("data", "seq_len"), world_size);
}

}  // namespace zf
