#!/usr/bin/env python3
"""The torch eager peer of zfcore's GPU benchmark: the same model shape (a plain torch model of
the Qwen2 or GPT-2 architecture), fp32 parameters under autocast bf16, fused AdamW, synthetic
tokens, warm-up steps then timed steps. Prints one line of JSON: step ms, tokens/s, peak GiB.

usage: torch_eager_bench.py {qwen2-1.5b,gpt2} --batch 8 --seq 512 [--warmup 3 --steps 10]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {
    # hidden, layers, heads, kv_heads, intermediate, vocab, rope_theta, norm_eps
    "qwen2-1.5b": dict(kind="qwen2", hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960,
                       vocab=151936, theta=1e6, eps=1e-6),
    "gpt2": dict(kind="gpt2", hidden=768, layers=12, heads=12, kv_heads=12, intermediate=3072, vocab=50257,
                 max_seq=1024, eps=1e-5),
}


class RMSNorm(nn.Module):
    def __init__(self, width, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotary(q, k, theta):
    d, t = q.shape[-1], q.shape[-2]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, device=q.device, dtype=torch.float32) / d)
    angles = torch.outer(torch.arange(t, device=q.device, dtype=torch.float32), inv)
    cos, sin = torch.cat([angles.cos()] * 2, -1).to(q.dtype), torch.cat([angles.sin()] * 2, -1).to(q.dtype)

    def turn(x):
        half = x.shape[-1] // 2
        return torch.cat([-x[..., half:], x[..., :half]], -1)

    return q * cos + turn(q) * sin, k * cos + turn(k) * sin


class QwenLayer(nn.Module):
    def __init__(self, s):
        super().__init__()
        h, self.heads, self.kv, self.theta = s["hidden"], s["heads"], s["kv_heads"], s["theta"]
        self.dim = h // self.heads
        self.norm1, self.norm2 = RMSNorm(h, s["eps"]), RMSNorm(h, s["eps"])
        self.q = nn.Linear(h, self.heads * self.dim)
        self.k = nn.Linear(h, self.kv * self.dim)
        self.v = nn.Linear(h, self.kv * self.dim)
        self.o = nn.Linear(h, h, bias=False)
        self.gate = nn.Linear(h, s["intermediate"], bias=False)
        self.up = nn.Linear(h, s["intermediate"], bias=False)
        self.down = nn.Linear(s["intermediate"], h, bias=False)

    def forward(self, x):
        b, t, h = x.shape
        y = self.norm1(x)
        q = self.q(y).view(b, t, self.heads, self.dim).transpose(1, 2)
        k = self.k(y).view(b, t, self.kv, self.dim).transpose(1, 2)
        v = self.v(y).view(b, t, self.kv, self.dim).transpose(1, 2)
        q, k = rotary(q, k, self.theta)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, h))
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Gpt2Layer(nn.Module):
    def __init__(self, s):
        super().__init__()
        h, self.heads = s["hidden"], s["heads"]
        self.ln1, self.ln2 = nn.LayerNorm(h, eps=s["eps"]), nn.LayerNorm(h, eps=s["eps"])
        self.attn, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc, self.out = nn.Linear(h, s["intermediate"]), nn.Linear(s["intermediate"], h)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.attn(self.ln1(x)).split(h, -1)
        q, k, v = (z.view(b, t, self.heads, h // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, h))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Model(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.embed = nn.Embedding(s["vocab"], s["hidden"])
        if s["kind"] == "gpt2":
            self.positions = nn.Embedding(s["max_seq"], s["hidden"])
            self.norm = nn.LayerNorm(s["hidden"], eps=s["eps"])
            self.layers = nn.ModuleList(Gpt2Layer(s) for _ in range(s["layers"]))
        else:
            self.norm = RMSNorm(s["hidden"], s["eps"])
            self.layers = nn.ModuleList(QwenLayer(s) for _ in range(s["layers"]))

    def forward(self, ids, targets):
        x = self.embed(ids)
        if self.s["kind"] == "gpt2":
            x = x + self.positions(torch.arange(ids.shape[1], device=ids.device))
        for layer in self.layers:
            x = layer(x)
        logits = F.linear(self.norm(x), self.embed.weight)  # tied output head, as in both presets
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_eager_bench.py: no GPU visible to torch")
    torch.manual_seed(0)
    model = Model(SHAPES[args.shape])
    with torch.no_grad():  # GPT-2 style initialization, so that the loss starts near ln(vocab)
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
            elif name.endswith("bias"):
                p.zero_()
    model = model.cuda()
    params = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    vocab = SHAPES[args.shape]["vocab"]
    ids = torch.randint(0, vocab, (args.batch, args.seq + 1), device="cuda")
    inputs, targets = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()  # the loss reaches the host every step, as zfcore reports it

    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        started = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - started) * 1000)
    ms = sum(times) / len(times)
    print(json.dumps({
        "system": "torch eager (autocast bf16, fused AdamW)", "shape": args.shape, "params": params,
        "batch": args.batch, "seq": args.seq, "step_ms": round(ms, 2),
        "tokens_per_s": round(args.batch * args.seq / (ms / 1000)),
        "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2), "loss": round(loss, 4),
        "torch": torch.__version__, "device": torch.cuda.get_device_name(),
    }))


if __name__ == "__main__":
    main()
