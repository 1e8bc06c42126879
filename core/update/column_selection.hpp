// column_selection.hpp: ZenFlow's split of the shard by gradient columns: which elements the
// device updates every step and which the CPU updates, and zen-auto's test for a due CPU update.
#pragma once

#include "update/update_buffers.hpp"

#include <cstdint>
#include <vector>

namespace zf {

// The columns of a layout's MATRIX segments (the selector's score and mask entries); with
// ZF_SEGMENT_TRANSPOSED, those of them that are the entries (tokens) of its lookup tables.
uint32_t column_count(const zf_layout &layout, uint32_t flag = ZF_SEGMENT_MATRIX);

// Marks every entry of the lookup tables selected (ZenFlow keeps them whole unless told otherwise).
void select_whole_tables(const zf_layout &layout, std::vector<uint8_t> &mask);

// Checkpoints keep a mask in two parts: the weights' columns (as before lookup tables had columns)
// and the tables' entries, so that a checkpoint written before still resumes: its tables were
// wholly the device's, which an entries part of all ones says. split: mask (column_count entries)
// into weights (column_count - the tables') and tables (column_count with ZF_SEGMENT_TRANSPOSED); join: back.
void split_mask(const zf_layout &layout, const std::vector<uint8_t> &mask, uint8_t *weights, uint8_t *tables);
std::vector<uint8_t> join_mask(const zf_layout &layout, const uint8_t *weights, const uint8_t *tables);

// Which elements of the shard the device updates every step and which the CPU updates at the
// boundaries, from a column mask. 1-D parameters always go to the device; a segment's padding to
// the CPU. Both range lists are sorted, disjoint, in shard elements, and together cover the shard.
struct Selection {
  std::vector<uint8_t> mask;                 // per column
  std::vector<zf_optimizer_range> device;    // selected columns and 1-D parameters
  std::vector<zf_optimizer_range> host;      // the other columns
  uint64_t device_numel = 0;
};
Selection make_selection(const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end, std::vector<uint8_t> mask);

// The shard's elements by what ZenFlow makes of them: all of them (end - begin), those in MATRIX
// segments, and of those the lookup tables' (ZF_SEGMENT_TRANSPOSED).
struct ShardElements {
  uint64_t numel = 0, matrix = 0, tables = 0;
};
ShardElements shard_elements(const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end);

// The elements of the shard that ZenFlow updates where the model computes at `topk`, as
// make_selection places them: the topk selectors' ceil(topk x cols) columns of each weight (at
// least one), counted exactly for a weight wholly in the shard and in proportion to its elements
// there for one split between shards; the lookup tables whole where tables_whole (else chosen
// among like any weight's columns); every other element (1-D parameters with their padding).
// The memory plan and `zfcore estimate` count the selected columns with it.
uint64_t selected_numel(const zf_layout &layout, uint64_t shard_begin, uint64_t shard_end, double topk,
                        bool tables_whole);

// The bytes a selected element holds where the model computes: its fp32 master and optimizer state
// (master_and_state), its shard index (8) and, where the model is not fp32, its compute-precision
// result; and, while the update runs, its gathered gradient (transient).
struct SelectedElementBytes {
  uint64_t held = 0, transient = 0;
  uint64_t total() const { return held + transient; }
};
SelectedElementBytes selected_element_bytes(uint64_t master_and_state, uint64_t compute_bytes);

// topk_ratio = "auto" on a shard where `fits` selected elements fit (zenflow_topk.cpp): the share
// of the weights' columns that fits beside every other element with the lookup tables whole, or,
// where that is under kMinAutoTopk, with the tables' entries chosen among too (table_rows);
// clamped to [kMinAutoTopk, 1].
struct AutoTopk {
  double topk = 0;
  bool table_rows = false;
};
AutoTopk auto_topk(const ShardElements &shard, uint64_t fits);

// Zen-auto: the CPU update is due when at least auto_ratio of the weights (that have selected and
// other columns) hold more gradient mass in their other columns, accumulated since the last CPU
// update, than in their selected columns in this step. Masses are the selector's scores summed
// over ranks.
bool auto_update_due(const zf_layout &layout, const std::vector<uint8_t> &mask, const std::vector<float> &step_scores,
                     const std::vector<float> &accumulated_scores, double auto_ratio);

}  // namespace zf
