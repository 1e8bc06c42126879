#!/usr/bin/env python3
"""Checks zfcore's Hugging Face exports with transformers itself (not run by ctest: it needs
transformers). Run test_models first; it leaves its exports under build/test-scratch/hf_round_trip_*
with zf_logits.safetensors (input_ids and zfcore's logits). For each export this loads the
directory with AutoModelForCausalLM, requires that no weight is missing or unexpected, and compares
the logits. Usage: python3 tests/models/check_export.py [build/test-scratch]
"""
import glob
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

root = sys.argv[1] if len(sys.argv) > 1 else "build/test-scratch"
failures = 0
for directory in sorted(glob.glob(os.path.join(root, "hf_round_trip_*"))):
    model, info = AutoModelForCausalLM.from_pretrained(directory, output_loading_info=True)
    model = model.float().eval()
    problems = {k: v for k, v in info.items() if v}
    expected = load_file(os.path.join(directory, "zf_logits.safetensors"))
    with torch.no_grad():
        logits = model(input_ids=expected["input_ids"]).logits.float()
    diff = (logits - expected["logits"]).abs().max().item()
    tolerance = 1e-4 if "float32" in directory else 0.1  # bf16 exports: our logits are bf16 compute
    ok = not problems and diff < tolerance
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} {os.path.basename(directory)}: max |logits diff| {diff:.3g} {problems or ''}")
sys.exit(1 if failures else 0)
