#!/usr/bin/env python3
"""Builds the parity fixtures of the model families: one tiny random-weight model per family, built by
transformers (pinned: transformers==5.23.0, fp32), with the family's distinctive features switched on
where they change the result: windows shorter than the sequence, RoPE scaling past the original
positions, norms and multipliers far from 1, partial rotation, layers without RoPE.

Usage: python3 tools/make_family_fixtures.py [OUT_DIR [NAME...]]   (default tests/fixtures/families, every family)
Writes OUT_DIR/NAME/config.json and model.safetensors (transformers' save_pretrained) and
OUT_DIR/NAME/expected.safetensors:
  input_ids [2, T]   sampled from the model itself (random ids hide most features); T = 32, or the
                     family's own length (Qwen3.5: 80, past transformers' delta-rule chunk of 64)
  logits [2, T, V]   transformers' logits in fp32
  loss [1]           transformers' loss with labels = input_ids (with the load-balancing loss, where asked)
  aux_loss [1]       the mixtures of experts: transformers' load-balancing loss, unscaled
  grad.PARAM         the gradient of that loss for every parameter, under the names of model.safetensors (an
                     image-text model's: those of its language model, named as its text-only class names
                     them; its vision tower gets none from text)
Gemma 4's layer scalars are buffers transformers never trains: their grad.* entries are zeros.
The image-text fixtures (gemma3_image_text, qwen3_5_image_text, qwen3_5_moe_image_text, gemma4_image_text) are the
conditional-generation models with a tiny vision tower, run on text only; the Qwen3.5 ones' checkpoints also
hold a multi-token-prediction tensor (mtp.fc.weight), which transformers does not build and zfcore passes
through. qwen3_5_moe_image_text's experts are stored fused (mlp.experts.gate_up_proj [E, 2I, H], down_proj
[E, H, I]), as the published Qwen3.5-MoE checkpoints hold them; its gradients are given per expert, under
the names zfcore's parameters have, as are gemma4_moe's (whose checkpoint holds its experts 3-D, as
transformers saves Gemma 4).
tests/fixtures/gemma4_type_alone/parameters.json lists the parameters transformers builds for the Gemma 4 that
zfcore's model.type = "gemma4_text" stands for without a checkpoint (type_alone()).
tests/fixtures/gpt_oss_mxfp4 is the gpt_oss fixture with its experts in MXFP4, and their dequantisation by
transformers (mxfp4()).
zfcore does not need this script to build or test: the fixtures are committed.
"""
import os
import sys

import torch
import transformers
from safetensors.torch import load_file, save_file

VOCAB, SEQ, BATCH, HIDDEN = 96, 32, 2, 32


def common(**overrides):
    config = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    config.update(overrides)
    return config


def qwen3_5_moe_text(**overrides):
    """Qwen3.5-MoE's language model: no dense MLP (no intermediate_size), 8 experts of 16, a shared one of 24."""
    config = common(head_dim=16, max_position_embeddings=128, layer_types=["linear_attention", "full_attention"],
                    linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                    linear_conv_kernel_dim=4, moe_intermediate_size=16, shared_expert_intermediate_size=24,
                    num_experts=8, num_experts_per_tok=2, output_router_logits=True, router_aux_loss_coef=0.5,
                    rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25})
    del config["intermediate_size"]
    config.update(overrides)
    return config


