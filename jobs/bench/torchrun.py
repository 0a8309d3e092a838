#!/usr/bin/env python3
"""torchrun for Debian 12's PyTorch 1.13 on Python 3.11, whose own /usr/bin/torchrun crashes at
start-up: Std.from_str in torch/distributed/elastic/multiprocessing/api.py finds a member of an
IntFlag by iterating it, and Python 3.11 no longer yields the zero member (Std.NONE), so "0"
becomes None. This replaces that one function and runs torchrun's main() unchanged.

usage: /usr/bin/python3 jobs/bench/torchrun.py --nproc_per_node=2 SCRIPT [ARGS...]
"""
from torch.distributed.elastic.multiprocessing import api


def from_str(vm):
    """"3" -> Std.ALL; "0:3,1:0" -> {0: Std.ALL, 1: Std.NONE}, as the original means it."""
    if ":" not in vm:
        return api.Std(int(vm))
    return {int(rank): api.Std(int(value)) for rank, value in (m.split(":") for m in vm.split(","))}


api.Std.from_str = staticmethod(from_str)

if __name__ == "__main__":
    from torch.distributed.run import main
    main()
