#!/usr/bin/env python3
"""The Llama family's decoder in plain PyTorch, the reference the llama tests compare hpctrain against.
Written from the published architecture (Llama, Qwen2, Qwen3, Mistral as Hugging Face's config.json
describes them), without transformers: RMSNorm, rotary positions on the pairs (i, i + head_dim/2)
with Llama 3.1's frequency rescaling, grouped-query attention, a SwiGLU MLP, Qwen2's q/k/v biases,
Qwen3's per-head RMSNorm of queries and keys, a tied or separate output layer. Files are
Hugging Face model directories: config.json and model.safetensors, or shards with
model.safetensors.index.json.

  llama_reference.py make DIR --family F [--seed S] [--shards N] [--config FILE]
      a small model of family F (llama, llama3, qwen2, qwen3, mistral; GQA in each), its keys
      overridden by FILE's (a config.json, for a larger shape), with random weights, written to DIR,
      with DIR/tokens.safetensors ("token_ids" int64 [3, T]) and
      DIR/expected.safetensors (the module's "logits" on them)
  llama_reference.py logits DIR --tokens FILE --out FILE [--mutate M]
      DIR's weights loaded strictly (every tensor named once, shapes as config.json's), its
      logits on FILE's token_ids written as "logits"; --mutate computes them wrongly, as a port's
      bug would (rope-pairs: adjacent channels paired; kv-order: KV heads tiled, not repeated;
      gate-up: the two swapped; no-rope-scaling), to show that the comparison catches it
  llama_reference.py compare A B [--row R --from F]
      the largest difference of A's and B's "logits", relative to B's largest, as JSON; with --row,
      A's row R from position F on (as many positions as B's one row has) against B
  llama_reference.py pad DIR
      DIR/tokens.safetensors as a padded batch, DIR/padded.safetensors (token_ids, attention_mask:
      row 0 whole, row 1's first 12 tokens padded on the right, row 2's first 14 on the left with
      6 pads), and rows 1 and 2 alone as DIR/row1.safetensors, DIR/row2.safetensors
  llama_reference.py loss DIR --ids IDS
      the next-token cross-entropy of the comma-separated ids IDS (inputs all but the last, targets
      all but the first) and the global norm of its gradients, as JSON
  llama_reference.py same-weights DIR FILE
      DIR loaded strictly, its tensors against FILE's (a safetensors file of the same names; a tied
      output layer may be in FILE alone): the largest absolute difference, as JSON
  llama_reference.py peft-logits BASE ADAPTER --tokens FILE --out FILE
      BASE with the PEFT adapter directory ADAPTER applied as PEFT's LoRA applies it: each module
      target_modules names (a module's name, or the last parts of it) gets W + lora_alpha/r B A
      from adapter_model.safetensors (base_model.model.<module>.lora_A/B.weight), every tensor of
      which must be used; the logits on FILE's token_ids written as "logits", the largest |B A|
      printed as JSON
  llama_reference.py greedy DIR --prompt IDS --new N [--no-cache] [--time]
      greedy continuation of the comma-separated ids IDS, N tokens, printed as JSON ids; with a
      KV cache (the new token's keys and values appended), or recomputing the whole sequence;
      --time: {"tokens": ids, "seconds": the loop's time} instead
"""
import argparse
import json
import math
import os
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_reference import read_safetensors, write_safetensors  # noqa: E402

MUTATION = None  # logits --mutate
VOCAB = 256  # the byte tokenizer's, so `hpctrain generate --tokenizer bytes` decodes every id

FAMILIES = {
    "llama": dict(model_type="llama", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=48, rope_theta=10000.0, tie_word_embeddings=False),
    "llama3": dict(model_type="llama", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                   intermediate_size=48, rope_theta=500000.0, tie_word_embeddings=True,
                   rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 16}),
    "qwen2": dict(model_type="qwen2", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=40, rope_theta=1000000.0, tie_word_embeddings=True,
                  use_sliding_window=False, sliding_window=32768),
    "qwen3": dict(model_type="qwen3", hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                  head_dim=16, intermediate_size=40, rope_theta=1000000.0, tie_word_embeddings=False,
                  attention_bias=False),
    "mistral": dict(model_type="mistral", hidden_size=32, num_attention_heads=4, num_key_value_heads=1,
                    intermediate_size=48, rope_theta=10000.0, tie_word_embeddings=False, sliding_window=4096),
}


