// zfcore: the command line. run / validate / estimate / plugins / config / bench / --version.
#include "cli/commands.hpp"

#include "runtime/error.hpp"
#include "runtime/log.hpp"

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

const char *kUsage =
    "usage: zfcore <command> [arguments]\n"
    "\n"
    "commands:\n"
    "  run FILE [--set table.key=value]...       train as FILE (TOML) says\n"
    "  eval FILE [--json] [--set ...]            loss and perplexity of FILE's model on its held-out data\n"
    "  validate FILE [--set table.key=value]...  check FILE and the plugins it names, run nothing\n"
    "  prepare FILE [--set table.key=value]...   tokenize FILE's chat, prompt_completion or JSON text data now\n"
    "  checkpoint verify DIR                     check checkpoints against their checksums, train nothing\n"
    "  checkpoint info DIR                       a checkpoint's step, run, layout and tensors, from its headers\n"
    "  export CHECKPOINT OUT_DIR [FILE] [--set ...] a checkpoint's model in Hugging Face format, train nothing\n"
    "  plugins [--params]                        list the plugins found (and their parameters)\n"
    "  config --keys                             list the core tables' keys, types, defaults\n"
    "  estimate FILE [--world N] [--set ...]     per-rank and per-host memory of FILE's model, checkpoint size\n"
    "  convert DS_CONFIG.json                    a DeepSpeed config as zfcore TOML, on stdout\n"
    "  bench optimizer [options]                 compare CPU optimizers (zfcore bench optimizer --help)\n"
    "  bench disk PATH [options]                 O_DIRECT write/read bandwidth of the filesystem under PATH\n"
    "  bench stages|offload|zenflow|binding      train configurations side by side and recommend one\n"
    "  bench convergence [options]               held-out loss over training time of configurations\n"    "  bench scale [options]                     ZeRO-3 offload rows on a large model: MFU, compute share\n"
    "  --version                                 print the version and ABI\n"
    "\n"
    "zfcore COMMAND --help describes a command.\n";

// The options run, validate and estimate share.
const char *kConfigOptions =
    "  --set table.key=value   override a key of FILE, or add one (one word; TOML values: 3, 1e-4,\n"
    "                          true/false in lower case, \"text\" or a bare word; a plugin list as in\n"
    "                          the file: --set 'offload.plugin=[\"nvme\", \"cpu_optimizer\"]')\n"
    "  --unset table.key       remove a key FILE sets, before the --set overrides apply (e.g. the\n"
    "                          old plugin's keys when --set switches [selector] plugin)\n";

