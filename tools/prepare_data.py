#!/usr/bin/env python3
"""Chat, prompt-completion and text documents to a zfcore token shard (format version 2).

zfcore runs this once per data file (zfcore prepare, or zfcore run when no prepared copy matches);
nothing of it runs while training. It renders conversations with the tokenizer's own chat template
through transformers' apply_chat_template and marks, per token, where the loss counts, as TRL's
SFTTrainer does:

  chat               {"messages": [{"role": ..., "content": ...}, ...], "tools": [...]?}: the
                     assistant's tokens ({% generation %} spans of the template; for a template
                     without them, TRL's training variant of it, else the tokens each assistant
                     turn adds to the conversation before it)
  prompt_completion  {"prompt": ..., "completion": ...} (strings, or lists of messages): the
                     completion's tokens (an EOS is added to a string completion)
  text               {"text": ...}: every token (an EOS is added)

Input: JSON Lines, a JSON array, or Parquet (with pyarrow). Output in --out: data.bin (the shard:
ids, loss mask, document starts; docs/data.md describes it) and record.json (what it was made from,
the loss rule, counts, and where each document came from). Errors are one line on stderr, starting
with "error: ", naming the file, line and field; the exit status is then 1.
"""
import argparse
import array
import json
import os
import struct
import sys

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_LISTED = 10  # errors listed before the count of the rest


class DataError(Exception):
    pass


def fail(message):
    print("error: " + message, file=sys.stderr, flush=True)
    sys.exit(1)


def install_hint(package):
    return f"{sys.executable} -m pip install '{package}'"


def read_records(path):
    """(label, record) for each record: "FILE:LINE" (JSON Lines), "FILE: element N", "FILE: row N"."""
    if path.endswith(".parquet"):
        try:
            import pyarrow.parquet as pq
        except ImportError:
            fail(f"{path}: reading Parquet needs pyarrow, which {sys.executable} lacks: {install_hint('pyarrow')}")
        row = 0
        for batch in pq.ParquetFile(path).iter_batches():
            for record in batch.to_pylist():
                yield f"{path}: row {row}", row, record
                row += 1
        return
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip()[:1] == "[":
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            fail(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}")
        for i, record in enumerate(records):
            yield f"{path}: element {i}", i, record
        return
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"{path}:{number}:{e.colno}: not valid JSON: {e.msg} (JSON Lines: one object per line)")
        yield f"{path}:{number}", number, record


def load_tokenizer(path, template_path):
    try:
        import transformers
    except ImportError:
        fail(f"preparing chat, prompt_completion and text documents needs transformers, which {sys.executable} "
             f"lacks: {install_hint('transformers')}")
    directory = path if os.path.isdir(path) else os.path.dirname(path) or "."
    try:
        if os.path.exists(os.path.join(directory, "tokenizer_config.json")):
            tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        else:
            tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(directory, "tokenizer.json"))
    except Exception as e:  # transformers raises many kinds
        fail(f"{path}: transformers cannot load the tokenizer: {e}")
    if template_path:
        with open(template_path, encoding="utf-8") as f:
            tokenizer.chat_template = f.read()
    return tokenizer, transformers.__version__


def trl_templates():
    """TRL's chat_templates folder, found without importing TRL (its import takes seconds); None without TRL."""
    import importlib.util
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = os.path.join(list(spec.submodule_search_locations)[0], "chat_templates")
    return folder if os.path.isdir(folder) else None


def training_template(tokenizer):
    """The template to render with and the loss rule's name, as TRL's SFTTrainer chooses them: a template with
    {% generation %} tags as it is; a template TRL ships (chat_templates/NAME.jinja) replaced by its training variant
    (NAME_training.jinja); any other template masked by the tokens each assistant turn adds."""
    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    if template is None:
        return None, None
    if "{%- generation %}" in template or "{% generation %}" in template:
        return None, "{% generation %} spans of the chat template"
    folder = trl_templates()
    for name in sorted(os.listdir(folder)) if folder else []:
        training = os.path.join(folder, name[:-len(".jinja")] + "_training.jinja")
        if not name.endswith(".jinja") or name.endswith("_training.jinja") or not os.path.exists(training):
            continue
        with open(os.path.join(folder, name), encoding="utf-8") as f:
            if f.read() != template:
                continue
        with open(training, encoding="utf-8") as f:
            return f.read(), "{% generation %} spans of TRL's training variant of the chat template"
    return None, "the tokens each assistant turn adds to the rendered conversation"


