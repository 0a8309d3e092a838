#!/usr/bin/env python3
"""Loads a model exported by `hpctrain ckpt export FILE --to state_dict --out model.pt` into the same
network written in PyTorch, strictly (every name and shape must match), and evaluates it on a
dataset prepared by `hpctrain prepare fashion-mnist`, read from the original IDX files
and normalized as the dataset's manifest says. The accuracy should equal hpctrain's test_acc for
that checkpoint. This is also the recipe for taking a trained model to Python (docs/checkpoint-format.md).

usage: load_state_dict.py --state-dict model.pt --source DIR_WITH_IDX_GZ --manifest DATASET/manifest.json
"""
import argparse
import json

import numpy as np
import torch
from torch import nn

from torch_reference import read_idx  # the IDX reader, from the script beside this one


class FashionCnn(nn.Module):
    """hpctrain's fashion_cnn (src/model/fashion_cnn.cpp), with its parameter names."""

    def __init__(self, num_classes=10, dropout=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.dropout = nn.Dropout(dropout)
        self.fc2 = nn.Linear(128, num_classes)

    def forward(self, x):
        x = torch.max_pool2d(torch.relu(self.bn1(self.conv1(x))), 2)
        x = torch.max_pool2d(torch.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(self.dropout(torch.relu(self.fc1(x.flatten(1)))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--state-dict", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--manifest", required=True)
    args = parser.parse_args()
    manifest = json.load(open(args.manifest))
    model = FashionCnn()
    model.load_state_dict(torch.load(args.state_dict), strict=True)
    model.eval()
    images = torch.from_numpy(read_idx(f"{args.source}/t10k-images-idx3-ubyte.gz").copy()).unsqueeze(1)
    labels = torch.from_numpy(read_idx(f"{args.source}/t10k-labels-idx1-ubyte.gz").astype(np.int64))
    mean, std = manifest["input_mean"], manifest["input_std"]
    with torch.no_grad():
        logits = model((images.float() / 255.0 - mean) / std)
    print(json.dumps({"tensors": len(model.state_dict()), "test_acc": (logits.argmax(1) == labels).float().mean().item()}))


if __name__ == "__main__":
    main()
