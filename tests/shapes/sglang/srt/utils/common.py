"""SGLang's ``broadcast_pyobj``: TP0 broadcasts what it received; the other ranks block in the broadcast."""

from __future__ import annotations

import pickle


def broadcast_pyobj(data: list, rank: int, group=None, src: int = 0) -> list:
    import torch
    import torch.distributed as dist

    if rank == src:
        buf = torch.tensor(list(pickle.dumps(data)), dtype=torch.uint8)
        size = torch.tensor([buf.numel()], dtype=torch.long)
        dist.broadcast(size, src=src, group=group)
        if buf.numel():
            dist.broadcast(buf, src=src, group=group)
        return data
    size = torch.tensor([0], dtype=torch.long)
    dist.broadcast(size, src=src, group=group)
    buf = torch.empty(int(size.item()), dtype=torch.uint8)
    if buf.numel():
        dist.broadcast(buf, src=src, group=group)
    return pickle.loads(bytes(buf.tolist()))
