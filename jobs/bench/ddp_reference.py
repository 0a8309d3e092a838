#!/usr/bin/env python3
"""The PyTorch side of jobs/bench/compare.sh: hpctrain's fashion_cnn, gpt or unet trained with
DistributedDataParallel the way a PyTorch user trains on CPU nodes: gloo, a DistributedSampler
and a DataLoader over tensors in memory (no worker processes: the data is in memory and every
core has a rank), one intra-op thread per rank, and the optimizer, batch and data of hpctrain's
configs/fashion_cnn.ini, configs/text_gpt.ini and configs/fashion_ddpm.ini. The unet (the twin of
tests/support/unet_reference.py) trains on DDPM's objective as hpctrain's train.objective=diffusion
does: a step t uniform in [0, 1000), Gaussian noise, the class dropped with probability 0.1,
the linear schedule, the mean squared error on the noise, gradients clipped at 1, and a moving
average of the weights (decay 0.999) updated after every step.

Prints one JSON line on rank 0: the steady rate (samples/s, or tokens/s for gpt) over the steps
after --warmup, the seconds from launch to the end of the first optimizer step (launch: the
HPCTRAIN_BENCH_LAUNCH_NS environment variable, nanoseconds since the epoch, when set; else when
this script started), and every rank's peak RSS in MiB.

The networks carry hpctrain's parameter names, so `hpctrain ckpt export` of a checkpoint loads
into them strictly: --check-state-dict FILE does that (no training, no launcher) and, for gpt,
prints the loss over the held-out text as `hpctrain eval` computes it (the last --test-fraction
of the bytes, windows of --block-size laid end to end), which must equal hpctrain's test_loss.

usage: /usr/bin/python3 jobs/bench/torchrun.py --nproc_per_node=N jobs/bench/ddp_reference.py
         --model fashion_cnn --data /usr/share/datasets/fashion-mnist [--batch-size 64]
         [--steps 300] [--warmup 100]
       ... --model gpt --data DIR_OR_FILE_OF_TEXT [--batch-size 32] (4 blocks, 128 wide, block 128)
       ... --model unet --data /usr/share/datasets/fashion-mnist [--batch-size 64]
       ... --model unet --data ... --sample S --batch-size B: no training; each rank draws B images of
         class 3 with DDIM in S steps and guidance 2, as `hpctrain sample` does (two forwards a
         step), and rank 0 prints the images/s of all ranks
       /usr/bin/python3 jobs/bench/ddp_reference.py --model gpt --data TEXT --check-state-dict model.pt
         [--layers 4 --heads 4 --embd 128 --block-size 128]
"""
import argparse
import contextlib
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

STARTED = time.time()  # before torch is imported

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from load_state_dict import FashionCnn  # noqa: E402  (hpctrain's fashion_cnn, by its names)
from torch_reference import read_idx  # noqa: E402

sys.path.insert(0, str(Path(__file__).parents[2] / "tests" / "support"))
from unet_reference import Unet  # noqa: E402  (hpctrain's unet, by its names)

FASHION_MEAN, FASHION_STD = 0.2860, 0.3530  # what `hpctrain prepare fashion-mnist` records
# PyTorch 2 fuses causal attention into one kernel, as hpctrain built against libtorch 2 does; 1.13
# computes it step by step, as hpctrain does there. Both compute the same function (up to
# rounding; with dropout the two draw different masks).
FUSED_ATTENTION = hasattr(F, "scaled_dot_product_attention")


class CausalSelfAttention(nn.Module):
    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(embd, 3 * embd)
        self.c_proj = nn.Linear(embd, embd)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (y.view(b, t, self.heads, c // self.heads).transpose(1, 2) for y in (q, k, v))
        if FUSED_ATTENTION:
            dropout = self.attn_dropout.p if self.training else 0.0
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads)) + mask
            y = self.attn_dropout(F.softmax(att, dim=-1)) @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c)))


