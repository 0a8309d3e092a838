#!/usr/bin/env python3
"""Sums up a trace that `hpctrain bench step --update --profile FILE` wrote (libtorch's profiler,
Chrome trace-event JSON): where a training step's time goes on the GPU and on the host.

  - GPU: the span from the first kernel (or copy) to the last, the time the GPU was busy in it
    (the union of kernel and copy intervals), the idle gaps between them (how many, how long,
    how many over 10 us), and kernel time by kind (matrix products, attention, normalization,
    softmax and loss, the optimizer, element-wise, reductions, copies), with the ten kernels
    that take longest;
  - host: the launches (CUDA runtime calls that start work) and the time the host spent in calls
    that wait for the GPU (synchronizations and blocking copies).

Figures are per step: totals divided by --steps (the profile's step count, 3 by default).

usage: profile_summary.py TRACE.json [--steps 3] [--json]
exit: 0 done; 2 the trace cannot be read or has no GPU work; 141 the reader closed the pipe.
"""
import argparse
import json
import os
import re
import sys

# Kernel kinds, tried in order: the first pattern that matches a kernel's name names its kind.
KINDS = [
    ("optimizer", r"adam|multi_tensor_apply|foreach"),  # also any other multi-tensor (foreach) kernel
    ("attention", r"flash|fmha|attention|sdpa|_attn"),
    ("matrix products", r"gemm|cutlass|cublas|xmma|nvjet|matmul|gemv|wgmma|sm\d+_"),
    ("normalization", r"layer_norm|layernorm|batch_norm|rms_?norm"),
    ("softmax and loss", r"softmax|nll_loss|cross_entropy|logsumexp"),
    ("reductions", r"reduce|norm_kernel|sum_kernel"),
    ("element-wise", r"elementwise|vectorized|unrolled|gelu|tanh|fill|copy|index|embedding|where|dropout"),
]
LAUNCHES = re.compile(r"^cu(da)?(LaunchKernel|LaunchKernelEx|GraphLaunch|MemcpyAsync|MemsetAsync|LaunchCooperativeKernel)")
WAITS = re.compile(r"^cu(da)?(StreamSynchronize|DeviceSynchronize|EventSynchronize|Memcpy$|MemcpyDtoH)")


def kind_of(name):
    lower = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lower):
            return kind
    return "other"


def union_and_gaps(intervals):
    """The busy time of [start, end) intervals, and the gaps between the busy stretches."""
    busy, gaps = 0.0, []
    end = None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            if end is not None:
                gaps.append(start - end)
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy, gaps


def summarize(events, steps):
    gpu = [e for e in events if e.get("ph") == "X" and e.get("cat", "").lower() in ("kernel", "gpu_memcpy", "gpu_memset")]
    if not gpu:
        raise ValueError("the trace holds no GPU kernels or copies (a CPU run, or a profiler without CUDA)")
    intervals = [(float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))) for e in gpu]
    busy, gaps = union_and_gaps(intervals)
    span = max(i[1] for i in intervals) - min(i[0] for i in intervals)
    by_kind, by_name = {}, {}
    for e in gpu:
        category = e.get("cat", "").lower()
        kind = "copies and fills" if category != "kernel" else kind_of(e.get("name", ""))
        by_kind[kind] = by_kind.get(kind, 0.0) + float(e.get("dur", 0))
        by_name[e.get("name", "")] = by_name.get(e.get("name", ""), 0.0) + float(e.get("dur", 0))
    runtime = [e for e in events if e.get("ph") == "X" and e.get("cat", "").lower() in ("cuda_runtime", "cuda_driver")]
    launches = [e for e in runtime if LAUNCHES.match(e.get("name", ""))]
    waits = [e for e in runtime if WAITS.match(e.get("name", ""))]
    per = 1.0 / steps
    return {
        "steps": steps,
        "gpu_span_ms": span * per / 1e3,
        "gpu_busy_ms": busy * per / 1e3,
        "gpu_idle_ms": (span - busy) * per / 1e3,
        "gpu_busy_share": busy / span if span > 0 else 0.0,
        "kernels_per_step": sum(1 for e in gpu if e.get("cat", "").lower() == "kernel") * per,
        "gaps_per_step": len(gaps) * per,
        "gaps_over_10us_per_step": sum(1 for g in gaps if g > 10) * per,
        "gap_ms_over_10us": sum(g for g in gaps if g > 10) * per / 1e3,
        "kernel_ms_by_kind": {k: v * per / 1e3 for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_kernels_ms": [[n[:90], v * per / 1e3] for n, v in sorted(by_name.items(), key=lambda kv: -kv[1])[:10]],
        "launches_per_step": len(launches) * per,
        "host_launch_ms": sum(float(e.get("dur", 0)) for e in launches) * per / 1e3,
        "host_wait_ms": sum(float(e.get("dur", 0)) for e in waits) * per / 1e3,
    }


def print_table(s):
    print(f"per step, over {s['steps']} profiled steps:")
    print(f"  GPU span {s['gpu_span_ms']:.2f} ms: busy {s['gpu_busy_ms']:.2f} ms ({100 * s['gpu_busy_share']:.1f} %), "
          f"idle {s['gpu_idle_ms']:.2f} ms in {s['gaps_per_step']:.0f} gaps "
          f"({s['gaps_over_10us_per_step']:.0f} over 10 us: {s['gap_ms_over_10us']:.2f} ms)")
    print(f"  {s['kernels_per_step']:.0f} kernels; host: {s['launches_per_step']:.0f} launches taking "
          f"{s['host_launch_ms']:.2f} ms, {s['host_wait_ms']:.2f} ms waiting for the GPU")
    busy = sum(s["kernel_ms_by_kind"].values()) or 1.0
    print("  GPU time by kind:")
    for kind, ms in s["kernel_ms_by_kind"].items():
        print(f"    {kind:<18} {ms:8.2f} ms {100 * ms / busy:5.1f} %")
    print("  longest kernels:")
    for name, ms in s["top_kernels_ms"]:
        print(f"    {ms:8.2f} ms  {name}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON line")
    args = parser.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
        events = trace["traceEvents"] if isinstance(trace, dict) else trace
        summary = summarize(events, max(args.steps, 1))
    except (OSError, ValueError, KeyError, TypeError) as e:
        print(f"profile_summary: error: {args.trace}: {e}", file=sys.stderr)
        return 2
    try:
        if args.json:
            print(json.dumps(summary))
        else:
            print_table(summary)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader stopped early (`| head`): no traceback, and no second error at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    return 0


if __name__ == "__main__":
    sys.exit(main())
