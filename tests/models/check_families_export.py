#!/usr/bin/env python3
"""Every family trains, exports and loads in transformers with the loss zfcore computes.

For each fixture of tests/fixtures/families (tools/make_family_fixtures.py): zfcore trains it 3 steps
from model.init_from on random token windows and exports it with checkpoint.export_hf; then
  - the export's config.json has every key of the fixture's, with the same values (dtype aside);
  - transformers loads it as the same class with no missing or unexpected weight, and its weights moved;
  - an image-text fixture's tensors outside the language model (vision tower, MTP) are in it unchanged;
  - Gemma 4's layer scalars (buffers transformers never trains) are in it unchanged;
  - `zfcore eval` of the export and transformers' loss agree (1e-5) on windows of the fixture's own
    sequences (zfcore's windows of seq_len + 1 ids start every seq_len ids).
gpt-oss's MXFP4 fixture (its experts quantised) trains and exports unquantised: no quantization_config, no
NAME_blocks / NAME_scales, said in zfcore's log, and transformers' loss on it is zfcore's.
Then each family given by type alone (random weights) trains a step and exports a config.json that
transformers loads as the same model: no missing weight, the same loss as `zfcore eval`.
Exits 4 (skipped) when transformers is not importable.
Usage: check_families_export.py ZFCORE SOURCE_DIR SCRATCH_DIR
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
    from safetensors.torch import load_file
except ImportError as error:
    print(f"SKIP: the Python package transformers is not importable ({error}); tools/setup.sh installs it")
    sys.exit(4)

zfcore, source, scratch = sys.argv[1:4]
fixtures = os.path.join(source, "tests", "fixtures", "families")
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
SEQ_LEN = 31  # windows of 32 ids: the fixtures' sequence length
failures = []


def check(ok, what):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        failures.append(what)


def shard(path, ids, vocab):
    with open(path, "wb") as f:
        f.write(struct.pack("<8sIIQQ32x", b"ZFTOKENS", 1, 2, len(ids), vocab))
        f.write(array.array("H", ids).tobytes())


logs = []  # every zfcore command's stdout and stderr


def zfcore_command(*args):
    result = subprocess.run([zfcore, *args], capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: zfcore {' '.join(args)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}")
    logs.append(result.stdout + result.stderr)
    return result.stdout


def zfcore_eval(work, export):
    """`zfcore eval --json` of the export on WORK/held_out.bin."""
    with open(os.path.join(work, "eval.toml"), "w") as f:
        f.write(f"""[run]
output_dir = "{work}/eval"
[model]
init_from = "{export}"
[data]
type = "tokens"
eval_path = "{work}/held_out.bin"
seq_len = {SEQ_LEN}
[train]
micro_batch = 2
eval_batches = 10
""")
    return json.loads(zfcore_command("eval", os.path.join(work, "eval.toml"), "--json").strip().splitlines()[-1])


def held_out_windows(work, ids, vocab):
    """WORK/held_out.bin of `ids`, and the windows zfcore evaluates there: 32 ids starting every 31."""
    shard(os.path.join(work, "held_out.bin"), ids, vocab)
    return torch.tensor([ids[i * SEQ_LEN:i * SEQ_LEN + SEQ_LEN + 1] for i in range((len(ids) - 1) // SEQ_LEN)])


def train_and_export(work, tables):
    """`zfcore run` of `tables` ([model], [data], [train], ...) exporting to WORK/export; returns that path."""
    export = os.path.join(work, "export")
    with open(os.path.join(work, "train.toml"), "w") as f:
        f.write(f"""[run]
