"""A real gloo process group of N ranks hung on purpose (used by tests and the bench).

    python -m tests.sources.gloo_ranks N STRAGGLER PORT   → ranks != STRAGGLER block in all_reduce
"""

from __future__ import annotations

import os
import sys
import time


def straggler_work(seconds: float) -> None:
    time.sleep(seconds)


def rank_main(rank: int, world: int, straggler: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x = torch.ones(4)
    dist.all_reduce(x)  # everyone is here once
    print(f"ready {rank}", flush=True)
    if rank == straggler:
        straggler_work(3600)
    else:
        dist.all_reduce(x)


if __name__ == "__main__":
    n, s, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    if len(sys.argv) > 4:
        rank_main(int(sys.argv[4]), n, s, port)
    else:
        import subprocess

        procs = [subprocess.Popen([sys.executable, "-m", "tests.sources.gloo_ranks", str(n), str(s), str(port), str(r)])
                 for r in range(n)]
        print(" ".join(str(p.pid) for p in procs), flush=True)
        try:
            for p in procs:
                p.wait()
        finally:
            for p in procs:
                p.kill()
    os._exit(0)
