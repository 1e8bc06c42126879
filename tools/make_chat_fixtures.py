#!/usr/bin/env python3
"""Builds tests/fixtures/chat: tokenizers with the families' chat templates, conversations, and the
token ids and loss masks TRL's SFTTrainer makes of them (expected.json), the oracle that
tests/data/check_chat_templates.py and check_chat_data.py hold zfcore's preparation to.

Pinned: transformers 5.23.0 and trl 1.16.0 (pip install transformers==5.23.0 trl==1.16.0). The
templates are the published ones: those TRL ships (chat_templates/: Llama 3 / 3.1 / 3.2, Qwen3,
Qwen3.5 / 3.6, Gemma 3 / 4, gpt-oss) and, in tests/fixtures/chat/templates/ (its README says where
each comes from), Mistral Small 3, OLMo 2, Phi-4, Phi-4-mini and Granite 4. `chatml` is a ChatML
template with {% generation %} tags of its own and `chatml_plain` the same without them (no oracle
of its own: its masks must equal chatml's). The tokenizers are the small family tokenizers of
tests/fixtures/tokenizers/families.

The oracle: where TRL can tag the template (it has {% generation %} tags, or TRL swaps in its
training variant), SFTTrainer with assistant_only_loss; where it cannot (SFTTrainer refuses
assistant_only_loss), TRL's completion-only loss of each assistant turn as the completion of the
conversation before it, united over the turns on the ids of the whole conversation, and null for a
conversation whose turns are not prefixes of it (zfcore must refuse it). Templates that print
today's date render a fixed one (expected.json's "date").

Usage: python3 tools/make_chat_fixtures.py [REPO_ROOT]
"""
import datetime
import json
import os
import shutil
import sys
import tempfile

import transformers
import trl
import trl.chat_template_utils
from transformers.utils import chat_template_utils

PINNED = {"transformers": "5.23.0", "trl": "1.16.0"}

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
          "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>\\n' }}"
          "{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML_PLAIN = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                "{% endif %}")

