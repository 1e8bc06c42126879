// The zoo transformers (GPT-2, Llama, Qwen2) as the engine drives them: block structure and
// parameter flags, causal attention, the loss, training through the engine's column-major flat
// buffers (with and without activation checkpointing) and the parameter counts of the presets.
#include "params/flat_buffers.hpp"
#include "model/zoo.hpp"
#include "models/model_fixture.hpp"
#include "runtime/memory.hpp"

#include <catch2/catch.hpp>

using namespace zf;
using test::next_token_batch;
using test::run_blocks;
using test::tiny_model;

namespace {

torch::Tensor random_ids(int64_t batch, int64_t length, int64_t vocab, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(vocab, {batch, length}, torch::kLong);
}

}  // namespace

TEST_CASE("model: blocks are embeddings, one per layer, then head, with each parameter listed once and flagged", "[model]") {
  auto [type, tie] = GENERATE(std::make_pair("gpt2", true), std::make_pair("gpt2", false),
                              std::make_pair("llama", false), std::make_pair("llama", true),
                              std::make_pair("qwen2", true), std::make_pair("qwen2", false));
  INFO(type << " tie=" << tie);
  auto model = tiny_model(type, tie);
  CHECK(model->name() == type);
  std::vector<std::string> blocks = model->block_names();
  REQUIRE(blocks.size() == 4);
  CHECK(blocks.front() == "embeddings");
  CHECK(blocks.back() == "head");

  std::vector<ModelParameter> params = model->parameters();
  uint64_t numel = 0;
  std::set<const void *> seen;
  uint32_t previous_block = 0;
  bool has_lm_head = false;
  for (const ModelParameter &p : params) {
    INFO(p.name);
    CHECK(seen.insert(p.tensor.unsafeGetTensorImpl()).second);  // each tensor once
    CHECK(p.block >= previous_block);
    previous_block = p.block;
    numel += uint64_t(p.tensor.numel());
    bool embedding = p.name.find("wte") != std::string::npos || p.name.find("wpe") != std::string::npos ||
                     p.name.find("embed_tokens") != std::string::npos;
    bool one_d = p.tensor.dim() == 1;
    CHECK(p.matrix == (!embedding && !one_d));
    CHECK(p.no_decay == one_d);
    if (embedding) CHECK(p.block == 0);
    has_lm_head = has_lm_head || p.name == "lm_head.weight";
    CHECK(p.tensor.requires_grad());
  }
  CHECK(has_lm_head == !tie);
  CHECK(numel == model->shape().parameter_count());
  CHECK(params.back().block == 3);
}

TEST_CASE("model: logits are B x T x vocab and position t sees only tokens up to t", "[model]") {
  std::string type = GENERATE("gpt2", "llama", "qwen2");
  INFO(type);
  auto model = tiny_model(type, true);
  model->train(false);
  torch::NoGradGuard no_grad;
  torch::Tensor ids = random_ids(2, 12, 61, 3);
  torch::Tensor logits = run_blocks(*model, next_token_batch(ids));
  CHECK(logits.sizes() == torch::IntArrayRef({2, 12, 61}));
  CHECK(logits.scalar_type() == torch::kFloat32);

  torch::Tensor changed = ids.clone();
  changed.index_put_({torch::indexing::Slice(), 8}, (ids.index({torch::indexing::Slice(), 8}) + 1) % 61);
  torch::Tensor other = run_blocks(*model, next_token_batch(changed));
  CHECK(torch::equal(logits.narrow(1, 0, 8), other.narrow(1, 0, 8)));  // the past does not see the future
  CHECK_FALSE(torch::allclose(logits.narrow(1, 8, 4), other.narrow(1, 8, 4)));
}

TEST_CASE("model: the loss is the mean cross-entropy over positions whose target is not -100", "[model]") {
  auto model = tiny_model("llama", false);
  torch::Tensor ids = random_ids(2, 10, 61, 5);
  Batch batch = next_token_batch(ids);
  batch.targets.index_put_({0, torch::indexing::Slice(0, 4)}, kIgnoreIndex);  // an instruction prompt
  torch::Tensor logits = run_blocks(*model, batch);
  double loss = model->loss(logits, batch).item<double>();

  torch::Tensor logp = torch::log_softmax(logits.to(torch::kDouble), -1);
  double sum = 0;
  int counted = 0;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 10; ++t) {
      int64_t target = batch.targets[b][t].item<int64_t>();
      if (target == kIgnoreIndex) continue;
      sum -= logp[b][t][target].item<double>();
      ++counted;
    }
  CHECK(counted == 2 * 9 - 4);
  CHECK(loss == Approx(sum / counted).epsilon(1e-6));

  batch.targets.fill_(kIgnoreIndex);  // nothing counts: 0, not NaN, so one such micro-batch is harmless
  torch::Tensor nothing = model->loss(logits, batch);
  CHECK(nothing.item<double>() == 0.0);
  nothing.backward();
}