def untold_turn(label, i, before, through, text):
    """The error for an assistant turn whose rendering is not where the whole conversation has it."""
    at = next((k for k, (a, b) in enumerate(zip(through, text)) if a != b), min(len(through), len(text)))
    if not through.startswith(before):
        at = next((k for k, (a, b) in enumerate(zip(before, through)) if a != b), min(len(before), len(through)))
        first, second, what = before, through, "the conversation before it, with the generation prompt"
    else:
        first, second, what = through, text, "the whole conversation"
    shown = lambda s: json.dumps(s[max(0, at - 30):at + 30], ensure_ascii=False)
    fix = ("TRL has no training variant of this template" if trl_templates() else
           f"TRL's training variants of common templates may mark them ({install_hint('trl')})")
    return DataError(f"{label}: messages[{i}]: the chat template renders the conversation through this assistant turn "
                     f"as {shown(first)} where {what} has {shown(second)} (at character {at}), so the turn's tokens "
                     f"cannot be told apart; {fix}: add {{% generation %}} ... {{% endgeneration %}} around the "
                     "assistant's turns in a copy of the template and set data.chat_template to it")


def check_messages(messages, label, field):
    if not isinstance(messages, list) or not messages:
        raise DataError(f"{label}: {field} is {type(messages).__name__ if messages != [] else 'empty'}, "
                        "not a list of messages ({\"role\": ..., \"content\": ...})")
    for i, message in enumerate(messages):
        where = f"{label}: {field}[{i}]"
        if not isinstance(message, dict):
            raise DataError(f"{where} is {type(message).__name__}, not an object with \"role\" and \"content\"")
        if "role" not in message or message["role"] is None:
            raise DataError(f"{where}: no \"role\" (one of {', '.join(ROLES)})")
        if message["role"] not in ROLES:
            raise DataError(f"{where}.role: unknown role {json.dumps(message['role'])} (one of {', '.join(ROLES)})")
        content = message.get("content")
        if content is None and not message.get("tool_calls"):
            raise DataError(f"{where}: no \"content\"")


def render(tokenizer, messages, label, **kwargs):
    try:
        return tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, **kwargs)
    except Exception as e:
        raise DataError(f"{label}: the chat template raised: {type(e).__name__}: {e}") from None


def derived_mask(tokenizer, messages, label, kwargs):
    """The assistant spans as the characters each assistant turn adds, mapped onto the tokens."""
    render_text = lambda m, prompt: tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=prompt,
                                                                  **kwargs)
    try:
        text = render_text(messages, False)
        spans = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = render_text(messages[:i], True) if i > 0 else ""
            through = render_text(messages[:i + 1], False)
            if not text.startswith(through) or not through.startswith(before):
                raise untold_turn(label, i, before, through, text)
            spans.append((len(before), len(through)))
    except DataError:
        raise
    except Exception as e:
        raise DataError(f"{label}: the chat template raised: {type(e).__name__}: {e}") from None
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [int(any(a <= start and end <= b and end > start for a, b in spans))
            for start, end in encoded["offset_mapping"]]
    return encoded["input_ids"], mask


def chat_document(tokenizer, record, label, template, rule):
    if not isinstance(record, dict) or "messages" not in record:
        raise DataError(f"{label}: no \"messages\" (data.type = \"chat\" reads "
                        "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]})")
    messages = record["messages"]
    check_messages(messages, label, "messages")
    if not any(m["role"] == "assistant" for m in messages):
        raise DataError(f"{label}: messages: no assistant turn (the loss counts only the assistant's tokens)")
    tools = record.get("tools")
    tools = json.loads(tools) if isinstance(tools, str) else tools
    kwargs = {"tools": tools, "chat_template": template}
    if rule.startswith("the tokens each"):
        ids, mask = derived_mask(tokenizer, messages, label, kwargs)
    else:
        out = render(tokenizer, messages, label, return_assistant_tokens_mask=True, **kwargs)
        ids, mask = list(out["input_ids"]), list(out["assistant_masks"])
    if 1 not in mask:
        raise DataError(f"{label}: messages: the chat template marks none of the assistant's tokens")
    return ids, mask


def prompt_completion_document(tokenizer, record, label):
    if not isinstance(record, dict) or "prompt" not in record or "completion" not in record:
        missing = "prompt" if not isinstance(record, dict) or "prompt" not in record else "completion"
        raise DataError(f"{label}: no \"{missing}\" (data.type = \"prompt_completion\" reads "
                        "{\"prompt\": ..., \"completion\": ...})")
    prompt, completion = record["prompt"], record["completion"]
    if isinstance(prompt, list) != isinstance(completion, list):
        raise DataError(f"{label}: \"prompt\" and \"completion\" must both be strings or both lists of messages")
    if isinstance(prompt, list):
        check_messages(prompt, label, "prompt")
        check_messages(completion, label, "completion")
        tools = record.get("tools")
        kwargs = {"tools": json.loads(tools) if isinstance(tools, str) else tools}
        prompt_ids = render(tokenizer, prompt, label, add_generation_prompt=True, **kwargs)["input_ids"]
        ids = render(tokenizer, prompt + completion, label, **kwargs)["input_ids"]
    else:
        for name, value in (("prompt", prompt), ("completion", completion)):
            if not isinstance(value, str):
                raise DataError(f"{label}: \"{name}\" is {type(value).__name__}, not a string")
        if tokenizer.eos_token and not completion.endswith(tokenizer.eos_token):
            completion += tokenizer.eos_token
        prompt_ids = tokenizer(text=prompt)["input_ids"]
        ids = tokenizer(text=prompt + completion)["input_ids"]
    shared = 0
    while shared < min(len(prompt_ids), len(ids)) and prompt_ids[shared] == ids[shared]:
        shared += 1
    if shared == len(ids):
        raise DataError(f"{label}: completion: no tokens")
    return list(ids), [0] * shared + [1] * (len(ids) - shared)


