// Safetensors I/O: what is written reads back bit for bit in every supported dtype; the bytes
// follow the format (little-endian header length, space-padded header, 8-byte aligned data); and
// a damaged file is refused with a message that names the file and the tensor.
#include "checkpoint/checksum.hpp"
#include "checkpoint/safetensors.hpp"
#include "runtime/error.hpp"
#include "support/process.hpp"

#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>

using namespace zf;

namespace {

std::string read_bytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void write_bytes(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A file with a hand-written header and `data_bytes` bytes of data.
std::string handmade(const std::string &dir, const std::string &name, const std::string &header, size_t data_bytes) {
  uint64_t length = header.size();
  std::string bytes(8, '\0');
  std::memcpy(bytes.data(), &length, 8);
  bytes += header + std::string(data_bytes, '\x01');
  std::string path = dir + "/" + name;
  write_bytes(path, bytes);
  return path;
}

// The zf::Error message of opening path ("" when it opens).
std::string open_error(const std::string &path) {
  try {
    SafetensorsFile::open(path);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("model: safetensors round trip keeps every dtype, shape and the metadata bit for bit", "[model][safetensors]") {
  std::string dir = test::scratch_dir("safetensors_round_trip");
  at::manual_seed(7);
  std::vector<std::pair<std::string, at::Tensor>> tensors = {
      {"f32", at::randn({3, 5})},
      {"bf16", at::randn({4, 2}).to(at::kBFloat16)},
      {"f16", at::randn({7}).to(at::kHalf)},
      {"f64", at::randn({2, 2, 2}, at::kDouble)},
      {"i64", at::randint(-1000000, 1000000, {5}, at::kLong)},
      {"i32", at::randint(-1000, 1000, {3, 1}, at::kInt)},
      {"u8", at::randint(0, 255, {9}, at::kByte)},
      {"bool", at::randint(0, 2, {6}, at::kLong).to(at::kBool)},
      {"scalar", at::tensor(3.5f)},
      {"empty", at::zeros({0, 4})},
      {"transposed", at::randn({3, 4}).t()},  // non-contiguous input is written in logical order
  };
  std::map<std::string, std::string> metadata = {{"format", "pt"}, {"step", "12"}};
  std::string path = dir + "/all.safetensors";
  write_safetensors(path, tensors, metadata);

  SafetensorsFile file = SafetensorsFile::open(path);
  std::map<std::string, std::string> read_back = file.metadata();
  for (const auto &[name, tensor] : tensors) CHECK(read_back.erase("checksum." + name) == 1);  // one per tensor
  CHECK(read_back.erase(kEntriesChecksumKey) == 1);  // and one of the header's entries
  CHECK(read_back == metadata);
  CHECK(file.has_checksums());
  CHECK(file.damaged_tensors().empty());
  CHECK(file.names().size() == tensors.size());
  for (const auto &[name, tensor] : tensors) {
    INFO(name);
    REQUIRE(file.has(name));
    at::Tensor back = file.load(name);
    CHECK(back.scalar_type() == tensor.scalar_type());
    CHECK(back.sizes() == tensor.sizes());
    CHECK(at::equal(back, tensor));
  }
  CHECK(file.info("bf16").dtype_name == "BF16");
  CHECK(file.info("bool").dtype_name == "BOOL");
  CHECK_FALSE(file.has("missing"));
  CHECK_THROWS_WITH(file.load("missing"), Catch::Contains("missing") && Catch::Contains("all.safetensors"));
}

TEST_CASE("model: a tensor's checksum does not depend on how its bytes were written, and a flipped bit shows",
          "[model][safetensors]") {
  std::string dir = test::scratch_dir("safetensors_checksums");
  at::Tensor values = at::arange(1000, at::kFloat);
  // The same bytes whole, and through pieces of 37 elements (not a multiple of the checksum's stripe).
  TensorPieces pieces{"pieces", at::kFloat, 1000, 37,
                      [&](uint64_t first, uint64_t count, void *out) {
                        std::memcpy(out, values.data_ptr<float>() + first, count * 4);
                      },
                      nullptr};
  write_safetensors(dir + "/a.safetensors", {{"whole", values}}, {}, {pieces});
  SafetensorsFile file = SafetensorsFile::open(dir + "/a.safetensors");
  CHECK(file.metadata().at("checksum.whole") == file.metadata().at("checksum.pieces"));
  CHECK(file.metadata().at("checksum.whole") == checksum_hex(values.data_ptr(), 4000));
  Checksum split;
  for (size_t at = 0; at < 4000; at += 13) split.update(static_cast<char *>(values.data_ptr()) + at, std::min<size_t>(13, 4000 - at));
  CHECK(split.hex() == checksum_hex(values.data_ptr(), 4000));
  at::Tensor flipped = values.clone();
  reinterpret_cast<uint8_t *>(flipped.data_ptr())[2001] ^= 1;
  CHECK(checksum_hex(flipped.data_ptr(), 4000) != checksum_hex(values.data_ptr(), 4000));
}

TEST_CASE("model: safetensors bytes follow the format: LE length, space-padded header, aligned data", "[model][safetensors]") {
  std::string dir = test::scratch_dir("safetensors_bytes");
  std::string path = dir + "/one.safetensors";
  write_safetensors(path, {{"w", at::arange(3, at::kFloat)}});
  std::string bytes = read_bytes(path);
  uint64_t length = 0;
  std::memcpy(&length, bytes.data(), 8);
  CHECK((8 + length) % 8 == 0);
  std::string header = bytes.substr(8, length);
  CHECK(header.find("\"w\":{\"data_offsets\":[0,12],\"dtype\":\"F32\",\"shape\":[3]}") != std::string::npos);
  CHECK(header.find_last_not_of(' ') + 1 >= header.size() - 7);  // padding only
  CHECK(bytes.size() == 8 + length + 12);
  float values[3];
  std::memcpy(values, bytes.data() + 8 + length, 12);
  CHECK(values[0] == 0.0f);
  CHECK(values[2] == 2.0f);
}

TEST_CASE("model: read_into converts dtype and fills transposed views", "[model][safetensors]") {
  std::string dir = test::scratch_dir("safetensors_read_into");
  at::Tensor stored = at::randn({4, 6});
  write_safetensors(dir + "/w.safetensors", {{"w", stored}});
  SafetensorsFile file = SafetensorsFile::open(dir + "/w.safetensors");
  at::Tensor column_major = at::zeros({6, 4}).t();  // [4, 6] view, column-contiguous
  file.read_into("w", column_major);
  CHECK(at::equal(column_major, stored));
  at::Tensor half = at::zeros({4, 6}, at::kBFloat16);
  file.read_into("w", half);
  CHECK(at::equal(half, stored.to(at::kBFloat16)));
  at::Tensor wrong = at::zeros({6, 4});
  CHECK_THROWS_WITH(file.read_into("w", wrong), Catch::Contains("'w'") && Catch::Contains("[6, 4]"));
}

TEST_CASE("model: damaged safetensors files are refused with the file and tensor named", "[model][safetensors]") {
  std::string dir = test::scratch_dir("safetensors_damaged");
  std::string good = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

  write_bytes(dir + "/short.safetensors", "abc");
  CHECK_THAT(open_error(dir + "/short.safetensors"), Catch::Contains("short.safetensors") && Catch::Contains("truncated"));

  // A whole file cut in the middle of its data.
  write_safetensors(dir + "/cut.safetensors", {{"w", at::ones({64})}});
  std::string whole = read_bytes(dir + "/cut.safetensors");
  write_bytes(dir + "/cut.safetensors", whole.substr(0, whole.size() - 10));
  CHECK_THAT(open_error(dir + "/cut.safetensors"), Catch::Contains("cut.safetensors") && Catch::Contains("'w'") &&
                                                       Catch::Contains("truncated"));
  // ... and in the middle of its header.
  write_bytes(dir + "/cut_header.safetensors", whole.substr(0, 20));
  CHECK_THAT(open_error(dir + "/cut_header.safetensors"),
             Catch::Contains("cut_header.safetensors") && Catch::Contains("header length"));

  handmade(dir, "json.safetensors", "{\"a\": [", 0);
  CHECK_THAT(open_error(dir + "/json.safetensors"), Catch::Contains("json.safetensors: corrupt safetensors header: not valid JSON"));

  handmade(dir, "range.safetensors", good, 4);
  CHECK_THAT(open_error(dir + "/range.safetensors"), Catch::Contains("range.safetensors") && Catch::Contains("'a'") &&
                                                         Catch::Contains("run past"));

  handmade(dir, "overlap.safetensors",
           "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
           "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
           12);
  CHECK_THAT(open_error(dir + "/overlap.safetensors"),
             Catch::Contains("overlap.safetensors") && Catch::Contains("'a'") && Catch::Contains("'b'") &&
                 Catch::Contains("overlap"));

  handmade(dir, "dtype.safetensors", "{\"a\":{\"dtype\":\"F8_E4M3\",\"shape\":[2],\"data_offsets\":[0,2]}}", 2);
  CHECK_THAT(open_error(dir + "/dtype.safetensors"), Catch::Contains("dtype.safetensors") && Catch::Contains("'a'") &&
                                                         Catch::Contains("F8_E4M3"));

  handmade(dir, "size.safetensors", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8);
  CHECK_THAT(open_error(dir + "/size.safetensors"), Catch::Contains("size.safetensors") && Catch::Contains("'a'") &&
                                                        Catch::Contains("needs 12 bytes"));

  handmade(dir, "fields.safetensors", "{\"a\":{\"dtype\":\"F32\"}}", 0);
  CHECK_THAT(open_error(dir + "/fields.safetensors"), Catch::Contains("'a'") && Catch::Contains("data_offsets"));

  CHECK_THAT(open_error(dir + "/absent.safetensors"), Catch::Contains("absent.safetensors"));
  handmade(dir, "ok.safetensors", good, 8);
  CHECK(open_error(dir + "/ok.safetensors").empty());
}

TEST_CASE("model: sharded checkpoints are read through model.safetensors.index.json", "[model][safetensors]") {
  std::string dir = test::scratch_dir("safetensors_sharded");
  write_safetensors(dir + "/model-00001-of-00002.safetensors", {{"a", at::ones({2})}, {"b", at::zeros({3})}});
  write_safetensors(dir + "/model-00002-of-00002.safetensors", {{"c", at::full({4}, 2.0)}});
  write_bytes(dir + "/model.safetensors.index.json",
              "{\"metadata\": {\"total_size\": 36}, \"weight_map\": {\"a\": \"model-00001-of-00002.safetensors\", "
              "\"b\": \"model-00001-of-00002.safetensors\", \"c\": \"model-00002-of-00002.safetensors\"}}");
  SafetensorsSet set = SafetensorsSet::open_directory(dir);
  CHECK(set.names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(at::equal(set.load("c"), at::full({4}, 2.0)));
  CHECK(set.info("b").shape == std::vector<int64_t>{3});
  CHECK_THROWS_WITH(set.load("d"), Catch::Contains("'d'") && Catch::Contains(dir));

  write_bytes(dir + "/model.safetensors.index.json",
              "{\"weight_map\": {\"c\": \"model-00001-of-00002.safetensors\"}}");
  CHECK_THROWS_WITH(SafetensorsSet::open_directory(dir),
                    Catch::Contains("'c'") && Catch::Contains("model-00001-of-00002.safetensors"));

  std::string empty = test::scratch_dir("safetensors_no_weights");
  CHECK_THROWS_WITH(SafetensorsSet::open_directory(empty), Catch::Contains("no model.safetensors"));
}