TEST_CASE("model: training through column-major flat buffers matches plain parameters", "[model]") {
  std::string type = GENERATE("gpt2", "llama", "qwen2");
  // Checkpointing off, on for every layer, and on for the first of the two only.
  int checkpointed = GENERATE(-1, 0, 1);
  INFO(type << " activation_checkpointing=" << (checkpointed >= 0) << " checkpoint_layers=" << checkpointed);
  torch::manual_seed(11);
  TransformerOptions options = test::tiny_options(type, true);
  auto reference = make_transformer(options);
  torch::manual_seed(11);
  options.activation_checkpointing = checkpointed >= 0;
  options.checkpoint_layers = std::max(checkpointed, 0);
  auto engine_model = make_transformer(options);

  // What the engine does: lay the parameters into flat buffers, 2-D weights column by column.
  MemoryLedger ledger;
  FlatBuffers flat(engine_model->parameters(), engine_model->block_names(), /*column_major=*/true);
  flat.materialize(flat.layout().numel, torch::kFloat32, ledger);
  bool any_transposed = false;
  for (const ModelParameter &p : engine_model->parameters())
    any_transposed = any_transposed || (p.tensor.dim() == 2 && !p.tensor.is_contiguous());
  REQUIRE(any_transposed);

  Batch batch = next_token_batch(random_ids(2, 9, 61, 13));
  torch::Tensor expected = reference->loss(run_blocks(*reference, batch), batch);
  expected.backward();
  torch::Tensor loss = engine_model->loss(run_blocks(*engine_model, batch), batch);
  loss.backward();
  CHECK(loss.item<double>() == Approx(expected.item<double>()).epsilon(1e-6));

  std::vector<ModelParameter> mine = engine_model->parameters(), theirs = reference->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    INFO(mine[i].name);
    // The gradient landed in the flat gradient buffer (the .grad the engine pointed at it).
    REQUIRE(mine[i].tensor.grad().defined());
    const float *grad = mine[i].tensor.grad().data_ptr<float>(), *begin = flat.grads.data_ptr<float>();
    CHECK((grad >= begin && grad < begin + flat.grads.numel()));
    CHECK(torch::allclose(mine[i].tensor.grad(), theirs[i].tensor.grad(), 1e-5, 1e-6));
  }
}

TEST_CASE("model: bfloat16 models start from the float32 values and compute nearby losses", "[model]") {
  std::string type = GENERATE("gpt2", "qwen2");
  auto wide = tiny_model(type, true, 21, "float32");
  auto narrow = tiny_model(type, true, 21, "bfloat16");
  auto a = wide->parameters(), b = narrow->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    CHECK(b[i].tensor.scalar_type() == torch::kBFloat16);
    CHECK(torch::equal(a[i].tensor.detach().to(torch::kBFloat16), b[i].tensor.detach()));
  }
  Batch batch = next_token_batch(random_ids(2, 8, 61, 4));
  torch::Tensor logits = run_blocks(*narrow, batch);
  CHECK(logits.scalar_type() == torch::kBFloat16);
  torch::Tensor loss = narrow->loss(logits, batch);
  CHECK(loss.scalar_type() == torch::kFloat32);
  CHECK(loss.item<double>() == Approx(wide->loss(run_blocks(*wide, batch), batch).item<double>()).epsilon(0.02));
  loss.backward();
}

TEST_CASE("model: dropout acts only while training", "[model]") {
  std::string type = GENERATE("gpt2", "llama");
  torch::manual_seed(2);
  TransformerOptions options = test::tiny_options(type, true);
  options.dropout = 0.3;
  auto model = make_transformer(options);
  Batch batch = next_token_batch(random_ids(2, 8, 61, 9));
  torch::NoGradGuard no_grad;
  CHECK_FALSE(torch::equal(run_blocks(*model, batch), run_blocks(*model, batch)));
  model->train(false);
  CHECK(torch::equal(run_blocks(*model, batch), run_blocks(*model, batch)));
}

TEST_CASE("model: GPT-2 refuses sequences longer than its position table, and ids outside the vocabulary", "[model]") {
  auto model = tiny_model("gpt2", true);
  CHECK_THROWS_WITH(run_blocks(*model, next_token_batch(random_ids(1, 17, 61, 1))),
                    Catch::Contains("model.max_seq = 16") && Catch::Contains("data.seq_len to at most 16"));
  // A checkpoint's config.json fixes the table: only data.seq_len can change.
  TransformerOptions from_checkpoint = test::tiny_options("gpt2", true);
  from_checkpoint.init_from = "checkpoint";
  CHECK_THROWS_WITH(run_blocks(*make_transformer(from_checkpoint), next_token_batch(random_ids(1, 17, 61, 1))),
                    Catch::Contains("n_positions in model.init_from's config.json = 16") &&
                        Catch::Contains("data.seq_len to at most 16") && !Catch::Contains("raise model.max_seq"));
  torch::Tensor ids = random_ids(1, 4, 61, 1);
  ids[0][2] = 61;
  CHECK_THROWS_WITH(run_blocks(*model, next_token_batch(ids)), Catch::Contains("model.vocab = 61"));
}

