#!/usr/bin/env python3
"""Generates the small test fixtures that pin zfcore to Hugging Face's implementations.

Needs torch, transformers, safetensors, tokenizers and sentencepiece (not needed to build or test
zfcore; the fixtures are committed). Usage: python3 tools/make_fixtures.py OUT_DIR
Writes OUT_DIR/hf/{gpt2,llama,qwen2}/ (config.json, model.safetensors, expected.safetensors with
input_ids, logits and HF's own loss) and OUT_DIR/tokenizers/ (bpe/tokenizer.json,
sentencepiece/tokenizer.model, cases.json with the ids both libraries give for each text) and
OUT_DIR/hf/gpt2_tokenizer/ (a GPT-2 saved with the bpe tokenizer's files, for the export test).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

VOCAB, SEQ, BATCH = 96, 16, 2


def perturb(model, seed):
    # HF's default init (std 0.02) gives near-uniform logits; larger weights make a sharper test.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and ("norm" in name or "ln_" in name):
                p.copy_(1 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.15 * torch.randn(p.shape, generator=gen))


def export_model(out, name, config, model_class, seed):
    torch.manual_seed(seed)
    model = model_class(config).float().eval()
    perturb(model, seed)
    directory = os.path.join(out, "hf", name)
    model.save_pretrained(directory, safe_serialization=True)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed + 1))
    with torch.no_grad():
        result = model(input_ids=ids, labels=ids)
    save_file({"input_ids": ids.contiguous(), "logits": result.logits.float().contiguous(),
               "loss": result.loss.float().reshape(1).contiguous()},
              os.path.join(directory, "expected.safetensors"))
    print(name, "loss", float(result.loss), "params", sum(p.numel() for p in model.parameters()))


def models(out):
    from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config,
                              Qwen2ForCausalLM)
    export_model(out, "gpt2", GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), GPT2LMHeadModel, 10)
    export_model(out, "llama", LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                           max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0,
                                           tie_word_embeddings=False), LlamaForCausalLM, 20)
    export_model(out, "qwen2", Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64,
                                           num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                           max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                           tie_word_embeddings=True), Qwen2ForCausalLM, 30)


CASES = [
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "don't won't I'm you're they'll we've he'd",
    "   leading and   multiple    spaces\tand\ttabs\n\nnew lines\r\n",
    "numbers 12345 and 3.14159 and 1,000,000",
    "Unicode: naïve café, Ünïcödé, 日本語のテキスト, Ελληνικά, русский текст",
    "emoji 🙂🚀 and symbols ©®™ — “quotes” ‘single’",
    "code: def f(x):\n    return x ** 2  # square",
    "<|endoftext|>special token in the middle<|endoftext|>",
    "",
    "a",
]


def training_text():
    import inspect
    import textwrap
    modules = ["argparse", "collections", "json", "os", "pathlib", "re", "string", "textwrap", "typing",
               "unittest", "email", "http", "logging", "subprocess"]
    texts = []
    for name in modules:
        module = __import__(name)
        for _, member in inspect.getmembers(module):
            doc = inspect.getdoc(member)
            if doc:
                texts.append(textwrap.dedent(doc))
    texts.extend(CASES * 3)
    return texts


def tokenizers(out):
    from tokenizers import Tokenizer, decoders, models as tok_models, pre_tokenizers, trainers
    import sentencepiece as spm
    texts = training_text()
    directory = os.path.join(out, "tokenizers")
    os.makedirs(os.path.join(directory, "bpe"), exist_ok=True)
    os.makedirs(os.path.join(directory, "sentencepiece"), exist_ok=True)

    bpe = Tokenizer(tok_models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    bpe.train_from_iterator(texts, trainer)
    bpe.save(os.path.join(directory, "bpe", "tokenizer.json"))

    prefix = os.path.join(directory, "sentencepiece", "tokenizer")
    spm.SentencePieceTrainer.train(sentence_iterator=iter([t for t in texts if t]), model_prefix=prefix,
                                   vocab_size=500, model_type="bpe", byte_fallback=True, character_coverage=1.0,
                                   bos_id=1, eos_id=2, unk_id=0, pad_id=-1, split_digits=True,
                                   allow_whitespace_only_pieces=True, remove_extra_whitespaces=False,
                                   num_threads=1, minloglevel=2)
    os.remove(prefix + ".vocab")
    sp = spm.SentencePieceProcessor(model_file=prefix + ".model")
    cases = []
    for text in CASES:
        ids = bpe.encode(text).ids
        sp_ids = sp.encode(text)
        cases.append({"text": text, "bpe_ids": ids, "bpe_decoded": bpe.decode(ids, skip_special_tokens=False),
                      "sp_ids": sp_ids, "sp_decoded": sp.decode(sp_ids)})
    with open(os.path.join(directory, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(cases, f, ensure_ascii=False, indent=1)
    print("tokenizers: bpe vocab", bpe.get_vocab_size(), "sentencepiece vocab", sp.get_piece_size())


def model_with_tokenizer(out):
    # A GPT-2 as the Hub has them: the bpe tokenizer's files beside the weights, its
    # <|endoftext|> as bos/eos, dropout set: what a fine-tune, then export, must carry over.
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2TokenizerFast
    directory = os.path.join(out, "hf", "gpt2_tokenizer")
    tokenizer = GPT2TokenizerFast(tokenizer_file=os.path.join(out, "tokenizers", "bpe", "tokenizer.json"),
                                  bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>")
    eos = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=4, bos_token_id=eos,
                        eos_token_id=eos, resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1)
    torch.manual_seed(40)
    GPT2LMHeadModel(config).save_pretrained(directory, safe_serialization=True)
    os.remove(os.path.join(directory, "generation_config.json"))  # zfcore's export writes one
    tokenizer.save_pretrained(directory)
    print("gpt2_tokenizer vocab", len(tokenizer), "eos", eos)


if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "fixtures"
    models(out)
    tokenizers(out)
    model_with_tokenizer(out)
