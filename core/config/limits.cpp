// check_run_limits() of config/limits.hpp; the checks across ranks are in run_checks.cpp (they need
// a communicator, which the parsers library, and so the fuzz targets, do without).
#include "config/limits.hpp"

#include "runtime/error.hpp"
#include "runtime/files.hpp"
#include "runtime/input.hpp"

#include <cfloat>
#include <cmath>

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

  // run.name becomes the directory runs/NAME: one name, never a path that leads elsewhere.
  const std::string name = config.string("run", "name");
  const std::string name_problem = entry_name_problem(name);
  ZF_REQUIRE(name_problem.empty(), "%s: run.name = \"%s\" %s (it names the directory runs/NAME); to write "
             "elsewhere set run.output_dir", config.where("run", "name").str().c_str(), excerpt(name).c_str(),
             name_problem.c_str());

  // The optimizers compute in fp32: a value that rounds to 0 or 1 there fails at step 1 quoting the
  // rounded value, or silently changes the math.
  const double eps = config.real("optimizer", "eps");
  ZF_REQUIRE(float(eps) >= FLT_MIN, "%s: optimizer.eps = %.15g is below what fp32 holds as a normal number (the "
             "optimizers compute in fp32; it would be %g there): use %g or more",
             config.where("optimizer", "eps").str().c_str(), eps, double(float(eps)), double(FLT_MIN));
  ZF_REQUIRE(std::isfinite(float(eps)), "%s: optimizer.eps = %.15g is beyond what fp32 holds (the optimizers compute "
             "in fp32; it would be inf there and no weight would change): use a small positive value such as 1e-8",
             config.where("optimizer", "eps").str().c_str(), eps);
  const double norm_eps = config.real("model", "norm_eps");
  ZF_REQUIRE(std::isfinite(float(norm_eps)), "%s: model.norm_eps = %.15g is beyond what fp32 holds (every "
             "normalization would output 0): use a small value such as 1e-5, or 0 for the preset's",
             config.where("model", "norm_eps").str().c_str(), norm_eps);
  // lr = 1e39 was accepted and failed in the optimizer at step 1, naming no key.
  for (const char *key : {"lr", "weight_decay"}) {
    const double value = config.real("optimizer", key);
    ZF_REQUIRE(std::isfinite(float(value)), "%s: optimizer.%s = %.15g is beyond what fp32 holds (the optimizers "
               "compute in fp32; it would be inf there and every weight nan): use at most %g",
               config.where("optimizer", key).str().c_str(), key, value, double(FLT_MAX));
  }
  for (const char *key : {"beta1", "beta2"}) {
    const double beta = config.real("optimizer", key);
    ZF_REQUIRE(float(beta) < 1.0f, "%s: optimizer.%s = %.15g rounds to 1 in fp32, where the optimizers compute "
               "(the moment would never change): use at most %.9g", config.where("optimizer", key).str().c_str(), key,
               beta, double(std::nextafter(1.0f, 0.0f)));
  }
}

}  // namespace zf
