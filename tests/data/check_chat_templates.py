#!/usr/bin/env python3
"""Every chat template of tests/fixtures/chat, through zfcore's preparation (prepare_data.py), against TRL.

- Token ids and loss masks: the conversations (system prompts, several turns, empty and unicode
  contents; tool calls and reasoning fields where the template has them) give the ids and masks of
  expected.json (tools/make_chat_fixtures.py): TRL's SFTTrainer with assistant_only_loss where TRL
  can tag the template, else TRL's completion-only loss of each assistant turn as the completion of
  the conversation before it.
- A conversation whose turns the template renders differently inside the whole conversation (no
  oracle in expected.json) is refused, naming its line, the turn and what to do.
- Bad inputs (a missing role, an unknown role, no assistant turn, what the template raises) are
  named with file, line and field, for every template.
The script is loaded once for all templates (check_chat_data.py runs it through zfcore); templates
that print today's date see the fixtures' date. Exits 4 (skipped) without transformers or trl.
Usage: check_chat_templates.py PREPARE_DATA_PY SOURCE_DIR SCRATCH_DIR
"""
import contextlib
import datetime
import importlib.util
import io
import json
import os
import shutil
import sys

from token_shard import read_shard

if importlib.util.find_spec("transformers") is None or importlib.util.find_spec("trl") is None:
    print("SKIP: no transformers or trl; pip install transformers==5.23.0 trl==1.16.0")
    sys.exit(4)
import transformers  # noqa: E402
from transformers.utils import chat_template_utils  # noqa: E402

prepare_script, source, scratch = sys.argv[1:4]
fixtures = os.path.join(source, "tests", "fixtures", "chat")
expected = json.load(open(os.path.join(fixtures, "expected.json")))
shutil.rmtree(scratch, ignore_errors=True)
os.makedirs(scratch)
# The preparation zfcore runs (check_chat_data.py runs it through zfcore), loaded once for all templates.
spec = importlib.util.spec_from_file_location("prepare_data", prepare_script)
prepare_data = importlib.util.module_from_spec(spec)
spec.loader.exec_module(prepare_data)


class FixedDate(datetime.datetime):
    """Templates that print today's date (strftime_now) see the fixtures' date."""

    @classmethod
    def now(cls, tz=None):
        return cls.fromisoformat(expected["date"]).replace(tzinfo=tz)


chat_template_utils.datetime = FixedDate


def prepare(name, data):
    """prepare_data.py's exit status, its stderr and the documents of the shard it writes."""
    out = os.path.join(scratch, os.path.basename(data) + ".prepared")
    sys.argv = ["prepare_data.py", "--type", "chat", "--data", data, "--tokenizer", os.path.join(fixtures, name),
                "--out", out]
    stderr = io.StringIO()
    status = 0
    with contextlib.redirect_stderr(stderr):
        try:
            prepare_data.main()
        except SystemExit as e:
            status = e.code
    return status, stderr.getvalue(), read_shard(os.path.join(out, "data.bin")) if status == 0 else None


def write(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return path


def check_template(name):
    """(ok, what) pairs for one template."""
    results = []
    rows = [json.loads(line) for file in expected["files"][name] for line in open(os.path.join(fixtures, file))]
    docs = expected[name]["chat"]
    good = [(row, doc) for row, doc in zip(rows, docs) if doc is not None]
    untold = [row for row, doc in zip(rows, docs) if doc is None]
    status, message, got = prepare(name, write(os.path.join(scratch, f"{name}.jsonl"), [row for row, _ in good]))
    results.append((got == [(doc["ids"], doc["mask"]) for _, doc in good],
                    f"{name}: {len(good)} conversations ({', '.join(expected['files'][name])}), ids and loss masks "
                    f"identical to TRL's ({expected['oracle'][name]}) {message[-600:] if got is None else ''}"))
    # Bad inputs, and the conversations the template cannot mask by turn, in one file.
    bad = [json.loads(line) for line in open(os.path.join(fixtures, "bad.jsonl"))]
    path = write(os.path.join(scratch, f"{name}_bad.jsonl"), bad + untold)
    status, message, _ = prepare(name, path)
    lines = {n: next((l for l in message.split("\n") if f"{path}:{n}:" in l), "") for n in range(1, len(bad) + 2)}
    raises = expected["raises"][name]
    wanted = {1: ["messages[1]", "no \"role\""], 2: ["messages[0].role", "unknown role \"bot\""],
              3: ["messages", "no assistant turn"]}
    wanted.update({int(n): ["the chat template raised", text] for n, text in raises.items()})
    ok = status == 1 and all(all(w in lines[n] for w in words) for n, words in wanted.items())
    ok = ok and not lines[len(bad)] and all(not lines[n] for n in (4, 5) if str(n) not in raises)
    failing = len(wanted) + len(untold)
    ok = ok and f"{failing} of {len(bad) + len(untold)} records cannot be used" in message
    for k, row in enumerate(untold):
        line = next((l for l in message.split("\n") if f"{path}:{len(bad) + 1 + k}:" in l), "")
        ok = ok and all(w in line for w in ("messages[", "where the whole conversation has", "cannot be told apart",
                                            "TRL has no training variant", "data.chat_template"))
    results.append((ok, f"{name}: bad inputs named by line and field ({sorted(wanted)}), {len(untold)} conversations "
                        f"it cannot mask by turn refused with what to do: {message.strip()[-400:] if not ok else ''}"))
    return results


def check_trl_choice():
    """prepare_data.py picks TRL's training variants without importing TRL: for every template TRL ships, its choice
    is what TRL's own get_training_chat_template returns (or, where TRL refuses, the per-turn rule)."""
    from trl import chat_template_utils as trl_templates
    tokenizer = transformers.AutoTokenizer.from_pretrained(os.path.join(fixtures, "qwen3"))
    folder = prepare_data.trl_templates()
    differ = []
    names = sorted(n for n in os.listdir(folder) if n.endswith(".jinja") and not n.endswith("_training.jinja"))
    for name in names:
        tokenizer.chat_template = open(os.path.join(folder, name), encoding="utf-8").read()
        try:
            want = trl_templates.get_training_chat_template(tokenizer)
        except ValueError:
            want = None
        got, rule = prepare_data.training_template(tokenizer)
        if got != want or (want is None and not rule.startswith("the tokens each")):
            differ.append(name)
    return not differ, f"the training variant chosen for each of TRL's {len(names)} templates is TRL's: {differ}"


names = list(expected["files"])
failures = []
ok, what = check_trl_choice()
print(("ok   " if ok else "FAIL ") + what)
if not ok:
    failures.append(what)
for name in names:
    for ok, what in check_template(name):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            failures.append(what)
print(f"{len(names)} templates, {len(failures)} failure(s)")
sys.exit(1 if failures else 0)