def families():
    T = transformers
    window_types = ["sliding_attention", "full_attention"]
    return {
        # Llama 3.1+: llama3 frequency scaling whose original context (16) the sequence passes; 3.2's tied head.
        "llama3": (T.LlamaConfig, common(tie_word_embeddings=True, rope_parameters={
            "rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16})),
        # Qwen3: head_dim 16 != hidden / heads, q/k norms per head; biases on q, k, v and o.
        "qwen3": (T.Qwen3Config, common(head_dim=16, attention_bias=True,
                                        rope_parameters={"rope_type": "default", "rope_theta": 1e6})),
        # Mistral: explicit head_dim, a window of 8 over every layer.
        "mistral": (T.MistralConfig, common(head_dim=16, sliding_window=8)),
        # Ministral 3: yarn from 16 original positions, Llama 4's query scaling past them.
        "ministral3": (T.Ministral3Config, common(head_dim=16, sliding_window=None, rope_parameters={
            "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 16,
            "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
            "llama_4_scaling_beta": 0.5})),
        # OLMo 2: norms after the branches, q/k norms over the whole projections.
        "olmo2": (T.Olmo2Config, common()),
        # OLMo 3: OLMo 2 with a sliding layer (window 8) and a full one, each with its RoPE.
        "olmo3": (T.Olmo3Config, common(layer_types=window_types, sliding_window=8, rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                               "original_max_position_embeddings": 16, "attention_factor": 1.2}})),
        # Gemma 3: a local layer (window 8, base 10000) and a global one (base 1e6, linear factor 2),
        # (1 + w) norms before and after each branch, query_pre_attn_scalar != head_dim, soft-capped logits.
        "gemma3": (T.Gemma3TextConfig, common(head_dim=16, tie_word_embeddings=True, layer_types=window_types,
                                              sliding_window=8, query_pre_attn_scalar=10,
                                              final_logit_softcapping=5.0, rope_parameters={
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0}})),
        # Phi-3 / Phi-4: fused qkv and gate_up, half of each head rotated, a window of 12.
        "phi3": (T.Phi3Config, common(sliding_window=12, rope_parameters={
            "rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5})),
        # SmolLM3: the second layer without RoPE.
        "smollm3": (T.SmolLM3Config, common(no_rope_layers=[1, 0])),
        # Granite: every multiplier away from 1.
        "granite": (T.GraniteConfig, common(embedding_multiplier=3.0, residual_multiplier=0.5,
                                            attention_multiplier=0.2, logits_scaling=2.5)),
        # Qwen3.5: a Gated DeltaNet layer (2 key heads serving 4 value heads) and a gated full-attention
        # layer with a quarter of each head rotated; 80 positions, so the delta rule runs over two chunks.
        "qwen3_5": (T.Qwen3_5TextConfig, common(
            head_dim=16, max_position_embeddings=128, layer_types=["linear_attention", "full_attention"],
            linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
            linear_conv_kernel_dim=4,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25}), 80),
        # Gemma 3's image-text checkpoint: the gemma3 language model under text_config, a one-layer vision tower.
        "gemma3_image_text": (T.Gemma3Config, dict(
            text_config=common(head_dim=16, tie_word_embeddings=True, layer_types=window_types, sliding_window=8, query_pre_attn_scalar=10,
                               final_logit_softcapping=5.0, rope_parameters={
                                   "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                   "full_attention": {"rope_type": "linear", "rope_theta": 1e6, "factor": 2.0}}),
            vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                               image_size=8, patch_size=4),
            mm_tokens_per_image=4, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=0)),
        # Qwen3.5's image-text checkpoint: the qwen3_5 language model (with M-RoPE sections, which text-only
        # positions make plain RoPE) under text_config, a one-block vision tower, one MTP layer declared.
        "qwen3_5_image_text": (T.Qwen3_5Config, dict(
            text_config=common(
                head_dim=16, max_position_embeddings=128, layer_types=["linear_attention", "full_attention"],
                linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
                linear_conv_kernel_dim=4, attn_output_gate=True, mtp_num_hidden_layers=1,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                                 "mrope_section": [1, 1, 0], "mrope_interleaved": True}),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                               spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=HIDDEN,
                               num_position_embeddings=16),
            tie_word_embeddings=False), 80),
        # Gemma 4: two sliding layers (window 8, base 10000) and a full one computing keys and values, then a
        # sliding and a full layer reusing them (num_kv_shared_layers) with a double-wide MLP; full layers with
        # their own head size (32) and one key-value head whose values are the keys' projection, under
        # proportional RoPE; per-layer input embeddings; layer scalars away from 1; soft-capped logits.
        "gemma4": (T.Gemma4TextConfig, common(
            head_dim=16, num_hidden_layers=5, tie_word_embeddings=True, sliding_window=8,
            layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention",
                         "full_attention"],
            global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=2,
            hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, use_double_wide_mlp=True,
            final_logit_softcapping=5.0, rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 10000.0}})),
        # Gemma 4's image-text checkpoint: a gemma4 language model (three layers, the last reusing the first's keys
        # and values) under text_config, a one-layer vision tower.
        "gemma4_image_text": (T.Gemma4Config, dict(
            text_config=common(
                head_dim=16, num_hidden_layers=3, tie_word_embeddings=True, sliding_window=8,
                layer_types=["sliding_attention", "full_attention", "full_attention"], global_head_dim=32,
                num_global_key_value_heads=1, attention_k_eq_v=True, num_kv_shared_layers=1,
                hidden_size_per_layer_input=8, vocab_size_per_layer_input=VOCAB, final_logit_softcapping=5.0,
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                 "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                                    "rope_theta": 10000.0}}),
            vision_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                               num_key_value_heads=2, head_dim=8, patch_size=4, position_embedding_size=64),
            audio_config=None, tie_word_embeddings=True)),
        # Gemma 4's mixture of experts (gemma-4-26B-A4B's layer): 4 experts, 2 per token, beside every dense MLP;
        # a sliding and a full layer (K = V, one key-value head of 32 channels), no per-layer inputs.
        "gemma4_moe": (T.Gemma4TextConfig, common(
            head_dim=16, tie_word_embeddings=True, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
            global_head_dim=32, num_global_key_value_heads=1, attention_k_eq_v=True, hidden_size_per_layer_input=0,
            enable_moe_block=True, num_experts=4, top_k_experts=2, moe_intermediate_size=16,
            final_logit_softcapping=5.0, rope_parameters={
                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25,
                                   "rope_theta": 10000.0}})),
        # The mixtures of experts: 8 experts, 2 per token, every expert receiving tokens; the load-balancing
        # loss in the loss (output_router_logits) with a coefficient large enough to show in the gradients.
        # Qwen3-MoE: renormalised top 2, a dense middle layer (mlp_only_layers), per-head q/k norms.
        "qwen3_moe": (T.Qwen3MoeConfig, common(head_dim=16, num_hidden_layers=3, moe_intermediate_size=16,
                                               num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                                               mlp_only_layers=[1], output_router_logits=True,
                                               router_aux_loss_coef=0.5)),
        # Mixtral: always renormalised, a window of 8 over every layer.
        "mixtral": (T.MixtralConfig, common(intermediate_size=16, num_local_experts=8, num_experts_per_tok=2,
                                            sliding_window=8, output_router_logits=True, router_aux_loss_coef=0.5)),
        # OLMoE: top 2 not renormalised, q/k norms over the whole projections.
        "olmoe": (T.OlmoeConfig, common(intermediate_size=16, num_experts=8, num_experts_per_tok=2,
                                        norm_topk_prob=False, output_router_logits=True, router_aux_loss_coef=0.5)),
        # Qwen3.5-MoE: the qwen3_5 layers with experts in every layer (top 2 always renormalised) and a
        # shared expert behind its sigmoid gate; saved one expert at a time, as transformers writes it.
        "qwen3_5_moe": (T.Qwen3_5MoeTextConfig, qwen3_5_moe_text(), 80),
        # Its image-text checkpoint (Qwen3.5-35B-A3B's class), the experts fused into 3-D tensors as the
        # published checkpoints hold them, a one-block vision tower, one MTP layer declared.
        "qwen3_5_moe_image_text": (T.Qwen3_5MoeConfig, dict(
            text_config=qwen3_5_moe_text(mtp_num_hidden_layers=1, rope_parameters={
                "rope_type": "default", "rope_theta": 1e6, "partial_rotary_factor": 0.25,
                "mrope_section": [1, 1, 0], "mrope_interleaved": True}),
            vision_config=dict(depth=1, hidden_size=16, intermediate_size=32, num_heads=2, patch_size=4,
                               spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=HIDDEN,
                               num_position_embeddings=16),
            tie_word_embeddings=False), 80),
        # gpt-oss: a sliding layer (window 8) and a full one, yarn from 16 original positions, sinks, biases
        # everywhere, a router with a bias, fused experts (width 32: MXFP4 packs groups of 32) whose SwiGLU
        # clamp (1.5) the values pass.
        "gpt_oss": (T.GptOssConfig, common(head_dim=16, intermediate_size=32, num_local_experts=8,
                                           num_experts_per_tok=2, layer_types=window_types, sliding_window=8,
                                           swiglu_limit=1.5, output_router_logits=True, router_aux_loss_coef=0.5,
                                           rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0,
                                                            "factor": 4.0, "original_max_position_embeddings": 16,
                                                            "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False})),
    }


def perturb(model, seed):
    # transformers' init (std 0.02, norms at 1 or 0) gives near-uniform logits; larger weights make a sharper test.
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1 and "norm" in name:
                p.copy_(p + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("router.scale") or name.endswith("per_expert_scale"):  # Gemma 4's, near 1
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith(("mlp.gate.weight", "mlp.router.weight")):  # a router: peaked enough to matter, flat enough for every expert
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name.endswith("mlp.router.bias"):  # gpt-oss's router bias: small beside its logits
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=gen))
        for name, b in model.named_buffers():
            if name.endswith("layer_scalar"):  # Gemma 4's fixed per-layer scalar, loaded, never trained
                b.copy_(0.5 + torch.rand(b.shape, generator=gen))


