// The core's own config tables. Each key is a zf_param_decl, the same declaration plugins use,
// so one checker (PluginConfig) serves both.
#include "config/config.hpp"

namespace zf {
namespace {


}  // namespace

zf_param_decl decl(const char *key, zf_param_type type, const char *default_value, const char *doc, uint32_t flags,
                   double min, double max, const char *choices) {
  return zf_param_decl{key, type, flags, default_value, doc, min, max, choices, nullptr};
}

const std::map<std::string, std::vector<zf_param_decl>> &core_schema() {
  static const std::map<std::string, std::vector<zf_param_decl>> schema = {
      {"model", model_schema()},
      {"data", data_schema()},
      {"run",
       {decl("name", ZF_PARAM_STRING, "run", "name of the run, used for the output directory"),
        decl("seed", ZF_PARAM_INT, "1234", "seed of parameters, data order and dropout", kMin, 0),
        decl("output_dir", ZF_PARAM_STRING, "", "where steps.jsonl, steps.csv and summary.json go (default runs/NAME)"),
        decl("log_every", ZF_PARAM_INT, "1", "print one step line every N steps", kMin, 1),
        decl("timing_warmup", ZF_PARAM_INT, "2", "steps left out of the mean step time", kMin, 0),
        decl("device", ZF_PARAM_STRING, "cpu", "where the model computes", 0, 0, 0, "cpu|cuda"),
        decl("threads", ZF_PARAM_INT, "0", "intra-op threads of the training thread (0 = automatic)", kMin, 0),
        decl("progress", ZF_PARAM_STRING, "auto", "progress bar: auto (on a terminal), on, off", 0, 0, 0, "auto|on|off")}},
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