LLAMA3 = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
QWEN = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
GEMMA = {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}
# name: (tokenizer of tests/fixtures/tokenizers/families, template (TRL's file, a file of templates/, or text), special
# tokens, the extra conversations the template renders: "tools" (tool calls) and "reasoning" (reasoning_content /
# thinking fields))
FAMILIES = {
    "llama3": ("llama3", "llama3.jinja", LLAMA3, ()),
    "llama3_1": ("llama3", "llama3_1.jinja", LLAMA3, ("tools",)),
    "llama3_2": ("llama3", "llama3_2.jinja", LLAMA3, ("tools",)),
    "qwen3": ("qwen3", "qwen3.jinja", QWEN, ("tools", "reasoning")),
    "qwen3_instruct_2507": ("qwen3", "qwen3_instruct_2507.jinja", QWEN, ("tools",)),
    "qwen3_5": ("qwen3_5", "qwen3_5_think.jinja", QWEN, ("tools", "reasoning")),
    "qwen3_5_nothink": ("qwen3_5", "qwen3_5_nothink.jinja", QWEN, ("tools", "reasoning")),
    "qwen3_6": ("qwen3_5", "qwen3_6.jinja", QWEN, ("tools", "reasoning")),
    "gemma3": ("gemma3", "gemma3.jinja", GEMMA, ()),
    "gemma4": ("gemma3", "gemma4_v5.jinja", GEMMA, ("tools", "reasoning")),
    "gptoss": ("phi4", "gptoss.jinja", {"eos_token": "<|endoftext|>"}, ("tools", "reasoning")),
    "mistral_small3": ("mistral_tekken", "templates/mistral_small3.jinja",
                       {"bos_token": "<s>", "eos_token": "</s>"}, ()),
    "olmo2": ("olmo2", "templates/olmo2.jinja",
              {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|pad|>"}, ()),
    "phi4": ("phi4", "templates/phi4.jinja", {"eos_token": "<|im_end|>"}, ()),
    "phi4_mini": ("phi4", "templates/phi4_mini.jinja", {"eos_token": "<|endoftext|>"}, ()),
    "granite4": ("phi4", "templates/granite4.jinja", {"eos_token": "<|endoftext|>"}, ("tools",)),
    "chatml": ("phi4", CHATML, {"eos_token": "<|im_end|>"}, ()),
    "chatml_plain": ("phi4", CHATML_PLAIN, {"eos_token": "<|im_end|>"}, ()),
}

CONVERSATIONS = [
    {"messages": [{"role": "system", "content": "You are terse."},
                  {"role": "user", "content": "What is 2 + 2?"},
                  {"role": "assistant", "content": "4."}]},
    {"messages": [{"role": "user", "content": "Name a colour."},
                  {"role": "assistant", "content": "Blue."},
                  {"role": "user", "content": "Another one?"},
                  {"role": "assistant", "content": "Green, and then red."}]},
    {"messages": [{"role": "system", "content": ""},
                  {"role": "user", "content": ""},
                  {"role": "assistant", "content": "You said nothing."},
                  {"role": "user", "content": "Right."},
                  {"role": "assistant", "content": ""}]},
    {"messages": [{"role": "user", "content": "Grüße aus Köln! 你好，世界 🙂"},
                  {"role": "assistant", "content": "Schön — 谢谢! 🎉 ñ"}]},
]
TOOLS = [{"type": "function", "function": {"name": "multiply", "description": "Multiply two numbers.",
                                           "parameters": {"type": "object", "properties": {
                                               "a": {"type": "number"}, "b": {"type": "number"}},
                                               "required": ["a", "b"]}}}]
TOOL_CONVERSATION = {
    "messages": [{"role": "user", "content": "What is 6 times 7?"},
                 {"role": "assistant", "content": "",
                  "tool_calls": [{"type": "function", "function": {"name": "multiply", "arguments": {"a": 6, "b": 7}}}]},
                 {"role": "tool", "name": "multiply", "content": "42"},
                 {"role": "assistant", "content": "6 times 7 is 42."}],
    "tools": TOOLS}
# Templates name the model's reasoning differently (Qwen: reasoning_content, gpt-oss: thinking); each reads its own.
REASONING_CONVERSATION = {
    "messages": [{"role": "user", "content": "Is 7 prime?"},
                 {"role": "assistant", "reasoning_content": "Only 1 and 7 divide 7.",
                  "thinking": "Only 1 and 7 divide 7.", "content": "Yes."},
                 {"role": "user", "content": "And 9?"},
                 {"role": "assistant", "reasoning_content": "9 is 3 times 3.", "thinking": "9 is 3 times 3.",
                  "content": "No, 9 = 3 × 3."}]}
# Bad inputs, one a line, for every template: a missing role, an unknown role, no assistant turn, two user turns in a
# row and a tool turn (which some templates refuse), and a good conversation; expected.json holds what each
# template raises on lines 4 and 5.
BAD = [
    {"messages": [{"role": "user", "content": "hi"}, {"content": "x"}]},
    {"messages": [{"role": "bot", "content": "hi"}, {"role": "assistant", "content": "x"}]},
    {"messages": [{"role": "user", "content": "hi"}]},
    {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"},
                  {"role": "assistant", "content": "c"}]},
    {"messages": [{"role": "user", "content": "6 times 7?"}, {"role": "tool", "name": "multiply", "content": "42"},
                  {"role": "assistant", "content": "42."}]},
    {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]},
]
PROMPT_COMPLETION = [
    {"prompt": "The capital of France is", "completion": " Paris."},
    {"prompt": "Ünïcödé: 你好", "completion": " 🙂"},
    {"prompt": [{"role": "user", "content": "Say hi."}], "completion": [{"role": "assistant", "content": "Hi!"}]},
]
TEXT = [{"text": "A plain document."}, {"text": "Zweites Dokument — ünïcödé."}]


class FixedDate(datetime.datetime):
    """Templates that print today's date (strftime_now) render one fixed date here, and in the check."""

    @classmethod
    def now(cls, tz=None):
        return cls(2026, 1, 15, tzinfo=tz)


def sft_dataset(tokenizer, rows, **config):
    """The training dataset SFTTrainer prepares of rows (its tokenization is the oracle)."""
    import datasets
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=8, intermediate_size=16, num_hidden_layers=1, num_attention_heads=1,
        num_key_value_heads=1))
    with tempfile.TemporaryDirectory() as out:
        args = trl.SFTConfig(output_dir=out, report_to=[], max_length=None, dataset_num_proc=None, use_cpu=True, bf16=False, **config)
        trainer = trl.SFTTrainer(model=model, args=args, train_dataset=datasets.Dataset.from_list(rows),
                                 processing_class=tokenizer)
        return [dict(row) for row in trainer.train_dataset]


def entry(row):
    """ids and the loss mask: TRL folds the assistant or completion mask into the labels (-100: not counted)."""
    return {"ids": row["input_ids"], "mask": [int(label != -100) for label in row["labels"]]}


