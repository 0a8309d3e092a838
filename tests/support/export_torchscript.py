#!/usr/bin/env python3
"""The example exporter of model.name=torchscript, used by the tests: writes a small CNN for
1x28x28 images (two conv-BatchNorm-ReLU-pool stages, dropout, a linear head) as TorchScript.

  export_torchscript.py OUT.pt [--classes N] [--channels C] [--freeze PREFIX] [--tied] [--transposed-head] [--seed S]
      torch.jit.save(torch.jit.script(model)), its weights drawn after torch.manual_seed(S)
      (default 0); --freeze sets requires_grad=False on the
      parameters whose names start with PREFIX; --tied writes a module with one weight shared
      by two layers (tied weights) instead; --transposed-head stores the head's weight as the
      transpose of a [in, classes] tensor (non-contiguous), which dist.zero_stage > 0 cannot shard
  export_torchscript.py OUT.pt --language-model VOCAB --block T
      a small causal language model instead (token and position embeddings, one block of
      causal self-attention, an output layer tied to the token embedding, as GPT-2's): token ids
      [B, T] -> next-token logits [B, T, VOCAB], for a token stream from `hpctrain prepare text`
      with model.gpt_block_size=T
  export_torchscript.py --check-state-dict FILE --source IDX_DIR --manifest DATASET/manifest.json [--limit N] [--tied]
      loads a state_dict written by `hpctrain ckpt export` into the same model (strict: every
      name and shape must match) and prints its loss and accuracy on the first N test images
      as JSON, normalized as the manifest says

Any model works the same way: script it, save it, and train it with
`hpctrain train --model.name=torchscript --model.path=OUT.pt`.
"""
import argparse
import gzip
import json

import numpy as np
import torch
from torch import nn


class SmallCnn(nn.Module):
    def __init__(self, classes: int, channels: int):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(channels, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2))
        self.dropout = nn.Dropout(0.2)
        self.head = nn.Linear(16 * 7 * 7, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.dropout(torch.flatten(self.features(x), 1)))


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(28 * 28, 10)
        self.first = nn.Linear(10, 10)
        self.second = nn.Linear(10, 10)
        self.second.weight = self.first.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(self.embed(torch.flatten(x, 1)))))


class TinyLm(nn.Module):
    def __init__(self, vocab: int, block: int, embd: int = 32):
        super().__init__()
        self.tokens = nn.Embedding(vocab, embd)
        self.positions = nn.Embedding(block, embd)
        self.norm = nn.LayerNorm(embd)
        self.attention = nn.MultiheadAttention(embd, 2, dropout=0.1, batch_first=True)
        self.head = nn.Linear(embd, vocab, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x.size(1)
        h = self.tokens(x) + self.positions(torch.arange(t, device=x.device))
        causal = torch.triu(torch.full((t, t), float("-inf"), device=x.device), diagonal=1)
        q = self.norm(h)
        a, _ = self.attention(q, q, q, attn_mask=causal, need_weights=False)
        return self.head(h + a)


def read_idx(path: str) -> np.ndarray:
    data = gzip.open(path, "rb").read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def check_state_dict(args: argparse.Namespace) -> None:
    model = Tied() if args.tied else SmallCnn(args.classes, args.channels)
    state = torch.load(args.check_state_dict, weights_only=True)
    model.load_state_dict(state, strict=True)
    model.eval()
    manifest = json.load(open(args.manifest))
    images = torch.from_numpy(read_idx(f"{args.source}/t10k-images-idx3-ubyte.gz")[:args.limit].copy())
    labels = torch.from_numpy(read_idx(f"{args.source}/t10k-labels-idx1-ubyte.gz")[:args.limit].astype(np.int64))
    inputs = (images.unsqueeze(1).float() / 255.0 - manifest["input_mean"]) / manifest["input_std"]
    with torch.no_grad():
        logits = model(inputs)
    print(json.dumps({"tensors": len(state),
                      "test_loss": nn.functional.cross_entropy(logits.double(), labels).item(),
                      "test_acc": (logits.argmax(1) == labels).double().mean().item()}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", nargs="?")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--channels", type=int, default=1)
    parser.add_argument("--freeze", default="")
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--transposed-head", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--language-model", type=int, default=0, metavar="VOCAB")
    parser.add_argument("--block", type=int, default=32)
    parser.add_argument("--check-state-dict")
    parser.add_argument("--source")
    parser.add_argument("--manifest")
    parser.add_argument("--limit", type=int, default=10000)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    if args.check_state_dict:
        check_state_dict(args)
        return
    if args.language_model:
        model = TinyLm(args.language_model, args.block)
    else:
        model = Tied() if args.tied else SmallCnn(args.classes, args.channels)
    if args.transposed_head:
        model.head.weight = nn.Parameter(model.head.weight.detach().t().contiguous().t())
    for name, parameter in model.named_parameters():
        if args.freeze and name.startswith(args.freeze):
            parameter.requires_grad_(False)
    torch.jit.save(torch.jit.script(model), args.out)


if __name__ == "__main__":
    main()