class Block(nn.Module):
    def __init__(self, embd, heads, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(embd)
        self.attn = CausalSelfAttention(embd, heads, dropout)
        self.ln_2 = nn.LayerNorm(embd)
        self.mlp = nn.Sequential()
        self.mlp.c_fc = nn.Linear(embd, 4 * embd)
        self.mlp.gelu = nn.GELU()
        self.mlp.c_proj = nn.Linear(4 * embd, embd)
        self.mlp.dropout = nn.Dropout(dropout)

    def forward(self, x, mask):
        x = x + self.attn(self.ln_1(x), mask)
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    """hpctrain's gpt (src/model/gpt.cpp): GPT-2's layout and initialization, tied output layer,
    fused attention where PyTorch has it (FUSED_ATTENTION)."""

    def __init__(self, vocab=256, block_size=128, layers=4, heads=4, embd=128, dropout=0.1):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, embd), wpe=nn.Embedding(block_size, embd), drop=nn.Dropout(dropout),
            h=nn.ModuleList(Block(embd, heads, dropout) for _ in range(layers)), ln_f=nn.LayerNorm(embd)))
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, 0.0, 0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for block in self.transformer.h:
            for w in (block.attn.c_proj.weight, block.mlp.c_proj.weight):
                nn.init.normal_(w, 0.0, 0.02 / math.sqrt(2 * layers))

    def forward(self, tokens):
        t, tr = tokens.size(1), self.transformer
        x = tr.drop(tr.wte(tokens) + tr.wpe(torch.arange(t, device=tokens.device)))
        mask = None if FUSED_ATTENTION else torch.full((t, t), float("-inf"), device=tokens.device).triu(1)
        for block in tr.h:
            x = block(x, mask)
        return F.linear(tr.ln_f(x), tr.wte.weight)  # tied to the token embedding


def fashion_batches(args, rank, world):
    images = torch.from_numpy(read_idx(f"{args.data}/train-images-idx3-ubyte.gz").copy()).unsqueeze(1)
    labels = torch.from_numpy(read_idx(f"{args.data}/train-labels-idx1-ubyte.gz").astype("int64"))
    dataset = TensorDataset(images, labels)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True, seed=42)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=0)
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        for x, y in loader:
            yield (x.float() / 255.0 - FASHION_MEAN) / FASHION_STD, y
        epoch += 1


class Diffusion(nn.Module):
    """DDPM's training loss around a denoiser, so that DDP wraps one module: the linear schedule of
    configs/fashion_ddpm.ini (T = 1000), the class dropped with probability 0.1."""

    def __init__(self, denoiser, steps=1000, cond_drop=0.1):
        super().__init__()
        self.denoiser = denoiser
        self.steps = steps
        self.cond_drop = cond_drop
        betas = torch.linspace(1e-4, 0.02, steps, dtype=torch.float64)
        self.register_buffer("alpha_bar", torch.cumprod(1 - betas, 0).float(), persistent=False)

    def forward(self, clean, labels):
        t = torch.randint(self.steps, (clean.size(0),))
        noise = torch.randn_like(clean)
        a = self.alpha_bar[t].view(-1, 1, 1, 1)
        noisy = a.sqrt() * clean + (1 - a).sqrt() * noise
        labels = torch.where(torch.rand(clean.size(0)) < self.cond_drop, torch.full_like(labels, -1), labels)
        return F.mse_loss(self.denoiser(noisy, t, labels), noise)


def ddim_rate(args, world):
    """Images/s of all ranks for `hpctrain sample --steps S --guidance 2 --class 3`'s loop."""
    denoiser = Unet(1, 32, [1, 2, 2], 10, attention=False).eval()
    alpha_bar = Diffusion(denoiser).alpha_bar.double()
    visited = [round(i * 999 / (args.sample - 1)) for i in reversed(range(args.sample))]
    labels = torch.full((args.batch_size,), 3)
    none = torch.full_like(labels, -1)
    dist.barrier()
    started = time.perf_counter()
    with torch.no_grad():
        x = torch.randn(args.batch_size, 1, 28, 28)
        for i, t in enumerate(visited):
            now = alpha_bar[t].item()
            before = alpha_bar[visited[i + 1]].item() if i + 1 < len(visited) else 1.0
            steps = torch.full((args.batch_size,), t)
            unconditional = denoiser(x, steps, none)
            eps = unconditional + 2.0 * (denoiser(x, steps, labels) - unconditional)
            clean = ((x - math.sqrt(1 - now) * eps) / math.sqrt(now)).clamp(-FASHION_MEAN / FASHION_STD,
                                                                         (1 - FASHION_MEAN) / FASHION_STD)
            direction = (x - math.sqrt(now) * clean) / math.sqrt(1 - now)
            x = math.sqrt(before) * clean + math.sqrt(1 - before) * direction
    elapsed = [None] * world
    dist.all_gather_object(elapsed, time.perf_counter() - started)
    return world * args.batch_size / max(elapsed)


