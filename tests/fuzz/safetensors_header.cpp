// Fuzz target: a safetensors file (model.safetensors, a checkpoint's rank file), whose header
// SafetensorsFile::open parses (parse_safetensors_header) before it reads tensors straight from
// the mapped file. Every byte range it accepts must lie inside the file, hold exactly what shape
// and dtype need, and not overlap another: the target reads each range, so that AddressSanitizer
// reports any that does not.
#include "checkpoint/safetensors_header.hpp"
#include "fuzz_target.hpp"

#include <algorithm>
#include <utility>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  zf::fuzz::input_text(data, size);
  const std::string name = "fuzz/model.safetensors";
  zf::SafetensorsHeader header;
  if (!zf::fuzz::accepts(name, [&] { header = zf::parse_safetensors_header(data, size, name); })) return 0;
  using zf::fuzz::require;
  require(header.data_begin <= size && header.data_size == size - header.data_begin,
          "the data section is not the rest of the file");
  const uint8_t *section = data + header.data_begin;
  uint64_t previous_end = 0;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto &[tensor, info] : header.tensors) {
    require(info.begin <= info.end && info.end <= header.data_size, "tensor '" + tensor + "' lies outside the file");
    unsigned __int128 bytes = zf::safetensors_element_size(info.dtype_name);
    for (int64_t dim : info.shape) {
      require(dim >= 0, "tensor '" + tensor + "' has a negative dimension");
      bytes *= uint64_t(dim);
      bytes = std::min<unsigned __int128>(bytes, ~uint64_t(0));
    }
    require(bytes == info.end - info.begin, "tensor '" + tensor + "' holds another size than shape and dtype need");
    volatile uint8_t sum = 0;
    for (uint64_t i = info.begin; i < info.end; ++i) sum = sum + section[i];
    if (info.end > info.begin) ranges.emplace_back(info.begin, info.end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (const auto &[begin, end] : ranges) {
    require(begin >= previous_end, "two tensors share bytes");
    previous_end = end;
  }
  return 0;
}
