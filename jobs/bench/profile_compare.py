#!/usr/bin/env python3
"""Two operator tables side by side: hpctrain's `log.profile_steps` file
(<run.dir>/profile/rank-<r>.tsv) and the PyTorch twin's (`ddp_reference.py --profile-steps`),
each operator's self CPU milliseconds per step in both, the largest differences first, and the
totals: step wall time, the sum of self times, and what the profiler did not see (wall less the
operators: the framework's own work between operators).

  profile_compare.py HPCTRAIN.tsv PYTORCH.tsv [--top 25]
"""
import argparse
import re


def read(path):
    """(steps, wall ms of the steps, {name: (calls, self ms, total ms)}) of a table."""
    with open(path) as f:
        header = f.readline()
        match = re.match(r"# (\d+) optimizer step\(s\), ([0-9.e+-]+) ms", header)
        if not match:
            raise SystemExit(f"{path}: not an operator table (first line: {header.strip()!r})")
        f.readline()  # the column names
        rows = {}
        for line in f:
            name, calls, self_ms, total_ms = line.rstrip("\n").split("\t")
            rows[name] = (int(calls), float(self_ms), float(total_ms))
    return int(match.group(1)), float(match.group(2)), rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("hpctrain")
    parser.add_argument("pytorch")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    (steps_a, wall_a, a), (steps_b, wall_b, b) = read(args.hpctrain), read(args.pytorch)
    per_a = {k: (c / steps_a, s / steps_a) for k, (c, s, _) in a.items()}
    per_b = {k: (c / steps_b, s / steps_b) for k, (c, s, _) in b.items()}
    names = sorted(set(per_a) | set(per_b),
                   key=lambda k: -abs(per_a.get(k, (0, 0))[1] - per_b.get(k, (0, 0))[1]))
    print(f"{'operator':48} {'calls/step':>21} {'self ms/step':>23} {'difference':>10}")
    print(f"{'':48} {'hpctrain':>10} {'pytorch':>10} {'hpctrain':>11} {'pytorch':>11} {'ms':>10}")
    for name in names[:args.top]:
        ca, sa = per_a.get(name, (0, 0.0))
        cb, sb = per_b.get(name, (0, 0.0))
        print(f"{name[:48]:48} {ca:10.1f} {cb:10.1f} {sa:11.3f} {sb:11.3f} {sa - sb:+10.3f}")
    self_a = sum(s for _, s in per_a.values())
    self_b = sum(s for _, s in per_b.values())
    print(f"{'sum of self times':48} {'':21} {self_a:11.3f} {self_b:11.3f} {self_a - self_b:+10.3f}")
    print(f"{'step wall time':48} {'':21} {wall_a / steps_a:11.3f} {wall_b / steps_b:11.3f} "
          f"{(wall_a / steps_a) - (wall_b / steps_b):+10.3f}")
    print(f"{'outside the operators (wall - self)':48} {'':21} {wall_a / steps_a - self_a:11.3f} "
          f"{wall_b / steps_b - self_b:11.3f}")


if __name__ == "__main__":
    main()
