#!/usr/bin/env python3
"""hpctrain's unet (src/model/unet.cpp, docs/diffusion.md) in plain PyTorch: the twin a checkpoint
exported with `hpctrain ckpt export` loads into, and the reference the tests compare against.

  unet_reference.py make DIR --channels CH --mults 1,2 [--attention] [--classes N] [--image C,H,W] [--seed S]
      random weights (PyTorch's default initialization), written as DIR/unet.pt (torch.save of
      the state_dict), and DIR/expected.pt: "noisy" [4, C, H, W], "steps" [4] and "labels" [4]
      (the last -1: no class) and the module's "noise" prediction on them
"""
import argparse
import math
import os

import torch
from torch import nn
import torch.nn.functional as F

GROUPS = 8


def conv(c_in, c_out, kernel=3, stride=1):
    return nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2)


def sinusoidal(steps, dim):
    half = dim // 2
    frequencies = torch.exp(torch.arange(half, dtype=torch.float32) / half * -math.log(10000.0))
    angles = steps.float()[:, None] * frequencies[None, :]
    return torch.cat([torch.sin(angles), torch.cos(angles)], 1)


class ResBlock(nn.Module):
    def __init__(self, c_in, c_out, emb, dropout):
        super().__init__()
        self.norm1 = nn.GroupNorm(GROUPS, c_in)
        self.conv1 = conv(c_in, c_out)
        self.emb_proj = nn.Linear(emb, c_out)
        self.norm2 = nn.GroupNorm(GROUPS, c_out)
        self.dropout = nn.Dropout(dropout)
        self.conv2 = conv(c_out, c_out)
        self.shortcut = conv(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x, emb):
        h = self.conv1(F.silu(self.norm1(x)))
        h = h + self.emb_proj(F.silu(emb))[:, :, None, None]
        h = self.conv2(self.dropout(F.silu(self.norm2(h))))
        return h + (x if self.shortcut is None else self.shortcut(x))


class Attention(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.norm = nn.GroupNorm(GROUPS, channels)
        self.qkv = conv(channels, 3 * channels, 1)
        self.proj = conv(channels, channels, 1)

    def forward(self, x):
        b, c = x.shape[:2]
        q, k, v = self.qkv(self.norm(x)).reshape(b, 3, c, -1).unbind(1)
        weights = torch.softmax(torch.bmm(q.transpose(1, 2), k) / math.sqrt(c), -1)
        return x + self.proj(torch.bmm(v, weights.transpose(1, 2)).reshape(x.shape))


class Level(nn.Module):
    def __init__(self, c_in, c_out, emb, dropout, attention, resample):
        super().__init__()
        self.res = ResBlock(c_in, c_out, emb, dropout)
        self.attn = Attention(c_out) if attention else None
        self.kind = resample
        self.resample = conv(c_out, c_out, 3, 2 if resample == "down" else 1) if resample else None

    def forward(self, x, emb):
        features = self.res(x, emb)
        if self.attn is not None:
            features = self.attn(features)
        if self.kind is None:
            return features, features
        if self.kind == "down":
            return features, self.resample(features)
        return features, self.resample(F.interpolate(features, scale_factor=2.0, mode="nearest"))


class Unet(nn.Module):
    def __init__(self, image_channels, channels, mults, classes, attention, dropout=0.0):
        super().__init__()
        emb = 4 * channels
        self.channels = channels
        self.classes = classes
        self.time_in = nn.Linear(channels, emb)
        self.time_out = nn.Linear(emb, emb)
        self.class_embed = nn.Embedding(classes + 1, emb) if classes > 0 else None
        self.conv_in = conv(image_channels, channels)
        widths = [channels * m for m in mults]
        self.down = nn.ModuleList()
        previous = channels
        for i, width in enumerate(widths):
            lowest = i + 1 == len(widths)
            self.down.append(Level(previous, width, emb, dropout, lowest and attention, None if lowest else "down"))
            previous = width
        self.mid_res1 = ResBlock(previous, previous, emb, dropout)
        self.mid_attn = Attention(previous) if attention else None
        self.mid_res2 = ResBlock(previous, previous, emb, dropout)
        self.up = nn.ModuleList()
        for i in reversed(range(len(widths))):
            self.up.append(Level(previous + widths[i], widths[i], emb, dropout, i + 1 == len(widths) and attention,
                                 None if i == 0 else "up"))
            previous = widths[i]
        self.norm_out = nn.GroupNorm(GROUPS, previous)
        self.conv_out = conv(previous, image_channels)

    def forward(self, noisy, steps, labels):
        emb = self.time_out(F.silu(self.time_in(sinusoidal(steps, self.channels))))
        if self.class_embed is not None:
            emb = emb + self.class_embed(torch.where(labels < 0, torch.full_like(labels, self.classes), labels))
        h = self.conv_in(noisy)
        skips = []
        for level in self.down:
            features, h = level(h, emb)
            skips.append(features)
        h = self.mid_res1(h, emb)
        if self.mid_attn is not None:
            h = self.mid_attn(h)
        h = self.mid_res2(h, emb)
        for level in self.up:
            h = level(torch.cat([h, skips.pop()], 1), emb)[1]
        return self.conv_out(F.silu(self.norm_out(h)))


def make(args):
    torch.manual_seed(args.seed)
    image = [int(v) for v in args.image.split(",")]
    model = Unet(image[0], args.channels, [int(m) for m in args.mults.split(",")], args.classes, args.attention).eval()
    os.makedirs(args.dir, exist_ok=True)
    torch.save(model.state_dict(), os.path.join(args.dir, "unet.pt"))
    noisy = torch.randn([4] + image)
    steps = torch.tensor([0, 17, 500, 999])
    labels = torch.tensor([0, 1, max(args.classes - 1, 0), -1])
    with torch.no_grad():
        noise = model(noisy, steps, labels)
    torch.save({"noisy": noisy, "steps": steps, "labels": labels, "noise": noise},
               os.path.join(args.dir, "expected.pt"))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--channels", type=int, required=True)
    m.add_argument("--mults", required=True)
    m.add_argument("--attention", action="store_true")
    m.add_argument("--classes", type=int, default=0)
    m.add_argument("--image", default="1,28,28")
    m.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    make(args)


if __name__ == "__main__":
    main()
