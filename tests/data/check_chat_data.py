#!/usr/bin/env python3
"""Chat, prompt-completion and text documents as a TRL user brings them, through zfcore.

- Token ids and loss masks: `zfcore prepare` of tests/fixtures/chat's prompt-completion pairs,
  text documents and (from Parquet) conversations writes the ids and masks TRL's SFTTrainer makes
  of them (expected.json, tools/make_chat_fixtures.py); check_chat_templates.py holds every chat
  template of the fixtures to TRL.
- Bad inputs (a missing role, an unknown role, no assistant turn, a template that raises, a missing
  field, invalid JSON) fail naming the file, the line and the field; conversations longer than
  seq_len are counted in the log with their lines.
- A CPU run on chat data learns (the held-out loss of the assistant's tokens falls), logs the loss
  rule and the share of counted tokens, reuses the prepared data in the next run and prepares it
  again when the template changes; its export carries the template; an Alpaca run's export carries
  the Alpaca prompt as its template, and both runs say so.
Exits 4 (skipped) without transformers or trl.
Usage: check_chat_data.py ZFCORE SOURCE_DIR SCRATCH_DIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

from token_shard import read_shard

try:
    import transformers
    import trl  # noqa: F401  (prepare_data.py swaps in TRL's training templates, as SFTTrainer does)
except ImportError as error:
    print(f"SKIP: {error}; pip install transformers==5.23.0 trl==1.16.0")
    sys.exit(4)

zfcore, source, scratch = sys.argv[1:4]
fixtures = os.path.join(source, "tests", "fixtures", "chat")
expected = json.load(open(os.path.join(fixtures, "expected.json")))
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
env = dict(os.environ, ZFCORE_PYTHON=sys.executable)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def config(name, table):
    path = os.path.join(scratch, name + ".toml")
    with open(path, "w") as f:
        f.write(table)
    return path


def zf(*args):
    return subprocess.run([zfcore, *args], capture_output=True, text=True, env=env)


def prepare(data_type, data, tokenizer, prepared, *more):
    cfg = config("prepare", f"""[data]
