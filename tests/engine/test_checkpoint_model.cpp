// A checkpoint is resumed, evaluated and exported only as the model it was trained as: [model] keys
// that keep every shape (heads, norm_eps) are checked against what the checkpoint recorded, and
// zfcore export reads the config its run recorded, not a file of that name where it is run.
#include "support/process.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

using namespace zf;
namespace fs = std::filesystem;

namespace {

// A GPT-2 of 2 heads at hidden 32: heads = 4 keeps every shape.
std::string tiny_config(const std::string &norm_eps) {
  return "[run]\nname = \"tiny\"\nprogress = \"off\"\n[model]\ntype = \"gpt2\"\nhidden = 32\nlayers = 1\nheads = 2\n"
         "vocab = 257\nmax_seq = 32\nnorm_eps = " + norm_eps + "\n[data]\ntype = \"text\"\n"
         "path = \"/usr/share/common-licenses/GPL-3\"\ntokenizer = \"byte\"\nseq_len = 32\neval_fraction = 0.05\n"
         "[train]\nsteps = 2\nmicro_batch = 4\n[optimizer]\nplugin = \"adamw_ref\"\n[stage]\nplugin = \"zero0\"\n"
         "[checkpoint]\nevery = 1\n[sample]\ntokens = 0\n";
}

void write_file(const std::string &path, const std::string &text) { std::ofstream(path) << text; }

}  // namespace

TEST_CASE("a checkpoint is resumed, evaluated and exported only under the model it was trained as",
          "[checkpoint]") {
  const std::string dir = test::scratch_dir("ckpt_model_keys"), out = dir + "/out";
  write_file(dir + "/train.toml", tiny_config("1e-5"));
  const std::string run = test::zfcore() + " run " + dir + "/train.toml --set run.output_dir=" + out;
  test::Outcome first = test::run_command(run);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const std::string ck = out + "/checkpoints/step-00000002";
  test::Outcome heads = test::run_command(run + " --set train.steps=3 --set model.heads=4");
  INFO(heads.output);
  CHECK(heads.exit_code == 1);
  CHECK_THAT(heads.output, Catch::Contains(ck + " was trained as another model") &&
                               Catch::Contains("model.heads = 2 in the checkpoint, 4 in this config") &&
                               Catch::Contains("--set model.heads=2"));
  CHECK_FALSE(fs::exists(out + "/checkpoints/step-00000003"));
  test::Outcome eval = test::run_command(test::zfcore() + " eval " + dir + "/train.toml --set run.output_dir=" + out +
                                         " --set model.norm_eps=1e-6");
  INFO(eval.output);
  CHECK(eval.exit_code == 1);
  CHECK_THAT(eval.output, Catch::Contains("model.norm_eps = 1e-05 in the checkpoint, 1e-06 in this config") &&
                              Catch::Contains("To evaluate it"));
  test::Outcome exported = test::run_command(test::zfcore() + " export " + ck + " " + dir + "/hf --set model.heads=4");
  INFO(exported.output);
  CHECK(exported.exit_code == 1);
  CHECK_THAT(exported.output, Catch::Contains("model.heads = 2 in the checkpoint, 4 in this config"));
  CHECK_FALSE(fs::exists(dir + "/hf/model.safetensors"));
  // The same model resumes.
  test::Outcome same = test::run_command(run + " --set train.steps=3");
  INFO(same.output);
  CHECK(same.exit_code == 0);
}

TEST_CASE("zfcore export reads the config its checkpoint's run recorded, from any directory", "[checkpoint]") {
  const std::string dir = test::scratch_dir("ckpt_export_config");
  fs::create_directories(dir + "/a");
  fs::create_directories(dir + "/b");
  write_file(dir + "/a/train.toml", tiny_config("1e-5"));
  // Another config of the same relative name where the export is run.
  write_file(dir + "/b/train.toml", tiny_config("0.25"));
  test::Outcome trained = test::run_command("cd " + dir + "/a && " + test::zfcore() + " run train.toml "
                                            "--set run.output_dir=" + dir + "/out");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  test::Outcome exported = test::run_command("cd " + dir + "/b && " + test::zfcore() + " export " + dir +
                                             "/out/checkpoints/step-00000002 " + dir + "/hf");
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  const std::string config = test::read_text(dir + "/hf/config.json");
  INFO(config);
  CHECK(config.find("1e-05") != std::string::npos);
  CHECK(config.find("0.25") == std::string::npos);
}

