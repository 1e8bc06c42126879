#!/usr/bin/env python3
"""Fine-tune, export, then load the export in transformers and generate: what a user does.

Fine-tunes tests/fixtures/hf/gpt2_tokenizer (a tiny GPT-2 saved by transformers with its tokenizer)
for a few steps on a fixed text (written here, so that no edit elsewhere changes what it learns),
exports it with checkpoint.export_hf, and checks that
  - config.json keeps the checkpoint's token ids and dropout, generation_config.json has its eos,
    and the tokenizer files are copied beside the weights;
  - AutoModelForCausalLM.from_pretrained + AutoTokenizer load it with no missing weight, and a
    greedy generate() writes the same text as zfcore's own greedy sample of the same model;
  - checkpoint.export_dtype = "float32" of a bfloat16 run exports the fp32 master weights: they
    round to the bfloat16 export of the same run, and carry more precision than it.
Exits 4 (skipped) when transformers is not importable.
Usage: check_transformers_export.py ZFCORE SOURCE_DIR SCRATCH_DIR
"""
import json
import os
import shutil
import subprocess
import sys

try:
    import torch
    import transformers
    from safetensors.torch import load_file
except ImportError as error:
    print(f"SKIP: the Python package transformers is not importable ({error}); tools/setup.sh installs it")
    sys.exit(4)

zfcore, source, scratch = sys.argv[1:4]
fixture = os.path.join(source, "tests", "fixtures", "hf", "gpt2_tokenizer")
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
PROMPT = "The quick brown"
TEXT = """The quick brown fox jumps over the lazy dog. The dog does not move, and the fox runs on into the
field, where the grass is long and the wind comes from the hills. A farmer walks along the fence in the
morning and counts his sheep: one, two, three, four, five. The sheep are white, the fence is brown, and
the sky is grey before the rain. When the rain comes, the farmer goes back to the house and makes a fire.
He reads a book about the sea, the ships that cross it, and the people who wait for them in the ports.
The quick brown fox sleeps under a tree at the edge of the wood until the rain stops. Then it runs back
across the field, past the sheep and the fence, and the dog watches it go without getting up.
In the evening the farmer writes a letter to his sister in the town. He tells her about the sheep, the
rain, the fox and the dog, and asks when she will come to visit. The letter is short, and he reads it
twice before he folds it and puts it by the door, so that he will not forget it in the morning.
"""
train_text = os.path.join(scratch, "train.txt")
with open(train_text, "w") as f:
    f.write(TEXT * 4)


def run(name, *overrides):
    """Fine-tunes the fixture; returns the export directory and zfcore's output."""
    export = os.path.join(scratch, name)
    config = os.path.join(scratch, name + ".toml")
    with open(config, "w") as f:
        f.write(f"""[run]
output_dir = "{export}-run"
progress = "off"
[model]
init_from = "{fixture}"
[data]
type = "text"
path = "{train_text}"
tokenizer = "hf"
tokenizer_path = "{fixture}"
seq_len = 15
[train]
steps = 4
micro_batch = 4
[optimizer]
lr = 0.001
[sample]
tokens = 8
temperature = 0.0
prompt = "{PROMPT}"
[checkpoint]
export_hf = "{export}"
""")
    command = [zfcore, "run", config] + [f"--set={o}" for o in overrides]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    return export, result.stdout


failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


# 1. The export has what transformers users expect beside the weights.
export, output = run("float32")
config = json.load(open(os.path.join(export, "config.json")))
source_config = json.load(open(os.path.join(fixture, "config.json")))
for key in ("bos_token_id", "eos_token_id", "resid_pdrop", "embd_pdrop", "attn_pdrop"):
    check(config.get(key) == source_config[key], f"config.json keeps {key} = {source_config[key]}")
generation = json.load(open(os.path.join(export, "generation_config.json")))
check(generation.get("eos_token_id") == source_config["eos_token_id"], "generation_config.json has the eos id")
for name in ("tokenizer.json", "tokenizer_config.json"):
    same = open(os.path.join(export, name), "rb").read() == open(os.path.join(fixture, name), "rb").read()
    check(same, f"{name} copied beside the weights")

# 2. transformers loads it with its tokenizer and generates what zfcore's greedy sample wrote.
model, info = transformers.AutoModelForCausalLM.from_pretrained(export, output_loading_info=True)
tokenizer = transformers.AutoTokenizer.from_pretrained(export)
check(not any(info.values()), f"from_pretrained: no missing or unexpected weights {info}")
inputs = tokenizer(PROMPT, return_tensors="pt")
with torch.no_grad():
    generated = model.eval().generate(**inputs, do_sample=False, max_new_tokens=8)
text = PROMPT + tokenizer.decode(generated[0, inputs["input_ids"].shape[1]:], skip_special_tokens=True)
marker = "temperature 0):\n"
zf_text = output[output.index(marker) + len(marker):].split("\nzfcore: ")[0] if marker in output else None
check(zf_text == text, f"generate() writes zfcore's greedy sample: {text!r} vs {zf_text!r}")

# 3. export_dtype: a bfloat16 run's fp32 master, and the same run exported in its compute dtype.
master_dir, _ = run("master", "model.dtype=bfloat16", "checkpoint.export_dtype=float32")
working_dir, _ = run("working", "model.dtype=bfloat16")
master = load_file(os.path.join(master_dir, "model.safetensors"))
working = load_file(os.path.join(working_dir, "model.safetensors"))
check(all(t.dtype == torch.float32 for t in master.values()), "export_dtype = float32 writes float32 tensors")
check(all(t.dtype == torch.bfloat16 for t in working.values()), "export_dtype = auto writes the compute dtype")
check(all(torch.equal(master[k].to(torch.bfloat16), working[k]) for k in working),
      "the float32 export rounds to the bfloat16 export (the same weights)")
check(any(not torch.equal(master[k], working[k].float()) for k in working),
      "the float32 export has the master's precision, not bf16 values widened")
check(json.load(open(os.path.join(master_dir, "config.json")))["torch_dtype"] == "float32",
      "config.json says float32")
transformers.AutoModelForCausalLM.from_pretrained(master_dir)

print(f"{checks} checks, {len(failures)} failing")
sys.exit(1 if failures else 0)
