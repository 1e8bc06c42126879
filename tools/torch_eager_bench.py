#!/usr/bin/env python3
"""The torch eager peer of zfcore's GPU benchmark: the same model shape (a plain torch model of
the Qwen2 or GPT-2 architecture), fp32 parameters, fused AdamW, synthetic tokens, warm-up steps
then timed steps with the loss on the host every step. Prints one line of JSON: step ms,
tokens/s, peak GiB.

usage: torch_eager_bench.py SHAPE --batch 8 --seq 512 [--warmup 3 --steps 10] [--compile] [--profile FILE.json]
  SHAPE: qwen2-1.5b or gpt2 (this file's own torch model), or a family's shape built by transformers
         from its config (the model every user of that family trains): llama3.2-1b, qwen3-1.7b,
         gemma3-1b, qwen2-1.5b-hf
  --compile: torch.compile(model) (one GPU), the peer a user gets with one more line
       torchrun --standalone --nproc_per_node N torch_eager_bench.py SHAPE --parallel MODE [...]
       mpirun -np N python3 torch_eager_bench.py SHAPE --parallel MODE [...]

--parallel (one process per GPU, NCCL; --batch is per GPU, each rank draws its own tokens):
  none           one GPU, autocast bf16 (the default)
  ddp            DistributedDataParallel (default buckets, fp32 gradients), autocast bf16
  fsdp2          FSDP2 fully_shard on each layer, then the root (which holds the tied embedding and
                 output head), reshard_after_forward=False (ZeRO-2-like); bf16 compute parameters
                 via MixedPrecisionPolicy, fp32 sharded parameters and AdamW state, gradients
                 reduce-scattered in --reduce-dtype
  fsdp2-reshard  the same with reshard_after_forward=True on the layers (ZeRO-3-like); the root
                 keeps FSDP2's root default (False: it is needed first in the backward)
Under mpirun, OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK} stand for RANK, WORLD_SIZE and LOCAL_RANK,
and MASTER_ADDR/MASTER_PORT default to 127.0.0.1:29517. Rank 0 prints the JSON line: step ms
(rank 0's mean), tokens/s over all GPUs and per GPU, peak GiB (per GPU, the largest rank's).
"""
import argparse
import contextlib
import json
import math
import os
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

PARALLEL = ("none", "ddp", "fsdp2", "fsdp2-reshard")
MASTER_PORT = "29517"

SHAPES = {
    # hidden, layers, heads, kv_heads, intermediate, vocab, rope_theta, norm_eps
    "qwen2-1.5b": dict(kind="qwen2", hidden=1536, layers=28, heads=12, kv_heads=2, intermediate=8960,
                       vocab=151936, theta=1e6, eps=1e-6),
    "gpt2": dict(kind="gpt2", hidden=768, layers=12, heads=12, kv_heads=12, intermediate=3072, vocab=50257,
                 max_seq=1024, eps=1e-5),
}


def llama_like(model_type, hidden, layers, heads, kv_heads, intermediate, vocab, theta, eps, tie, **extra):
    config = dict(model_type=model_type, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  num_key_value_heads=kv_heads, intermediate_size=intermediate, vocab_size=vocab, rope_theta=theta,
                  rms_norm_eps=eps, tie_word_embeddings=tie, max_position_embeddings=8192)
    config.update(extra)
    return dict(kind="hf", vocab=vocab, config=config)


# The families' shapes as zfcore's presets give them (core/model/presets.cpp), built by transformers.
SHAPES.update({
    "qwen2-1.5b-hf": llama_like("qwen2", 1536, 28, 12, 2, 8960, 151936, 1e6, 1e-6, True),
    "llama3.2-1b": llama_like("llama", 2048, 16, 32, 8, 8192, 128256, 5e5, 1e-5, True, max_position_embeddings=131072,
                              rope_parameters={
        "rope_type": "llama3", "rope_theta": 5e5, "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}),
    "qwen3-1.7b": llama_like("qwen3", 2048, 28, 16, 8, 6144, 151936, 1e6, 1e-6, True, head_dim=128),
    "gemma3-1b": llama_like("gemma3_text", 1152, 26, 4, 1, 6912, 262144, 1e6, 1e-6, True, head_dim=256,
                            query_pre_attn_scalar=256, sliding_window=512),
})


class HfModel(nn.Module):
    """A transformers causal LM of the shape's config, with this file's (ids, targets) -> loss."""

    def __init__(self, s):
        super().__init__()
        import transformers
        config = transformers.AutoConfig.for_model(**s["config"])
        self.model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")

    def forward(self, ids, targets):
        logits = self.model(input_ids=ids).logits
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.view(-1))


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


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("shape", choices=sorted(SHAPES))
    parser.add_argument("--batch", type=int, default=8, help="sequences per GPU")
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="weights: seed; tokens: seed + rank")
    parser.add_argument("--parallel", choices=PARALLEL, default="none")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model (one GPU)")
    parser.add_argument("--profile", metavar="FILE.json",
                        help="after the timed steps, trace two more under torch.profiler into FILE.json (one GPU)")
    parser.add_argument("--reduce-dtype", choices=("float32", "bfloat16"), default="float32",
                        help="fsdp2*: MixedPrecisionPolicy.reduce_dtype of the gradient reduce-scatter")
    return parser.parse_args()