output_dir = "{work}/run"
progress = "off"
{tables}[checkpoint]
export_hf = "{export}"
""")
    zfcore_command("run", os.path.join(work, "train.toml"))
    return export


def check_export(label, work, export, windows):
    """transformers loads the export with no missing or unexpected weight, and its loss on the windows is
    `zfcore eval`'s; returns the model."""
    report = zfcore_eval(work, export)
    # The class config.json names (an image-text checkpoint's conditional-generation class, run on text).
    model_class = getattr(transformers, json.load(open(os.path.join(export, "config.json")))["architectures"][0])
    model, info = model_class.from_pretrained(export, dtype=torch.float32, output_loading_info=True)
    model.eval()
    check(not info["missing_keys"] and not info["unexpected_keys"],
          f"{label}: loads as {type(model).__name__}, no missing or unexpected weight "
          f"({info['missing_keys']}, {info['unexpected_keys']})")
    with torch.no_grad():
        expected = model(input_ids=windows, labels=windows).loss.item()
        text_config = model.config.get_text_config()  # an image-text model's: its language model's
        if getattr(text_config, "output_router_logits", False):
            # The load-balancing loss is over the rows the model runs: zfcore runs the positions that have a
            # target (a window's last id is only a target), so transformers runs those too here. It is not
            # linear in the rows: each micro-batch of eval.toml's 2 windows has its own, weighted by its
            # positions as zfcore averages its micro-batches (the cross-entropy is the mean over positions).
            ce, aux, positions = 0.0, 0.0, 0
            for start in range(0, windows.shape[0], 2):
                part = windows[start:start + 2]
                out = model(input_ids=part[:, :-1])
                ce += torch.nn.functional.cross_entropy(out.logits.flatten(0, 1), part[:, 1:].flatten(),
                                                        reduction="sum").item()
                aux += out.aux_loss.item() * part[:, 1:].numel()
                positions += part[:, 1:].numel()
            expected = (ce + text_config.router_aux_loss_coef * aux) / positions
    check(report["sequences"] == windows.shape[0], f"{label}: zfcore evaluated {report['sequences']} windows")
    check(abs(report["loss"] - expected) <= 1e-5 * abs(expected),
          f"{label}: zfcore's loss {report['loss']!r} == transformers' {expected!r} on the export")
    return model


for name in sorted(os.listdir(fixtures)):
    fixture = os.path.join(fixtures, name)
    source_config = json.load(open(os.path.join(fixture, "config.json")))
    vocab = source_config.get("text_config", source_config)["vocab_size"]
    work = os.path.join(scratch, name)
    os.makedirs(work)
    train = torch.randint(vocab, (SEQ_LEN * 8 + 1,), generator=torch.Generator().manual_seed(1)).tolist()
    shard(os.path.join(work, "train.bin"), train, vocab)
    # The fixture's own sequences end to end.
    sequences = load_file(os.path.join(fixture, "expected.safetensors"))["input_ids"]
    windows = held_out_windows(work, sequences.reshape(-1).tolist(), vocab)
    export = train_and_export(work, f"""[model]
init_from = "{fixture}"
[data]
type = "tokens"
path = "{work}/train.bin"
seq_len = {SEQ_LEN}
[train]
steps = 3
micro_batch = 2
[optimizer]
lr = 0.01
""")
    config = json.load(open(os.path.join(export, "config.json")))
    changed = [k for k, v in source_config.items() if k not in ("dtype", "torch_dtype") and config.get(k) != v]
    check(not changed, f"{name}: the export's config.json keeps every key of the fixture's (differing: {changed})")
    model = check_export(name, work, export, windows)
    original = getattr(transformers, source_config["architectures"][0]).from_pretrained(fixture, dtype=torch.float32)
    check(type(model) is type(original), f"{name}: loads as {type(original).__name__} ({type(model).__name__})")
    if "text_config" in source_config:  # what zfcore does not train goes through as it was
        stored, exported = load_file(os.path.join(fixture, "model.safetensors")), load_file(
            os.path.join(export, "model.safetensors"))
        frozen = [k for k in stored if "language_model" not in k and k != "lm_head.weight"]
        same = [k for k in frozen if k in exported and torch.equal(stored[k], exported[k])]
        check(frozen and same == frozen, f"{name}: the export holds the {len(frozen)} tensors outside the language "
              f"model unchanged ({len(same)} are)")
    moved = any(not torch.equal(a, b) for a, b in zip(model.state_dict().values(), original.state_dict().values()))
    check(moved, f"{name}: 3 steps changed the weights")
    fixed = [k for k, v in original.state_dict().items() if k.endswith("layer_scalar")]  # Gemma 4's buffers
    if fixed:
        kept = [k for k in fixed if torch.equal(model.state_dict()[k], original.state_dict()[k])]
        check(kept == fixed, f"{name}: training kept the {len(fixed)} layer scalars as they were ({len(kept)} are)")

