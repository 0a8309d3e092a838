#!/usr/bin/env python3
"""The reference hpctrain is compared with: fashion_cnn trained in PyTorch eager on one device.

Same network (src/model/fashion_cnn.cpp), same data and scaling (uint8 / 255), same optimizer
(AdamW, lr 0.002, weight decay 1e-4), same per-step batch; batches are gathered from host
tensors in a shuffled order and copied to the device every step, as hpctrain's loader does.
Prints one JSON line: samples/s of each epoch after the first (the first includes warm-up),
and the test accuracy after the last.

usage: torch_reference.py --source DIR_WITH_IDX_GZ [--epochs 3] [--batch-size 64] [--device cuda]
"""
import argparse
import gzip
import json
import time

import numpy as np
import torch
from torch import nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_cnn(num_classes=10, dropout=0.25):
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(dropout),
        nn.Linear(128, num_classes))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    torch.manual_seed(42)
    device = torch.device(args.device)

    def load(prefix):
        images = torch.from_numpy(read_idx(f"{args.source}/{prefix}-images-idx3-ubyte.gz").copy())
        labels = torch.from_numpy(read_idx(f"{args.source}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64))
        return images.unsqueeze(1), labels

    train_x, train_y = load("train")
    test_x, test_y = load("t10k")
    model = fashion_cnn().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.002, weight_decay=1e-4)
    loss_fn = nn.CrossEntropyLoss()
    rates = []
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train_y))
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        for first in range(0, len(order), args.batch_size):
            idx = order[first:first + args.batch_size]
            x = (train_x[idx].float() / 255.0).to(device, non_blocking=True)
            y = train_y[idx].to(device, non_blocking=True)
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates.append(len(order) / (time.perf_counter() - start))
    model.eval()
    correct = 0
    with torch.no_grad():
        for first in range(0, len(test_y), 512):
            x = (test_x[first:first + 512].float() / 255.0).to(device)
            correct += (model(x).argmax(1).cpu() == test_y[first:first + 512]).sum().item()
    print(json.dumps({"framework": f"pytorch {torch.__version__} eager", "device": str(device),
                      "epochs": args.epochs, "batch_size": args.batch_size,
                      "samples_per_s_per_epoch": [round(r) for r in rates],
                      "samples_per_s_after_warmup": round(float(np.mean(rates[1:] or rates))),
                      "test_acc": correct / len(test_y)}))


if __name__ == "__main__":
    main()
