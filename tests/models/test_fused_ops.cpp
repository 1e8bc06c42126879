// The fused step's autograd functions on the CPU (model.fused = "always": the kernels' host loops,
// core/model/fused_kernels_host.cpp), so that every build's tests run the plumbing a GPU run takes:
// each function against the plain formulas (tests/models/fused_checks.hpp), forward and backward, in
// float32 and bf16; a family fixture's loss and every gradient with the fused layers and loss equal
// to the unfused model's within rounding and to transformers'; and model.fused = true (the default)
// keeps the CPU on libtorch's ops.
#include "config/config.hpp"
#include "model/zoo.hpp"
#include "models/fused_checks.hpp"
#include "models/model_fixture.hpp"
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <set>

using namespace zf;

TEST_CASE("fused ops on the CPU: RMSNorm with and without the residual add, each weight mode, equals the plain "
          "formulas forward and backward", "[model][fused]") {
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const NormWeight mode = GENERATE(NormWeight::cast_then_scale, NormWeight::scale_then_cast, NormWeight::one_plus);
  INFO("dtype " << c10::toString(dtype) << ", mode " << int(mode));
  test::check_fused_norms(torch::kCPU, dtype, mode, FusedKernels::always);
}

TEST_CASE("fused ops on the CPU: SwiGLU and GeGLU, also on the halves of one projection, equal the plain formulas",
          "[model][fused]") {
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  INFO("dtype " << c10::toString(dtype));
  test::check_fused_glu(torch::kCPU, dtype, FusedKernels::always);
}

TEST_CASE("fused ops on the CPU: RoPE over whole and partial heads equals transformers' rotate_half formula",
          "[model][fused]") {
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  INFO("dtype " << c10::toString(dtype));
  test::check_fused_rope(torch::kCPU, dtype, FusedKernels::always);
}

TEST_CASE("fused loss on the CPU with its kernel: bf16 within bf16 rounding of the whole logits' loss and "
          "gradients, float32 to its rounding", "[model][fused]") {
  const torch::Dtype dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const double softcap = GENERATE(0.0, 30.0);
  INFO("dtype " << c10::toString(dtype) << ", softcap " << softcap);
  test::check_fused_loss(torch::kCPU, dtype, softcap, FusedKernels::always, 300, 5003);
}

TEST_CASE("fused ops: model.fused = true (the default) leaves a CPU run on libtorch's ops, false everywhere",
          "[model][fused]") {
  torch::Tensor x = torch::randn({4, 16}).requires_grad_(true), w = torch::ones({16}).requires_grad_(true);
  for (FusedKernels fused : {FusedKernels::gpu, FusedKernels::off}) {
    const std::string node = rms_norm(x, w, NormWeight::cast_then_scale, 1e-6, fused).grad_fn()->name();
    INFO(node);
    CHECK(node.find("Fused") == std::string::npos);
  }
  const std::string node = rms_norm(x, w, NormWeight::cast_then_scale, 1e-6, FusedKernels::always).grad_fn()->name();
  CHECK(node.find("FusedRmsNorm") != std::string::npos);
}

namespace {

// The names of the autograd nodes that made `loss`.
std::set<std::string> graph_nodes(const torch::Tensor &loss) {
  std::set<std::string> names;
  std::set<const torch::autograd::Node *> seen;
  std::function<void(const std::shared_ptr<torch::autograd::Node> &)> walk = [&](const auto &node) {
    if (!node || !seen.insert(node.get()).second) return;
    names.insert(node->name());
    for (const torch::autograd::Edge &edge : node->next_edges()) walk(edge.function);
  };
  walk(loss.grad_fn());
  return names;
}

}  // namespace