// zfcore COMMAND --help.
std::string command_usage(const std::string &command) {
  if (command == "run")
    return std::string("usage: zfcore run FILE [--set table.key=value]... [--unset table.key]... [--verbose]\n\n"
                       "Trains as FILE (TOML, or a DeepSpeed JSON as zfcore convert reads it) says; under mpirun,\n"
                       "one process per rank.\n\noptions:\n") +
           kConfigOptions +
           "  --verbose               a DeepSpeed JSON's notes on every run, not only on the first run of its\n"
           "                          run directory\n" +
           "\nexit codes:\n"
           "  0    trained to train.steps (or the checkpoint resumed from is already there)\n"
           "  1    an error: the config, a plugin, the data, or a failure while training (the message says which)\n"
           "  2    a malformed command line (an unknown option, --set without table.key=value)\n"
           "  129  stopped by SIGHUP, 130 by SIGINT (Ctrl-C), 143 by SIGTERM (128 + the signal): the current step\n"
           "       finished and a checkpoint was written; the same command resumes from it\n";
  if (command == "eval")
    return std::string("usage: zfcore eval FILE [--json] [--set table.key=value]... [--unset table.key]...\n\n"
                       "Evaluates FILE's model on its held-out data (data.eval_path, or the data.eval_fraction\n"
                       "split): the first train.eval_batches micro-batches of train.micro_batch, as a run's\n"
                       "evaluation does. The weights come from the checkpoint checkpoint.resume names (default\n"
                       "auto: the newest of the run's checkpoints; a directory picks one; never skips them), else\n"
                       "from model.init_from (or the seeded initialization). No optimizer state is allocated.\n"
                       "Under mpirun the ranks share the micro-batches and rank 0 prints.\n\noptions:\n"
                       "  --json                  one JSON object: loss, perplexity, tokens, sequences, step, weights\n") +
           kConfigOptions;
  if (command == "validate")
    return std::string("usage: zfcore validate FILE [--set table.key=value]... [--unset table.key]...\n\n"
                       "Checks FILE and the parameters of the plugins it names; runs nothing.\n\noptions:\n") +
           kConfigOptions;
  if (command == "estimate")
    return std::string("usage: zfcore estimate FILE [--world N] [--ranks-per-host N] [--bytes] [--set table.key=value]... "
                       "[--unset table.key]...\n\n"
                       "Prints the per-rank memory of FILE's model under each ZeRO stage, before anything runs, then\n"
                       "the config's own plan per rank and per host (GPU, pinned host, pageable host, disk) beside\n"
                       "what this host has, and its checkpoints beside their directory's free space.\n\n"
                       "options:\n  --world N               ranks to spread over (default 1)\n"
                       "  --ranks-per-host N      ranks that share one host's memory (default: all of them)\n"
                       "  --bytes                 every table cell as an exact byte count (default: KiB, MiB, GiB)\n") +
           kConfigOptions;
  if (command == "prepare")
    return std::string("usage: zfcore prepare FILE [--set table.key=value]... [--unset table.key]...\n\n"
                       "Prepares the data FILE's [data] names (data.path and data.eval_path) as zfcore run would\n"
                       "before training: chat, prompt_completion, and text of JSON Lines, JSON or Parquet files are\n"
                       "rendered with the tokenizer's chat template by transformers (python3, or ZFCORE_PYTHON) and\n"
                       "kept as token shards in data.prepared_dir (default ~/.cache/zfcore/prepared). A prepared copy\n"
                       "that matches the data, tokenizer and template is reused; otherwise it is made again.\n\n"
                       "options:\n") +
           kConfigOptions;
  if (command == "convert")
    return "usage: zfcore convert DS_CONFIG.json > train.toml\n\nWrites DeepSpeed's config as zfcore TOML: batch (train_batch_size is train.global_batch,\n"
           "checked against micro-batch x accumulation x ranks when the run starts), precision, ZeRO stage\n"
           "and its knobs, offload_optimizer (cpu, nvme), aio, zenflow, optimizer, scheduler (DeepSpeed's\n"
           "learning rate step for step, with its defaults: log warm-up, 1000 warm-up steps), clipping.\n"
           "\"auto\" is what the Hugging Face Trainer fills in by default (lr 5e-5, 8 per device, ...).\n"
           "Keys without a zfcore key, \"auto\" values and values that differ from DeepSpeed's are listed at\n"
           "the top, each with the value that applies; what DeepSpeed refuses is refused. A key DeepSpeed does\n"
           "not have is an error at its line, with the nearest key suggested. Add [model] and [data] (or\n"
           "--set them when running). zfcore run, validate, eval and estimate take a .json config directly,\n"
           "through the same conversion, and print the same notes (run: at a run directory's first run).\n";
  if (command == "export")
    return "usage: zfcore export CHECKPOINT OUT_DIR [FILE] [--set table.key=value]...\n\nWrites the model of the\n"
           "checkpoint CHECKPOINT (a step-N directory) to OUT_DIR in Hugging Face format (safetensors,\n"
           "config.json, the tokenizer where the run has one), as checkpoint.export_hf does, without\n"
           "training. FILE is the run's config (for the model); by default the config checkpoint.json\n"
           "records (the run's file or DeepSpeed JSON as it read it, with its --set and --unset), so no file\n"
           "is needed (an older zfcore's checkpoint: the file it names); any number of ranks may run\n"
           "it (the checkpoint is resharded on load). It is `zfcore run FILE` with checkpoint.resume =\n"
           "CHECKPOINT, train.steps = its step, checkpoint.export_hf = OUT_DIR, checkpoint.final = false.\n";
  if (command == "checkpoint")
    return "usage: zfcore checkpoint verify DIR\n       zfcore checkpoint info DIR\n\n"
           "verify checks the checkpoints in DIR (one checkpoint step-N, a checkpoint directory, or a\n"
           "run's output directory) as a resume does: every rank file, its header and metadata, and every\n"
           "tensor against the checksum written with it. Prints one line per checkpoint; exits 1 if one\n"
           "is damaged.\n\ninfo prints what the checkpoint step-N in DIR holds: step, run name and id, config\n"
           "and layout digests, what checkpoint.json records (world size, stage, offload, optimizer, batch),\n"
           "each rank's shard, each tensor's dtype and bytes, and which checksums it carries.\n";
  if (command == "plugins")
    return "usage: zfcore plugins [--params]\n\nLists the plugins in the search path (built-in directory, then\n"
           "ZFCORE_PLUGIN_PATH) and the files rejected, with the reason.\n\noptions:\n"
           "  --params                each plugin's parameters: type, default, doc and range\n";
  if (command == "config")
    return "usage: zfcore config --keys [--markdown]\n\nLists every key of the core tables ([run], [model], [data],\n"
           "[train], [optimizer], [sample], [checkpoint]) with its type, default and meaning.\n\noptions:\n"
           "  --keys                  the listing (plugin tables' own keys: zfcore plugins --params)\n"
           "  --markdown              as the Markdown reference page docs/config.md\n";
  if (command == "bench")
    return "usage: zfcore bench optimizer|disk|stages|offload|zenflow|binding|convergence|scale [options]\n\n"
           "  optimizer [options]               CPU optimizer plugins against torch's AdamW\n"
           "  disk PATH [options]               sequential O_DIRECT write and read bandwidth under PATH\n"
           "  stages|offload|zenflow|binding    train configurations side by side and recommend one\n"
           "  convergence [options]             the held-out loss of configurations over steps and training\n"
           "                                    time; recommends the first to reach a target loss\n"
           "  scale [options]                   ZeRO-3 with cpu_optimizer, offload.ratio = auto and ZenFlow on a\n"
           "                                    large model: MFU, compute share of the step, memory per rank\n\n"
           "zfcore bench NAME --help describes each.\n";
  return "";
}

