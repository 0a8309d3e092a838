#!/usr/bin/env python3
"""The PyTorch eager side of `hpctrain bench step --model llama --update`: the Llama-family decoder
of tests/support/llama_reference.py (hpctrain's, parameter for parameter) built from the same
config.json, and whole optimizer steps on random tokens timed the same way: 3 untimed steps, then
the median of --steps. Each step: zero_grad, forward (under autocast with --precision bf16),
cross-entropy in float32 over each window averaged, backward, AdamW (foreach, hpctrain's
defaults: lr 1e-4, weight decay 1e-4). One JSON line: parameters, step_ms, tokens_per_s.

usage: llama_step.py --hf-config FILE [--precision fp32|bf16] [--batch-size 8] [--block-size 1024]
                     [--steps 20]
"""
import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).parents[2] / "tests" / "support"))
from llama_reference import Decoder  # noqa: E402


def full_config(path):
    with open(path) as f:
        cfg = json.load(f)
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    cfg.setdefault("tie_word_embeddings", False)
    cfg.setdefault("rms_norm_eps", 1e-6)
    cfg.setdefault("rope_theta", 10000.0)
    return cfg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--hf-config", required=True)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(7)
    cfg = full_config(args.hf_config)
    model = Decoder(cfg).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4, foreach=True)
    shape = (args.batch_size, args.block_size)
    tokens = torch.randint(0, cfg["vocab_size"], shape)
    target = torch.randint(0, cfg["vocab_size"], shape)
    autocast = (lambda: torch.autocast(device_type="cpu", dtype=torch.bfloat16)) if args.precision == "bf16" \
        else contextlib.nullcontext

    def step():
        optimizer.zero_grad(set_to_none=True)
        with autocast():
            logits = model(tokens)
        loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), reduction="none")
        loss.view(shape).mean(1).mean().backward()
        optimizer.step()

    for _ in range(3):
        step()
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    step_s = sorted(seconds)[len(seconds) // 2]  # the upper median, as hpctrain takes it
    print(json.dumps({"framework": f"pytorch {torch.__version__} eager", "precision": args.precision,
                      "parameters": sum(p.numel() for p in model.parameters()),
                      "batch_size": args.batch_size, "block_size": args.block_size,
                      "step_ms": round(step_s * 1e3, 3),
                      "tokens_per_s": round(args.batch_size * args.block_size / step_s)}))


if __name__ == "__main__":
    main()