def text_document(tokenizer, record, label, field):
    if not isinstance(record, dict) or field not in record:
        raise DataError(f"{label}: no \"{field}\" (data.type = \"text\" reads {{\"{field}\": ...}} from JSON)")
    text = record[field]
    if not isinstance(text, str):
        raise DataError(f"{label}: \"{field}\" is {type(text).__name__}, not a string")
    if tokenizer.eos_token and not text.endswith(tokenizer.eos_token):
        text += tokenizer.eos_token
    ids = tokenizer(text=text)["input_ids"]
    return list(ids), [1] * len(ids)


def write_shard(path, ids, mask, starts, vocab):
    """Token shard format version 2 (docs/data.md)."""
    width = 2 if max(ids, default=0) < 65536 and vocab <= 65536 else 4
    header = struct.pack("<8sIIQQQI", b"ZFTOKENS", 2, width, len(ids), vocab, len(starts), 1)
    with open(path, "wb") as f:
        f.write(header.ljust(64, b"\0"))
        f.write(array.array("H" if width == 2 else "I", ids).tobytes())
        f.write(bytes(mask))
        f.write(array.array("Q", starts).tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--type", required=True, choices=("chat", "prompt_completion", "text"))
    parser.add_argument("--data", required=True, help="JSON Lines, JSON array or Parquet file")
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json, or the directory holding it")
    parser.add_argument("--chat-template", default="", help="a Jinja file that replaces the tokenizer's template")
    parser.add_argument("--text-field", default="text")
    parser.add_argument("--out", required=True, help="directory for data.bin and record.json")
    args = parser.parse_args()
    if sys.byteorder != "little":
        fail("token shards are little-endian; prepare the data on an x86-64 or aarch64 host")

    tokenizer, version = load_tokenizer(args.tokenizer, args.chat_template)
    template, rule = None, None
    if args.type == "chat":
        template, rule = training_template(tokenizer)
        if rule is None:
            fail(f"{args.tokenizer}: the tokenizer has no chat template (tokenizer_config.json or chat_template.jinja);"
                 " set data.chat_template to a Jinja file")
    elif args.type == "prompt_completion":
        rule = "the completion's tokens"
    else:
        rule = "every token"

    ids, mask, starts, lines, errors = [], [], [], [], []
    unit = None
    for label, number, record in read_records(args.data):
        unit = unit or ("row" if args.data.endswith(".parquet") else "element" if ": element" in label else "line")
        try:
            if args.type == "chat":
                doc, flags = chat_document(tokenizer, record, label, template, rule)
            elif args.type == "prompt_completion":
                doc, flags = prompt_completion_document(tokenizer, record, label)
            else:
                doc, flags = text_document(tokenizer, record, label, args.text_field)
        except DataError as e:
            errors.append(str(e))
            continue
        starts.append(len(ids))
        ids.extend(doc)
        mask.extend(flags)
        lines.append(number)
    if errors:
        listed = "\n  ".join(errors[:MAX_LISTED])
        more = f"\n  ... and {len(errors) - MAX_LISTED} more" if len(errors) > MAX_LISTED else ""
        fail(f"{args.data}: {len(errors)} of {len(errors) + len(starts)} records cannot be used:\n  {listed}{more}")
    if not starts:
        fail(f"{args.data}: no records")
    vocab = len(tokenizer)
    os.makedirs(args.out, exist_ok=True)
    write_shard(os.path.join(args.out, "data.bin"), ids, mask, starts, max(vocab, max(ids) + 1))
    record = {"type": args.type, "data": os.path.abspath(args.data), "tokenizer": os.path.abspath(args.tokenizer),
              "chat_template": (template or tokenizer.chat_template) if args.type == "chat" else None,
              "loss": rule, "transformers": version, "documents": len(starts), "tokens": len(ids),
              "counted": sum(mask), "unit": unit, "lines": lines}
    with open(os.path.join(args.out, "record.json"), "w", encoding="utf-8") as f:
        json.dump(record, f)
    print(f"{args.data}: {len(starts)} documents, {len(ids)} tokens, loss on {rule}: {sum(mask)} tokens",
          file=sys.stderr)


if __name__ == "__main__":
    main()
