// RunConfig::apply_global_batch (config.hpp): DeepSpeed's rule train_batch_size =
// train_micro_batch_size_per_gpu x gradient_accumulation_steps x world size, with zfcore's names
// train.global_batch, train.micro_batch and train.grad_accum. As in DeepSpeed, the one of the
// last two that is not set is derived (both unset: grad_accum 1), and the three must agree.
#include "config/config.hpp"

#include "runtime/error.hpp"

namespace zf {

void RunConfig::apply_global_batch(int world_size) {
  const int64_t global = integer("train", "global_batch");
  if (global == 0) return;
  const bool micro_set = is_set("train", "micro_batch"), accum_set = is_set("train", "grad_accum");
  int64_t micro = integer("train", "micro_batch"), accum = micro_set || accum_set ? integer("train", "grad_accum") : 1;
  const Location at = where("train", "global_batch");
  const std::string rule =
      " (DeepSpeed's rule: train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x ranks); "
      "change one of the three";
  if (world_size <= 0) {  // validate: any number of ranks must be a whole one
    const int64_t per_rank = micro_set ? micro * accum : accum;
    ZF_REQUIRE(global % per_rank == 0,
               "%s: train.global_batch = %lld is not a multiple of train.micro_batch x train.grad_accum = %s x %lld: "
               "no number of ranks gives it%s",
               at.str().c_str(), (long long)global, micro_set ? std::to_string(micro).c_str() : "(derived)",
               (long long)accum, rule.c_str());
    return;
  }
  const int64_t ranks = world_size;
  const std::string ranks_text = format("%lld rank%s", (long long)ranks, ranks == 1 ? "" : "s");
  if (!micro_set || !accum_set) {
    // The one not set: micro_batch where only grad_accum is set (or neither), else grad_accum.
    const int64_t known = (micro_set ? micro : accum) * ranks;
    ZF_REQUIRE(global % known == 0,
               "%s: train.global_batch = %lld is not a multiple of train.micro_batch x train.grad_accum x ranks: "
               "%s = %lld x %s = %lld, with train.%s derived%s",
               at.str().c_str(), (long long)global, micro_set ? "train.micro_batch" : "train.grad_accum",
               (long long)(micro_set ? micro : accum), ranks_text.c_str(), (long long)known,
               micro_set ? "grad_accum" : "micro_batch", rule.c_str());
    (micro_set ? accum : micro) = global / known;
    const char *derived = micro_set ? "grad_accum" : "micro_batch";
    set("train", derived, Value(micro_set ? accum : micro), at, at);
    if (!micro_set) set("train", "grad_accum", Value(accum), at, at);
    return;
  }
  ZF_REQUIRE(global == micro * accum * ranks,
             "%s: train.global_batch = %lld must equal train.micro_batch x train.grad_accum x ranks = %lld x %lld x "
             "%s = %lld%s, or leave train.grad_accum out to derive it",
             at.str().c_str(), (long long)global, (long long)micro, (long long)accum, ranks_text.c_str(),
             (long long)(micro * accum * ranks), rule.c_str());
}

}  // namespace zf
