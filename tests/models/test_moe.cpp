// The mixture-of-experts MLP (core/model/moe.hpp) against a reference that routes token by token:
// the grouped-GEMM path (at::_grouped_mm, which also runs on the CPU) and the loop over experts give
// the reference's output and gradients; an expert that receives no token gets a zero gradient, not
// none (cpu_optimizer then updates it as AdamW updates a zero gradient); activation checkpointing,
// which runs each layer twice, gives the same loss and gradients, the load-balancing loss included;
// Qwen3.5-MoE's experts, held one matrix each, export as the fused 3-D tensors its checkpoints hold.
#include "checkpoint/safetensors.hpp"
#include "config/config.hpp"
#include "model/hf_checkpoint.hpp"
#include "model/moe.hpp"
#include "model/zoo.hpp"
#include "runtime/input.hpp"
#include "models/model_fixture.hpp"
#include "support/moe_layer.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace zf;

namespace {

using Experts = test::MoeLayer;

Experts random_experts(int64_t experts, int64_t k, bool norm, int64_t h, int64_t inner) {
  return test::random_moe_layer(experts, k, norm, h, inner, 0.5, 0.3);
}

// Token by token: softmax, top k, each chosen expert's SwiGLU weighted by its (renormalised) probability.
torch::Tensor reference(const Experts &x, const torch::Tensor &input) {
  torch::Tensor tokens = input.reshape({-1, input.size(-1)});
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < tokens.size(0); ++t) {
    torch::Tensor token = tokens[t];
    torch::Tensor probs = torch::softmax(torch::mv(x.w.router, token), 0);
    auto [values, picks] = probs.topk(x.spec.top_k);
    if (x.spec.norm_topk) values = values / values.sum();
    torch::Tensor sum = torch::zeros_like(token);
    for (int64_t j = 0; j < x.spec.top_k; ++j) {
      const int64_t e = picks[j].item<int64_t>();
      torch::Tensor hidden = torch::silu(torch::mv(x.w.gate[e], token)) * torch::mv(x.w.up[e], token);
      sum = sum + values[j] * torch::mv(x.w.down[e], hidden);
    }
    rows.push_back(sum);
  }
  return torch::stack(rows).view(input.sizes());
}

std::vector<torch::Tensor> gradients(const Experts &x, const torch::Tensor &input, const torch::Tensor &output,
                                     const torch::Tensor &seed) {
  std::vector<torch::Tensor> inputs = x.all();
  inputs.push_back(input);
  return torch::autograd::grad({output}, inputs, {seed}, /*retain_graph=*/false, /*create_graph=*/false,
                               /*allow_unused=*/true);
}

}  // namespace

TEST_CASE("moe: grouped GEMMs and the loop over experts compute the token-by-token reference, forward and backward",
          "[model][moe]") {
  const bool norm = GENERATE(false, true);
  INFO("norm_topk_prob " << norm);
  torch::manual_seed(7);
  Experts x = random_experts(8, 2, norm, 16, 24);
  torch::Tensor input = torch::randn({3, 11, 16}).requires_grad_();
  torch::Tensor seed = torch::randn({3, 11, 16});
  torch::Tensor want = reference(x, input);
  std::vector<torch::Tensor> want_grads = gradients(x, input, want, seed);
  for (bool grouped : {false, true}) {
    INFO("grouped " << grouped);
    torch::Tensor got = moe_mlp(x.spec, x.w, input, nullptr, 0, grouped);
    CHECK((got - want).abs().max().item<double>() < 1e-5);
    std::vector<torch::Tensor> got_grads = gradients(x, input, got, seed);
    for (size_t i = 0; i < want_grads.size(); ++i) {
      INFO("tensor " << i);
      REQUIRE(got_grads[i].defined());
      const torch::Tensor want_grad = want_grads[i].defined() ? want_grads[i] : torch::zeros_like(got_grads[i]);
      CHECK((got_grads[i] - want_grad).abs().max().item<double>() < 1e-5);
    }
  }
}

