#!/usr/bin/env python3
"""zfcore eval against transformers: the same tiny GPT-2 on the same token windows gives the same loss.

Writes a token shard of random ids (docs/data.md's format), runs `zfcore eval --json` with
model.init_from = tests/fixtures/hf/gpt2 and data.eval_path = the shard (seq_len 15: windows of 16
ids starting every 15), and computes transformers' loss with labels = input_ids on those windows.
Exits 4 (skipped) when transformers is not importable.
Usage: check_transformers_eval.py ZFCORE SOURCE_DIR SCRATCH_DIR
"""
import array
import json
import os
import shutil
import struct
import subprocess
import sys

try:
    import torch
    import transformers
except ImportError as error:
    print(f"SKIP: the Python package transformers is not importable ({error}); tools/setup.sh installs it")
    sys.exit(4)

zfcore, source, scratch = sys.argv[1:4]
fixture = os.path.join(source, "tests", "fixtures", "hf", "gpt2")
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)

SEQ_LEN, WINDOWS = 15, 10
vocab = json.load(open(os.path.join(fixture, "config.json")))["vocab_size"]
generator = torch.Generator().manual_seed(7)
ids = torch.randint(vocab, (SEQ_LEN * WINDOWS + 1,), generator=generator).tolist()
shard = os.path.join(scratch, "held_out.bin")
with open(shard, "wb") as f:
    f.write(struct.pack("<8sIIQQ32x", b"ZFTOKENS", 1, 2, len(ids), vocab))
    f.write(array.array("H", ids).tobytes())

config = os.path.join(scratch, "eval.toml")
with open(config, "w") as f:
    f.write(f"""[run]
output_dir = "{os.path.join(scratch, "run")}"
[model]
init_from = "{fixture}"
[data]
type = "tokens"
eval_path = "{shard}"
seq_len = {SEQ_LEN}
[train]
micro_batch = 4
eval_batches = 100
""")
result = subprocess.run([zfcore, "eval", config, "--json"], capture_output=True, text=True)
if result.returncode != 0:
    sys.exit(f"FAIL: zfcore eval exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
report = json.loads(result.stdout.strip().splitlines()[-1])

model = transformers.AutoModelForCausalLM.from_pretrained(fixture, dtype=torch.float32).eval()
windows = torch.tensor([ids[i * SEQ_LEN:i * SEQ_LEN + SEQ_LEN + 1] for i in range(WINDOWS)])
with torch.no_grad():
    expected = model(input_ids=windows, labels=windows).loss.item()

failures = []
def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)

check(report["tokens"] == WINDOWS * SEQ_LEN, f"tokens {report['tokens']} == {WINDOWS * SEQ_LEN}")
check(report["sequences"] == WINDOWS, f"sequences {report['sequences']} == {WINDOWS}")
check(abs(report["loss"] - expected) <= 1e-5 * expected, f"loss {report['loss']!r} == transformers' {expected!r}")
check(report["step"] == 0 and "init_from" in report["weights"], f"weights from init_from ({report['weights']})")
sys.exit(1 if failures else 0)
