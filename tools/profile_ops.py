#!/usr/bin/env python3
"""GPU time by kind of operation from a Chrome trace of torch's profiler: zfcore's (ZF_PROFILE=FILE.json:FIRST:COUNT,
core/runtime/profile.hpp) or the torch peer's (tools/torch_eager_bench.py --profile FILE.json). Sums the kernels'
durations per kind (GEMM, attention, zfcore's fused kernels, norms, softmax and loss, elementwise, reductions,
copies, optimizer, communication, other) and prints one line of JSON per trace: per step, milliseconds and shares of
the GPU's busy time, the GEMM share, and the largest kernels.

usage: profile_ops.py TRACE.json[:STEPS] [TRACE.json[:STEPS] ...] [--markdown]
  STEPS: how many steps the trace holds (default 2), to report per step
  --markdown: also a table of the kinds, a column per trace (for docs/gpu.md)
"""
import json
import sys
from collections import defaultdict

# First match wins; names are lower-cased. cuBLAS/cuBLASLt kernels on Hopper are nvjet_*, sm90_xmma_*, cutlass_*.
KINDS = [
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "matmul", "splitkreduce")),
    ("attention", ("flash", "fmha", "attention", "cudnn", "sdpa", "softmax_warp_forward_attn")),
    ("zfcore fused", ("norm_forward", "norm_backward", "glu_forward_kernel", "glu_backward_kernel", "rope_kernel")),
    ("norm", ("rms_norm", "rmsnorm", "layer_norm", "layernorm", "rowwisemoments", "compute_stats")),
    ("softmax, loss", ("softmax", "nll_loss", "cross_entropy", "logsumexp", "log_softmax")),
    ("optimizer", ("adam", "multi_tensor_apply", "fused_adam")),
    ("communication", ("nccl",)),
    ("copy, cast", ("copy", "memcpy", "memset", "cat_", "catarray", "index_put", "fill")),
    ("reduction", ("reduce", "sum_", "norm_kernel")),
    ("elementwise", ("elementwise", "vectorized", "unrolled", "pointwise", "triton_")),
]


def kind_of(name):
    lower = name.lower()
    for kind, needles in KINDS:
        if any(n in lower for n in needles):
            return kind
    return "other"


def summarize(path, steps):
    with open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    by_kind, by_name = defaultdict(float), defaultdict(float)
    begin, end = None, None
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        us = float(e.get("dur", 0))
        name = e.get("name", "?")
        by_kind[kind_of(name) if e["cat"] == "kernel" else "copy, cast"] += us
        by_name[name] += us
        start = float(e["ts"])
        begin = start if begin is None else min(begin, start)
        end = start + us if end is None else max(end, start + us)
    busy = sum(by_kind.values())
    result = {
        "trace": path, "steps": steps,
        "gpu_busy_ms_per_step": round(busy / 1e3 / steps, 2),
        "gpu_span_ms_per_step": round(((end or 0) - (begin or 0)) / 1e3 / steps, 2),
        "gemm_share": round(by_kind["gemm"] / busy, 4) if busy else 0,
        "ms_per_step": {k: round(v / 1e3 / steps, 2) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "share": {k: round(v / busy, 4) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])} if busy else {},
        "top_kernels_ms_per_step": {n[:120]: round(v / 1e3 / steps, 2)
                                    for n, v in sorted(by_name.items(), key=lambda kv: -kv[1])[:15]},
    }
    return result


def main(argv):
    markdown = "--markdown" in argv
    results = []
    for arg in [a for a in argv if a != "--markdown"]:
        path, _, steps = arg.partition(".json:")
        path = path + ".json" if steps or not path.endswith(".json") else path
        results.append(summarize(path, int(steps) if steps else 2))
        print(json.dumps(results[-1]))
    if markdown and results:
        kinds = [k for k, _ in KINDS] + ["other"]
        print("| kind | " + " | ".join(r["trace"] for r in results) + " |")
        print("|---|" + "---|" * len(results))
        for k in kinds:
            cells = ["%.2f ms (%.1f%%)" % (r["ms_per_step"].get(k, 0), 100 * r["share"].get(k, 0)) for r in results]
            print("| %s | %s |" % (k, " | ".join(cells)))
        print("| GPU busy per step | " + " | ".join("%.2f ms" % r["gpu_busy_ms_per_step"] for r in results) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    main(sys.argv[1:])