def full_config(family):
    c = dict(FAMILIES[family])
    c.update(vocab_size=VOCAB, num_hidden_layers=2, max_position_embeddings=64, rms_norm_eps=1e-5,
             hidden_act="silu", bos_token_id=1, eos_token_id=[2, 3], torch_dtype="float32")
    return c


class RMSNorm(nn.Module):
    def __init__(self, size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def inverse_frequencies(cfg, head_dim):
    theta = cfg.get("rope_theta", 10000.0)
    freqs = [1.0 / theta ** (2 * i / head_dim) for i in range(head_dim // 2)]
    scaling = cfg.get("rope_scaling")
    if scaling and MUTATION != "no-rope-scaling":  # Llama 3.1: slow the long wavelengths, keep the short, blend between
        factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
        context = scaling["original_max_position_embeddings"]
        out = []
        for f in freqs:
            wavelength = 2 * math.pi / f
            if wavelength < context / high:
                out.append(f)
            elif wavelength > context / low:
                out.append(f / factor)
            else:
                smooth = (context / wavelength - low) / (high - low)
                out.append((1 - smooth) * f / factor + smooth * f)
        freqs = out
    return torch.tensor(freqs, dtype=torch.float64)


def rotate(x, positions, inv_freq):
    """Each pair (x[i], x[i + d/2]) turned by position * inv_freq[i]."""
    half = x.shape[-1] // 2
    angle = positions.double()[:, None] * inv_freq[None, :]
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    if MUTATION == "rope-pairs":  # (x[2i], x[2i + 1]), Meta's original checkpoints' layout
        even, odd = x[..., 0::2], x[..., 1::2]
        return torch.stack([even * cos - odd * sin, odd * cos + even * sin], dim=-1).flatten(-2)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, self.heads, self.kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
        self.dim = cfg.get("head_dim", h // self.heads)
        qwen2 = cfg["model_type"] == "qwen2"
        bias = qwen2 or cfg.get("attention_bias", False)
        self.q_proj = nn.Linear(h, self.heads * self.dim, bias=bias)
        self.k_proj = nn.Linear(h, self.kv * self.dim, bias=bias)
        self.v_proj = nn.Linear(h, self.kv * self.dim, bias=bias)
        self.o_proj = nn.Linear(self.heads * self.dim, h, bias=bias and not qwen2)
        if cfg["model_type"] == "qwen3":
            self.q_norm = RMSNorm(self.dim, cfg["rms_norm_eps"])
            self.k_norm = RMSNorm(self.dim, cfg["rms_norm_eps"])
        self.inv_freq = inverse_frequencies(cfg, self.dim)

    def forward(self, x, positions, cache=None):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.heads, self.dim)
        k = self.k_proj(x).view(b, t, self.kv, self.dim)
        v = self.v_proj(x).view(b, t, self.kv, self.dim).transpose(1, 2)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q = rotate(q.transpose(1, 2), positions, self.inv_freq)
        k = rotate(k.transpose(1, 2), positions, self.inv_freq)
        if cache is not None:
            if "k" in cache:
                k, v = torch.cat([cache["k"], k], 2), torch.cat([cache["v"], v], 2)
            cache["k"], cache["v"] = k, v
        group = self.heads // self.kv  # query head i reads KV head i // group
        if MUTATION == "kv-order":
            k, v = k.repeat(1, group, 1, 1), v.repeat(1, group, 1, 1)
        else:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = q @ k.transpose(-1, -2) / math.sqrt(self.dim)
        key_positions = torch.arange(k.shape[2])
        scores = scores.masked_fill(key_positions[None, :] > positions[:, None], float("-inf"))
        out = torch.softmax(scores, -1) @ v
        return self.o_proj(out.transpose(1, 2).reshape(b, t, self.heads * self.dim))


class Mlp(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, i = cfg["hidden_size"], cfg["intermediate_size"]
        self.gate_proj, self.up_proj = nn.Linear(h, i, bias=False), nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x):
        gate, up = (self.up_proj, self.gate_proj) if MUTATION == "gate-up" else (self.gate_proj, self.up_proj)
        return self.down_proj(nn.functional.silu(gate(x)) * up(x))


class Layer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        self.mlp = Mlp(cfg)

    def forward(self, x, positions, cache=None):
        x = x + self.self_attn(self.input_layernorm(x), positions, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = nn.Module()
        self.model.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.model.layers = nn.ModuleList([Layer(cfg) for _ in range(cfg["num_hidden_layers"])])
        self.model.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])
        if not cfg["tie_word_embeddings"]:
            self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)

    def forward(self, tokens, start=0, caches=None):
        positions = torch.arange(start, start + tokens.shape[1])
        x = self.model.embed_tokens(tokens)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, positions, None if caches is None else caches[i])
        x = self.model.norm(x)
        head = self.model.embed_tokens.weight if self.cfg["tie_word_embeddings"] else self.lm_head.weight
        return x @ head.t()


