// A rank fills only its part of the parameters (ZeRO-3 builds no whole model anywhere): any range
// of the flat buffers, drawn at random or read from a sharded Hugging Face checkpoint, holds the
// bits the whole model built in memory holds there, and reading a range reads only its bytes.
// Oracles: random_normal / make_transformer / load_hf_checkpoint of the whole model.
#include "checkpoint/safetensors.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/init.hpp"
#include "models/model_fixture.hpp"
#include "params/flat_buffers.hpp"
#include "support/process.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <random>

using namespace zf;
namespace fs = std::filesystem;

namespace {

// [0, numel) cut at `cuts` random places (a cut inside a stored row splits it into regions).
std::vector<uint64_t> cut_points(uint64_t numel, int cuts, uint32_t seed) {
  std::mt19937 random(seed);
  std::vector<uint64_t> points = {0, numel};
  for (int i = 0; i < cuts; ++i) points.push_back(random() % numel);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  return points;
}

// The values init.hpp promises, drawn with torch ops alone: piece p (1 Mi elements) of a tensor
// comes from a generator seeded seed + 0x9e3779b97f4a7c15 * (p + 1), drawn in fp32, then rounded.
torch::Tensor expected_normal(uint64_t seed, double std, int64_t numel, torch::Dtype dtype) {
  const int64_t piece = int64_t(1) << 20;
  torch::Tensor out = torch::empty({numel}, torch::kFloat32);
  for (int64_t p = 0; p * piece < numel; ++p) {
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed + 0x9e3779b97f4a7c15ull * uint64_t(p + 1));
    out.narrow(0, p * piece, std::min(piece, numel - p * piece)).normal_(0.0, std, generator);
  }
  return out.to(dtype);
}

// The flat buffer of the whole model, built the way the engine built it before: every parameter
// allocated, then copied in.
torch::Tensor whole_buffer(Model &model, bool column_major, torch::Dtype dtype) {
  static MemoryLedger ledger;  // the model's parameters become views of the buffer: it outlives every model
  FlatBuffers flat(model.parameters(), model.block_names(), column_major);
  flat.materialize(flat.layout().numel, dtype, ledger, ZF_TIER_HOST, /*with_grads=*/false);
  return flat.params.clone();
}

// The same buffer filled range by range from `values`, for a model with shapes only.
torch::Tensor filled_by_parts(Model &model, const ParameterSource &values, bool column_major, torch::Dtype dtype,
                              const std::vector<uint64_t> &points) {
  FlatBuffers flat(model.parameters(), model.block_names(), column_major);
  torch::Tensor out = torch::full({int64_t(flat.layout().numel)}, 7.0, torch::TensorOptions().dtype(dtype));
  for (size_t i = 0; i + 1 < points.size(); ++i)
    flat.fill(values, points[i], points[i + 1], out.narrow(0, int64_t(points[i]), int64_t(points[i + 1] - points[i])));
  return out;
}

}  // namespace

TEST_CASE("init: any region of a tensor, row or column order, holds random_normal's bits", "[model][init][shard]") {
  torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  bool column_major = GENERATE(false, true);
  const int64_t rows = 1100, cols = 1000;  // 1.1 Mi elements: regions cross the 1 Mi-element pieces
  torch::manual_seed(5);
  const uint64_t seed = draw_init_seed();
  torch::Tensor whole = expected_normal(seed, 0.02, rows * cols, dtype).view({rows, cols});
  torch::manual_seed(5);
  CHECK(torch::equal(random_normal({rows, cols}, 0.02, dtype), whole));
  const int64_t width = column_major ? rows : cols;
  std::vector<uint64_t> points = cut_points(uint64_t(rows * cols), 6, column_major ? 1 : 2);
  points.insert(points.end() - 1, uint64_t(1) << 20);  // the edge of the first piece
  std::sort(points.begin(), points.end());
  for (size_t i = 0; i + 1 < points.size(); ++i)
    for_each_region(int64_t(points[i]), int64_t(points[i + 1]), width, column_major,
                    [&](const StoredRegion &region, int64_t) {
                      INFO("region rows " << region.x0 << "+" << region.nx << " columns " << region.y0 << "+" << region.ny);
                      torch::Tensor part = torch::empty({region.numel()}, torch::TensorOptions().dtype(dtype));
                      fill_normal(seed, 0.02, rows, cols, region, part);
                      CHECK(torch::equal(part.view({region.nx, region.ny}), stored_part(whole, region)));
                    });
}