def init_distributed():
    """Joins the NCCL group of torchrun's or mpirun's processes: (rank, world size, local rank)."""
    env = os.environ
    for name, ompi in (("RANK", "OMPI_COMM_WORLD_RANK"), ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE"),
                       ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK")):
        if name not in env and ompi in env:
            env[name] = env[ompi]
    env.setdefault("RANK", "0")
    env.setdefault("WORLD_SIZE", "1")
    env.setdefault("LOCAL_RANK", "0")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", MASTER_PORT)
    local_rank = int(env["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    return dist.get_rank(), dist.get_world_size(), local_rank


def build_model(shape, seed):
    """The model on the CPU with the same weights on every rank (FSDP2 does not broadcast them)."""
    torch.manual_seed(seed)
    model = HfModel(SHAPES[shape]) if SHAPES[shape]["kind"] == "hf" else Model(SHAPES[shape])
    with torch.no_grad():  # GPT-2 style initialization, so that the loss starts near ln(vocab)
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.02)
            elif name.endswith("bias"):
                p.zero_()
    return model


def fsdp2(model, reshard_after_forward, reduce_dtype, mesh):
    """FSDP2: one group per layer, then the root's group, which holds what is left: the embedding
    (so the tied output head, used at both ends of the forward, lives in one group), the final norm
    and GPT-2's positions. The root keeps FSDP2's default for roots (no reshard after the forward:
    the backward starts with it). bf16 compute copies of the fp32 sharded parameters."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=reduce_dtype)
    for layer in model.layers:
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def parallelize(model, args, world, local_rank):
    if args.parallel == "ddp":
        return nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
    if args.parallel.startswith("fsdp2"):
        from torch.distributed.device_mesh import init_device_mesh
        return fsdp2(model, args.parallel == "fsdp2-reshard", getattr(torch, args.reduce_dtype),
                     init_device_mesh("cuda", (world,)))
    return model


def make_step(model, optimizer, inputs, targets, autocast, allocated_at):
    """One training step; allocated_at gets the bytes in use at its start and after the forward."""
    def step():
        allocated_at["step_start"] = torch.cuda.memory_allocated()
        with torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            loss = model(inputs, targets)
        allocated_at["forward_end"] = torch.cuda.memory_allocated()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()  # the loss reaches the host every step, as zfcore reports it

    return step


def tokens(args, rank, device):
    """This rank's batch: --batch x --seq tokens (and the next ones as targets), seed + rank."""
    torch.manual_seed(args.seed + rank)
    ids = torch.randint(0, SHAPES[args.shape]["vocab"], (args.batch, args.seq + 1), device=device)
    return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()


def run(step, warmup, steps, distributed):
    """Warm-up steps, then timed steps: (mean step ms, last loss); the memory peak from then on."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    if distributed:
        dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        loss = step()
        times.append((time.perf_counter() - started) * 1000)
    return sum(times) / len(times), loss


def peak_bytes(distributed):
    """max_memory_allocated of this GPU, or the largest over the ranks."""
    peak = torch.tensor([torch.cuda.max_memory_allocated()], dtype=torch.int64, device="cuda")
    if distributed:
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return int(peak.item())


def report(args, params, world, ms, loss, peak, allocated_at):
    tokens_per_gpu = args.batch * args.seq / (ms / 1000)
    common = {"shape": args.shape, "params": params, "batch": args.batch, "seq": args.seq,
              "allocated_at_gib": {k: round(v / 2**30, 2) for k, v in allocated_at.items()}}
    tail = {"torch": torch.__version__, "device": torch.cuda.get_device_name()}
    if args.parallel == "none":  # the single-GPU line, as it always was
        system = "torch.compile" if args.compile else "torch eager"
        return {"system": system + " (autocast bf16, fused AdamW)", **common, "step_ms": round(ms, 2),
                "tokens_per_s": round(tokens_per_gpu), "peak_gib": round(peak / 2**30, 2),
                "loss": round(loss, 4), **tail}
    if args.parallel == "ddp":
        system, extra = "torch DDP (autocast bf16)", {"param_dtype": "float32 (autocast bf16)",
                                                      "reduce_dtype": "float32"}
    else:
        system = "torch FSDP2 (reshard_after_forward=%s)" % (args.parallel == "fsdp2-reshard")
        extra = {"param_dtype": "bfloat16 (fp32 shards)", "reduce_dtype": args.reduce_dtype}
    return {"system": system, "parallel": args.parallel, **common, "world_size": world,
            "step_ms": round(ms, 2), "tokens_per_s": round(tokens_per_gpu * world),
            "tokens_per_s_per_gpu": round(tokens_per_gpu), "peak_gib": round(peak / 2**30, 2),
            "loss": round(loss, 4), "adamw": "fused", **extra, **tail}


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("torch_eager_bench.py: no GPU visible to torch")
    distributed = args.parallel != "none"
    rank, world, local_rank = init_distributed() if distributed else (0, 1, 0)
    model = build_model(args.shape, args.seed).cuda()
    params = sum(p.numel() for p in model.parameters())
    model = parallelize(model, args, world, local_rank)
    if args.compile:
        model = torch.compile(model)
    # Fused AdamW, also on FSDP2's sharded (DTensor) parameters.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01, fused=True)
    inputs, targets = tokens(args, rank, "cuda")
    autocast = not args.parallel.startswith("fsdp2")  # FSDP2 computes in bf16 by its policy
    allocated_at = {}  # rank 0's, in the last step
    step = make_step(model, optimizer, inputs, targets, autocast, allocated_at)
    ms, loss = run(step, args.warmup, args.steps, distributed)
    peak = peak_bytes(distributed)
    if args.profile and rank == 0:  # two more steps under torch's profiler (tools/profile_ops.py reads the trace)
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as traced:
            for _ in range(2):
                step()
            torch.cuda.synchronize()
        traced.export_chrome_trace(args.profile)
    if rank == 0:
        print(json.dumps(report(args, params, world, ms, loss, peak, allocated_at)), flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