def randomize(module, seed):
    """Weights large enough that attention is far from uniform and every part moves the logits."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))


def write_directory(directory, cfg, tensors, shards):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    names = list(tensors)
    if shards <= 1:
        write_safetensors(os.path.join(directory, "model.safetensors"), tensors, {"format": "pt"})
        return
    weight_map, total = {}, 0
    for s in range(shards):
        file = "model-%05d-of-%05d.safetensors" % (s + 1, shards)
        part = {n: tensors[n] for n in names[s::shards]}
        write_safetensors(os.path.join(directory, file), part, {"format": "pt"})
        for n, t in part.items():
            weight_map[n] = file
            total += t.numel() * t.element_size()
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def read_directory(directory):
    with open(os.path.join(directory, "config.json")) as f:
        cfg = json.load(f)
    index = os.path.join(directory, "model.safetensors.index.json")
    tensors = {}
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    for file in files:
        for name, t in read_safetensors(os.path.join(directory, file)).items():
            assert name not in tensors, name + " in two files"
            tensors[name] = t
    return cfg, tensors


def load_directory(directory):
    cfg, tensors = read_directory(directory)
    cfg.setdefault("tie_word_embeddings", False)
    cfg.setdefault("num_key_value_heads", cfg["num_attention_heads"])
    model = Decoder(cfg)
    if cfg["tie_word_embeddings"]:
        tensors.pop("lm_head.weight", None)
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    return model.eval()


def make(args):
    torch.manual_seed(args.seed)
    cfg = full_config(args.family)
    if args.config:
        with open(args.config) as f:
            cfg.update(json.load(f))
    model = Decoder(cfg)
    randomize(model, args.seed)
    write_directory(args.dir, cfg, model.state_dict(), args.shards)
    tokens = torch.randint(0, VOCAB, (3, 20), generator=torch.Generator().manual_seed(args.seed + 1))
    write_safetensors(os.path.join(args.dir, "tokens.safetensors"), {"token_ids": tokens})
    with torch.no_grad():
        write_safetensors(os.path.join(args.dir, "expected.safetensors"), {"logits": model(tokens)})


def logits(args):
    global MUTATION
    MUTATION = args.mutate
    model = load_directory(args.dir)
    tokens = read_safetensors(args.tokens)["token_ids"]
    with torch.no_grad():
        write_safetensors(args.out, {"logits": model(tokens)})


def pad(args):
    tokens = read_safetensors(os.path.join(args.dir, "tokens.safetensors"))["token_ids"]
    ids, mask = tokens.clone(), torch.ones_like(tokens)
    ids[1, 12:], mask[1, 12:] = 0, 0
    ids[2, 6:], ids[2, :6], mask[2, :6] = tokens[2, :14], 7, 0
    write_safetensors(os.path.join(args.dir, "padded.safetensors"), {"token_ids": ids, "attention_mask": mask})
    write_safetensors(os.path.join(args.dir, "row1.safetensors"), {"token_ids": tokens[1:2, :12].clone()})
    write_safetensors(os.path.join(args.dir, "row2.safetensors"), {"token_ids": tokens[2:3, :14].clone()})


def compare(args):
    a, b = read_safetensors(args.a)["logits"].double(), read_safetensors(args.b)["logits"].double()
    if args.row is not None:
        a = a[args.row:args.row + 1, args.start:args.start + b.shape[1]]
    if a.shape != b.shape:
        print(json.dumps({"error": "shapes %s and %s" % (list(a.shape), list(b.shape))}))
        sys.exit(1)
    print(json.dumps({"max_relative_difference": ((a - b).abs().max() / b.abs().max()).item()}))


def loss(args):
    model = load_directory(args.dir).train()
    ids = torch.tensor([[int(i) for i in args.ids.split(",")]])
    logits_ = model(ids[:, :-1])
    value = nn.functional.cross_entropy(logits_.flatten(0, 1), ids[0, 1:])
    value.backward()
    norm = torch.sqrt(sum(p.grad.double().pow(2).sum() for p in model.parameters() if p.grad is not None))
    print(json.dumps({"loss": value.item(), "grad_norm": norm.item()}))


def same_weights(args):
    model = load_directory(args.dir)
    theirs = read_safetensors(args.file)
    ours = model.state_dict()
    if set(ours) - set(theirs) or set(theirs) - set(ours) - {"lm_head.weight"}:
        print(json.dumps({"error": "names differ: %s" % sorted(set(ours) ^ set(theirs))}))
        sys.exit(1)
    worst = max((ours[n].double() - theirs[n].double()).abs().max().item() for n in ours)
    print(json.dumps({"max_abs_difference": worst, "tensors": len(ours)}))


def targeted(module, targets):
    return any(module == t or module.endswith("." + t) for t in targets)


def peft_logits(args):
    model = load_directory(args.base)
    with open(os.path.join(args.adapter, "adapter_config.json")) as f:
        adapter = json.load(f)
    assert adapter["peft_type"] == "LORA" and not adapter["fan_in_fan_out"], adapter
    scale = adapter["lora_alpha"] / adapter["r"]
    tensors = read_safetensors(os.path.join(args.adapter, "adapter_model.safetensors"))
    unused = set(tensors)
    largest = 0.0
    with torch.no_grad():
        for module, layer in model.named_modules():
            if not isinstance(layer, nn.Linear) or not targeted(module, adapter["target_modules"]):
                continue
            a_name = "base_model.model." + module + ".lora_A.weight"
            b_name = "base_model.model." + module + ".lora_B.weight"
            delta = tensors[b_name].float() @ tensors[a_name].float()
            assert delta.shape == layer.weight.shape and tensors[a_name].shape[0] == adapter["r"], module
            layer.weight += scale * delta
            largest = max(largest, delta.abs().max().item())
            unused -= {a_name, b_name}
    assert not unused, "adapter tensors no target module takes: %s" % sorted(unused)
    ids = read_safetensors(args.tokens)["token_ids"]
    with torch.no_grad():
        write_safetensors(args.out, {"logits": model(ids)})
    print(json.dumps({"largest_update": largest}))


def greedy(args):
    model = load_directory(args.dir)
    ids = [int(i) for i in args.prompt.split(",")]
    out = []
    start_time = time.perf_counter()
    caches = None if args.no_cache else [{} for _ in model.model.layers]
    with torch.no_grad():
        step_input, start = torch.tensor([ids]), 0
        for _ in range(args.new):
            if caches is None:
                logits_ = model(torch.tensor([ids + out]))
            else:
                logits_ = model(step_input, start, caches)
                start += step_input.shape[1]
            token = int(logits_[0, -1].argmax())
            out.append(token)
            step_input = torch.tensor([[token]])
    if args.time:
        print(json.dumps({"tokens": out, "seconds": time.perf_counter() - start_time}))
    else:
        print(json.dumps(out))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("dir")
    p.add_argument("--family", choices=sorted(FAMILIES), required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--shards", type=int, default=1)
    p.add_argument("--config")
    p.set_defaults(run=make)
    p = sub.add_parser("logits")
    p.add_argument("dir")
    p.add_argument("--tokens", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--mutate", choices=["rope-pairs", "kv-order", "gate-up", "no-rope-scaling"])
    p.set_defaults(run=logits)
    p = sub.add_parser("compare")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--row", type=int)
    p.add_argument("--from", dest="start", type=int, default=0)
    p.set_defaults(run=compare)
    p = sub.add_parser("pad")
    p.add_argument("dir")
    p.set_defaults(run=pad)
    p = sub.add_parser("loss")
    p.add_argument("dir")
    p.add_argument("--ids", required=True)
    p.set_defaults(run=loss)
    p = sub.add_parser("same-weights")
    p.add_argument("dir")
    p.add_argument("file")
    p.set_defaults(run=same_weights)
    p = sub.add_parser("peft-logits")
    p.add_argument("base")
    p.add_argument("adapter")
    p.add_argument("--tokens", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(run=peft_logits)
    p = sub.add_parser("greedy")
    p.add_argument("dir")
    p.add_argument("--prompt", required=True)
    p.add_argument("--new", type=int, required=True)
    p.add_argument("--no-cache", action="store_true")
    p.add_argument("--time", action="store_true")
    p.set_defaults(run=greedy)
    args = parser.parse_args()
    args.run(args)


if __name__ == "__main__":
    main()