TEST_CASE("moe: an expert that receives no token gets a zero gradient", "[model][moe]") {
  torch::manual_seed(8);
  Experts x = random_experts(4, 2, true, 8, 8);
  {
    torch::NoGradGuard no_grad;
    x.w.router[3].fill_(0);
    x.w.router.narrow(0, 0, 3).abs_();
  }
  // Positive: expert 3's logit (0) is always the smallest.
  torch::Tensor input = (torch::rand({2, 5, 8}) + 0.1).requires_grad_();
  for (bool grouped : {false, true}) {
    torch::Tensor output = moe_mlp(x.spec, x.w, input, nullptr, 0, grouped);
    std::vector<torch::Tensor> grads = gradients(x, input, output, torch::ones({2, 5, 8}));
    for (size_t i = 1 + 3 * 3; i < 1 + 3 * 4; ++i) {  // expert 3's gate, up and down
      REQUIRE(grads[i].defined());
      CHECK(grads[i].abs().max().item<double>() == 0);
    }
    CHECK(grads[1].abs().max().item<double>() > 0);  // expert 0's gate
  }
}

TEST_CASE("moe: activation checkpointing keeps the loss and gradients, load-balancing loss included", "[model][moe]") {
  const std::string dir = test::source_dir() + "/tests/fixtures/families/qwen3_moe";
  SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  Batch batch = test::next_token_batch(expected.load("input_ids"));
  std::vector<std::vector<torch::Tensor>> grads;
  std::vector<double> losses, aux;
  for (const char *checkpointing : {"false", "true"}) {
    auto model = make_model(RunConfig::parse(
        "[model]\ninit_from = \"" + dir + "\"\nactivation_checkpointing = " + checkpointing + "\n", "moe.toml"));
    torch::Tensor loss = model->loss(test::run_blocks(*model, batch), batch);
    loss.backward();
    losses.push_back(loss.item<double>());
    aux.push_back(model->aux_loss());
    grads.emplace_back();
    for (const ModelParameter &p : model->parameters()) grads.back().push_back(p.tensor.grad().clone());
  }
  CHECK(losses[0] == Approx(expected.load("loss").item<double>()).epsilon(1e-5));
  CHECK(losses[1] == losses[0]);
  CHECK(aux[1] == aux[0]);
  for (size_t i = 0; i < grads[0].size(); ++i) {
    INFO("parameter " << i);
    CHECK((grads[1][i] - grads[0][i]).abs().max().item<double>() <= 1e-6 * (1 + grads[0][i].abs().max().item<double>()));
  }
}

TEST_CASE("moe: the presets count the parameters transformers builds, and the top k experts as active", "[model][moe]") {
  // transformers 5.23.0's model of each published config.json, counted on the meta device; active: less the
  // experts a token does not use, (experts - k) x 3 x hidden x expert width in each layer.
  CHECK(preset_parameter_count("qwen3-30b-a3b") == 30532122624ull);
  CHECK(find_preset("qwen3-30b-a3b")->active_parameter_count() == 30532122624ull - 48ull * 120 * 3 * 2048 * 768);
  CHECK(preset_parameter_count("olmoe-1b-7b") == 6919161856ull);
  CHECK(find_preset("olmoe-1b-7b")->active_parameter_count() == 6919161856ull - 16ull * 56 * 3 * 2048 * 1024);
  CHECK(preset_parameter_count("mixtral-8x7b") == 46702792704ull);
  CHECK(find_preset("mixtral-8x7b")->active_parameter_count() == 46702792704ull - 32ull * 6 * 3 * 4096 * 14336);
  CHECK(find_preset("qwen3-8b")->active_parameter_count() == preset_parameter_count("qwen3-8b"));
  // Qwen3.5-35B-A3B's language model (Qwen3_5MoeForCausalLM): its shared expert and gate are active for every token.
  CHECK(preset_parameter_count("qwen3.5-35b-a3b") == 34660610688ull);
  CHECK(find_preset("qwen3.5-35b-a3b")->active_parameter_count() == 34660610688ull - 40ull * 248 * 3 * 2048 * 512);
}