bool asks_help(const std::string &command, const std::vector<std::string> &rest) {
  if (command == "bench" && !rest.empty() && rest[0] != "-h" && rest[0] != "--help") return false;  // its own
  for (const std::string &arg : rest)
    if (arg == "-h" || arg == "--help") return true;
  return false;
}

}  // namespace

int main(int argc, char **argv) {
  // A file past the size limit (ulimit -f) fails its write with EFBIG, which is reported with the
  // file's name, instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
  // A closed stdout or stderr (`| head` that has read its lines, `| tee` ended by Ctrl-C) fails the
  // write with EPIPE instead of killing the run: training, its checkpoints and outputs go on, and
  // the step lines stop (report/report.cpp says so once; steps.jsonl and steps.csv have every step).
  std::signal(SIGPIPE, SIG_IGN);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (asks_help(command, rest) && !command_usage(command).empty()) {
    std::fputs(command_usage(command).c_str(), stdout);
    return 0;
  }
  try {
    if (command == "--version" || command == "-V" || command == "version") return zf::command_version();
    if (command == "run") return zf::command_run(rest);
    if (command == "eval") return zf::command_eval(rest);
    if (command == "validate") return zf::command_validate(rest);
    if (command == "prepare") return zf::command_prepare(rest);
    if (command == "plugins") return zf::command_plugins(rest);
    if (command == "bench") return zf::command_bench(rest);
    if (command == "estimate") return zf::command_estimate(rest);
    if (command == "config") return zf::command_config(rest);
    if (command == "convert") return zf::command_convert(rest);
    if (command == "checkpoint") return zf::command_checkpoint(rest);
    if (command == "export") return zf::command_export(rest);
    std::fprintf(stderr, "zfcore: unknown command '%s'\n\n%s", command.c_str(), kUsage);
    return 2;
  } catch (const zf::UsageError &error) {
    std::fprintf(stderr, "zfcore %s: %s\n", command.c_str(), error.what());
    return 2;
  } catch (const std::exception &error) {
    zf::log_error(zf::error_message(error));
    return 1;
  }
}