def per_turn(tokenizer, rows):
    """For a template TRL cannot mask by assistant turn: TRL's completion-only loss of each assistant turn as a
    completion of the conversation before it, united over the turns, on TRL's ids of the whole conversation. None for
    a conversation whose turns are not prefixes of it (the template renders them differently there)."""
    whole = sft_dataset(tokenizer, [{"messages": r["messages"], "tools": r.get("tools")} for r in rows])
    pairs, owners = [], []
    for n, r in enumerate(rows):
        for i, m in enumerate(r["messages"]):
            if m["role"] == "assistant":
                pairs.append({"prompt": r["messages"][:i], "completion": [m], "tools": r.get("tools")})
                owners.append(n)
    turns = sft_dataset(tokenizer, pairs, completion_only_loss=True)
    out = [{"ids": w["input_ids"], "mask": [0] * len(w["input_ids"])} for w in whole]
    for n, turn in zip(owners, turns):
        if out[n] is None:
            continue
        ids, mask = turn["input_ids"], entry(turn)["mask"]
        if out[n]["ids"][:len(ids)] != ids:
            out[n] = None
            continue
        out[n]["mask"][:len(mask)] = [a | b for a, b in zip(out[n]["mask"], mask)]
    return out


def template_text(template, trl_templates, root):
    if template.startswith("templates/"):
        with open(os.path.join(root, "tests", "fixtures", "chat", template), encoding="utf-8") as f:
            return f.read()
    if template.endswith(".jinja"):
        with open(os.path.join(trl_templates, template), encoding="utf-8") as f:
            return f.read()
    return template


def main():
    for package, version in PINNED.items():
        if __import__(package).__version__ != version:
            sys.exit(f"{package} {__import__(package).__version__} is installed; the fixtures pin {version}: "
                     f"pip install {package}=={version}")
    chat_template_utils.datetime = FixedDate
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    out = os.path.join(root, "tests", "fixtures", "chat")
    trl_templates = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
    os.makedirs(out, exist_ok=True)
    expected = {"pinned": PINNED, "date": FixedDate.now().isoformat(), "oracle": {}, "files": {}, "raises": {}}
    for name, (tokenizer_name, template, special, extras) in FAMILIES.items():
        directory = os.path.join(out, name)
        os.makedirs(directory, exist_ok=True)
        shutil.copy(os.path.join(root, "tests", "fixtures", "tokenizers", "families", tokenizer_name, "tokenizer.json"),
                    directory)
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast",
                       "chat_template": template_text(template, trl_templates, root), **special}, f, indent=1)
        files = ["conversations.jsonl"] + [f"{extra}.jsonl" for extra in extras]
        expected["files"][name] = files
        if name == "chatml_plain":
            continue  # its masks must equal chatml's
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        rows = CONVERSATIONS + ([TOOL_CONVERSATION] if "tools" in extras else []) + (
            [REASONING_CONVERSATION] if "reasoning" in extras else [])
        try:
            trl.chat_template_utils.get_training_chat_template(tokenizer)
            tagged = True
        except ValueError:  # TRL has no training variant of this template
            tagged = False
        if tagged:
            chat = [entry(r) for r in sft_dataset(tokenizer, [{"messages": r["messages"], "tools": r.get("tools")}
                                                              for r in rows], assistant_only_loss=True)]
            expected["oracle"][name] = "assistant_only_loss"
            # the oracle of untagged templates, held to TRL's masks where TRL has both
            print(name, "per-turn completion masks equal assistant masks:", per_turn(tokenizer, rows) == chat)
        else:
            chat = per_turn(tokenizer, rows)
            expected["oracle"][name] = "completion_only_loss per assistant turn"
        expected[name] = {"chat": chat}
        template = tokenizer.chat_template if tagged is False else (
            trl.chat_template_utils.get_training_chat_template(tokenizer) or tokenizer.chat_template)
        expected["raises"][name] = {}
        for line in (4, 5):
            try:
                tokenizer.apply_chat_template(BAD[line - 1]["messages"], chat_template=template, tokenize=False)
            except Exception as e:  # what the template raises is the oracle
                expected["raises"][name][line] = str(e)
        print(name, expected["oracle"][name], "refused:", [i for i, c in enumerate(chat) if c is None])
        if name == "qwen3":  # one tokenizer suffices for the template-free types
            # strings and message lists in one column are not one Arrow type: two datasets
            pc = sft_dataset(tokenizer, PROMPT_COMPLETION[:2]) + sft_dataset(tokenizer, PROMPT_COMPLETION[2:])
            expected[name]["prompt_completion"] = [entry(r) for r in pc]
            text = sft_dataset(tokenizer, TEXT)
            expected[name]["text"] = [entry(r) for r in text]
    expected["chatml_plain"] = expected["chatml"]
    expected["oracle"]["chatml_plain"] = "chatml's masks"
    expected["raises"]["chatml_plain"] = expected["raises"]["chatml"]
    for file, rows in (("conversations.jsonl", CONVERSATIONS), ("tools.jsonl", [TOOL_CONVERSATION]),
                       ("reasoning.jsonl", [REASONING_CONVERSATION]),
                       ("bad.jsonl", BAD), ("prompt_completion.jsonl", PROMPT_COMPLETION), ("text.jsonl", TEXT)):
        with open(os.path.join(out, file), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main()
