// sequence_source.hpp: a DataSource over a SequenceSet (the token sources share it).
#pragma once

#include "data/data_source.hpp"
#include "data/sequences.hpp"

namespace zf {

// The split's members of set, in the order data_source.hpp describes; nullptr for an empty eval
// split. seed: [run] seed (the per-epoch permutations).
std::unique_ptr<DataSource> make_sequence_source(std::shared_ptr<const SequenceSet> set, Split split,
                                                 double eval_fraction, bool shuffle, uint64_t seed);

}  // namespace zf