// Llama (cast_then_scale, the residual add with the next norm), Qwen3 (per-head q and k norms), Gemma 3
// (1 + w, GeGLU, the final softcap), OLMo 2 (the weight in float32), Phi-3 (the halves of gate_up_proj,
// a partial rotation), Granite (the logits divisor).
TEST_CASE("fused ops on the CPU: a family fixture's loss and every gradient with the fused layers and loss equal "
          "the unfused model's and transformers'", "[model][fused][hf][parity]") {
  const std::string name = GENERATE(as<std::string>(), "llama3", "qwen3", "gemma3", "olmo2", "phi3", "granite");
  INFO(name);
  const std::string dir = test::source_dir() + "/tests/fixtures/families/" + name;
  SafetensorsFile expected = SafetensorsFile::open(dir + "/expected.safetensors");
  const Batch batch = test::next_token_batch(expected.load("input_ids"));
  auto run = [&](const std::string &fused, std::set<std::string> *nodes) {
    auto model = make_model(RunConfig::parse("[model]\ninit_from = \"" + dir + "\"\nfused = " + fused + "\n", "f.toml"));
    model->train(false);
    torch::Tensor hidden = batch.inputs;
    for (size_t b = 0; b + 1 < model->block_names().size(); ++b) hidden = model->forward_block(b, hidden, batch);
    torch::Tensor loss = model->forward_loss(hidden, batch);
    if (nodes) *nodes = graph_nodes(loss);
    loss.backward();
    std::map<std::string, torch::Tensor> out{{"loss", loss.detach()}};
    for (const ModelParameter &p : model->parameters()) out[p.name] = p.tensor.grad();
    return out;
  };
  std::set<std::string> nodes;
  std::map<std::string, torch::Tensor> fused = run("\"always\"", &nodes), unfused = run("false", nullptr);
  for (const char *kernel : {"FusedRmsNorm", "FusedRope", "FusedGlu", "FusedLinearCrossEntropy"}) {
    INFO(kernel);
    CHECK(std::any_of(nodes.begin(), nodes.end(), [&](const std::string &n) { return n.find(kernel) != n.npos; }));
  }
  const double loss = fused["loss"].item<double>(), want = expected.load("loss").item<double>();
  INFO("fused loss " << loss << ", unfused " << unfused["loss"].item<double>() << ", transformers' " << want);
  CHECK(std::abs(loss - unfused["loss"].item<double>()) <= 1e-6 * std::abs(want));
  CHECK(std::abs(loss - want) <= 1e-4 * std::abs(want));
  for (const auto &[param, grad] : unfused) {
    if (param == "loss") continue;
    INFO(param);
    REQUIRE(fused[param].defined());
    CHECK(test::fused_gap(fused[param], grad) <= 1e-5);
    CHECK(test::fused_gap(fused[param], expected.load("grad." + param)) <= 1e-3);
  }
}

TEST_CASE("fused ops on the CPU: a bf16 model's loss and gradients with model.fused = \"always\" equal the unfused "
          "model's within bf16 rounding", "[model][fused]") {
  const std::string type = GENERATE(as<std::string>(), "qwen2", "qwen3", "gemma3_text", "phi3");
  INFO(type);
  auto run = [&](const std::string &fused) {
    torch::manual_seed(14);
    auto model = make_model(RunConfig::parse("[model]\ntype = \"" + type + "\"\nhidden = 128\nlayers = 2\nheads = 4\n"
                                             "kv_heads = 2\nvocab = 1000\nmax_seq = 64\ndtype = \"bfloat16\"\nfused = " +
                                             fused + "\n", "fused.toml"));
    torch::manual_seed(15);
    Batch batch = test::next_token_batch(torch::randint(1000, {2, 48}, torch::kLong));
    torch::Tensor hidden = batch.inputs;
    for (size_t b = 0; b + 1 < model->block_names().size(); ++b) hidden = model->forward_block(b, hidden, batch);
    torch::Tensor loss = model->forward_loss(hidden, batch);
    loss.backward();
    std::map<std::string, torch::Tensor> out{{"loss", loss.detach()}};
    for (const ModelParameter &p : model->parameters()) out[p.name] = p.tensor.grad().to(torch::kFloat32);
    return out;
  };
  std::map<std::string, torch::Tensor> unfused = run("false"), fused = run("\"always\"");
  CHECK(std::abs(fused["loss"].item<double>() / unfused["loss"].item<double>() - 1) <= 2e-3);
  for (const auto &[name, grad] : unfused) {
    if (name == "loss") continue;
    INFO(name);
    CHECK(test::fused_gap(fused[name], grad) <= 0.05);
  }
}
