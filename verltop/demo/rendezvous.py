"""A gloo group's rendezvous that cannot lose its port, for processes of one machine.

verl picks a worker group's master port when rank 0 starts (bind to port 0, close) and the port is bound
again only when ``init_process_group`` runs, seconds later. On a busy machine one of Ray's own connections can
take it meanwhile: rank 0 then fails while its peers wait for it for ever (``ray.get`` of the group waits for
every rank), and the job never gets past its start. Here rank 0 lets the kernel pick its store's port and tells
its peers through a file; the demo's processes all share this machine's disk.
"""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path


def join_gloo(rank: int, world_size: int, addr: str, note: Path, timeout: timedelta) -> None:
    """``torch.distributed.init_process_group("gloo")`` for ``rank`` of ``world_size``; rank 0 writes its
    store's port to ``note`` (a path unique to the group), its peers wait for it there."""
    import torch.distributed as dist

    if rank == 0:
        # its peers learn the port only once it is open: it must not wait for them in here
        store = dist.TCPStore(addr, 0, world_size, is_master=True, timeout=timeout, wait_for_workers=False)
        note.parent.mkdir(parents=True, exist_ok=True)
        tmp = note.parent / f"{note.name}.tmp"
        tmp.write_text(str(store.port))
        tmp.replace(note)  # whole or absent: a peer never reads half a number
    else:
        deadline = time.monotonic() + timeout.total_seconds()
        while not note.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank 0 never opened its store ({note})")
            time.sleep(0.05)
        store = dist.TCPStore(addr, int(note.read_text()), world_size, is_master=False, timeout=timeout)
    dist.init_process_group(backend="gloo", store=store, rank=rank, world_size=world_size, timeout=timeout)