def stored_gradients(model, directory):
    """Every gradient under the name of the tensor save_pretrained wrote: transformers holds a layer's
    experts as 3-D gate_up_proj [E, 2I, H] and down_proj [E, H, I] and writes them one expert at a time."""
    from safetensors.torch import load_file
    stored = load_file(os.path.join(directory, "model.safetensors"))
    if any(".mlp.router." in key for key in stored):  # gpt-oss: its fused experts stored as they are
        for name, p in model.named_parameters():
            assert torch.equal(p.detach(), stored[name]), name
        return {name: p.grad for name, p in model.named_parameters()}
    mixtral = any(".block_sparse_moe." in key for key in stored)
    moe, names = ("block_sparse_moe", ("w1", "w3", "w2")) if mixtral else ("mlp", ("gate_proj", "up_proj", "down_proj"))
    grads, expected = {}, set(stored)
    for name, p in model.named_parameters():
        if name.endswith((".experts.gate_up_proj", ".experts.down_proj")) and ".mlp." not in name:
            # Gemma 4's experts: saved 3-D, as the model holds them; their gradients given per expert, as zfcore
            # holds them.
            assert torch.equal(p.detach(), stored[name]), name
            expected.remove(name)
            for key, grad in split_experts(name, p.grad):
                grads[key] = grad
                expected.add(key)
            continue
        parts = None
        if name.endswith("mlp.experts.gate_up_proj"):
            half = p.shape[1] // 2
            parts = [(0, lambda t, e: t[e, :half]), (1, lambda t, e: t[e, half:])]
        elif name.endswith("mlp.experts.down_proj"):
            parts = [(2, lambda t, e: t[e])]
        if parts is None:
            key = name.replace(".mlp.gate.", f".{moe}.gate.")
            grads[key], value = p.grad, p
        else:
            prefix = name[: name.index("mlp.experts.")]
            for which, take in parts:
                for e in range(p.shape[0]):
                    key = f"{prefix}{moe}.experts.{e}.{names[which]}.weight"
                    grads[key] = take(p.grad, e)
                    assert torch.equal(take(p.detach(), e), stored[key]), key
            continue
        assert torch.equal(value.detach(), stored[key]), key
    for key in stored:  # Gemma 4's layer scalars: buffers, which zfcore holds fixed (a zero gradient)
        if key.endswith("layer_scalar") and key not in grads:
            grads[key] = torch.zeros_like(stored[key])
    assert set(grads) == expected, set(grads) ^ expected
    return grads


