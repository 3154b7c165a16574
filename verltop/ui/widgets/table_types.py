"""The actor table's plain types: a column as laid out now and a row to show. The table, its row model and
the process rows all build on these, so none of them needs another to name them."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from verltop.model import ActorRow, PendingItem, ProcRow
from verltop.ui.widgets import pending_rows


@dataclass(frozen=True, slots=True)
class Shown:
    """A column as laid out now."""

    key: str
    label: str
    width: int
    compact: bool = False


@dataclass(frozen=True, slots=True)
class Row:
    """A row to show. Actor rows carry the actor; their cells are built only when drawn. Group rows are one
    line of text across the table (name, what the group hosts, counts), never cut into columns. Process rows
    (``proc``) are an actor's descendants under it (``parent``; keyed ``proc:<actor_id>:<pid>``, as pids
    repeat across nodes) or orphans (``orphan:<node_id>:<pid>``, with a ``note``)."""

    key: str
    header: Text | None = None
    actor: ActorRow | None = None
    proc: ProcRow | None = None
    parent: ActorRow | None = None
    branch: str = ""  # process rows: the tree's drawing before the title
    note: str = ""  # orphans: whose they were; actors: a slow rank's mark ("+41s gen"), low memory ("GPU 3% free")
    marker: str = ""  # actor rows with processes: ▾ open, ▸ closed
    pending: PendingItem | None = None  # a line of the "pending" group (ui/widgets/pending_rows.py)
    mark: str = ""  # a suspect of the last dump: its few words, first in STALLED (text/marks.py)

    @property
    def actor_id(self) -> str | None:
        if self.actor:
            return self.actor.actor_id
        return self.parent.actor_id if self.parent else None

    def sig(self, now: float | None = None) -> tuple:
        """What the cells depend on: equal signatures, equal cells (ages compare by whole seconds)."""
        a = self.actor
        if self.pending is not None:
            return (("p", pending_rows.sig(self.pending, now)), None)
        if self.proc is not None:
            p = self.proc
            return (("p", self.branch, self.note, self.mark, p.title, p.pid, p.ppid, p.gpu_index,
                     None if p.gpu_mem_bytes is None else p.gpu_mem_bytes >> 20, p.gpu_mem_total_bytes,
                     None if p.cpu_percent is None else round(p.cpu_percent),
                     None if p.rss_bytes is None else p.rss_bytes >> 20, p.node_ip,
                     self.parent.host_mem_total_bytes if self.parent else None), None)
        if a is None:
            return (("h", self.header.plain if self.header is not None else ""), None)
        static = (self.marker, a.role, a.roles, a.rank, a.world_size, a.node_ip, a.pid, a.gpu_index,
                  None if a.gpu_util_percent is None else round(a.gpu_util_percent),
                  None if a.gpu_mem_bytes is None else a.gpu_mem_bytes >> 20, a.gpu_mem_total_bytes,
                  None if a.cpu_percent is None else round(a.cpu_percent),
                  None if a.rss_bytes is None else a.rss_bytes >> 20, a.host_mem_total_bytes, a.state, a.task,
                  a.stalls, a.trend, a.num_restarts, self.mark, self.note)
        # the age ticks every second; kept apart so the rest of the row is not re-rendered for it
        return (static, _int_age(a, now))


def _int_age(a: ActorRow, now: float | None) -> int | None:
    r = a.running_s(now) if now is not None else a.task_running_s
    return None if r is None else int(r)