TEST_CASE("moe: the load-balancing loss joins the loss only when config.json asks for it, and is reported either way",
          "[model][moe]") {
  const std::string fixture = test::source_dir() + "/tests/fixtures/families/qwen3_moe";
  const std::string quiet = test::scratch_dir("moe_no_router_logits");
  std::filesystem::copy_file(fixture + "/model.safetensors", quiet + "/model.safetensors",
                             std::filesystem::copy_options::overwrite_existing);
  nlohmann::json config = read_json_file(fixture + "/config.json", 1 << 20);
  REQUIRE(config["output_router_logits"] == true);
  config["output_router_logits"] = false;
  std::ofstream(quiet + "/config.json") << config.dump();
  SafetensorsFile expected = SafetensorsFile::open(fixture + "/expected.safetensors");
  Batch batch = test::next_token_batch(expected.load("input_ids"));
  std::vector<double> losses, aux;
  for (const std::string &dir : {fixture, quiet}) {
    auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\n", "moe.toml"));
    losses.push_back(model->loss(test::run_blocks(*model, batch), batch).item<double>());
    aux.push_back(model->aux_loss());
  }
  CHECK(aux[1] == aux[0]);
  CHECK(aux[0] == Approx(expected.load("aux_loss").item<double>()).epsilon(1e-5));
  CHECK(losses[0] - losses[1] == Approx(config["router_aux_loss_coef"].get<double>() * aux[0]).epsilon(1e-5));
}

TEST_CASE("moe: Qwen3.5-MoE exports its experts fused, each expert's matrices its slices, and reads them back",
          "[model][moe][hf]") {
  // The fixture holds its experts one by one, as transformers' save_pretrained writes them.
  const std::string fixture = test::source_dir() + "/tests/fixtures/families/qwen3_5_moe";
  auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + fixture + "\"\n", "moe.toml"));
  const std::string out = test::scratch_dir("qwen3_5_moe_fused_export");
  save_hf_checkpoint(*model, out);
  SafetensorsFile stored = SafetensorsFile::open(fixture + "/model.safetensors");
  SafetensorsFile exported = SafetensorsFile::open(out + "/model.safetensors");
  for (const char *layer : {"0", "1"}) {
    const std::string p = std::string("model.layers.") + layer + ".mlp.experts.";
    INFO(p);
    CHECK_FALSE(exported.has(p + "0.gate_proj.weight"));
    const torch::Tensor gate_up = exported.load(p + "gate_up_proj"), down = exported.load(p + "down_proj");
    REQUIRE(gate_up.sizes() == torch::IntArrayRef({8, 32, 32}));  // [experts, 2 x width, hidden]
    REQUIRE(down.sizes() == torch::IntArrayRef({8, 32, 16}));     // [experts, hidden, width]
    for (int64_t e = 0; e < 8; ++e) {
      const std::string expert = p + std::to_string(e);
      CHECK(torch::equal(gate_up[e].narrow(0, 0, 16), stored.load(expert + ".gate_proj.weight")));
      CHECK(torch::equal(gate_up[e].narrow(0, 16, 16), stored.load(expert + ".up_proj.weight")));
      CHECK(torch::equal(down[e], stored.load(expert + ".down_proj.weight")));
    }
  }
  auto again = make_model(RunConfig::parse("[model]\ninit_from = \"" + out + "\"\n", "moe.toml"));
  const std::vector<ModelParameter> before = model->parameters(), after = again->parameters();
  REQUIRE(before.size() == after.size());
  for (size_t i = 0; i < before.size(); ++i) {
    INFO(before[i].name);
    CHECK(torch::equal(before[i].tensor, after[i].tensor));
  }
  // A fused tensor of another shape is refused, naming it and both shapes.
  const std::string bad = test::scratch_dir("qwen3_5_moe_fused_bad_shape");
  std::filesystem::copy_file(out + "/config.json", bad + "/config.json", std::filesystem::copy_options::overwrite_existing);
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const std::string &name : exported.names()) {
    torch::Tensor t = exported.load(name);
    tensors.emplace_back(name, name == "model.layers.1.mlp.experts.down_proj" ? t.narrow(0, 0, 7).contiguous() : t);
  }
  write_safetensors(bad + "/model.safetensors", tensors, {{"format", "pt"}});
  CHECK_THROWS_WITH(make_model(RunConfig::parse("[model]\ninit_from = \"" + bad + "\"\n", "moe.toml")),
                    Catch::Contains("model.layers.1.mlp.experts.down_proj") && Catch::Contains("[7, 32, 16]") &&
                        Catch::Contains("[8, 32, 16]"));
}
