#!/usr/bin/env python3
"""A byte-tokenizer model's export loads in transformers as trained: what a user does with it.

Trains the quickstart's tiny GPT (one byte per token) for a few steps with checkpoint.export_hf, then
  - AutoTokenizer.from_pretrained(export) encodes text (ASCII, multi-byte UTF-8, control characters)
    to the ids zfcore trained on, its bytes, and decodes them back; eos is id 256;
  - AutoModelForCausalLM + generate() greedily write what zfcore's own greedy sample wrote;
  - a model of vocab 256 (the bytes alone, no row for EOS) gets a tokenizer without EOS: text that
    holds "<|endoftext|>" encodes to its bytes and runs through the model (id 256 would be an
    IndexError), as it runs through the vocab-257 model, where it is id 256.
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
export256 = os.path.join(scratch, "export256")
command256 = [zfcore, "run", os.path.join(source, "examples", "quickstart.toml"),
              f"--set=run.output_dir={scratch}/run256", "--set=run.progress=off", "--set=train.steps=2",
              "--set=train.eval_every=0", "--set=train.micro_batch=4", "--set=model.hidden=64", "--set=model.vocab=256",
              "--set=sample.tokens=0", f"--set=checkpoint.export_hf={export256}"]
result256 = subprocess.run(command256, capture_output=True, text=True)
if result256.returncode != 0:
    sys.exit(f"FAIL: {' '.join(command256)} exited {result256.returncode}:\n{result256.stdout}\n{result256.stderr}")

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

EOT_TEXT = "one<|endoftext|>two"
for directory, vocab in ((export, 257), (export256, 256)):
    tok = transformers.AutoTokenizer.from_pretrained(directory)
    ids = tok(EOT_TEXT)["input_ids"]
    want = list(b"one") + [256] + list(b"two") if vocab == 257 else list(EOT_TEXT.encode("utf-8"))
    check(ids == want, f"vocab {vocab}: {EOT_TEXT!r} encodes to {ids}")
    check(max(ids) < vocab, f"vocab {vocab}: every id has a row in the model's embedding")
    check(tok.eos_token_id == (256 if vocab == 257 else None), f"vocab {vocab}: eos {tok.eos_token_id}")
    lm = transformers.AutoModelForCausalLM.from_pretrained(directory)
    try:
        with torch.no_grad():
            logits = lm.eval()(**tok(EOT_TEXT, return_tensors="pt")).logits
        check(logits.shape[-1] == vocab, f"vocab {vocab}: the model runs on {EOT_TEXT!r}")
    except IndexError as error:
        check(False, f"vocab {vocab}: the model runs on {EOT_TEXT!r}: {error}")

if failures:
    sys.exit(f"FAIL: {len(failures)} check(s): {failures}")
print("PASS")
