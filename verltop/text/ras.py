"""What NCCL RAS says about a hang, in words: one sentence per finding (a dump's notes, a suspect's reason)."""

from __future__ import annotations

from verltop.analysis.ras import OP_NAMES, findings
from verltop.model import RasFinding, RasReport


def finding_text(f: RasFinding) -> str:
    """``NCCL RAS, communicator 5719f456… (2 ranks): rank 1 (pid 630 on …) issued 5 AllReduce, its peers 6 — …``"""
    who = f"rank {f.rank}" + (f" (pid {f.pid} on {f.host})" if f.pid else "")
    comm = f"communicator {f.comm[:8]}…" + (f" ({f.comm_size} ranks)" if f.comm_size else "")
    if f.kind == "behind":
        return (f"NCCL RAS, {comm}: {who} issued {f.count} {f.op}, its peers {f.peers_count} — it never "
                f"reached {OP_NAMES.get(f.op or '', f.op)} #{f.peers_count}")
    if f.kind == "mismatch":
        peers = f"{'rank' if len(f.peers) == 1 else 'ranks'} {','.join(str(x) for x in f.peers)}"
        return (f"NCCL RAS, {comm}: {who} issued {f.op} while {peers} issued {f.peer_op} instead: "
                "different collectives on one communicator")
    if f.kind == "missing":
        state = "considered dead" if f.dead else "not answering"
        return f"NCCL RAS, {comm}: {who} is missing ({state}: its process is stopped, hung in the kernel or gone)"
    return f"NCCL RAS, {comm}: {who} aborted its communicator"


def ras_notes(report: RasReport | None) -> list[str]:
    """One line per finding, for a dump's notes (nothing for a healthy job or no answer)."""
    return [finding_text(f) for f in findings(report)] if report is not None else []
