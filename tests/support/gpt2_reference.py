#!/usr/bin/env python3
"""GPT-2 in plain PyTorch, the reference the pretrained-weights tests compare hpctrain against.
No transformers package and no download: the module follows Hugging Face's GPT-2 (names, Conv1D
weights stored [in, out], tanh-approximated GELU, an output layer tied to wte), and files are
written and read here (safetensors by hand: 8-byte header length, JSON header, raw bytes).

  gpt2_reference.py make DIR --vocab V --layers L --heads H --embd C --positions P [--seed S] [--light]
      random weights, written as DIR/gpt2.safetensors (GPT2Model's names, without the
      "transformer." prefix, with the causal-mask buffers older files keep), DIR/gpt2_f16.safetensors
      and DIR/gpt2_bf16.safetensors (the same in half precisions, GPT2LMHeadModel's names),
      DIR/gpt2.pt (torch.save of GPT2LMHeadModel's state_dict, lm_head.weight included), and
      DIR/expected.safetensors: "tokens" [4, P] int64 and the module's "logits" [4, P, V] on them;
      --light: gpt2.safetensors and gpt2.pt only
  gpt2_reference.py check FILE --expected DIR/expected.safetensors --layout hf|hpctrain --heads H
      loads FILE (safetensors or torch.save) strictly into the module, in Hugging Face's layout or
      hpctrain's (Linear weights [out, in], no lm_head), and prints the largest relative difference of
      its logits from the expected ones as JSON
  gpt2_reference.py greedy WEIGHTS --prompt TEXT --new N --heads H [--time] [--batch B]
      the module's greedy continuation of TEXT's bytes (one token per byte), N tokens, the context
      cut to its last P tokens as it grows (nanoGPT's way), printed as JSON ids; with --time, as
      {"tokens": [...], "seconds": S} (the loop alone; jobs/bench/generate.sh); --batch B: B copies
      of the prompt continued as one batch (the first one's tokens printed)
  gpt2_reference.py peft-merge BASE ADAPTER_DIR --out FILE
      PEFT's merge of a LoRA adapter directory (adapter_model.safetensors, adapter_config.json)
      into BASE (GPT2LMHeadModel's names and layout), as peft's LoraLayer merges: each target's
      weight += transpose(B @ A) * lora_alpha / r when fan_in_fan_out (Conv1D); written as
      safetensors
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
from torch import nn
from torch.nn import functional as F

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64}
NAMES = {v: k for k, v in DTYPES.items()}


def write_safetensors(path, tensors, metadata=None):
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = metadata
    for name, t in tensors.items():
        t = t.detach().contiguous()
        raw = t.view(torch.int16) if t.dtype in (torch.float16, torch.bfloat16) else t
        data = raw.numpy().tobytes()
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = DTYPES[info["dtype"]]
        raw = bytearray(blob[8 + n + begin:8 + n + end])
        if dtype in (torch.float16, torch.bfloat16):
            t = torch.frombuffer(raw, dtype=torch.int16).view(dtype) if raw else torch.empty(0, dtype=dtype)
        else:
            t = torch.frombuffer(raw, dtype=dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(info["shape"]).clone()
    return out


def read_weights(path):
    with open(path, "rb") as f:
        zipped = f.read(4) == b"PK\x03\x04"
    return torch.load(path) if zipped else read_safetensors(path)


class Proj(nn.Module):
    """Hugging Face's Conv1D (weight [in, out]) or a Linear (weight [out, in])."""

    def __init__(self, n_in, n_out, conv1d):
        super().__init__()
        self.conv1d = conv1d
        shape = (n_in, n_out) if conv1d else (n_out, n_in)
        self.weight = nn.Parameter(torch.randn(shape) * 0.2)  # large enough that context matters
        self.bias = nn.Parameter(torch.randn(n_out) * 0.02)

    def forward(self, x):
        return x @ self.weight + self.bias if self.conv1d else F.linear(x, self.weight, self.bias)


class Attention(nn.Module):
    def __init__(self, embd, heads, positions, conv1d):
        super().__init__()
        self.heads = heads
        self.c_attn = Proj(embd, 3 * embd, conv1d)
        self.c_proj = Proj(embd, embd, conv1d)
        self.register_buffer("bias", torch.tril(torch.ones(positions, positions)).view(1, 1, positions, positions),
                             persistent=False)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(c // self.heads)
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf")).softmax(-1)
        return self.c_proj((att @ v).transpose(1, 2).contiguous().view(b, t, c))


class Mlp(nn.Module):
    def __init__(self, embd, conv1d):
        super().__init__()
        self.c_fc = Proj(embd, 4 * embd, conv1d)
        self.c_proj = Proj(4 * embd, embd, conv1d)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, embd, heads, positions, conv1d):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embd)
        self.attn = Attention(embd, heads, positions, conv1d)
        self.ln_2 = nn.LayerNorm(embd)
        self.mlp = Mlp(embd, conv1d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt2(nn.Module):
    """GPT2LMHeadModel's names (layout hf) or hpctrain gpt's (layout hpctrain: no lm_head)."""

    def __init__(self, vocab, layers, heads, embd, positions, layout):
        super().__init__()
        conv1d = layout == "hf"
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, embd), wpe=nn.Embedding(positions, embd),
            h=nn.ModuleList(Block(embd, heads, positions, conv1d) for _ in range(layers)),
            ln_f=nn.LayerNorm(embd)))
        if conv1d:
            self.lm_head = nn.Linear(embd, vocab, bias=False)
            self.lm_head.weight = self.transformer.wte.weight
        for ln in [m for m in self.modules() if isinstance(m, nn.LayerNorm)]:
            nn.init.normal_(ln.weight, 1.0, 0.1)
            nn.init.normal_(ln.bias, 0.0, 0.1)

    def forward(self, tokens):
        t = tokens.shape[1]
        x = self.transformer.wte(tokens) + self.transformer.wpe(torch.arange(t))
        for block in self.transformer.h:
            x = block(x)
        return F.linear(self.transformer.ln_f(x), self.transformer.wte.weight)