def split_experts(name, tensor):
    """A 3-D expert tensor of transformers (gate_up_proj [E, 2I, H], down_proj [E, H, I]) as the 2-D
    tensors of its experts, under the names transformers writes one expert at a time (Gemma 4's:
    experts.E.*, as zfcore names them)."""
    prefix = name[: name.rindex("experts.") + len("experts.")]
    if name.endswith("gate_up_proj"):
        half = tensor.shape[1] // 2
        for e in range(tensor.shape[0]):
            yield f"{prefix}{e}.gate_proj.weight", tensor[e, :half]
            yield f"{prefix}{e}.up_proj.weight", tensor[e, half:]
    else:
        for e in range(tensor.shape[0]):
            yield f"{prefix}{e}.down_proj.weight", tensor[e]


def fuse_experts(directory):
    """Rewrites model.safetensors with each layer's experts fused, mlp.experts.gate_up_proj [E, 2I, H] and
    down_proj [E, H, I], as Qwen3.5-MoE's published checkpoints hold them."""
    weights = os.path.join(directory, "model.safetensors")
    tensors = load_file(weights)
    fused, experts = {}, {}
    for key in sorted(tensors):
        if ".mlp.experts." not in key:
            fused[key] = tensors[key]
            continue
        prefix, rest = key.split(".mlp.experts.")
        e, which = rest.split(".", 1)
        experts.setdefault(prefix, {})[(int(e), which)] = tensors[key]
    for prefix, parts in experts.items():
        count = 1 + max(e for e, _ in parts)
        fused[prefix + ".mlp.experts.gate_up_proj"] = torch.stack(
            [torch.cat([parts[(e, "gate_proj.weight")], parts[(e, "up_proj.weight")]]) for e in range(count)])
        fused[prefix + ".mlp.experts.down_proj"] = torch.stack([parts[(e, "down_proj.weight")] for e in range(count)])
    save_file({k: v.contiguous() for k, v in fused.items()}, weights, metadata={"format": "pt"})


