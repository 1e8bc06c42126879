// ZenFlow can choose among the token embedding's rows as among a weight's columns: the flat buffers
// describe the embedding [tokens, hidden], stored token by token, to selectors as a column-contiguous
// matrix of hidden x tokens, so a selector built against the SDK alone picks tokens. ZenFlow keeps
// the embedding whole on the device unless topk_ratio = "auto" finds it does not fit. The model keeps
// its [tokens, hidden] view; checkpoints keep the layout digest and the weights' mask they had
// before, so a ZenFlow checkpoint written then resumes with the embedding wholly on the device.
// Oracles: the gradient's own row norms, the layout of a model whose embedding is no table, and a
// re-derivation of what the device's compact copies hold.
#include "config/config.hpp"
#include "engine/training_checkpoint.hpp"
#include "models/model_fixture.hpp"
#include "params/flat_buffers.hpp"
#include "plugin/plugin_registry.hpp"
#include "plugin/plugin_set.hpp"
#include "update/update_plan.hpp"
#include "update/zenflow.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>

using namespace zf;

namespace {

RunConfig zenflow_config(const std::string &topk) {
  return RunConfig::parse(
      "[optimizer]\nplugin = \"cpu_adam\"\nthreads = 1\n[offload]\nplugin = \"cpu_optimizer\"\n"
      "[selector]\nplugin = \"topk_l2\"\n"
      "[zenflow]\ntopk_ratio = " + topk + "\nupdate_interval = 1\noverlap_step = false\n",
      "table_rows.toml");
}

// The tied (qwen2) or untied (llama) tiny model in flat buffers stored column by column, with the
// gradients of one batch in which some tokens come more often than others.
struct Trained {
  std::unique_ptr<Runtime> runtime = Runtime::single_cpu();  // first: its ledger outlives the buffers
  std::unique_ptr<TransformerModel> model;
  std::unique_ptr<FlatBuffers> flat;
  torch::Tensor embedding_before;
};
Trained one_backward(const std::string &type, bool tie) {
  Trained t;
  t.model = test::tiny_model(type, tie, 4);
  t.embedding_before = t.model->parameters()[0].tensor.detach().clone();
  t.flat = std::make_unique<FlatBuffers>(t.model->parameters(), t.model->block_names(), /*column_major=*/true);
  t.flat->materialize(t.flat->layout().numel, torch::kFloat32, t.runtime->memory);
  torch::manual_seed(9);
  torch::Tensor ids = torch::randint(61, {4, 16}, torch::kLong);
  ids.narrow(1, 0, 6).fill_(7);  // token 7 often, 11 less often: the largest rows of an untied model
  ids.narrow(1, 6, 3).fill_(11);
  Batch batch = test::next_token_batch(ids);
  t.model->loss(test::run_blocks(*t.model, batch), batch).backward();
  return t;
}

std::unique_ptr<UpdatePlan> zenflow_plan(Trained &t, PluginSet &plugins, const RunConfig &config) {
  const zf_layout &layout = t.flat->layout();
  auto plan = std::make_unique<UpdatePlan>(*t.runtime, plugins, layout, 0, layout.numel, torch::kFloat32,
                                           ZF_TIER_HOST, OptimizerSettings{1e-3, 0.9, 0.999, 1e-8, 0.01},
                                           ZenFlowOptions::read(config, 1000));
  plan->allocate(t.flat->params);
  return plan;
}

void one_step(UpdatePlan &plan, Trained &t, int64_t step) {
  plan.begin(step, 1e-3, t.flat->params, t.flat->grads, /*scale_known=*/true, 1.0f);
  plan.finish(1.0f, 1.0f, /*defer=*/false);
  plan.finish_step();
}

torch::Tensor named(const std::vector<std::pair<std::string, torch::Tensor>> &state, const std::string &name) {
  for (const auto &[n, tensor] : state)
    if (n == name) return tensor;
  return torch::Tensor();
}

uint64_t kept(double topk, uint64_t cols) {  // the selector's ceil, at least 1
  return std::clamp<uint64_t>(uint64_t(std::ceil(topk * double(cols) - 1e-9)), 1, cols);
}

// Elements the device's compact copies hold for a selection of topk of every MATRIX segment's
// columns (the embedding's tokens too, unless it is whole) and every other segment with its padding.
uint64_t device_elements(const zf_layout &layout, double topk, bool embedding_whole) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i) {
    const zf_segment &s = layout.segments[i];
    const uint64_t end = i + 1 < layout.segment_count ? layout.segments[i + 1].offset : layout.numel;
    if ((s.flags & ZF_SEGMENT_TRANSPOSED) && embedding_whole)
      total += s.numel;
    else if (s.flags & ZF_SEGMENT_MATRIX)
      total += kept(topk, s.cols) * s.rows;
    else
      total += end - s.offset;
  }
  return total;
}

}  // namespace

