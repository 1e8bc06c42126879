// data_source.hpp: where micro-batches come from. A source maps a global chunk index to a
// micro-batch, so the order is a pure function of (seed, step): deterministic, sharded across
// ranks (rank r of W takes chunks c*W + r) and resumable by step.
//
// Training split: chunk c holds the sequences at positions [c*B, (c+1)*B) of an endless stream
// of epochs (B = micro_batch). Position p is sequence perm_e[p mod N] of epoch e = p / N, where N
// = size() and perm_e is a permutation seeded by ([run] seed, e) (identity when data.shuffle is
// off). Any chunk is computed on its own, so a run resumes mid-epoch from the step alone, and the
// W ranks together read every sequence once per epoch.
//
// Evaluation split ([data] eval_fraction > 0): a fixed held-out set of size() sequences in a fixed
// order, chosen independently of [run] seed (runs with different seeds evaluate on the same data)
// and disjoint from the training split. Chunk c holds positions [c*B, min((c+1)*B, size())), so a
// pass over it is chunks 0 .. ceil(size()/B) - 1 (rank r of W: chunks r, r + W, ...) and the last
// batch may be short; a chunk past the end throws.
#pragma once

#include "config/config.hpp"
#include "model/model.hpp"

#include <memory>

namespace zf {

enum class Split { train, eval };

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch batch(int64_t chunk, int64_t micro_batch) = 0;
  // batch() for training step `step`: an error (an id outside the vocabulary, a changed shard)
  // names the step, which a resumed run reaches again.
  Batch batch_of_step(int64_t step, int64_t chunk, int64_t micro_batch);
  // Sequences (samples) in this split: one epoch for training, one pass for evaluation.
  virtual int64_t size() const = 0;
  // Every token id is below this (the model's vocabulary must be at least as large); 0 for
  // sources that are not token data (random).
  virtual int64_t vocab_size() const = 0;
  // A digest of the split's size and of up to 256 of its sequences, evenly spaced: what a checkpoint
  // records of the data, so that a resume on other data is noticed. "" for generated data (random).
  virtual std::string sampled_digest() const { return ""; }
};

// The source [data] describes, for one split. For Split::eval it returns nullptr when there is no
// held-out data (eval_fraction = 0). Sources of both splits of one config share the loaded data.
std::unique_ptr<DataSource> make_data_source(const RunConfig &config, Split split = Split::train);

// The chat template an export carries when it is not its tokenizer's own, the one the model trained
// with: data.chat_template's file (chat), or the Alpaca prompt (alpaca; the log says so); "" else.
std::string exported_chat_template(const RunConfig &config);

}  // namespace zf
