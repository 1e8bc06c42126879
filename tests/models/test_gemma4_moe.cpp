// Gemma 4's experts (core/model/gemma4_moe.hpp) run as the other mixtures of experts run theirs: grouped
// GEMMs (at::_grouped_mm, which also runs on the CPU) give the loop's output and gradients; each expert's
// projection is a matrix of its own, whose columns ZenFlow selects, read from and exported to the 3-D
// tensors transformers stores (experts.gate_up_proj [E, 2I, H], experts.down_proj [E, H, I]).
#include "checkpoint/safetensors.hpp"
#include "config/config.hpp"
#include "model/gemma4_moe.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/zoo.hpp"
#include "params/flat_buffers.hpp"
#include "models/model_fixture.hpp"
#include "support/moe_layer.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

using namespace zf;

TEST_CASE("gemma4 moe: grouped GEMMs and the loop over experts give the same output and gradients", "[model][moe]") {
  torch::manual_seed(11);
  const int64_t h = 16, experts = 8, k = 2;
  const test::MoeLayer layer = test::random_moe_layer(experts, k, true, h, 24, 0.5, 0.3);
  auto leaf = [](torch::Tensor t) { return t.requires_grad_(); };
  Gemma4MoeWeights w;
  w.router_proj = layer.w.router;
  w.experts = layer.w;
  w.router_scale = leaf(1 + 0.3 * torch::randn({h}));
  w.per_expert_scale = leaf(1 + 0.3 * torch::randn({experts}));
  w.pre_norm = leaf(1 + 0.3 * torch::randn({h}));
  w.dense_out_norm = leaf(1 + 0.3 * torch::randn({h}));
  w.experts_out_norm = leaf(1 + 0.3 * torch::randn({h}));
  const torch::Tensor residual = torch::randn({3, 11, h}).requires_grad_(), dense = torch::randn({3, 11, h});
  const torch::Tensor seed = torch::randn({3, 11, h});
  std::vector<torch::Tensor> inputs = layer.all();
  inputs.insert(inputs.end(), {w.router_scale, w.per_expert_scale, w.pre_norm, w.experts_out_norm, residual});
  std::vector<torch::Tensor> outputs[2], grads[2];
  for (bool grouped : {false, true}) {
    torch::Tensor out = gemma4_moe(w, residual, dense, k, 1e-6, FusedKernels::off, grouped);
    outputs[grouped] = {out};
    grads[grouped] = torch::autograd::grad({out}, inputs, {seed});
  }
  CHECK((outputs[1][0] - outputs[0][0]).abs().max().item<double>() < 1e-5);
  for (size_t i = 0; i < inputs.size(); ++i) {
    INFO("tensor " << i);
    CHECK((grads[1][i] - grads[0][i]).abs().max().item<double>() < 1e-5);
  }
}

TEST_CASE("gemma4 moe: each expert's projection is a matrix ZenFlow selects columns of, read from and exported to "
          "transformers' 3-D tensors", "[model][moe][hf]") {
  const std::string fixture = test::source_dir() + "/tests/fixtures/families/gemma4_moe";
  const RunConfig config = RunConfig::parse("[model]\ninit_from = \"" + fixture + "\"\n", "gemma4_moe.toml");
  auto model = make_model(config);
  // Stored column by column, as ZenFlow's selection reads them: each a [out, in] matrix.
  FlatBuffers flat(model->parameters(), model->block_names(), true);
  int matrices = 0;
  for (uint32_t i = 0; i < flat.layout().segment_count; ++i) {
    const zf_segment &seg = flat.layout().segments[i];
    const std::string name = seg.name;
    if (name.find(".experts.") == std::string::npos) continue;
    INFO(name);
    CHECK((seg.flags & ZF_SEGMENT_MATRIX));
    CHECK((seg.flags & ZF_SEGMENT_COLUMN_CONTIGUOUS));
    const bool down = name.find("down_proj") != std::string::npos;
    CHECK(seg.rows == uint64_t(down ? 32 : 16));  // moe_intermediate_size 16, hidden 32
    CHECK(seg.cols == uint64_t(down ? 16 : 32));
    ++matrices;
  }
  CHECK(matrices == 2 * 4 * 3);  // 2 layers, 4 experts, gate, up and down
  // The export writes the 3-D tensors the checkpoint holds, each expert's matrices their slices.
  const std::string out = test::scratch_dir("gemma4_moe_fused_export");
  save_hf_checkpoint(*model, out);
  SafetensorsFile stored = SafetensorsFile::open(fixture + "/model.safetensors");
  SafetensorsFile exported = SafetensorsFile::open(out + "/model.safetensors");
  for (const char *layer : {"0", "1"}) {
    const std::string p = std::string("model.layers.") + layer + ".experts.";
    INFO(p);
    CHECK_FALSE(exported.has(p + "0.gate_proj.weight"));
    for (const char *which : {"gate_up_proj", "down_proj"})
      CHECK(torch::equal(exported.load(p + which), stored.load(p + which)));
  }
  auto again = make_model(RunConfig::parse("[model]\ninit_from = \"" + out + "\"\n", "gemma4_moe.toml"));
  const std::vector<ModelParameter> before = model->parameters(), after = again->parameters();
  REQUIRE(before.size() == after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    INFO(before[i].name);
    CHECK(torch::equal(before[i].tensor, after[i].tensor));
  }
}