type = "{data_type}"
path = "{data}"
tokenizer = "hf"
tokenizer_path = "{tokenizer}"
prepared_dir = "{prepared}"
""")
    return zf("prepare", cfg, *more)


# Token ids and loss masks of prompt-completion pairs and text, against TRL (check_chat_templates.py holds every
# chat template to TRL; the Parquet check below runs one through zfcore).
prepared = os.path.join(scratch, "prepared")
for kind, file in (("prompt_completion", "prompt_completion.jsonl"), ("text", "text.jsonl")):
    docs = expected["qwen3"][kind]
    result = prepare(kind, os.path.join(fixtures, file), os.path.join(fixtures, "qwen3"), prepared)
    match = re.search(r"prepared in (\S+):", result.stdout)
    got = read_shard(os.path.join(match.group(1), "data.bin")) if result.returncode == 0 and match else []
    check(got == [(d["ids"], d["mask"]) for d in docs],
          f"qwen3 {kind}: {len(docs)} documents, ids and loss masks identical to TRL's {result.stderr[-800:]}")

# Parquet (what Hugging Face datasets saves) gives what JSON Lines gives.
try:
    import pyarrow
    import pyarrow.parquet
    rows = [json.loads(line) for line in open(os.path.join(fixtures, "conversations.jsonl"))]
    parquet = os.path.join(scratch, "conversations.parquet")
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), parquet)
    result = prepare("chat", parquet, os.path.join(fixtures, "qwen3"), prepared)
    match = re.search(r"prepared in (\S+):", result.stdout)
    got = read_shard(os.path.join(match.group(1), "data.bin")) if match else []
    check(got == [(d["ids"], d["mask"]) for d in expected["qwen3"]["chat"][:4]],
          f"Parquet conversations: ids and masks identical to TRL's {result.stderr[-300:]}")
except ImportError:
    print("skip Parquet: no pyarrow")

# Bad inputs: file, line and field.
qwen3 = os.path.join(fixtures, "qwen3")
BAD = [
    ("missing_role", "chat", qwen3, [{"messages": [{"role": "user", "content": "hi"}, {"content": "x"}]}],
     [":1:", "messages[1]", "no \"role\""]),
    ("unknown_role", "chat", qwen3, [{"messages": [{"role": "bot", "content": "hi"}]}],
     [":1:", "messages[0].role", "unknown role \"bot\""]),
    ("no_assistant", "chat", qwen3, [{"messages": [{"role": "user", "content": "hi"}]}],
     [":1:", "messages", "no assistant turn"]),
    ("template_raises", "chat", os.path.join(fixtures, "gemma3"),
     [{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                    {"role": "assistant", "content": "c"}]}],
     [":1:", "the chat template raised", "alternate"]),
    ("no_messages", "chat", qwen3, [{"text": "hi"}], [":1:", "no \"messages\""]),
    ("no_completion", "prompt_completion", qwen3, [{"prompt": "a", "completion": "b"}, {"prompt": "a"}],
     [":2:", "no \"completion\""]),
]
for name, kind, tokenizer, rows, words in BAD:
    path = os.path.join(scratch, name + ".jsonl")
    with open(path, "w") as f:
        f.write("\n".join(json.dumps(r) for r in rows) + "\n")
    result = prepare(kind, path, tokenizer, prepared)
    message = result.stderr
    check(result.returncode == 1 and all(w in message for w in [path] + words),
          f"bad input {name}: exit 1, names {words}: {message.strip()[-300:]}")
with open(os.path.join(scratch, "broken.jsonl"), "w") as f:
    f.write('{"messages": []}\n{"messages": [\n')
result = prepare("chat", os.path.join(scratch, "broken.jsonl"), qwen3, prepared)
check(result.returncode == 1 and "broken.jsonl:2:" in result.stderr and "not valid JSON" in result.stderr,
      f"invalid JSON names its line: {result.stderr.strip()[-200:]}")

# Without transformers, or without Python: the error gives the command that installs it.
fake = os.path.join(scratch, "no_transformers")
os.makedirs(os.path.join(fake, "transformers"))
with open(os.path.join(fake, "transformers", "__init__.py"), "w") as f:
    f.write("raise ImportError('not installed')\n")
with open(os.path.join(fake, "python"), "w") as f:
    f.write(f"#!/bin/sh\nPYTHONPATH={fake} exec {sys.executable} \"$@\"\n")
os.chmod(os.path.join(fake, "python"), 0o755)
conversations = os.path.join(fixtures, "conversations.jsonl")
for python, words in ((os.path.join(fake, "python"), [f"{sys.executable} -m pip install 'transformers'"]),
                      (os.path.join(fake, "absent"), ["python3 -m pip install transformers", "ZFCORE_PYTHON"])):
    env["ZFCORE_PYTHON"] = python
    result = prepare("chat", conversations, qwen3, os.path.join(scratch, "prepared_fake"))
    check(result.returncode == 1 and all(w in result.stderr for w in words),
          f"{os.path.basename(python)}: the error says how to install: {result.stderr.strip()[-300:]}")
env["ZFCORE_PYTHON"] = sys.executable

# A CPU run that learns, with the log's loss rule, reuse, re-preparation and the export's template.
tokenizer = os.path.join(scratch, "tokenizer")
shutil.copytree(qwen3, tokenizer)
rows = []
for i in range(40):
    a, b = i % 7, (i * 3) % 5
    rows.append({"messages": [{"role": "system", "content": "Add."},
                              {"role": "user", "content": f"{a} plus {b}?"},
                              {"role": "assistant", "content": f"{a + b}. Yes, {a} and {b} make {a + b}."}]})
train = os.path.join(scratch, "train.jsonl")
with open(train, "w") as f:
    f.write("\n".join(json.dumps(r) for r in rows) + "\n")
export = os.path.join(scratch, "export")


def train_run(name, data_type="chat", path=train, steps=60, seq_len=96, extra=""):
    cfg = config(name, f"""[run]