// The checkpoint records the config it ran (the text read, a DeepSpeed JSON's as converted, and its
// --set and --unset): zfcore export needs no file, not even a DeepSpeed JSON whose model and data came
// from --set, nor the config file at all, and reads relative paths from where the run started.
TEST_CASE("zfcore export of a DeepSpeed JSON run needs no config file", "[checkpoint]") {
  const std::string dir = test::scratch_dir("ckpt_export_deepspeed");
  fs::create_directories(dir + "/run");
  fs::create_directories(dir + "/elsewhere");
  write_file(dir + "/run/ds.json", R"({"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 1.0})");
  fs::copy_file("/usr/share/common-licenses/GPL-3", dir + "/run/corpus.txt");
  test::Outcome trained = test::run_command(
      "cd " + dir + "/run && " + test::zfcore() + " run ds.json --set model.type=gpt2 --set model.hidden=32 "
      "--set model.layers=1 --set model.heads=2 --set model.vocab=257 --set model.max_seq=32 --set data.type=text "
      "--set data.path=corpus.txt --set data.seq_len=32 --set train.steps=2 --set run.progress=off "
      "--set run.output_dir=out");
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  fs::remove(dir + "/run/ds.json");  // nor the file
  const std::string ck = dir + "/run/out/checkpoints/step-00000002";
  test::Outcome exported = test::run_command("cd " + dir + "/elsewhere && " + test::zfcore() + " export " + ck + " hf");
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  for (const char *file : {"model.safetensors", "config.json", "tokenizer.json"})
    CHECK(fs::exists(dir + "/elsewhere/hf/" + file));
  const std::string digest = test::json_field(test::read_text(dir + "/run/out/summary.json"), "param_digest");
  CHECK_THAT(exported.output, Catch::Contains("param_digest " + digest));
  CHECK_FALSE(fs::exists(dir + "/run/hf"));
}

TEST_CASE("a flipped bit in zfcore's own export is found when model.init_from loads it", "[checkpoint]") {
  const std::string dir = test::scratch_dir("ckpt_export_bit");
  write_file(dir + "/train.toml", tiny_config("1e-5"));
  const std::string run = test::zfcore() + " run " + dir + "/train.toml --set checkpoint.every=0";
  test::Outcome exported = test::run_command(run + " --set run.output_dir=" + dir + "/a --set checkpoint.export_hf=" +
                                             dir + "/hf");
  INFO(exported.output);
  REQUIRE(exported.exit_code == 0);
  // The lowest bit of the last float of the last tensor: a finite value, a little off.
  const std::string file = dir + "/hf/model.safetensors";
  std::string bytes = test::read_text(file);
  REQUIRE(bytes.size() > 16);
  bytes[bytes.size() - 4] ^= 1;
  { std::ofstream(file, std::ios::binary) << bytes; }
  test::Outcome loaded = test::run_command(run + " --set run.output_dir=" + dir + "/b --set model.init_from=" + dir +
                                           "/hf --set train.steps=1");
  INFO(loaded.output);
  CHECK(loaded.exit_code == 1);
  CHECK_THAT(loaded.output, Catch::Contains(file + ": tensor '") &&
                                Catch::Contains("does not match the checksum written with it"));
}

TEST_CASE("a checkpoint is resumed only with the family features it was trained with, each change named",
          "[checkpoint][model]") {
  // Gemma 3's fixture: another sliding window or another local RoPE base keeps every shape.
  const std::string dir = test::scratch_dir("ckpt_model_features"), model = dir + "/model";
  fs::create_directories(model);
  const std::string fixture = test::source_dir() + "/tests/fixtures/families/gemma3";
  for (const char *name : {"config.json", "model.safetensors"}) fs::copy_file(fixture + "/" + name, model + "/" + name);
  write_file(dir + "/train.toml", "[run]\nprogress = \"off\"\noutput_dir = \"" + dir + "/out\"\n[model]\ninit_from = \"" +
                                      model + "\"\n[data]\ntype = \"synthetic\"\nvocab = 96\nseq_len = 31\n[train]\n"
                                      "steps = 1\nmicro_batch = 2\n[checkpoint]\nevery = 1\n[sample]\ntokens = 0\n");
  const std::string run = test::zfcore() + " run " + dir + "/train.toml";
  test::Outcome first = test::run_command(run);
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const std::string config = test::read_text(model + "/config.json");
  auto edited = [&](const std::string &from, const std::string &to) {
    std::string text = config;
    const size_t at = text.find(from);
    REQUIRE(at != std::string::npos);
    write_file(model + "/config.json", text.replace(at, from.size(), to));
    return test::run_command(run + " --set train.steps=2");
  };
  test::Outcome window = edited("\"sliding_window\": 8", "\"sliding_window\": 6");
  INFO(window.output);
  CHECK(window.exit_code == 1);
  CHECK_THAT(window.output, Catch::Contains("was trained as another model") &&
                                Catch::Contains("config.json's sliding_window = 8 in the checkpoint, 6 in this "
                                                "config's model (" + model + "/config.json)"));
  test::Outcome base = edited("\"rope_theta\": 10000.0", "\"rope_theta\": 20000.0");
  INFO(base.output);
  CHECK(base.exit_code == 1);
  CHECK_THAT(base.output, Catch::Contains("config.json's rope_parameters.sliding_attention.rope_theta = 10000.0 in "
                                          "the checkpoint, 20000.0 in this config's model"));
  CHECK_FALSE(fs::exists(dir + "/out/checkpoints/step-00000002"));
  write_file(model + "/config.json", config);  // the same features resume
  test::Outcome same = test::run_command(run + " --set train.steps=2");
  INFO(same.output);
  CHECK(same.exit_code == 0);
}
