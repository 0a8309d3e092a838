#!/usr/bin/env python3
"""Does channels-last make the unet's convolutions faster on this CPU? The PyTorch twin of
hpctrain's unet (tests/support/unet_reference.py, configs/fashion_ddpm.ini's shape) timed forward
and backward at batch 64 on one thread, contiguous and channels-last in turn (docs/benchmarks.md,
"Diffusion").

  /usr/bin/python3 jobs/bench/unet_channels_last.py [--runs 6]
"""
import argparse
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "support"))
from unet_reference import Unet  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    steps = torch.randint(0, 1000, (64,))
    labels = torch.randint(0, 10, (64,))
    images = torch.randn(64, 1, 28, 28)
    layouts = {"contiguous": (Unet(1, 32, [1, 2, 2], 10, False), images),
               "channels_last": (Unet(1, 32, [1, 2, 2], 10, False).to(memory_format=torch.channels_last),
                                 images.to(memory_format=torch.channels_last))}

    def step(model, noisy):
        loss = (model(noisy, steps, labels) - noisy).pow(2).mean()
        model.zero_grad(set_to_none=True)
        loss.backward()

    for model, noisy in layouts.values():
        for _ in range(2):
            step(model, noisy)
    times = {name: [] for name in layouts}
    for _ in range(args.runs):
        for name, (model, noisy) in layouts.items():
            start = time.perf_counter()
            step(model, noisy)
            times[name].append(time.perf_counter() - start)
    for name, seconds in times.items():
        seconds.sort()
        print(f"{name}: median {seconds[len(seconds) // 2] * 1e3:.1f} ms, runs {[round(s * 1e3) for s in seconds]}")


if __name__ == "__main__":
    main()
