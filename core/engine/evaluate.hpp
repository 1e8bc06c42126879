// evaluate.hpp: the held-out loss. One computation serves a run's evaluation (train.eval_every) and
// `zfcore eval` (the model alone: no stage, no optimizer plugin, no master copy, no gradients).
#pragma once

#include "config/config.hpp"
#include "data/data_source.hpp"
#include "model/model.hpp"
#include "runtime/runtime.hpp"

#include <functional>
#include <string>

namespace zf {

struct EvalResult {
  double loss = 0;        // mean loss per counted token, over all ranks
  double tokens = 0;      // counted tokens (targets that are not kIgnoreIndex)
  int64_t sequences = 0;  // sequences evaluated
  int64_t batches = 0;    // micro-batches evaluated
};

// Around each block's forward: a stage that shards parameters gathers the block (enter) and
// releases it (leave). Empty functions for a model that is whole on every rank.
struct BlockAccess {
  std::function<void(uint32_t block)> enter, leave;
};

// Mean loss per counted token over the first `max_batches` micro-batches of `data` (all of it when
// it has fewer). Rank r of W runs micro-batches r, r + W, ...; the sums are reduced over ranks, and
// every rank returns the same result. Runs without gradients and with dropout off.
EvalResult evaluate_loss(Model &model, DataSource &data, Runtime &runtime, int64_t micro_batch, int64_t max_batches,
                         const BlockAccess &access);

// Batches come from the data source on the host; a GPU run moves them to its device.
Batch on_device(Batch batch, const Runtime &runtime);

// `zfcore eval`: the config's model, loaded from the checkpoint that checkpoint.resume names (the
// newest one of the run for "auto"; "never" skips checkpoints) or else from model.init_from (or
// its seeded initialization), evaluated on the held-out data (data.eval_path, or the
// data.eval_fraction split) for train.eval_batches micro-batches of train.micro_batch.
struct EvalReport {
  EvalResult result;
  std::string weights;  // where the parameters came from, for the report
  int64_t step = 0;     // the checkpoint's step, 0 without one
  int64_t available_sequences = 0;  // in the held-out data
};
EvalReport evaluate_config(const RunConfig &config, Runtime &runtime);

}  // namespace zf
