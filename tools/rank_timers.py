#!/usr/bin/env python3
"""Where the slow steps of runs went, from their steps.jsonl written with run.rank_timers = true.

For each run directory: mean, median and slowest step (after --skip steps), the slowest over the
median, and for every step over --slow x the median, which rank took longest and the timers in
which that rank (and the step's other ranks) differ most from their medians over the run.
usage: tools/rank_timers.py [--skip N] [--slow X] RUN_DIR...
"""
import argparse
import json
import os
import statistics


def load(run_dir):
    with open(os.path.join(run_dir, "steps.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def report(run_dir, skip, slow):
    steps = load(run_dir)[skip:]
    if not steps:
        print(f"{run_dir}: no steps after the first {skip}")
        return
    ms = [s["step_ms"] for s in steps]
    median = statistics.median(ms)
    print(f"{os.path.basename(run_dir.rstrip('/'))}: mean {statistics.mean(ms):.1f} ms, median {median:.1f}, "
          f"slowest {max(ms):.1f} ({max(ms) / median:.2f}x median), steps {steps[0]['step']}-{steps[-1]['step']}")
    if "rank_timers_ms" not in steps[0]:
        print("  (no rank_timers_ms: run with --set run.rank_timers=true)")
        return
    names = list(steps[0]["rank_timers_ms"])
    ranks = len(steps[0]["rank_step_ms"])
    # Each timer's median over the run, per rank.
    medians = {n: [statistics.median(s["rank_timers_ms"][n][r] for s in steps if n in s["rank_timers_ms"])
                   for r in range(ranks)] for n in names}
    for n in names:
        if any(m > 0.5 for m in medians[n]):
            print(f"  median {n:>22}: " + " ".join(f"{m:8.1f}" for m in medians[n]))
    for s in steps:
        if s["step_ms"] <= slow * median:
            continue
        by_rank = s["rank_step_ms"]
        worst = max(range(ranks), key=lambda r: by_rank[r])
        excess = sorted(((s["rank_timers_ms"][n][r] - medians[n][r], n, r) for n in names if n in s["rank_timers_ms"]
                         for r in range(ranks)), reverse=True)[:4]
        said = ", ".join(f"{n} on rank {r} +{d:.1f}" for d, n, r in excess if d > 0.5)
        print(f"  step {s['step']}: {s['step_ms']:.1f} ms ({s['step_ms'] / median:.2f}x), update "
              f"{s.get('update', '-')}, ranks " + "/".join(f"{x:.0f}" for x in by_rank) +
              f"; longest rank {worst}; over the median: {said or 'nothing over 0.5 ms'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--skip", type=int, default=3, help="steps left out at the start (default 3)")
    parser.add_argument("--slow", type=float, default=1.10, help="a slow step is over this x the median (1.10)")
    parser.add_argument("runs", nargs="+")
    args = parser.parse_args()
    for run_dir in args.runs:
        report(run_dir, args.skip, args.slow)


if __name__ == "__main__":
    main()