TEST_CASE("ZenFlow whose GPU cannot hold the embedding selects whole token rows of it, those of the largest gradients",
          "[zenflow]") {
  auto [type, tie] = GENERATE(std::make_pair("qwen2", true), std::make_pair("llama", false));
  INFO(type << (tie ? ", tied embeddings" : ""));
  Trained t = one_backward(type, tie);
  const zf_layout &layout = t.flat->layout();
  const zf_segment &embedding = layout.segments[0];
  const std::vector<ModelParameter> parameters = t.model->parameters();
  const ModelParameter &table = parameters[0];
  REQUIRE(table.name == "model.embed_tokens.weight");

  // Selectors see hidden x tokens, a column per token, each token's 32 values one run; the model
  // still sees [tokens, hidden] with the values it had.
  CHECK(embedding.rows == 32);
  CHECK(embedding.cols == 61);
  CHECK(embedding.flags == (ZF_SEGMENT_MATRIX | ZF_SEGMENT_COLUMN_CONTIGUOUS | ZF_SEGMENT_TRANSPOSED));
  CHECK(table.tensor.sizes() == torch::IntArrayRef({61, 32}));
  CHECK(torch::equal(table.tensor.detach(), t.embedding_before));
  CHECK(torch::equal(t.flat->params.narrow(0, int64_t(embedding.offset), 61 * 32).view({61, 32}), t.embedding_before));
  const torch::Tensor grad = table.tensor.grad();
  REQUIRE(grad.data_ptr<float>() == t.flat->grads.data_ptr<float>() + embedding.offset);  // a view of the flat gradients

  RunConfig config = zenflow_config("\"auto\"");
  PluginRegistry registry{{PluginRegistry::builtin_dir()}};
  PluginSet plugins(config, *t.runtime, registry);
  std::unique_ptr<UpdatePlan> plan = zenflow_plan(t, plugins, config);
  // A device that holds the 1-D parameters and half the embedding's elements beside the buffers
  // (24 bytes an element: fp32 master, two fp32 moments, index, gradient; a tenth kept free).
  uint64_t matrix = 0;
  for (uint32_t i = 0; i < layout.segment_count; ++i)
    if (layout.segments[i].flags & ZF_SEGMENT_MATRIX) matrix += layout.segments[i].numel;
  const uint64_t fits = (layout.numel - matrix) + embedding.numel / 2;
  t.runtime->device_memory_limit = (t.runtime->memory.peak(ZF_TIER_HOST) + fits * 24) * 10 / 9 + 10;
  one_step(*plan, t, 1);
  REQUIRE(plan->events().find("select") != std::string::npos);
  const auto state = plan->state_tensors();
  const double topk = named(state, "zenflow.topk_ratio").item<double>();
  CHECK(topk == Approx(double(embedding.numel / 2) / double(matrix)).epsilon(0.01));
  const uint64_t keep = kept(topk, 61);
  REQUIRE(keep >= 2);
  REQUIRE(keep < 61);

  // The oracle: the tokens whose gradient rows have the largest squared L2 norm.
  const torch::Tensor norms = grad.pow(2).sum(1).to(torch::kFloat64);
  std::vector<int64_t> order(61);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return norms[a].item<double>() > norms[b].item<double>(); });
  REQUIRE(norms[order[keep - 1]].item<double>() > norms[order[keep]].item<double>());  // no tie at the cut
  const std::set<int64_t> expected(order.begin(), order.begin() + int64_t(keep));
  if (!tie) CHECK(expected.count(7) == 1);

  const torch::Tensor tokens = named(state, "zenflow.table_mask");
  REQUIRE(tokens.defined());
  REQUIRE(tokens.numel() == 61);
  std::set<int64_t> chosen;
  for (int64_t i = 0; i < 61; ++i)
    if (tokens[i].item<uint8_t>()) chosen.insert(i);
  CHECK(chosen == expected);

  // The device's compact master holds those token rows of the embedding, not all 61.
  const uint64_t held = t.runtime->memory.current_by_tag(ZF_TIER_HOST).at("zenflow.master") / 4;
  CHECK(held == device_elements(layout, topk, /*embedding_whole=*/false));
  CHECK(held <= layout.numel - (61 - keep) * 32);
}