def build(out, name, seed, config_class, settings, seq=SEQ):
    torch.manual_seed(seed)
    config = config_class(**settings)
    config._attn_implementation = "eager"
    image_text = "text_config" in settings
    if image_text:  # the class its checkpoints name (AutoModelForCausalLM builds Qwen3.5's text-only one)
        model = getattr(transformers, config_class.__name__.replace("Config", "ForConditionalGeneration"))(config)
        model = model.float().eval()
    else:
        model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    perturb(model, seed)
    directory = os.path.join(out, name)
    model.save_pretrained(directory, safe_serialization=True)
    if getattr(config.get_text_config(), "mtp_num_hidden_layers", 0):
        # A multi-token-prediction weight, as Qwen3.5's checkpoints hold them: not built by transformers.
        weights = os.path.join(directory, "model.safetensors")
        tensors = load_file(weights)
        tensors["mtp.fc.weight"] = 0.2 * torch.randn(HIDDEN, 2 * HIDDEN, generator=torch.Generator().manual_seed(seed))
        save_file(tensors, weights, metadata={"format": "pt"})
    if name == "qwen3_5_moe_image_text":
        fuse_experts(directory)
    generation = os.path.join(directory, "generation_config.json")
    if os.path.exists(generation):
        os.remove(generation)
    # Sequences the model itself writes: its features then shape every position.
    torch.manual_seed(seed + 1)
    start = torch.randint(0, VOCAB, (BATCH, 1))
    with torch.no_grad():
        ids = model.generate(start, do_sample=True, max_new_tokens=seq - 1, min_new_tokens=seq - 1,
                             pad_token_id=0, eos_token_id=None, top_k=0, top_p=1.0)
    model.zero_grad()
    result = model(input_ids=ids, labels=ids)
    result.loss.backward()
    tensors = {"input_ids": ids.contiguous(), "logits": result.logits.detach().float().contiguous(),
               "loss": result.loss.detach().float().reshape(1).contiguous()}
    if getattr(result, "aux_loss", None) is not None:
        tensors["aux_loss"] = result.aux_loss.detach().float().reshape(1).contiguous()
        text = config.get_text_config()
        experts = getattr(text, "num_local_experts", None) or text.num_experts
        k = text.num_experts_per_tok
        for layer, logits in enumerate(result.router_logits):
            picks = torch.bincount(logits.topk(k, dim=-1).indices.reshape(-1), minlength=experts)
            assert bool((picks > 0).all()), f"{name}: layer {layer}: an expert receives no token ({picks.tolist()})"
    if name.endswith("_image_text"):
        for param_name, p in model.named_parameters():
            if p.grad is None:  # the vision tower, which text does not reach
                continue
            text_name = param_name.replace("model.language_model.", "model.")
            parts = split_experts(text_name, p.grad) if ".mlp.experts." in text_name else [(text_name, p.grad)]
            for part_name, grad in parts:
                tensors["grad." + part_name] = grad.detach().float().contiguous()
        for buffer_name, b in model.named_buffers():  # Gemma 4's layer scalars: held fixed, a zero gradient
            if buffer_name.endswith("layer_scalar"):
                tensors["grad." + buffer_name.replace("model.language_model.", "model.")] = torch.zeros_like(b).float()
    else:
        for param_name, grad in stored_gradients(model, directory).items():
            tensors["grad." + param_name] = grad.detach().float().contiguous()
    save_file(tensors, os.path.join(directory, "expected.safetensors"))
    print(name, config.model_type, "loss", float(result.loss), "params", sum(p.numel() for p in model.parameters()))


