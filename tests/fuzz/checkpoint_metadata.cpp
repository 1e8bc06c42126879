// Fuzz target: a training checkpoint's rank file (rank-NNNNN.safetensors), whose "__metadata__"
// says which step, world size, shard and layout it holds (read_checkpoint_metadata, as a resume
// and zfcore eval read it). What it accepts must be what save() could have written: each number
// exactly its decimal digits, at least one rank, a shard that does not end before it begins, a
// step within train.steps' range.
#include "checkpoint/checkpoint_metadata.hpp"
#include "checkpoint/safetensors_header.hpp"
#include "config/limits.hpp"
#include "fuzz_target.hpp"

#include <map>

namespace {

// The value of a text of 1 to 19 decimal digits; -1 for anything else.
int64_t decimal(const std::string &text) {
  if (text.empty() || text.size() > 19) return -1;
  int64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zf::fuzz::input_text(data, size);
  const std::string name = "fuzz/rank-00000.safetensors";
  zf::SafetensorsHeader header;
  zf::CheckpointMetadata metadata;
  if (!zf::fuzz::accepts(name, [&] {
        header = zf::parse_safetensors_header(data, size, name);
        metadata = zf::read_checkpoint_metadata(header.metadata, name);
      }))
    return 0;
  using zf::fuzz::require;
  const auto &fields = header.metadata;
  for (const auto &[key, value] : std::map<std::string, uint64_t>{{"step", uint64_t(metadata.step)},
                                                                  {"world_size", metadata.world_size},
                                                                  {"shard_begin", metadata.shard_begin},
                                                                  {"shard_end", metadata.shard_end}})
    require(decimal(fields.at(key)) >= 0 && uint64_t(decimal(fields.at(key))) == value,
            "metadata field '" + key + "' = \"" + fields.at(key) + "\" was read as " + std::to_string(value));
  require(metadata.world_size >= 1, "a world of no ranks was accepted");
  require(metadata.shard_begin <= metadata.shard_end, "a shard that ends before it begins was accepted");
  require(metadata.step >= 0 && double(metadata.step) <= zf::kMaxSteps, "a step out of range was accepted");
  require(metadata.layout == fields.at("layout"), "the layout digest was not read as stored");
  return 0;
}
