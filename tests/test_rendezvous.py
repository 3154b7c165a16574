"""The demo's gloo rendezvous: the port verl named may be taken by then; the group forms all the same."""

from __future__ import annotations

import socket
import subprocess
import sys

RANK = """
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

from verltop.demo.rendezvous import join_gloo

rank, note = int(sys.argv[1]), Path(sys.argv[2])
join_gloo(rank, 2, "127.0.0.1", note, timedelta(seconds=60))
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
print(int(t.item()), flush=True)
# gloo's threads are joined here, not by the interpreter's exit (which may abort: "terminate called without an
# active exception" when a rank exits while its peer's connection is still being torn down)
dist.barrier()
dist.destroy_process_group()
"""


def test_a_group_forms_while_the_named_port_is_taken(tmp_path):
    with socket.socket() as taken:  # the master port as verl chose it, taken meanwhile by someone else
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        named = taken.getsockname()[1]
        note = tmp_path / "rendezvous" / f"wg-127.0.0.1-{named}"
        # the peer first: it waits for rank 0's note
        procs = [subprocess.Popen([sys.executable, "-c", RANK, str(r), str(note)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for r in (1, 0)]
        outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [e[-800:] for _, e in outs]
    assert [o.strip() for o, _ in outs] == ["3", "3"]  # 1 + 2: both ranks in one all_reduce
    assert note.read_text().isdigit() and int(note.read_text()) != named