output_dir = "{os.path.join(scratch, name)}"
progress = "off"
[model]
type = "qwen3"
hidden = 64
layers = 2
heads = 4
kv_heads = 2
intermediate = 128
vocab = 512
[data]
type = "{data_type}"
path = "{path}"
tokenizer = "hf"
tokenizer_path = "{tokenizer}"
prepared_dir = "{prepared}"
seq_len = {seq_len}
eval_fraction = 0.2
{extra}
[train]
steps = {steps}
micro_batch = 8
eval_every = {steps}
eval_batches = 2
[optimizer]
lr = 0.003
[checkpoint]
final = false
export_hf = "{export}-{name}"
""")
    return zf("run", cfg)


first = train_run("learn")
log = first.stdout + first.stderr
check(first.returncode == 0, f"chat run exits 0: {log[-1500:] if first.returncode else ''}")
share = re.search(r"loss on \{% generation %\} spans of TRL's training variant of the chat template: (\d+) of (\d+) "
                  r"tokens counted \((\d+\.\d)%\)", log)
check(bool(share) and 0 < int(share.group(1)) < int(share.group(2)), "the log gives the loss rule and the share of "
      f"counted tokens: {share.group(0) if share else log[-800:]}")
steps_loss = [float(x) for x in re.findall(r"step\s+\d+[^\n]*?loss[ =:]+([0-9.]+)", log)]
check(len(steps_loss) >= 2 and steps_loss[-1] < 0.5 * steps_loss[0],
      f"the loss on the assistant's tokens falls: {steps_loss[:1]} -> {steps_loss[-1:]}")
loaded = transformers.AutoTokenizer.from_pretrained(export + "-learn") if first.returncode == 0 else None
original = transformers.AutoTokenizer.from_pretrained(tokenizer)
check(loaded is not None and loaded.chat_template == original.chat_template,
      "the export carries the chat template the model trained with")

again = train_run("again", steps=2)
check(again.returncode == 0 and "prepared data reused" in again.stdout + again.stderr,
      "a second run reuses the prepared data")
with open(os.path.join(tokenizer, "tokenizer_config.json")) as f:
    changed = json.load(f)
changed["chat_template"] = changed["chat_template"].replace("<|im_start|>system", "<|im_start|>system ")
with open(os.path.join(tokenizer, "tokenizer_config.json"), "w") as f:
    json.dump(changed, f)
third = train_run("changed", steps=2)
check(third.returncode == 0 and "the chat template changed" in third.stdout + third.stderr
      and "preparing it again" in third.stdout + third.stderr, "a changed template is prepared again, and said so")

cfg_long = config("long_docs", open(os.path.join(scratch, "learn.toml")).read().replace("seq_len = 96", "seq_len = 30")
                  .replace('"learn"', '"long_docs"'))
result = zf("run", cfg_long, "--set", "train.steps=1", "--set", f"run.output_dir={scratch}/long_docs",
            "--set", f"checkpoint.export_hf={scratch}/long_export")
text = result.stdout + result.stderr
check(re.search(r"40 of 40 documents are longer than data.seq_len \+ 1 = 31 tokens and are cut", text) is not None
      and f"{train}:1 (" in text, f"conversations longer than seq_len are counted, with their lines: "
      f"{text[text.find('documents are longer') - 20:][:300]}")

# data.chat_template replaces the tokenizer's template, for the data and in the export.
template = os.path.join(scratch, "chatml.jinja")
with open(template, "w") as f:
    f.write(json.load(open(os.path.join(fixtures, "chatml", "tokenizer_config.json")))["chat_template"])
result = train_run("own_template", steps=1, extra=f'chat_template = "{template}"')
text = result.stdout + result.stderr
exported = os.path.join(export + "-own_template", "chat_template.jinja")
check(result.returncode == 0 and "{% generation %} spans of the chat template:" in text and os.path.exists(exported)
      and open(exported).read() == open(template).read(),
      f"data.chat_template renders the data and is exported as chat_template.jinja {text[-400:]}")

alpaca = os.path.join(scratch, "alpaca.json")
with open(alpaca, "w") as f:
    json.dump([{"instruction": "Say hi.", "input": "", "output": "Hi!"}] * 16, f)
result = train_run("alpaca", "alpaca", alpaca, steps=1, seq_len=256)
text = result.stdout + result.stderr
check(result.returncode == 0 and "Alpaca prompt" in text, "an Alpaca run says its export's template is the Alpaca "
      f"prompt: {text[-500:] if result.returncode else ''}")
if result.returncode == 0:
    exported = transformers.AutoTokenizer.from_pretrained(export + "-alpaca")
    rendered = exported.apply_chat_template([{"role": "user", "content": "Say hi."}], tokenize=False)
    check(rendered == "Below is an instruction that describes a task. Write a response that appropriately completes "
          "the request.\n\n### Instruction:\nSay hi.\n\n### Response:\n",
          f"the Alpaca export's chat template renders the Alpaca prompt: {rendered!r}")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