def mxfp4(source, directory):
    """DIRECTORY: the gpt_oss fixture with its experts' matrices in MXFP4 as gpt-oss's published checkpoints
    store them (NAME_blocks, NAME_scales; quantization_config quant_method mxfp4), random blocks and scales
    around 2^0; expected.safetensors holds transformers' own dequantisation of each (fp32), under NAME."""
    from transformers.integrations.mxfp4 import convert_moe_packed_tensors
    os.makedirs(directory, exist_ok=True)
    gen = torch.Generator().manual_seed(5)
    tensors, expected = load_file(os.path.join(source, "model.safetensors")), {}
    for name in [k for k in tensors if k.endswith(("mlp.experts.gate_up_proj", "mlp.experts.down_proj"))]:
        experts, inner, outer = tensors.pop(name).shape  # [E, in, out]: stored transposed, in groups of 32 of `in`
        blocks = torch.randint(0, 256, (experts, outer, inner // 32, 16), generator=gen, dtype=torch.uint8)
        scales = torch.randint(121, 130, (experts, outer, inner // 32), generator=gen, dtype=torch.uint8)
        tensors[name + "_blocks"], tensors[name + "_scales"] = blocks, scales
        expected[name] = convert_moe_packed_tensors(blocks, scales, dtype=torch.float32).contiguous()
        assert expected[name].shape == (experts, inner, outer), name
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    save_file(expected, os.path.join(directory, "expected.safetensors"))
    import json
    config = json.load(open(os.path.join(source, "config.json")))
    config["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")
    print("gpt_oss_mxfp4", {k: tuple(v.shape) for k, v in expected.items()})


# Gemma 4 given by type alone: zfcore's keys (tests/models/test_families.cpp) and the Gemma4TextConfig they
# stand for: those keys, head_dim = hidden / heads and the full layers' heads twice that (512 over 256 in
# transformers' defaults), the per-layer inputs' table over the vocabulary; every other key transformers' default.
TYPE_ALONE = dict(hidden=32, layers=7, heads=4, kv_heads=2, intermediate=64, vocab=61, max_seq=64)


def type_alone(path):
    """PATH: the parameters (and buffers) transformers' Gemma4ForCausalLM of that config registers, with
    their shapes, built on the meta device."""
    import json
    z = TYPE_ALONE
    head_dim = z["hidden"] // z["heads"]
    config = transformers.Gemma4TextConfig(
        hidden_size=z["hidden"], num_hidden_layers=z["layers"], num_attention_heads=z["heads"],
        num_key_value_heads=z["kv_heads"], intermediate_size=z["intermediate"], vocab_size=z["vocab"],
        max_position_embeddings=z["max_seq"], head_dim=head_dim, global_head_dim=2 * head_dim,
        vocab_size_per_layer_input=z["vocab"])
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config)
    tensors = {name: list(p.shape) for name, p in model.named_parameters()}
    buffers = {name: list(b.shape) for name, b in model.named_buffers() if name.endswith("layer_scalar")}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump({"zfcore": z, "parameters": tensors, "buffers": buffers,
                   "layer_types": config.layer_types}, f, indent=1, sort_keys=True)
        f.write("\n")
    print("gemma4 by type alone", sum(1 for _ in tensors), "parameters")


def main():
    assert transformers.__version__ == "5.23.0", f"the fixtures pin transformers 5.23.0, not {transformers.__version__}"
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures",
                                                             "families")
    only = set(sys.argv[2:])
    everything = families()
    # Seeds in the order the fixtures were added: the first ten sorted, then each later one at the
    # position it was added at (families added side by side share a position), so that adding a family
    # leaves the others' fixtures as committed.
    later = {"qwen3_5": 0, "mixtral": 1, "olmoe": 2, "qwen3_moe": 3, "gemma3_image_text": 4, "qwen3_5_image_text": 5,
             "qwen3_5_moe": 6, "qwen3_5_moe_image_text": 7, "gpt_oss": 6,
             "gemma4": 6, "gemma4_image_text": 7, "gemma4_moe": 8}
    first = sorted(name for name in everything if name not in later)
    seeds = {name: at for at, name in enumerate(first)}
    seeds.update({name: len(first) + at for name, at in later.items()})
    for name in first + sorted(later, key=later.get):
        if not only or name in only:
            build(out, name, 100 + 10 * seeds[name], *everything[name])
    if not only or "gpt_oss" in only:
        mxfp4(os.path.join(out, "gpt_oss"), os.path.join(out, "..", "gpt_oss_mxfp4"))
    if not only or "gemma4_type_alone" in only:
        type_alone(os.path.join(out, "..", "gemma4_type_alone", "parameters.json"))


if __name__ == "__main__":
    main()