TEST_CASE("ZenFlow keeps the embedding whole where it fits, and a checkpoint from before it had rows to choose resumes",
          "[zenflow]") {
  Trained t = one_backward("qwen2", true);
  const zf_layout &layout = t.flat->layout();

  // The layout digest and the weights' mask are those of a model whose embedding is no table.
  std::vector<ModelParameter> before = t.model->parameters();
  for (ModelParameter &p : before) p.table = false;
  FlatBuffers old_flat(before, t.model->block_names(), /*column_major=*/true);
  CHECK(old_flat.layout().segments[0].flags == 0u);
  CHECK(layout_digest(layout) == layout_digest(old_flat.layout()));
  uint32_t old_columns = 0;
  for (uint32_t i = 0; i < old_flat.layout().segment_count; ++i)
    if (old_flat.layout().segments[i].flags & ZF_SEGMENT_MATRIX) old_columns += uint32_t(old_flat.layout().segments[i].cols);

  // A fixed topk_ratio: the weights' top columns, the embedding whole (as before it had rows to choose).
  RunConfig config = zenflow_config("0.1");
  PluginRegistry registry{{PluginRegistry::builtin_dir()}};
  PluginSet plugins(config, *t.runtime, registry);
  std::map<std::string, torch::Tensor> written;
  {
    std::unique_ptr<UpdatePlan> plan = zenflow_plan(t, plugins, config);
    one_step(*plan, t, 1);
    for (const auto &[name, tensor] : plan->state_tensors()) written[name] = tensor.clone();
    CHECK(t.runtime->memory.current_by_tag(ZF_TIER_HOST).at("zenflow.master") / 4 ==
          device_elements(layout, 0.1, /*embedding_whole=*/true));
  }
  CHECK(written.at("zenflow.table_mask").all().item<bool>());
  CHECK(written.at("zenflow.mask").numel() == int64_t(old_columns));
  CHECK(written.at("zenflow.mask").sum().item<int64_t>() > 0);

  // An older checkpoint: the same tensors without the tables' part, which is optional.
  std::unique_ptr<UpdatePlan> resumed = zenflow_plan(t, plugins, config);
  const std::vector<std::string> optional = resumed->optional_state();
  CHECK(std::find(optional.begin(), optional.end(), "zenflow.table_mask") != optional.end());
  for (auto &[name, tensor] : resumed->state_tensors())
    if (name != "zenflow.table_mask") tensor.copy_(written.at(name));
  resumed->restore(t.flat->params);
  // The device holds the whole embedding again, as the run that wrote the checkpoint did.
  const uint64_t held = t.runtime->memory.current_by_tag(ZF_TIER_HOST).at("zenflow.master") / 4;
  CHECK(held == device_elements(layout, 0.1, /*embedding_whole=*/true));
  one_step(*resumed, t, 2);  // and trains on
  CHECK(resumed->events().find("gpu") != std::string::npos);
}
