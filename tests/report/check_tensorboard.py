#!/usr/bin/env python3
"""A run's TensorBoard event files hold the scalars of steps.jsonl, read back by TensorBoard itself.

Trains linear_stack with evaluations and clipping, then loads OUTPUT_DIR/tensorboard with the
`tensorboard` package's EventAccumulator (what `tensorboard --logdir` uses) and checks that every
step of steps.jsonl is there under its tag: train/loss, train/learning_rate, train/grad_norm,
eval/loss (at the evaluated steps only), perf/step_ms, perf/tokens_per_s, memory/host_bytes and
timer/<timer>_ms for each timer, the optimizer step's as timer/optimizer_step_ms (no tag but
perf/step_ms ends in step_ms; float32 in the file: compared to 1e-6 relative). A run with
run.tensorboard = false writes no event file. A run of 4 steps (a checkpoint every 2) resumed from
step 2 adds a file that starts with a START session log at step 3, so that TensorBoard drops the old
file's steps 3 and 4 and shows each step once, with the resumed run's values. Exits 4 (skipped)
when tensorboard is not importable.
Usage: check_tensorboard.py ZFCORE SOURCE_DIR SCRATCH_DIR
"""
import glob
import json
import math
import os
import shutil
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
    from tensorboard.compat.proto.event_pb2 import SessionLog
except ImportError as error:
    print(f"SKIP: the Python package tensorboard is not importable ({error}); tools/setup.sh --tests installs it")
    sys.exit(4)

zfcore, source, scratch = sys.argv[1:4]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)


def run(out, *overrides):
    command = [zfcore, "run", os.path.join(source, "examples", "linear_stack.toml"), f"--set=run.output_dir={out}",
               "--set=run.progress=off", "--set=model.hidden=64", "--set=train.steps=8", "--set=train.micro_batch=16",
               "--set=data.eval_fraction=0.25", "--set=train.eval_every=3", "--set=train.clip_grad_norm=1"]
    command += [f"--set={o}" for o in overrides]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")


failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


out = os.path.join(scratch, "run")
run(out)
files = glob.glob(os.path.join(out, "tensorboard", "events.out.tfevents.*"))
check(len(files) == 1, f"one event file in OUTPUT_DIR/tensorboard: {files}")
events = EventAccumulator(os.path.join(out, "tensorboard"), size_guidance={"scalars": 0})
events.Reload()
tags = set(events.Tags()["scalars"])
steps = [json.loads(line) for line in open(os.path.join(out, "steps.jsonl"))]

expected = {}  # tag -> {step: value}
for s in steps:
    pairs = {"train/loss": s["loss"], "train/learning_rate": s["lr"], "train/grad_norm": s.get("grad_norm"),
             "eval/loss": s.get("eval_loss"), "perf/step_ms": s["step_ms"], "perf/tokens_per_s": s["tokens_per_s"],
             "memory/host_bytes": s["memory_bytes"]["host"]}
    for name, ms in s["timers_ms"].items():
        if not name.endswith("_microstep"):
            pairs[f"timer/{'optimizer_step' if name == 'step' else name}_ms"] = ms
    for tag, value in pairs.items():
        if value is not None:
            expected.setdefault(tag, {})[s["step"]] = value

check(expected["eval/loss"].keys() == {3, 6, 8}, f"steps.jsonl has eval_loss at steps 3, 6, 8")
for tag, values in sorted(expected.items()):
    if tag not in tags:
        check(False, f"{tag} is in the event file (tags: {sorted(tags)})")
        continue
    got = {e.step: e.value for e in events.Scalars(tag)}
    same = got.keys() == values.keys() and all(
        math.isclose(got[k], values[k], rel_tol=1e-6, abs_tol=1e-30) for k in values)
    check(same, f"{tag}: the steps and values of steps.jsonl ({len(values)} points)")

step_tags = [tag for tag in tags if tag.endswith("step_ms")]
check(sorted(step_tags) == ["perf/step_ms", "timer/optimizer_step_ms"] and "timer/step_ms" not in tags,
      f"one tag is the whole step (perf/step_ms), another the optimizer step: {sorted(step_tags)}")

off = os.path.join(scratch, "off")
run(off, "run.tensorboard=false")
check(not os.path.exists(os.path.join(off, "tensorboard")), "run.tensorboard = false writes no event file")

resumed = os.path.join(scratch, "resumed")
short = ["train.steps=4", "checkpoint.every=2", "train.eval_every=0"]
run(resumed, *short)
first = glob.glob(os.path.join(resumed, "tensorboard", "events.out.tfevents.*"))
step2 = glob.glob(os.path.join(resumed, "checkpoints", "step-*2"))
check(len(step2) == 1, f"a checkpoint of step 2: {step2}")
run(resumed, *short, f"checkpoint.resume={step2[0]}")
files = sorted(glob.glob(os.path.join(resumed, "tensorboard", "events.out.tfevents.*")))
check(len(files) == 2 and files[0] == first[0], f"the resumed run adds a file that sorts after the old one: {files}")
new_events = [e for e in EventFileLoader(files[-1]).Load() if not e.HasField("file_version")]
check(new_events and new_events[0].HasField("session_log") and new_events[0].session_log.status == SessionLog.START
      and new_events[0].step == 3, "the resumed run's first event is a START session log at step 3")
events = EventAccumulator(os.path.join(resumed, "tensorboard"), size_guidance={"scalars": 0})
events.Reload()
got = [(e.step, e.value) for e in events.Scalars("train/loss")]
want = [(s["step"], s["loss"]) for s in map(json.loads, open(os.path.join(resumed, "steps.jsonl")))]
check([step for step, _ in got] == [1, 2, 3, 4], f"TensorBoard shows steps 1-4 once each: {[s for s, _ in got]}")
check(len(got) == len(want) and all(g[0] == w[0] and math.isclose(g[1], w[1], rel_tol=1e-6) for g, w in zip(got, want)),
      "train/loss after the resume: the values of steps.jsonl")

# A run that stopped before its first checkpoint, started again: it starts over at step 1, and its
# file's START at step 1 makes TensorBoard drop the earlier file's steps, so that each shows once.
over = os.path.join(scratch, "over")
run(over, "train.steps=3", "train.eval_every=0", "checkpoint.final=false")
run(over, "train.steps=4", "train.eval_every=0")
files = sorted(glob.glob(os.path.join(over, "tensorboard", "events.out.tfevents.*")))
new_events = [e for e in EventFileLoader(files[-1]).Load() if not e.HasField("file_version")]
check(len(files) == 2 and new_events and new_events[0].HasField("session_log") and
      new_events[0].session_log.status == SessionLog.START and new_events[0].step == 1,
      "a run started over beside an earlier run's events begins with a START session log at step 1")
events = EventAccumulator(os.path.join(over, "tensorboard"), size_guidance={"scalars": 0})
events.Reload()
got = [e.step for e in events.Scalars("train/loss")]
check(got == [1, 2, 3, 4], f"TensorBoard shows the restarted run's steps 1-4 once each: {got}")

if failures:
    sys.exit(f"FAIL: {len(failures)} check(s): {failures}")
print("PASS")