def shape_of(state):
    vocab, embd = state["transformer.wte.weight"].shape
    positions = state["transformer.wpe.weight"].shape[0]
    layers = 1 + max(int(k.split(".")[2]) for k in state if k.startswith("transformer.h."))
    return vocab, layers, embd, positions


def load(path, layout, heads):
    state = read_weights(path)
    if layout == "hf" and "wte.weight" in state:  # GPT2Model's names
        state = {"transformer." + k: v for k, v in state.items()}
    vocab, layers, embd, positions = shape_of(state)
    model = Gpt2(vocab, layers, heads, embd, positions, layout)
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    return model.eval()


def make(args):
    os.makedirs(args.dir, exist_ok=True)
    torch.manual_seed(args.seed)
    model = Gpt2(args.vocab, args.layers, args.heads, args.embd, args.positions, "hf").eval()
    state = model.state_dict()
    bare = {k[len("transformer."):]: v for k, v in state.items() if k.startswith("transformer.")}
    for i in range(args.layers):  # older files keep each block's causal mask
        bare[f"h.{i}.attn.bias"] = model.transformer.h[i].attn.bias
    write_safetensors(f"{args.dir}/gpt2.safetensors", bare, {"format": "pt"})
    torch.save(state, f"{args.dir}/gpt2.pt")
    if args.light:
        return
    write_safetensors(f"{args.dir}/gpt2_f16.safetensors",
                      {k: v.half() for k, v in state.items() if k != "lm_head.weight"})
    write_safetensors(f"{args.dir}/gpt2_bf16.safetensors",
                      {k: v.bfloat16() for k, v in state.items() if k != "lm_head.weight"})
    tokens = torch.randint(0, args.vocab, (4, args.positions), generator=torch.Generator().manual_seed(args.seed + 1))
    with torch.no_grad():
        logits = model(tokens)
    write_safetensors(f"{args.dir}/expected.safetensors", {"tokens": tokens, "logits": logits})


def max_relative_difference(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def check(args):
    expected = read_safetensors(args.expected)
    with torch.no_grad():
        logits = load(args.file, args.layout, args.heads)(expected["tokens"])
    print(json.dumps({"max_relative_difference": max_relative_difference(logits, expected["logits"])}))


def greedy(args):
    model = load(args.weights, "hf", args.heads)
    positions = model.transformer.wpe.weight.shape[0]
    tokens = torch.tensor([list(args.prompt.encode())] * args.batch)
    out = []
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(args.new):
            logits = model(tokens[:, -positions:])
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            out.append(int(nxt[0]))
            tokens = torch.cat([tokens, nxt], dim=1)
    seconds = time.perf_counter() - start
    print(json.dumps({"tokens": out, "seconds": seconds} if args.time else out))


def peft_merge(args):
    base = read_weights(args.base)
    with open(f"{args.adapter}/adapter_config.json") as f:
        config = json.load(f)
    adapters = read_safetensors(f"{args.adapter}/adapter_model.safetensors")
    prefix, suffix = "base_model.model.", ".lora_A.weight"
    scale = config["lora_alpha"] / config["r"]
    merged = dict(base)
    for key, a in adapters.items():
        if not key.endswith(suffix):
            continue
        module = key[len(prefix):-len(suffix)]
        if not any(module == t or module.endswith("." + t) for t in config["target_modules"]):
            raise SystemExit(f"{module} is not among target_modules {config['target_modules']}")
        delta = adapters[prefix + module + ".lora_B.weight"] @ a * scale
        merged[module + ".weight"] = base[module + ".weight"] + (delta.T if config["fan_in_fan_out"] else delta)
    write_safetensors(args.out, merged)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("make")
    m.add_argument("dir")
    m.add_argument("--light", action="store_true")
    for flag, default in (("--vocab", 256), ("--layers", 2), ("--heads", 2), ("--embd", 32), ("--positions", 32),
                          ("--seed", 1)):
        m.add_argument(flag, type=int, default=default)
    c = sub.add_parser("check")
    c.add_argument("file")
    c.add_argument("--expected", required=True)
    c.add_argument("--layout", choices=("hf", "hpctrain"), required=True)
    c.add_argument("--heads", type=int, required=True)
    g = sub.add_parser("greedy")
    g.add_argument("weights")
    g.add_argument("--prompt", required=True)
    g.add_argument("--new", type=int, required=True)
    g.add_argument("--heads", type=int, required=True)
    g.add_argument("--time", action="store_true")
    g.add_argument("--batch", type=int, default=1)
    p = sub.add_parser("peft-merge")
    p.add_argument("base")
    p.add_argument("adapter")
    p.add_argument("--out", required=True)
    args = parser.parse_args()
    {"make": make, "check": check, "greedy": greedy, "peft-merge": peft_merge}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