TEST_CASE("init: a model with shapes only, filled range by range, holds the allocated model's bits",
          "[model][init][shard]") {
  std::string type = GENERATE("gpt2", "qwen2");
  bool column_major = GENERATE(false, true);
  std::string dtype = GENERATE("float32", "bfloat16");
  INFO(type << " column_major " << column_major << " " << dtype);
  TransformerOptions options = test::tiny_options(type, type == "qwen2");
  options.dtype = dtype;
  const torch::Dtype compute = dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  torch::manual_seed(9);
  auto allocated = make_transformer(options);
  torch::Tensor expected = whole_buffer(*allocated, column_major, compute);
  torch::manual_seed(9);
  auto shapes_only = make_unallocated_transformer(options);
  for (const ModelParameter &p : shapes_only->parameters()) CHECK(p.tensor.storage().nbytes() == 0);
  auto values = shapes_only->initial_values();
  for (int parts : {1, 3, 7}) {
    torch::Tensor filled = filled_by_parts(*shapes_only, *values, column_major, compute,
                                           cut_points(uint64_t(expected.numel()), parts - 1, uint32_t(parts)));
    CHECK(torch::equal(filled, expected));
  }
}

TEST_CASE("model.block_order = interleaved: every quarter of the flat buffers holds early and late blocks, "
          "and each parameter holds the values it holds in the model's order", "[model][init][shard]") {
  CHECK(interleaved_block_order(5) == std::vector<uint32_t>{0, 4, 2, 1, 3});
  CHECK(interleaved_block_order(6) == std::vector<uint32_t>{0, 4, 2, 1, 5, 3});
  TransformerOptions options = test::tiny_options("qwen2", false);
  options.shape.layers = 12;  // 14 blocks: the embedding, 12 layers, the head
  torch::manual_seed(11);
  auto allocated = make_transformer(options);
  torch::Tensor expected = whole_buffer(*allocated, true, torch::kFloat32);
  FlatBuffers model_order(allocated->parameters(), allocated->block_names(), true);
  torch::manual_seed(11);
  auto shapes_only = make_unallocated_transformer(options);
  FlatBuffers flat(shapes_only->parameters(), shapes_only->block_names(), true, /*interleave_blocks=*/true);
  const zf_layout &layout = flat.layout();
  REQUIRE(layout.block_count == 14);
  REQUIRE(layout.numel == model_order.layout().numel);
  for (uint32_t i = 0; i + 1 < layout.segment_count; ++i)
    CHECK(layout.segments[i].offset + layout.segments[i].numel <= layout.segments[i + 1].offset);
  uint64_t block_elements = 0;
  for (uint32_t b = 0; b < layout.block_count; ++b) {
    CHECK(layout.blocks[b].numel == model_order.layout().blocks[b].numel);
    block_elements += layout.blocks[b].numel;
  }
  CHECK(block_elements == layout.numel);
  // A quarter of the buffer (4 ZeRO-3 ranks) holds a block of the first half and one of the last.
  for (uint64_t q = 0; q < 4; ++q) {
    const uint64_t lo = q * layout.numel / 4, hi = (q + 1) * layout.numel / 4;
    bool early = false, late = false;
    for (uint32_t b = 0; b < layout.block_count; ++b)
      if (layout.blocks[b].offset < hi && lo < layout.blocks[b].offset + layout.blocks[b].numel)
        (b < layout.block_count / 2 ? early : late) = true;
    INFO("quarter " << q);
    CHECK((early && late));
  }
  auto values = shapes_only->initial_values();
  torch::Tensor filled = torch::full({int64_t(layout.numel)}, 7.0);
  const std::vector<uint64_t> points = cut_points(layout.numel, 5, 6);
  for (size_t i = 0; i + 1 < points.size(); ++i)
    flat.fill(*values, points[i], points[i + 1],
              filled.narrow(0, int64_t(points[i]), int64_t(points[i + 1] - points[i])));
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &mine = layout.segments[i];
    const zf_segment *theirs = nullptr;
    for (uint32_t j = 0; j < model_order.layout().segment_count; ++j)
      if (std::string(model_order.layout().segments[j].name) == mine.name) theirs = &model_order.layout().segments[j];
    INFO(mine.name);
    REQUIRE(theirs);
    CHECK(torch::equal(filled.narrow(0, int64_t(mine.offset), int64_t(mine.numel)),
                       expected.narrow(0, int64_t(theirs->offset), int64_t(theirs->numel))));
  }
}

