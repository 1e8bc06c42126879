#!/usr/bin/env python3
"""Writes the data of the packing benchmark (tools/device-families.sh) into DIR:
  alpaca.json  instruction examples whose responses have lengths drawn like Alpaca's (about 150 tokens
               on average with the Alpaca template, a long tail to about 1,500), in bytes: with
               data.tokenizer = "byte" one character is one token;
  tokens.bin   a token shard (format 1, uint16 ids below 257) of random bytes with at least TOKENS ids,
               for the `tokens` type at the same number of tokens per step.
usage: make_packing_bench_data.py DIR TOKENS"""
import json
import os
import random
import struct
import sys


def main():
    directory, tokens = sys.argv[1], int(sys.argv[2])
    os.makedirs(directory, exist_ok=True)
    rng = random.Random(52002)
    words = ["the", "model", "data", "answer", "question", "because", "which", "training", "a", "of", "is", "to"]

    def text(length):
        out = []
        while sum(len(w) + 1 for w in out) < length:
            out.append(rng.choice(words))
        return " ".join(out)[:length]

    examples, total = [], 0
    while total < 2 * tokens:  # packing cuts no example here; twice the tokens leaves room for the epoch
        response = min(max(int(rng.lognormvariate(4.3, 0.7)), 5), 1400)
        instruction = min(max(int(rng.lognormvariate(3.0, 0.5)), 5), 200)
        example = {"instruction": text(instruction), "input": text(20) if rng.random() < 0.4 else "",
                   "output": text(response)}
        examples.append(example)
        total += 140 + instruction + response + len(example["input"])
    with open(os.path.join(directory, "alpaca.json"), "w") as f:
        json.dump(examples, f)
    with open(os.path.join(directory, "tokens.bin"), "wb") as f:
        f.write(struct.pack("<8sIIQQ32x", b"ZFTOKENS", 1, 2, tokens, 257))
        f.write(struct.pack(f"<{tokens}H", *(rng.randrange(257) for _ in range(tokens))))
    print(f"{directory}: {len(examples)} examples (about {total} tokens), a shard of {tokens} tokens")


if __name__ == "__main__":
    main()
