#!/usr/bin/env python3
"""Builds tests/fixtures/chat: tokenizers with the families' chat templates, conversations, and the
token ids and loss masks TRL's SFTTrainer makes of them (expected.json), the oracle that
tests/data/check_chat_data.py holds tools/prepare_data.py to.

Pinned: transformers 5.23.0 and trl 1.16.0 (pip install transformers==5.23.0 trl==1.16.0). The
templates of Llama 3, Qwen3, Qwen3.5 and Gemma 3 are the published ones, as TRL ships them (it
recognises them and swaps in its training variants with {% generation %} tags); `chatml` is a
ChatML template with {% generation %} tags of its own and `chatml_plain` the same without them
(no oracle of its own: its masks must equal chatml's). The tokenizers are the small family
tokenizers of tests/fixtures/tokenizers/families.

Usage: python3 tools/make_chat_fixtures.py [REPO_ROOT]
"""
import json
import os
import shutil
import sys
import tempfile

import transformers
import trl

PINNED = {"transformers": "5.23.0", "trl": "1.16.0"}

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' }}"
          "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|im_end|>\\n' }}"
          "{% endgeneration %}{% else %}{{ message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
CHATML_PLAIN = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
                "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                "{% endif %}")

# name: (tokenizer of tests/fixtures/tokenizers/families, template (TRL's file or text), special tokens, tools?)
FAMILIES = {
    "llama3": ("llama3", "llama3.jinja", {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}, False),
    "qwen3": ("qwen3", "qwen3.jinja", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, True),
    "qwen3_5": ("qwen3_5", "qwen3_5_think.jinja", {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, True),
    "gemma3": ("gemma3", "gemma3.jinja", {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"}, False),
    "chatml": ("phi4", CHATML, {"eos_token": "<|im_end|>"}, False),
    "chatml_plain": ("phi4", CHATML_PLAIN, {"eos_token": "<|im_end|>"}, False),
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
PROMPT_COMPLETION = [
    {"prompt": "The capital of France is", "completion": " Paris."},
    {"prompt": "Ünïcödé: 你好", "completion": " 🙂"},
    {"prompt": [{"role": "user", "content": "Say hi."}], "completion": [{"role": "assistant", "content": "Hi!"}]},
]
TEXT = [{"text": "A plain document."}, {"text": "Zweites Dokument — ünïcödé."}]


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


def main():
    for package, version in PINNED.items():
        if __import__(package).__version__ != version:
            sys.exit(f"{package} {__import__(package).__version__} is installed; the fixtures pin {version}: "
                     f"pip install {package}=={version}")
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
    out = os.path.join(root, "tests", "fixtures", "chat")
    templates = os.path.join(os.path.dirname(trl.__file__), "chat_templates")
    os.makedirs(out, exist_ok=True)
    expected = {"pinned": PINNED}
    for name, (tokenizer_name, template, special, tools) in FAMILIES.items():
        directory = os.path.join(out, name)
        os.makedirs(directory, exist_ok=True)
        shutil.copy(os.path.join(root, "tests", "fixtures", "tokenizers", "families", tokenizer_name, "tokenizer.json"),
                    directory)
        if template.endswith(".jinja"):
            with open(os.path.join(templates, template), encoding="utf-8") as f:
                template = f.read()
        with open(os.path.join(directory, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template, **special}, f, indent=1)
        if name == "chatml_plain":
            continue  # TRL refuses templates without {% generation %} that it does not know
        tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        rows = CONVERSATIONS + ([TOOL_CONVERSATION] if tools else [])
        chat = sft_dataset(tokenizer, [{"messages": r["messages"], "tools": r.get("tools")} for r in rows],
                           assistant_only_loss=True)
        expected[name] = {"chat": [entry(r) for r in chat]}
        if name == "qwen3":  # one tokenizer suffices for the template-free types
            # strings and message lists in one column are not one Arrow type: two datasets
            pc = sft_dataset(tokenizer, PROMPT_COMPLETION[:2]) + sft_dataset(tokenizer, PROMPT_COMPLETION[2:])
            expected[name]["prompt_completion"] = [entry(r) for r in pc]
            text = sft_dataset(tokenizer, TEXT)
            expected[name]["text"] = [entry(r) for r in text]
    expected["chatml_plain"] = expected["chatml"]
    for file, rows in (("conversations.jsonl", CONVERSATIONS), ("tools.jsonl", [TOOL_CONVERSATION]),
                       ("prompt_completion.jsonl", PROMPT_COMPLETION), ("text.jsonl", TEXT)):
        with open(os.path.join(out, file), "w", encoding="utf-8") as f:
            f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    with open(os.path.join(out, "expected.json"), "w", encoding="utf-8") as f:
        json.dump(expected, f)


if __name__ == "__main__":
    main()