TEST_CASE("model: preset parameter counts match the published counts", "[model]") {
  CHECK(preset_parameter_count("gpt2") == 124439808ull);
  CHECK(preset_parameter_count("gpt2-medium") == 354823168ull);
  CHECK(preset_parameter_count("qwen2.5-0.5b") == 494032768ull);
  CHECK(preset_parameter_count("qwen2.5-1.5b") == 1543714304ull);
  CHECK(preset_parameter_count("qwen2-1.5b") == 1543714304ull);
  CHECK(preset_parameter_count("llama2-7b") == 6738415616ull);
  CHECK(preset_parameter_count("llama2-13b") == 13015864320ull);
  // The models people offload for, as their published safetensors count them (14.8B, 32.8B, 69.0B).
  CHECK(preset_parameter_count("qwen2.5-14b") == 14770033664ull);
  CHECK(preset_parameter_count("qwen2.5-32b") == 32763876352ull);
  CHECK(preset_parameter_count("llama2-70b") == 68976648192ull);
  // What the count does not see: the published config.json's norm epsilon, RoPE base and context.
  for (const char *name : {"qwen2.5-14b", "qwen2.5-32b"}) {
    const TransformerShape shape = *find_preset(name);
    CHECK(shape.norm_eps == 1e-5);  // 1e-6 up to Qwen2.5-7B, 1e-5 from 14B
    CHECK(shape.rope_theta == 1e6);
    CHECK(shape.max_seq == 131072);
    CHECK(shape.qkv_bias);
    CHECK(!shape.tie_embeddings);
  }
  const TransformerShape llama70 = *find_preset("llama2-70b");
  CHECK(llama70.kv_heads == 8);
  CHECK(llama70.rope_theta == 1e4);
  CHECK(llama70.max_seq == 4096);
  CHECK_THROWS_WITH(preset_parameter_count("gpt3"), Catch::Contains("gpt3"));
  for (const std::string &name : preset_names()) {
    INFO(name);
    CHECK_NOTHROW(find_preset(name)->validate(name));
  }
}

TEST_CASE("model: the model table of the config resolves presets, family defaults and explicit keys", "[model][config]") {
  auto options = [](const std::string &model_table) {
    return transformer_options(RunConfig::parse("[model]\n" + model_table, "m.toml"));
  };
  TransformerOptions gpt2 = options("preset = \"gpt2\"\n");
  CHECK(gpt2.shape == *find_preset("gpt2"));
  TransformerOptions smaller = options("preset = \"qwen2.5-0.5b\"\nlayers = 2\nmax_seq = 128\n");
  CHECK(smaller.shape.type == "qwen2");
  CHECK(smaller.shape.layers == 2);
  CHECK(smaller.shape.max_seq == 128);
  CHECK(smaller.shape.hidden == 896);
  CHECK(smaller.shape.tie_embeddings);

  TransformerOptions bare = options("type = \"llama\"\nhidden = 128\nlayers = 3\n");
  CHECK(bare.shape.heads == 2);
  CHECK(bare.shape.kv_heads == 2);
  CHECK(bare.shape.intermediate == 512);  // 8/3 * 128 rounded up to 256
  CHECK(bare.shape.vocab == 32000);
  CHECK(bare.shape.rope_theta == 1e4);
  CHECK_FALSE(bare.shape.tie_embeddings);
  CHECK_FALSE(bare.shape.qkv_bias);

  CHECK_THROWS_WITH(options("preset = \"qwen2.5-1.5\"\n"),
                    Catch::Contains("m.toml:2:10") && Catch::Contains("did you mean 'qwen2.5-1.5b'"));
  CHECK_THROWS_WITH(options("type = \"llama\"\npreset = \"gpt2\"\n"), Catch::Contains("m.toml:2:8"));
  CHECK_THROWS_WITH(options("type = \"llama\"\nqkv_bias = true\n"), Catch::Contains("qwen2"));
  CHECK_THROWS_WITH(options("type = \"gpt2\"\nhidden = 96\nheads = 5\n"), Catch::Contains("divisible"));
  CHECK_THROWS_WITH(options("type = \"gpt2\"\ndropout = 0.1\nactivation_checkpointing = true\n"),
                    Catch::Contains("m.toml:4:28"));
  CHECK(options("type = \"llama\"\nlayers = 3\nactivation_checkpointing = true\ncheckpoint_layers = 2\n")
            .checkpoint_layers == 2);
  CHECK_THROWS_WITH(options("type = \"llama\"\nlayers = 3\ncheckpoint_layers = 2\n"),
                    Catch::Contains("m.toml:4:21") && Catch::Contains("activation_checkpointing = true"));
  CHECK_THROWS_WITH(options("type = \"llama\"\nlayers = 3\nactivation_checkpointing = true\ncheckpoint_layers = 4\n"),
                    Catch::Contains("m.toml:5:21") && Catch::Contains("has 3 layers"));

  RunConfig config = RunConfig::parse("[model]\npreset = \"gpt2\"\nlayers = 1\nvocab = 100\nmax_seq = 8\n", "m.toml");
  auto model = make_model(config);  // type comes from the preset
  CHECK(model->name() == "gpt2");
  CHECK(model->block_names().size() == 3);
}