def text_bytes(path):
    files = sorted(p for p in Path(path).rglob("*") if p.is_file()) if Path(path).is_dir() else [Path(path)]
    return torch.frombuffer(bytearray(b"".join(f.read_bytes() for f in files)), dtype=torch.uint8).long()


def gpt_batches(args, rank):
    tokens = text_bytes(args.data)
    generator = torch.Generator().manual_seed(42 + rank)
    while True:  # nanoGPT's get_batch: windows of block_size + 1 at random offsets
        starts = torch.randint(len(tokens) - args.block_size - 1, (args.batch_size,), generator=generator)
        windows = torch.stack([tokens[s:s + args.block_size + 1] for s in starts.tolist()])
        yield windows[:, :-1], windows[:, 1:]


def check_state_dict(args, model):
    """Loads hpctrain's export strictly; for gpt, scores the held-out text as `hpctrain eval` does."""
    model.load_state_dict(torch.load(args.check_state_dict), strict=True)
    model.eval()
    result = {"tensors": len(model.state_dict()), "parameters": sum(p.numel() for p in model.parameters())}
    if args.model == "gpt":
        tokens = text_bytes(args.data)
        val = tokens[len(tokens) - int(len(tokens) * args.test_fraction):]
        windows = (len(val) - 1) // args.block_size
        total = 0.0
        with torch.no_grad():
            for first in range(0, windows, 64):
                starts = range(first * args.block_size, min(windows, first + 64) * args.block_size, args.block_size)
                x = torch.stack([val[s:s + args.block_size] for s in starts])
                y = torch.stack([val[s + 1:s + args.block_size + 1] for s in starts])
                total += F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum").item()
        result["test_loss"] = total / (windows * args.block_size)
    print(json.dumps(result))


def adamw(args, params, **options):
    """AdamW, or with --zero AdamW sharded over the ranks (PyTorch's ZeRO stage 1)."""
    if not args.zero:
        return torch.optim.AdamW(params, **options)
    from torch.distributed.optim import ZeroRedundancyOptimizer
    return ZeroRedundancyOptimizer(params, optimizer_class=torch.optim.AdamW, **options)


