// data_source.hpp: where micro-batches come from. A source maps a global chunk index to a
// micro-batch, so the order is a pure function of (seed, step): deterministic, sharded across
// ranks (rank r of W takes chunks c*W + r) and resumable by step.
#pragma once

#include "config/config.hpp"
#include "model/model.hpp"

#include <memory>

namespace zf {

class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual Batch batch(int64_t chunk, int64_t micro_batch) = 0;
};

std::unique_ptr<DataSource> make_data_source(const Config &config);

}  // namespace zf
