#!/usr/bin/env python3
"""Offload beside no offload on one GPU, each configuration in its own process, in one call.

Runs zfcore on a benchmark config (default examples/gpu/qwen2-1.5b-bench.toml) without offload
(gpu_adam) and with offload.plugin = cpu_optimizer (cpu_adam on the host's cores), plus variants
(clipping, bf16 moments), and prints step time, practicality (no-offload step / offloaded step),
GPU peak, pinned host memory and the step breakdown (where the offloaded step spends its time).

usage: tools/offload_bench.py BUILD_DIR [--config FILE] [--steps N] [--only NAME ...] [--set KEY=VALUE ...]
                              [--launcher "mpirun -np 2"]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OFFLOAD = ["offload.plugin=cpu_optimizer", "optimizer.plugin=cpu_adam"]
CASES = [
    ("none", ["offload.plugin=none", "optimizer.plugin=gpu_adam"]),
    ("cpu_optimizer", OFFLOAD),
    ("cpu_optimizer+clip1.0", OFFLOAD + ["train.clip_grad_norm=1.0"]),
    ("cpu_optimizer+bf16_moments", OFFLOAD + ["optimizer.moment_dtype=bf16"]),
    ("cpu_optimizer+serial", OFFLOAD + ["offload.overlap=false"]),
    ("cpu_full", ["offload.plugin=cpu_full", "optimizer.plugin=cpu_adam"]),
]
TIMERS = ["fwd", "bwd", "grad_copy_wait", "cpu_update", "update_wait", "update_stall", "param_copy_wait", "param_gather", "step"]


def run(build, config, name, sets, steps, out_root, launcher):
    out = os.path.join(out_root, name)
    cmd = launcher + [os.path.join(build, "bin", "zfcore"), "run", config, "--set", "run.output_dir=" + out,
           "--set", "train.steps=%d" % (steps + 3), "--set", "run.timing_warmup=3"]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    with open(out + ".log", "w") as f:
        f.write(log)
    if proc.returncode != 0:
        errors = [l for l in log.splitlines() if "error" in l.lower()]
        return {"status": "error", "message": (errors or log.splitlines()[-1:] or ["?"])[0][:200]}
    summary = json.load(open(os.path.join(out, "summary.json")))
    steps_ms = [json.loads(l)["step_ms"] for l in open(os.path.join(out, "steps.jsonl"))][3:]
    gpu = summary.get("gpu_memory_bytes", {})
    return {"status": "ok", "step_ms": summary["mean_step_ms"], "max_step_ms": max(steps_ms or [0]),
            "tokens_per_s": summary["tokens_per_s"], "gpu_peak_gib": gpu.get("allocated_peak", 0) / 2**30,
            "pinned_gib": summary["peak_memory_bytes"].get("pinned", 0) / 2**30,
            "loss": summary["final_loss"],
            "timers": {t: summary["mean_timers_ms"].get(t) for t in TIMERS if t in summary["mean_timers_ms"]}}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("build")
    parser.add_argument("--config", default=os.path.join(ROOT, "examples/gpu/qwen2-1.5b-bench.toml"))
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--only", nargs="*", help="case names to run (default: all)")
    parser.add_argument("--set", action="append", default=[], help="extra table.key=value for every case")
    parser.add_argument("--launcher", default="", help="command that starts the ranks, e.g. \"mpirun -np 2\"")
    args = parser.parse_args()
    out_root = os.path.join(args.build, "offload-bench")
    os.makedirs(out_root, exist_ok=True)
    results = {}
    for name, sets in CASES:
        if args.only and name not in args.only:
            continue
        results[name] = run(args.build, args.config, name, sets + args.set, args.steps, out_root, args.launcher.split())
        print(name, json.dumps(results[name]), flush=True)
    base = results.get("none", {}).get("step_ms")
    print("\n%s, %d timed steps" % (os.path.basename(args.config), args.steps))
    print("%-28s %9s %9s %8s %9s %8s %9s  %s" % ("case", "step ms", "max ms", "practic.", "tokens/s", "GPU GiB",
                                                "pinned", "breakdown ms"))
    for name, r in results.items():
        if r["status"] != "ok":
            print("%-28s %s: %s" % (name, r["status"], r["message"]))
            continue
        prac = "%.1f%%" % (100 * base / r["step_ms"]) if base else "-"
        breakdown = " ".join("%s %.1f" % (k, v) for k, v in r["timers"].items() if v is not None)
        print("%-28s %9.1f %9.1f %8s %9.0f %8.1f %9.1f  %s" % (name, r["step_ms"], r["max_step_ms"], prac,
                                                              r["tokens_per_s"], r["gpu_peak_gib"], r["pinned_gib"],
                                                              breakdown))
    json.dump(results, open(os.path.join(out_root, "results.json"), "w"), indent=1)


if __name__ == "__main__":
    sys.exit(main())
