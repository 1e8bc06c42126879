// deepspeed_keys.hpp: the keys DeepSpeed documents, per object of its JSON config. `zfcore convert`
// turns those with a zfcore key into it and the others into notes; a key outside these is an error
// that names the nearest one.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace zf::deepspeed {

using Keys = std::vector<std::string>;

inline const Keys kTopLevel = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "gradient_clipping",
    "steps_per_print", "wall_clock_breakdown", "bf16", "bfloat16", "fp16", "zero_optimization", "optimizer",
    "scheduler", "aio", "amp", "zero_allow_untested_optimizer", "zero_force_ds_cpu_optimizer", "prescale_gradients",
    "gradient_predivide_factor", "communication_data_type", "sparse_gradients", "dump_state", "memory_breakdown",
    "flops_profiler", "tensorboard", "wandb", "csv_monitor", "comms_logger", "activation_checkpointing", "seed",
    "checkpoint", "data_efficiency", "elasticity", "autotuning", "data_types", "compression_training"};
inline const Keys kZero = {
    "stage", "offload_optimizer", "offload_param", "overlap_comm", "contiguous_gradients", "reduce_bucket_size",
    "allgather_bucket_size", "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
    "stage3_max_live_parameters", "zenflow", "allgather_partitions", "reduce_scatter", "round_robin_gradients",
    "sub_group_size", "load_from_fp32_weights", "elastic_checkpoint", "ignore_unused_parameters",
    "stage3_max_reuse_distance", "stage3_gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save", "zero_hpz_partition_size", "zero_quantized_weights",
    "zero_quantized_gradients", "mics_shard_size", "memory_efficient_linear"};
inline const Keys kOffloadOptimizer = {"device", "nvme_path", "pin_memory", "buffer_count", "fast_init",
                                "pipeline_read", "pipeline_write", "pipeline", "ratio"};
inline const Keys kOffloadParam = {"device", "nvme_path", "pin_memory", "buffer_count", "buffer_size", "max_in_cpu"};
inline const Keys kZenFlow = {"topk_ratio", "auto_ratio", "pt_reserved_cores_perc", "update_interval", "select_interval",
                       "select_strategy", "overlap_step", "full_warm_up_rounds", "offload", "steps_per_epoch"};
inline const Keys kAio = {"block_size", "queue_depth", "intra_op_parallelism", "thread_count", "single_submit",
                   "overlap_events", "use_gds"};
inline const Keys kBf16 = {"enabled", "immediate_grad_update", "check_grad_overflow"};
inline const Keys kFp16 = {"enabled", "auto_cast", "loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                    "consecutive_hysteresis", "min_loss_scale", "fp16_master_weights_and_grads"};
inline const Keys kOptimizerParams = {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction", "amsgrad",
                               "torch_adam", "fp32_optimizer_states", "initial_accumulator_value", "lr_decay"};
// The parameters of each scheduler; DeepSpeed's defaults are applied below.
inline const std::map<std::string, Keys> kSchedulers = {
    {"WarmupLR", {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration"}},
    {"WarmupDecayLR",
     {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "last_batch_iteration", "total_num_steps"}},
    {"WarmupCosineLR",
     {"warmup_min_ratio", "warmup_num_steps", "cos_min_ratio", "warmup_type", "last_batch_iteration",
      "total_num_steps"}}};

}  // namespace zf::deepspeed