# gpt-oss's experts in MXFP4: dequantised at load, exported unquantised, its quantization_config dropped.
quantized = os.path.join(source, "tests", "fixtures", "gpt_oss_mxfp4")
work = os.path.join(scratch, "gpt_oss_mxfp4")
os.makedirs(work)
shard(os.path.join(work, "train.bin"), torch.randint(96, (SEQ_LEN * 8 + 1,), generator=torch.Generator().manual_seed(1)).tolist(), 96)
sequences = load_file(os.path.join(fixtures, "gpt_oss", "expected.safetensors"))["input_ids"]
windows = held_out_windows(work, sequences.reshape(-1).tolist(), 96)
export = train_and_export(work, f"""[model]
init_from = "{quantized}"
[data]
type = "tokens"
path = "{work}/train.bin"
seq_len = {SEQ_LEN}
[train]
steps = 3
micro_batch = 2
""")
config = json.load(open(os.path.join(export, "config.json")))
check("quantization_config" not in config and json.load(open(os.path.join(quantized, "config.json")))
      ["quantization_config"]["quant_method"] == "mxfp4", "gpt_oss_mxfp4: the export's config.json has no "
      "quantization_config")
exported = load_file(os.path.join(export, "model.safetensors"))
check(not [k for k in exported if k.endswith(("_blocks", "_scales"))] and
      exported["model.layers.0.mlp.experts.gate_up_proj"].shape == (8, 32, 64),
      "gpt_oss_mxfp4: the export holds the experts unquantised, as 3-D tensors")
check("MXFP4" in logs[-1] and "quantization_config" in logs[-1],
      "gpt_oss_mxfp4: zfcore's log says the experts were dequantised and the quantization_config dropped")
check_export("gpt_oss_mxfp4", work, export, windows)

# A model given by type alone (random weights) exports a config.json that transformers reads as the same model.
TYPES = ["llama", "qwen2", "qwen3", "mistral", "ministral3", "olmo2", "olmo3", "gemma3_text", "phi3", "smollm3",
         "granite", "gemma4_text", "qwen3_5_text",  # qwen3_5_text: 4 layers, its first full-attention layer is the 4th
         "qwen3_moe", "mixtral", "olmoe", "gpt_oss",  # 8 experts of width `intermediate`, 2 per token
         "qwen3_5_moe_text"]  # and a shared expert of that width; 4 layers, as qwen3_5_text
for family in TYPES:
    work = os.path.join(scratch, "type-" + family)
    os.makedirs(work)
    ids = torch.randint(96, (SEQ_LEN * 2 + 1,), generator=torch.Generator().manual_seed(2)).tolist()
    windows = held_out_windows(work, ids, 96)
    export = train_and_export(work, f"""[model]
type = "{family}"
hidden = 32
layers = {4 if family.startswith("qwen3_5") else 2}
heads = 4
kv_heads = 2
intermediate = 48
vocab = 96
max_seq = 64
[data]
type = "synthetic"
vocab = 96
seq_len = {SEQ_LEN}
[train]
steps = 1
micro_batch = 2
""")
    check_export(f"type {family}", work, export, windows)

print(f"{len(failures)} failures")
sys.exit(1 if failures else 0)