TEST_CASE("init_from: a range of a sharded Hugging Face checkpoint reads just that range's bytes",
          "[model][hf][shard]") {
  std::string type = GENERATE("gpt2", "llama");
  bool column_major = GENERATE(false, true);
  INFO(type << " column_major " << column_major);
  std::string dir = test::scratch_dir("shard_init_" + type) + "/hf";
  auto saved = test::tiny_model(type, false, 3, "bfloat16");
  test::write_sharded_hf(*saved, dir);

  TransformerOptions options = test::tiny_options(type, false);
  options.dtype = "bfloat16";
  options.init_from = dir;
  auto loaded = make_transformer(options);
  load_hf_checkpoint(*loaded, dir);
  torch::Tensor expected = whole_buffer(*loaded, column_major, torch::kBFloat16);
  CHECK(torch::equal(expected, whole_buffer(*saved, column_major, torch::kBFloat16)));

  auto shapes_only = make_unallocated_transformer(options);
  FlatBuffers flat(shapes_only->parameters(), shapes_only->block_names(), column_major);
  std::vector<uint64_t> points = cut_points(flat.layout().numel, 3, 4);
  uint64_t total_read = 0;
  for (size_t i = 0; i + 1 < points.size(); ++i) {
    const uint64_t lo = points[i], hi = points[i + 1];
    auto values = hf_parameter_source(*shapes_only, dir);  // its own count
    torch::Tensor part = torch::empty({int64_t(hi - lo)}, torch::kBFloat16);
    flat.fill(*values, lo, hi, part);
    CHECK(torch::equal(part, expected.narrow(0, int64_t(lo), int64_t(hi - lo))));
    uint64_t stored = 0;  // the range's parameter elements (not the padding between them), 2 bytes each
    for (uint32_t s = 0; s < flat.layout().segment_count; ++s) {
      const zf_segment &segment = flat.layout().segments[s];
      const uint64_t a = std::max(lo, segment.offset), b = std::min(hi, segment.offset + segment.numel);
      if (a < b) stored += (b - a) * 2;
    }
    CHECK(values->bytes_read() == stored);
    total_read += values->bytes_read();
  }
  uint64_t file_bytes = 0;
  for (const char *name : {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors"}) {
    SafetensorsFile file = SafetensorsFile::open(dir + name);
    for (const std::string &tensor : file.names()) file_bytes += file.info(tensor).end - file.info(tensor).begin;
  }
  CHECK(total_read == file_bytes);  // every byte once, over all the ranges
}

TEST_CASE("init_from: model.safetensors wins over model.safetensors.index.json, as in transformers",
          "[model][hf][safetensors]") {
  std::string dir = test::scratch_dir("shard_init_precedence") + "/hf";
  auto old_weights = test::tiny_model("qwen2", true, 21);
  test::write_sharded_hf(*old_weights, dir);
  auto new_weights = test::tiny_model("qwen2", true, 22);  // a fine-tune exported into the same directory
  save_hf_checkpoint(*new_weights, dir);
  REQUIRE(fs::exists(dir + "/model.safetensors.index.json"));
  auto loaded = test::tiny_model("qwen2", true, 23);
  load_hf_checkpoint(*loaded, dir);
  auto a = loaded->parameters(), b = new_weights->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(a[i].name);
    CHECK(torch::equal(a[i].tensor, b[i].tensor));
  }
}

