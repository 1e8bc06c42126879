// The core's own config tables. Each key is a zf_param_decl, the same declaration plugins use,
// so one checker (PluginConfig) serves both.
#include "config/limits.hpp"

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
       {decl("name", ZF_PARAM_STRING, "run",
             "name of the run, used for the output directory runs/NAME: one plain name (no /, . or ..)"),
        decl("seed", ZF_PARAM_INT, "1234", "seed of parameters, data order and dropout", kMin, 0),
        decl("output_dir", ZF_PARAM_STRING, "", "where steps.jsonl, steps.csv, summary.json, report.html and tensorboard/ go (default runs/NAME)"),
        decl("log_every", ZF_PARAM_INT, "1", "print one step line every N steps", kRange, 1, kMaxSteps),
        decl("wall_clock_breakdown", ZF_PARAM_BOOL, "false",
             "under each step line, the step's timers in ms (fwd, bwd, cpu_update, update_wait, ...; DeepSpeed's "
             "wall_clock_breakdown)"),
        decl("rank_timers", ZF_PARAM_BOOL, "false",
             "every rank's step time and timers in steps.jsonl (rank_step_ms, rank_timers_ms): which rank a slow "
             "step waited for, and on what (one small all-gather per step)"),
        decl("timing_warmup", ZF_PARAM_INT, "2", "steps left out of the mean step time", kRange, 0, kMaxSteps),
        decl("device", ZF_PARAM_STRING, "cpu", "where the model computes", 0, 0, 0, "cpu|cuda"),
        decl("deterministic", ZF_PARAM_BOOL, "false",
             "GPU: deterministic kernels only (runs repeat bit for bit; somewhat slower)"),
        decl("threads", ZF_PARAM_INT, "0", "intra-op threads of the training thread (0 = automatic)", kRange, 0, kMaxThreads),
        decl("bind_cores", ZF_PARAM_BOOL, "true",
             "give each rank its own physical cores of the host; on a GPU run pin the training thread to one or two "
             "of them (two from 8 cores up) and the optimizer workers to the rest"),
        decl("host_memory_limit_gb", ZF_PARAM_FLOAT, "0",
             "host memory (pinned + pageable) this host lets the run use, in GiB, shared by its ranks (0 = the "
             "cgroup limit, else available memory)", kRange, 0, 1 << 24),
        decl("device_memory_limit_gb", ZF_PARAM_FLOAT, "0",
             "the memory (GiB) each rank may fill where the model computes, which zenflow.topk_ratio = \"auto\" and "
             "offload.ratio = \"auto\" plan for (0 = the GPU's memory; a CPU run has no GPU, and auto there needs "
             "this set)", kRange, 0, 1 << 24),
        decl("progress", ZF_PARAM_STRING, "auto", "progress bar: auto (on a terminal), on, off", 0, 0, 0, "auto|on|off"),
        decl("tensorboard", ZF_PARAM_BOOL, "true",
             "write TensorBoard event files of the step scalars (loss, eval loss, lr, grad norm, step time, tokens/s, "
             "memory, timers as timer/NAME_ms) to OUTPUT_DIR/tensorboard/; a resumed run, or one that starts over "
             "beside older files, adds a file that makes TensorBoard drop their steps from its first, so each step "
             "shows once"),
        decl("comm_timeout_s", ZF_PARAM_FLOAT, "0",
             "seconds an MPI collective may wait for its peers before the rank ends, naming it (a stopped, dead or "
             "unreachable rank); 0 = automatic: ZF_COMM_TIMEOUT_S or 600 s, and during the steps 20 x the slowest "
             "step, at least 60 s", kMin, 0)}},
      {"train",
       {decl("steps", ZF_PARAM_INT, "100", "optimizer steps to run", kRange, 1, kMaxSteps),
        decl("micro_batch", ZF_PARAM_INT, "16", "samples per micro-batch per rank", kRange, 1, kMaxBatch),
        decl("grad_accum", ZF_PARAM_INT, "1", "micro-batches accumulated per optimizer step", kRange, 1, kMaxBatch),
        decl("grad_accum_dtype", ZF_PARAM_STRING, "auto",
             "what the gradients add up in: auto (the compute dtype, model.dtype) or float32 (a bf16 model's "
             "micro-step gradients add up in fp32, are reduced across ranks in fp32 and reach the optimizer in fp32: "
             "DeepSpeed's data_types.grad_accum_dtype = \"fp32\", FSDP2's reduce_dtype; every stage and offload; "
             "4 bytes a parameter more under zero0/zero1, the gradient shard in fp32 under zero2/zero3; at 32 "
             "micro-steps it halved a bf16 GPT's held-out-loss gap to fp32: plugins/stages/README.md)", 0, 0, 0,
             "auto|float32"),
        decl("global_batch", ZF_PARAM_INT, "0",
             "samples per optimizer step over all ranks (DeepSpeed's train_batch_size; 0 = not set): must equal "
             "micro_batch x grad_accum x ranks; where grad_accum (or micro_batch) is not set, it is derived from "
             "the ranks of the launch", kRange, 0, kMaxBatch * kMaxBatch),
        decl("lr_schedule", ZF_PARAM_STRING, "constant", "after warm-up: constant, cosine or linear decay", 0, 0, 0,
             "constant|cosine|linear"),
        decl("warmup_steps", ZF_PARAM_INT, "0", "learning-rate warm-up from 0 over this many steps", kRange, 0, kMaxSteps),
        decl("warmup_type", ZF_PARAM_STRING, "linear",
             "shape of the warm-up: linear (step / warmup_steps) or log (log(step + 1) / log(warmup_steps + 1): "
             "fast at first, the shape of DeepSpeed's default)", 0, 0, 0, "linear|log"),
        decl("warmup_min_ratio", ZF_PARAM_FLOAT, "0",
             "the warm-up starts at this fraction of optimizer.lr (DeepSpeed's warmup_min_lr / warmup_max_lr)",
             kUnitClosed, 0, 1),
        decl("lr_decay_steps", ZF_PARAM_INT, "0",
             "the step at which the decay reaches min_lr_ratio and stays (DeepSpeed's total_num_steps; 0 = "
             "train.steps)", kRange, 0, kMaxSteps),
        decl("lr_schedule_steps", ZF_PARAM_STRING, "zfcore",
             "zfcore: step 1 is the warm-up's first step; deepspeed: the lr DeepSpeed's schedulers give each "
             "optimizer step (step 1 at the warm-up's start, warm-up over max(2, warmup_steps) steps after it, "
             "the log warm-up log(i + 1) / log(warmup_steps)); zfcore convert writes it for a DeepSpeed scheduler",
             0, 0, 0, "zfcore|deepspeed"),
        decl("min_lr_ratio", ZF_PARAM_FLOAT, "0.1", "decay ends at this fraction of optimizer.lr", kUnitClosed, 0, 1),
        decl("clip_grad_norm", ZF_PARAM_FLOAT, "0.0", "clip gradients to this global L2 norm (0 = no clipping)", kMin, 0),
        decl("eval_every", ZF_PARAM_INT, "0", "evaluate the held-out split every N steps (0 = never)", kRange, 0, kMaxSteps),
        decl("eval_batches", ZF_PARAM_INT, "8", "micro-batches per evaluation", kRange, 1, kMaxBatch)}},
      {"sample",
       {decl("tokens", ZF_PARAM_INT, "0", "after training, print a sample of this many tokens (0 = none)", kRange, 0, kMaxSeqLen),
        decl("prompt", ZF_PARAM_STRING, "", "text the sample starts from"),
        decl("temperature", ZF_PARAM_FLOAT, "0.8", "sampling temperature (0 = greedy)", kMin, 0),
        decl("top_k", ZF_PARAM_INT, "0", "sample among the k likeliest tokens (0 = all)", kRange, 0, kMaxVocab)}},
      {"checkpoint",
       {decl("dir", ZF_PARAM_STRING, "", "checkpoint directory (default OUTPUT_DIR/checkpoints)"),
        decl("every", ZF_PARAM_INT, "0", "save every N steps (0 = only at the end and on SIGTERM/SIGINT)", kRange, 0,
             kMaxSteps),
        decl("final", ZF_PARAM_BOOL, "true",
             "save a checkpoint after the last step: zfcore eval reads the trained model, a failed export loses "
             "nothing, and running the finished run again trains nothing"),
        decl("keep", ZF_PARAM_INT, "2", "keep the newest N checkpoints", kRange, 1, kMaxBatch),
        decl("disk_limit_gb", ZF_PARAM_FLOAT, "0",
             "disk space (GiB) the run's checkpoints may fill in checkpoint.dir, checked before step 1 against "
             "keep + 1 checkpoints (0 = the free space of its filesystem)", kRange, 0, 1 << 24),
        decl("resume", ZF_PARAM_STRING, "auto",
             "auto: from the newest checkpoint of this run.name in dir if any; never; or a path (any number of "
             "ranks, stage and offload plugin may continue it)"),
        decl("resume_batch", ZF_PARAM_STRING, "same",
             "when the checkpoint was trained with another global batch (micro_batch x grad_accum x ranks): same "
             "(refuse), keep (derive train.grad_accum to keep the checkpoint's; the data order continues exactly) or "
             "new (continue with this run's)", 0, 0, 0, "same|keep|new"),
        decl("resume_data", ZF_PARAM_STRING, "same",
             "when the checkpoint was trained on other data than data.path holds now (another count of sequences or "
             "other sampled sequences): same (refuse) or new (continue on this data)", 0, 0, 0, "same|new"),
        decl("export_hf", ZF_PARAM_STRING, "", "at the end, export the model in Hugging Face format to this directory"),
        decl("export_dtype", ZF_PARAM_STRING, "auto",
             "weights of the export: auto (the compute dtype), float32 (the fp32 master) or bfloat16", 0, 0, 0,
             "auto|float32|bfloat16")}},
      {"zenflow",
       {decl("topk_ratio", ZF_PARAM_STRING, "auto",
             "fraction of each weight's gradient columns updated on the GPU every step (the selector's top k), in "
             "(0, 1], or auto: the largest fraction whose master and moments fit the GPU memory left after the first "
             "step (every column when they fit: then ZenFlow is AdamW; 0.1 on a CPU run without run.device_memory_limit_gb)"),
        decl("update_interval", ZF_PARAM_STRING, "4",
             "steps between CPU updates of the other columns (an integer >= 1), or \"auto\" (when their accumulated "
             "gradient outweighs the selected columns' in most weights)"),
        decl("select_strategy", ZF_PARAM_STRING, "auto", "when to choose the columns again: auto (every epoch), "
             "step or epoch (every select_interval steps or epochs)", 0, 0, 0, "auto|step|epoch"),
        decl("select_interval", ZF_PARAM_STRING, "auto",
             "steps (select_strategy = \"step\") or epochs (\"epoch\") between selections; auto = 1 epoch"),
        decl("schedule", ZF_PARAM_STRING, "staggered",
             "staggered: the other columns in update_interval groups, one group's CPU update per step, used at the "
             "next step; deepspeed: the whole interval's CPU update at its end, used one interval later (the "
             "reference's)", 0, 0, 0, "staggered|deepspeed"),
        decl("overlap_step", ZF_PARAM_BOOL, "true",
             "run the CPU update while the GPU computes (staggered: the next step; deepspeed: the next interval) and "
             "use its result then; false = wait for it"),
        decl("cpu_lr_scale", ZF_PARAM_STRING, "auto",
             "the CPU update's learning rate over optimizer.lr, a number > 0 or auto: update_interval when "
             "fine-tuning (model.init_from set) under the staggered schedule, else 1 (each other column gets one "
             "CPU step per update_interval steps; the scale makes up the distance, which helps fine-tuning and "
             "hurts training from scratch)"),
        decl("correction", ZF_PARAM_STRING, "auto",
             "what the staggered schedule does about the other columns' one step of delay: auto (age_gate under "
             "the staggered schedule, none under the deepspeed one); none; lookahead (the forward reads each CPU "
             "update extrapolated by correction_factor times its step, Nesterov-style); age_gate (the gradient "
             "computed before a column's CPU update was swapped in enters its next window weighted by "
             "correction_factor)", 0, 0, 0, "auto|none|lookahead|age_gate"),
        decl("correction_factor", ZF_PARAM_STRING, "auto",
             "lookahead: the share of the last CPU step to extrapolate, in [0, 4]; age_gate: the stale gradient's "
             "weight, in [0, 1]; auto: 1 for lookahead, 0 (dropped) for age_gate"),
        decl("full_warm_up_rounds", ZF_PARAM_INT, "0",
             "the first N steps update every column on the CPU, synchronously (plain offload)", kRange, 0, kMaxSteps),
        decl("auto_ratio", ZF_PARAM_FLOAT, "0.99",
             "update_interval = \"auto\": the CPU update runs when this fraction of the weights has more "
             "accumulated gradient mass in its other columns than in its selected ones", kUnitLeftOpen, 0, 1),
        decl("pt_reserved_cores_perc", ZF_PARAM_FLOAT, "0",
             "fraction of the rank's physical cores kept for the training thread, the rest for the CPU "
             "optimizer (0 = automatic: three quarters with several ranks on the host, where DeepSpeed's "
             "default is 0.5; one core, two from 8 cores up, for a rank alone)", kUnitRightOpen, 0, 1),
        decl("offload_selected_state", ZF_PARAM_BOOL, "false",
             "keep the GPU update's master and moments of the selected columns in pinned host memory (less GPU "
             "memory, slower GPU update)")}},
      {"optimizer",
       {decl("lr", ZF_PARAM_FLOAT, "1e-3", "learning rate", kMin, 0),
        decl("beta1", ZF_PARAM_FLOAT, "0.9", "first-moment decay", kUnitOpen, 0, 1),
        decl("beta2", ZF_PARAM_FLOAT, "0.999", "second-moment decay", kUnitOpen, 0, 1),
        decl("eps", ZF_PARAM_FLOAT, "1e-8", "denominator term", kMinOpen, 0),
        decl("weight_decay", ZF_PARAM_FLOAT, "0.0", "weight decay (biases and norms excluded)", kMin, 0),
        decl("device_plugin", ZF_PARAM_STRING, "gpu_adam",
             "on a GPU run with offload, the optimizer plugin that updates what stays on the GPU (ZenFlow's "
             "selected columns, offload.ratio's GPU share); optimizer.plugin updates the host's share")}},
  };
  return schema;
}

const std::vector<std::string> &optimizer_common_keys() {
  static const std::vector<std::string> keys = {"lr", "beta1", "beta2", "eps", "weight_decay", "device_plugin"};
  return keys;
}

}  // namespace zf
