// The core's own config tables. Each key is a zf_param_decl, the same declaration plugins use,
// so one checker (PluginConfig) serves both.
#include "config/config.hpp"

namespace zf {
namespace {

constexpr uint32_t kMin = ZF_PARAM_HAS_MIN;
constexpr uint32_t kMinOpen = ZF_PARAM_HAS_MIN | ZF_PARAM_MIN_EXCLUSIVE;
constexpr uint32_t kUnitOpen = ZF_PARAM_HAS_MIN | ZF_PARAM_HAS_MAX | ZF_PARAM_MAX_EXCLUSIVE;

zf_param_decl decl(const char *key, zf_param_type type, const char *default_value, const char *doc,
                   uint32_t flags = 0, double min = 0, double max = 0,
                   const char *choices = nullptr) {
  return zf_param_decl{key, type, flags, default_value, doc, min, max, choices, nullptr};
}

}  // namespace

const std::map<std::string, std::vector<zf_param_decl>> &core_schema() {
  static const std::map<std::string, std::vector<zf_param_decl>> schema = {
      {"run",
       {decl("name", ZF_PARAM_STRING, "run", "name of the run, used for the output directory"),
        decl("seed", ZF_PARAM_INT, "1234", "seed of parameters, data order and dropout", kMin, 0),
        decl("output_dir", ZF_PARAM_STRING, "", "where steps.jsonl, steps.csv and summary.json go (default runs/NAME)"),
        decl("log_every", ZF_PARAM_INT, "1", "print one step line every N steps", kMin, 1),
        decl("timing_warmup", ZF_PARAM_INT, "2", "steps left out of the mean step time", kMin, 0),
        decl("device", ZF_PARAM_STRING, "cpu", "where the model computes", 0, 0, 0, "cpu|cuda"),
        decl("threads", ZF_PARAM_INT, "0", "intra-op threads of the training thread (0 = automatic)", kMin, 0),
        decl("progress", ZF_PARAM_STRING, "auto", "progress bar: auto (on a terminal), on, off", 0, 0, 0, "auto|on|off")}},
      {"model",
       {decl("type", ZF_PARAM_STRING, "linear_stack", "model architecture", 0, 0, 0, "linear_stack"),
        decl("hidden", ZF_PARAM_INT, "64", "hidden size (linear_stack: features and classes)", kMin, 1),
        decl("layers", ZF_PARAM_INT, "4", "number of layers", kMin, 1),
        decl("dtype", ZF_PARAM_STRING, "float32", "compute and working-parameter precision", 0, 0, 0, "float32|bfloat16"),
        decl("column_major", ZF_PARAM_BOOL, "true", "store 2-D weights column by column (ZenFlow selects columns)")}},
      {"data",
       {decl("type", ZF_PARAM_STRING, "random", "data source", 0, 0, 0, "random"),
        decl("samples", ZF_PARAM_INT, "256", "random: size of the fixed data set", kMin, 1)}},
      {"train",
       {decl("steps", ZF_PARAM_INT, "100", "optimizer steps to run", kMin, 1),
        decl("micro_batch", ZF_PARAM_INT, "16", "samples per micro-batch per rank", kMin, 1),
        decl("grad_accum", ZF_PARAM_INT, "1", "micro-batches accumulated per optimizer step", kMin, 1)}},
      {"optimizer",
       {decl("lr", ZF_PARAM_FLOAT, "1e-3", "learning rate", kMin, 0),
        decl("beta1", ZF_PARAM_FLOAT, "0.9", "first-moment decay", kUnitOpen, 0, 1),
        decl("beta2", ZF_PARAM_FLOAT, "0.999", "second-moment decay", kUnitOpen, 0, 1),
        decl("eps", ZF_PARAM_FLOAT, "1e-8", "denominator term", kMinOpen, 0),
        decl("weight_decay", ZF_PARAM_FLOAT, "0.0", "weight decay (biases and norms excluded)", kMin, 0)}},
  };
  return schema;
}

const std::vector<std::string> &optimizer_common_keys() {
  static const std::vector<std::string> keys = {"lr", "beta1", "beta2", "eps", "weight_decay"};
  return keys;
}

}  // namespace zf