TEST_CASE("init_from: weight_map entries must be files of the checkpoint's directory", "[model][hf][safetensors]") {
  std::string root = test::scratch_dir("shard_init_weight_map");
  std::string dir = root + "/hf";
  auto model = test::tiny_model("llama", false, 31);
  test::write_sharded_hf(*model, dir);
  const std::string index = dir + "/model.safetensors.index.json";
  nlohmann::json original = nlohmann::json::parse(std::ifstream(index));
  const std::string tensor = original["weight_map"].begin().key();
  const std::string shard = original["weight_map"].begin().value();
  fs::copy_file(dir + "/" + shard, root + "/outside.safetensors", fs::copy_options::overwrite_existing);
  fs::remove(dir + "/link.safetensors");
  fs::create_symlink(root + "/outside.safetensors", dir + "/link.safetensors");
  for (const std::string &entry : {std::string("../outside.safetensors"), root + "/outside.safetensors",
                                   std::string("sub/../../outside.safetensors"), std::string("link.safetensors")}) {
    INFO(entry);
    nlohmann::json changed = original;
    changed["weight_map"][tensor] = entry;
    std::ofstream(index) << changed.dump();
    CHECK_THROWS_WITH(load_hf_checkpoint(*model, dir),
                      Catch::Contains(index + ": weight_map[\"" + tensor + "\"] = \"") &&
                          Catch::Contains("the index must name files of the checkpoint's directory"));
  }
  // A link to a file of the directory itself is fine.
  fs::remove(dir + "/link.safetensors");
  fs::create_symlink(shard, dir + "/link.safetensors");
  nlohmann::json linked = original;
  for (auto entry = linked["weight_map"].begin(); entry != linked["weight_map"].end(); ++entry)
    if (*entry == shard) *entry = "link.safetensors";
  std::ofstream(index) << linked.dump();
  CHECK_NOTHROW(load_hf_checkpoint(*model, dir));
}

TEST_CASE("init_from: a sharded model in the Hugging Face cache loads through its links to blobs/",
          "[model][hf][safetensors]") {
  // models--x/snapshots/<revision>/<file> -> ../../blobs/<hash>, as huggingface_hub lays out a download.
  const std::string root = test::scratch_dir("shard_init_hub_cache") + "/models--x";
  const std::string plain = root + "/plain", snapshot = root + "/snapshots/abc123";
  auto model = test::tiny_model("llama", false, 32);
  test::write_sharded_hf(*model, plain);
  fs::create_directories(root + "/blobs");
  fs::create_directories(snapshot);
  int n = 0;
  for (const auto &entry : fs::directory_iterator(plain)) {
    const std::string blob = "blob" + std::to_string(n++);
    fs::rename(entry.path(), root + "/blobs/" + blob);
    fs::create_symlink("../../blobs/" + blob, snapshot + "/" + entry.path().filename().string());
  }
  auto loaded = test::tiny_model("llama", false, 33);
  REQUIRE_NOTHROW(load_hf_checkpoint(*loaded, snapshot));
  for (size_t i = 0; i < model->parameters().size(); ++i)
    CHECK(torch::equal(loaded->parameters()[i].tensor, model->parameters()[i].tensor));
}