def train_step(args, ddp, model, optimizer, schedule, average, x, y):
    """One optimizer step: forward, backward (DDP's allreduce), clipping, the update, the moving average."""
    if args.model == "unet":
        loss = ddp(x, y)
    else:
        logits = ddp(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if args.model in ("gpt", "unet"):
        torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
    optimizer.step()
    if average:
        with torch.no_grad():
            for kept, weight in zip(average, model.parameters()):
                kept.lerp_(weight, 1 - 0.999)
    if schedule:
        schedule.step()
    return loss


class OpProfile:
    """--profile-steps: each step of A..B profiled on its own (torch.autograd.profiler, the legacy
    profiler hpctrain's log.profile_steps uses too), key_averages() summed over the steps and
    written as hpctrain writes <run.dir>/profile/rank-<r>.tsv."""

    def __init__(self, steps):
        self.first, self.last = (int(n) for n in steps.split("-")) if steps else (0, -1)
        self.rows = {}
        self.wall_ms = 0.0
        self.steps = 0

    @contextlib.contextmanager
    def step(self, step):
        if not self.first <= step <= self.last:
            yield
            return
        start = time.perf_counter()
        with torch.autograd.profiler.profile(use_kineto=False) as prof:
            yield
        self.wall_ms += (time.perf_counter() - start) * 1e3
        self.steps += 1
        for row in prof.key_averages():
            calls, self_ms, total_ms = self.rows.get(row.key, (0, 0.0, 0.0))
            self.rows[row.key] = (calls + row.count, self_ms + row.self_cpu_time_total / 1e3,
                                  total_ms + row.cpu_time_total / 1e3)

    def write(self, path):
        if self.steps == 0:
            return
        with open(path, "w") as out:
            out.write(f"# {self.steps} optimizer step(s), {self.wall_ms} ms of step work (wall); self and total "
                      "CPU ms of each operator over them, summed per name\nname\tcalls\tself_ms\ttotal_ms\n")
            for key, (calls, self_ms, total_ms) in sorted(self.rows.items(), key=lambda kv: -kv[1][1]):
                out.write(f"{key}\t{calls}\t{self_ms}\t{total_ms}\n")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["fashion_cnn", "gpt", "unet"], required=True)
    parser.add_argument("--data", required=True)
    parser.add_argument("--batch-size", type=int, default=None)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--embd", type=int, default=128)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--check-state-dict", metavar="FILE")
    parser.add_argument("--zero", action="store_true",
                        help="shard AdamW's state with torch.distributed.optim.ZeroRedundancyOptimizer")
    parser.add_argument("--test-fraction", type=float, default=0.1)
    parser.add_argument("--sample", type=int, default=0, metavar="S", help="unet: time DDIM sampling in S steps")
    parser.add_argument("--profile-steps", default="", metavar="A-B",
                        help="time each operator of steps A to B (from 1) with torch.autograd.profiler, as "
                             "hpctrain's log.profile_steps does, and write rank 0's table to --profile-out")
    parser.add_argument("--profile-out", default="profile.tsv")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.check_state_dict:
        torch.manual_seed(42)
        model = FashionCnn() if args.model == "fashion_cnn" else Gpt(256, args.block_size, args.layers, args.heads,
                                                                     args.embd, args.dropout)
        return check_state_dict(args, model)
    launch_ns = int(os.environ.get("HPCTRAIN_BENCH_LAUNCH_NS", "0"))
    launch = launch_ns / 1e9 if launch_ns else STARTED
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(42)
    if args.sample:
        rate = ddim_rate(args, world)
        if rank == 0:
            print(json.dumps({"framework": f"pytorch {torch.__version__}", "model": "unet sampling", "rate": rate,
                              "unit": "images/s", "first_step_s": 0, "peak_rss_mb": [0]}), flush=True)
        dist.barrier()
        os._exit(0)

    if args.model == "fashion_cnn":
        args.batch_size = args.batch_size or 64
        model = FashionCnn()
        optimizer = adamw(args, model.parameters(), lr=0.002, weight_decay=1e-4)
        schedule = None
        batches = fashion_batches(args, rank, world)
        per_step = args.batch_size * world
    elif args.model == "unet":  # configs/fashion_ddpm.ini
        args.batch_size = args.batch_size or 64
        model = Diffusion(Unet(1, 32, [1, 2, 2], 10, attention=False))
        optimizer = adamw(args, model.parameters(), lr=0.001, weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / 100))
        batches = fashion_batches(args, rank, world)
        per_step = args.batch_size * world
    else:
        args.batch_size = args.batch_size or 32
        model = Gpt(256, args.block_size, args.layers, args.heads, args.embd, args.dropout)
        decay = [p for p in model.parameters() if p.dim() >= 2]
        no_decay = [p for p in model.parameters() if p.dim() < 2]
        optimizer = adamw(args, [{"params": decay, "weight_decay": 0.1},
                                 {"params": no_decay, "weight_decay": 0.0}], lr=1e-3, betas=(0.9, 0.99))
        total = args.steps
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: (s + 1) / 100 if s < 100 else 0.5 * (1 + math.cos(math.pi * (s - 100) / max(1, total - 100))))
        batches = gpt_batches(args, rank)
        per_step = args.batch_size * world * args.block_size
    ddp = DistributedDataParallel(model)
    average = [p.detach().clone() for p in model.parameters()] if args.model == "unet" else None

    first_step_s = None
    timed_from = None
    profile = OpProfile(args.profile_steps)
    for step in range(args.steps):
        x, y = next(batches)
        with profile.step(step + 1):
            loss = train_step(args, ddp, model, optimizer, schedule, average, x, y)
        if step == 0:
            first_step_s = time.time() - launch
        if step + 1 == args.warmup:
            timed_from = time.perf_counter()
    elapsed = time.perf_counter() - timed_from
    if rank == 0:
        profile.write(args.profile_out)
    rss = [None] * world
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    if rank == 0:
        framework = f"pytorch {torch.__version__} DDP gloo" + (" ZeroRedundancyOptimizer" if args.zero else "")
        print(json.dumps({"framework": framework, "model": args.model,
                          "world_size": world, "batch_size": args.batch_size,
                          "rate": per_step * (args.steps - args.warmup) / elapsed,
                          "unit": "tokens/s" if args.model == "gpt" else "samples/s",
                          "first_step_s": first_step_s, "peak_rss_mb": rss, "loss": loss.item()}), flush=True)
    dist.barrier()
    # Gloo's teardown in PyTorch 1.13 sometimes never returns at exit (seen under compare.sh):
    # the measurement is out, so leave without it.
    os._exit(0)


if __name__ == "__main__":
    main()
