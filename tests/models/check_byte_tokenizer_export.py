#!/usr/bin/env python3
"""A byte-tokenizer model's export loads in transformers as trained: what a user does with it.

Trains the quickstart's tiny GPT (one byte per token) for a few steps with checkpoint.export_hf, then
  - AutoTokenizer.from_pretrained(export) encodes text (ASCII, multi-byte UTF-8, control characters)
    to the ids zfcore trained on, its bytes, and decodes them back; eos is id 256;
  - AutoModelForCausalLM + generate() greedily write what zfcore's own greedy sample wrote.
Exits 4 (skipped) when transformers is not importable.
Usage: check_byte_tokenizer_export.py ZFCORE SOURCE_DIR SCRATCH_DIR
"""
import os
import shutil
import subprocess
import sys

try:
    import torch
    import transformers
except ImportError as error:
    print(f"SKIP: the Python package transformers is not importable ({error}); tools/setup.sh --tests installs it")
    sys.exit(4)

zfcore, source, scratch = sys.argv[1:4]
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
export = os.path.join(scratch, "export")
PROMPT = "The GNU"
command = [zfcore, "run", os.path.join(source, "examples", "quickstart.toml"),
           f"--set=run.output_dir={scratch}/run", "--set=run.progress=off", "--set=train.steps=40",
           "--set=train.eval_every=0", "--set=train.micro_batch=4", "--set=model.hidden=64",
           "--set=sample.tokens=8", "--set=sample.temperature=0.0", f"--set=sample.prompt={PROMPT}",
           f"--set=checkpoint.export_hf={export}"]
result = subprocess.run(command, capture_output=True, text=True)
if result.returncode != 0:
    sys.exit(f"FAIL: {' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")

failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


tokenizer = transformers.AutoTokenizer.from_pretrained(export)
for text in ("Hello", "The GNU General Public License, version 3.\n", "wörld ☃ \t\x01 end", ""):
    ids = tokenizer(text)["input_ids"]
    check(ids == list(text.encode("utf-8")), f"{text!r} encodes to its bytes: {ids[:12]}")
    check(tokenizer.decode(ids) == text, f"{text!r} decodes back")
check(tokenizer.eos_token_id == 256, f"eos is id 256 (zfcore's end of text): {tokenizer.eos_token_id}")

model = transformers.AutoModelForCausalLM.from_pretrained(export)
inputs = tokenizer(PROMPT, return_tensors="pt")
with torch.no_grad():
    generated = model.eval().generate(**inputs, do_sample=False, max_new_tokens=8, pad_token_id=256)
new = generated[0, inputs["input_ids"].shape[1]:].tolist()
text = PROMPT + tokenizer.decode(new, skip_special_tokens=True)
marker = "temperature 0):\n"
output = result.stdout
zf_text = output[output.index(marker) + len(marker):].split("\nzfcore: ")[0] if marker in output else None
check(zf_text == text, f"generate() writes zfcore's greedy sample: {text!r} vs {zf_text!r}")

if failures:
    sys.exit(f"FAIL: {len(failures)} check(s): {failures}")
print("PASS")
