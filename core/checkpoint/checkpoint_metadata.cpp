#include "checkpoint/checkpoint_metadata.hpp"

#include "checkpoint/checksum.hpp"
#include "checkpoint/safetensors_header.hpp"
#include "config/limits.hpp"
#include "runtime/error.hpp"
#include "runtime/input.hpp"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <random>

namespace zf {
namespace {

const std::string &field(const std::map<std::string, std::string> &fields, const char *key, const std::string &file) {
  auto it = fields.find(key);
  ZF_REQUIRE(it != fields.end(),
             "%s: the metadata has no '%s', which every checkpoint zfcore writes records (step, world_size, shard, "
             "layout): the file was edited or damaged, and its parameters cannot be placed; resume from another "
             "checkpoint (checkpoint.resume = DIR) or start over (checkpoint.resume = \"never\")",
             file.c_str(), key);
  return it->second;
}

// A whole-number field from `min` to `max` (`what` says which), written as save() writes it:
// decimal digits only (no sign or blank), so that what is read is what was written.
uint64_t number(const std::map<std::string, std::string> &fields, const char *key, const std::string &file,
                const std::string &what, uint64_t min = 0, uint64_t max = UINT64_MAX) {
  const std::string &text = field(fields, key, file);
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  ZF_REQUIRE(error == std::errc() && end == text.data() + text.size() &&
                 value >= min && value <= max,
             "%s: metadata field '%s' = \"%s\" is not %s; the checkpoint is corrupt", file.c_str(), key,
             excerpt(text).c_str(), what.c_str());
  return value;
}

constexpr const char *kChecksumField = "metadata_checksum";
constexpr const char *kRecordField = "checkpoint_json";  // the checksum of checkpoint.json
// Says (under the metadata's checksum) that the file records its header entries' checksum, so that
// one removed by hand is missed, not taken for an older zfcore's file.
constexpr const char *kEntriesField = "entries_checked";

// The checksum of every field but the tensors' checksums and itself, as "key=value\n" in key order.
std::string metadata_checksum(const std::map<std::string, std::string> &fields) {
  Checksum checksum;
  for (const auto &[key, value] : fields) {
    if (key == kChecksumField || key.rfind("checksum", 0) == 0) continue;
    const std::string line = key + "=" + value + "\n";
    checksum.update(line.data(), line.size());
  }
  return checksum.hex();
}

}  // namespace

std::string new_run_id() {
  std::random_device source;
  char text[17];
  std::snprintf(text, sizeof text, "%08x%08x", unsigned(source()), unsigned(source()));
  return text;
}

std::map<std::string, std::string> checkpoint_metadata_fields(const CheckpointMetadata &metadata, int rank) {
  std::map<std::string, std::string> fields = {{"format", "2"},
                                               {"step", std::to_string(metadata.step)},
                                               {"world_size", std::to_string(metadata.world_size)},
                                               {"rank", std::to_string(rank)},
                                               {"shard_begin", std::to_string(metadata.shard_begin)},
                                               {"shard_end", std::to_string(metadata.shard_end)},
                                               {"layout", metadata.layout},
                                               {"run_name", metadata.run_name},
                                               {"run_id", metadata.run_id},
                                               {"config_digest", metadata.config_digest}};
  if (!metadata.record_checksum.empty()) fields[kRecordField] = metadata.record_checksum;
  fields[kEntriesField] = "1";
  fields[kChecksumField] = metadata_checksum(fields);
  return fields;
}

CheckpointMetadata read_checkpoint_metadata(const std::map<std::string, std::string> &fields, const std::string &file) {
  CheckpointMetadata metadata;
  auto format_field = fields.find("format");
  if (format_field != fields.end()) {
    // Format 1 had no format field: a "1" here was written by hand.
    ZF_REQUIRE(format_field->second == "2",
               "%s: metadata field 'format' = \"%s\": this zfcore writes format 2 and reads it and format 1 (whose "
               "files have no format field); %s", file.c_str(), excerpt(format_field->second).c_str(),
               format_field->second == "1" ? "the field was edited: the checkpoint is damaged"
                                           : "a newer zfcore wrote it, or the checkpoint is damaged");
    const std::string &recorded = field(fields, kChecksumField, file);
    const std::string actual = metadata_checksum(fields);
    ZF_REQUIRE(recorded == actual,
               "%s: the metadata (step, world size, shard, layout, run) does not match its checksum (written %s, "
               "read %s): the checkpoint is damaged; resume from another one (checkpoint.resume = DIR)",
               file.c_str(), excerpt(recorded).c_str(), actual.c_str());
    // Every file of this format records its tensors' checksums (write_safetensors): none at all, or
    // no checksum of the entries where the metadata says there is one, is an edit, not an old file.
    bool tensor_checksums = false;
    for (const auto &[key, value] : fields) tensor_checksums = tensor_checksums || key.rfind("checksum.", 0) == 0;
    const bool entries_missing = fields.count(kEntriesField) != 0 && fields.count(kEntriesChecksumKey) == 0;
    ZF_REQUIRE(tensor_checksums && !entries_missing,
               "%s: the %s checksums that every checkpoint of this format records are missing: the file was edited "
               "or damaged; resume from another checkpoint (checkpoint.resume = DIR)", file.c_str(),
               tensor_checksums ? "header entries'" : "tensors'");
    metadata.run_name = field(fields, "run_name", file);
    metadata.run_id = field(fields, "run_id", file);
    metadata.config_digest = field(fields, "config_digest", file);
    if (auto record = fields.find(kRecordField); record != fields.end()) metadata.record_checksum = record->second;
  }
  metadata.step = int64_t(number(fields, "step", file, format("a step number (0 to %lld)", (long long)kMaxSteps), 0,
                                 uint64_t(kMaxSteps)));
  metadata.world_size = number(fields, "world_size", file, "a number of ranks (1 or more)", 1);
  metadata.shard_begin = number(fields, "shard_begin", file, "a number");
  metadata.shard_end = number(fields, "shard_end", file,
                              format("a number from shard_begin (%llu) on", (unsigned long long)metadata.shard_begin),
                              metadata.shard_begin);
  metadata.layout = field(fields, "layout", file);
  return metadata;
}

}  // namespace zf
