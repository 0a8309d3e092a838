#!/usr/bin/env python3
"""The example exporter of model.name=torchscript, used by the tests: writes a small CNN for
1x28x28 images (two conv-BatchNorm-ReLU-pool stages, dropout, a linear head) as TorchScript.

  export_torchscript.py OUT.pt [--classes N]        torch.jit.save(torch.jit.script(model))
  export_torchscript.py --check-state-dict FILE     loads a state_dict written by
                                                    `hpctrain ckpt export` into the same model
                                                    (strict: every name and shape must match)

Any model works the same way: script (or trace) it, save it, and train it with
`hpctrain train --model.name=torchscript --model.path=OUT.pt`.
"""
import argparse

import torch
from torch import nn


class SmallCnn(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(16 * 7 * 7, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(torch.flatten(self.features(x), 1)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--check-state-dict")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = SmallCnn(args.classes)
    if args.check_state_dict:
        state = torch.load(args.check_state_dict, weights_only=True)
        model.load_state_dict(state, strict=True)
        print(f"loaded {len(state)} tensors")
        return
    torch.jit.save(torch.jit.script(model), args.out)


if __name__ == "__main__":
    main()
