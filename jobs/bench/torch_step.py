#!/usr/bin/env python3
"""The PyTorch eager side of `hpctrain bench step --model gpt`: the same gpt (ddp_reference.py's,
which is hpctrain's parameter for parameter) and the same forward+backward on random tokens,
timed the same way: 3 untimed steps, then the median of --steps, synchronized on CUDA. The loss
is hpctrain's: cross-entropy in float32 over each window, averaged. --precision and --tf32 act
as hpctrain's do (autocast in the forward pass; TF32 for float32 products and convolutions).

With --update, each timed step is a whole optimizer step (zero_grad, forward, backward and
AdamW, fused=True on CUDA, with hpctrain's defaults: lr 1e-4, weight decay 1e-4), as
`hpctrain bench step --update` times them. With --compile, the module runs through
torch.compile (default mode); its compilation falls in the untimed steps.

Prints one JSON line: parameters, forward_backward_ms (or step_ms with --update), tokens_per_s.

usage: torch_step.py [--device cuda|cpu] [--precision fp32|bf16|fp16] [--tf32 true|false]
         [--batch-size 8] [--steps 20] [--layers 12] [--heads 12] [--embd 768]
         [--block-size 1024] [--vocab 50257] [--update] [--compile]
"""
import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
from torch.nn import functional as F

sys.path.insert(0, str(Path(__file__).parent))
from ddp_reference import Gpt  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    parser.add_argument("--tf32", choices=["true", "false"], default="true")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--embd", type=int, default=768)
    parser.add_argument("--block-size", type=int, default=1024)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--update", action="store_true")
    parser.add_argument("--compile", action="store_true")
    args = parser.parse_args()
    if args.precision == "fp16" and args.device != "cuda":
        parser.error("--precision fp16 needs --device cuda")

    torch.backends.cuda.matmul.allow_tf32 = args.tf32 == "true"
    torch.backends.cudnn.allow_tf32 = args.tf32 == "true"
    torch.manual_seed(7)
    device = torch.device(args.device)
    model = Gpt(args.vocab, args.block_size, args.layers, args.heads, args.embd, dropout=0.0).to(device).train()
    parameters = sum(p.numel() for p in model.parameters())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=1e-4,
                                  **({"fused": True} if device.type == "cuda" else {"foreach": True}))
    forward = torch.compile(model) if args.compile else model
    shape = (args.batch_size, args.block_size)
    tokens = torch.randint(0, args.vocab, shape, device=device)
    target = torch.randint(0, args.vocab, shape, device=device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.precision)
    autocast = (lambda: torch.autocast(device_type=args.device, dtype=dtype)) if dtype else contextlib.nullcontext

    def forward_backward():
        model.zero_grad(set_to_none=args.update)
        with autocast():
            logits = forward(tokens)
        loss = F.cross_entropy(logits.float().flatten(0, 1), target.flatten(), reduction="none")
        loss.view(shape).mean(1).mean().backward()
        if args.update:
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    for _ in range(3):
        forward_backward()
    seconds = []
    for _ in range(args.steps):
        start = time.perf_counter()
        forward_backward()
        seconds.append(time.perf_counter() - start)
    step_s = sorted(seconds)[len(seconds) // 2]  # the upper median, as hpctrain takes it
    mode = "torch.compile" if args.compile else "eager"
    print(json.dumps({
        "framework": f"pytorch {torch.__version__} {mode}", "device": args.device,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "",
        "precision": args.precision, "tf32": args.tf32 == "true",
        "parameters": parameters, "update": args.update,
        "batch_size": args.batch_size, "block_size": args.block_size,
        ("step_ms" if args.update else "forward_backward_ms"): round(step_s * 1e3, 3),
        "tokens_per_s": round(args.batch_size * args.block_size / step_s)}))


if __name__ == "__main__":
    main()
