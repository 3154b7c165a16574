"""What a command reads first, declared by the engine and sent before the engine is imported.

``verltop dump`` starts fast on purpose: its reads go out from threads while the engine is still being
imported, and the dashboard client takes the answers when the engine asks for the same reads. This module
is the light entry for that; it imports only ``sources.reads``, ``sources.wire`` and ``sources.config``
(the engine package's ``__init__`` is lazy; ``snapshot``'s follow-up reads import the roles' rules in their
thread), and ``DumpJob`` reads with the timeouts declared here, so a
prefetched read is the very one the dump makes.
"""

from __future__ import annotations

from verltop.sources import reads, wire
from verltop.sources.config import Endpoint

WAIT_GRAPH_TIMEOUT_S = 5.0  # the dump's wait-graph reads: bounded, the chains can do without them
JOBS_TIMEOUT_S = 10.0  # the drivers of a whole-job dump
SEED_TIMEOUT_S, SEED_LIMIT = 15.0, 2000  # the finished tasks a snapshot's stall rules start from


def dump_reads(timeout_s: float, whole_job: bool) -> list[reads.Read]:
    """``dump``'s reads: actors, nodes, running tasks, node stats, the wait graph, pending work; the jobs'
    drivers when the whole job is dumped (not one worker group)."""
    wanted = [reads.actors(timeout_s, True), reads.nodes(timeout_s), reads.running_tasks(timeout_s, True),
              reads.nodes_summary(), reads.running_tasks(WAIT_GRAPH_TIMEOUT_S, False),
              reads.pending_refs(WAIT_GRAPH_TIMEOUT_S),
              # pending work (a job whose workers cannot be placed has nothing to dump but its driver)
              reads.unplaced_placement_groups(timeout_s), reads.pending_tasks(timeout_s),
              reads.profiling_enabled()]  # other nodes' stacks: through the dashboard, or the probes
    if whole_job:
        wanted.append(reads.jobs(JOBS_TIMEOUT_S))
    return wanted


def prefetch_dump(endpoint: Endpoint, timeout_s: float, whole_job: bool,
                  stacks: tuple[bool, bool, float] | None = None) -> wire.Prefetch:
    """Send ``dump``'s reads now; pass the result to ``oneshot.monitor`` for the engine to take them.
    ``stacks``: ``(native, nonblocking, per-process timeout)`` to start py-spy on this machine's actors as
    soon as the actors are in (``sources.headstart``), or None to leave it all to the engine."""
    pre = wire.Prefetch(endpoint.address, wire.headers(endpoint.token), dump_reads(timeout_s, whole_job),
                        timeout_s + 2)
    if stacks is not None:
        from verltop.sources import headstart

        native, nonblocking, per_process = stacks
        headstart.start(pre.peek(*reads.actors(timeout_s, True)), pre.peek(*reads.nodes(timeout_s)),
                        pre.peek(*reads.jobs(JOBS_TIMEOUT_S)) if whole_job else None, per_process, native,
                        nonblocking)
    return pre


def snapshot_reads(timeout_s: float) -> list[reads.Read]:
    """``snapshot``'s reads (``Monitor.poll_once``): actors, running and waiting tasks, the finished ones that
    seed the usual durations and the failed ones (a collective that timed out), nodes and their summary,
    pending work."""
    return [reads.actors(timeout_s, True), reads.running_tasks(timeout_s, True), reads.waiting_tasks(timeout_s),
            reads.finished_tasks(SEED_TIMEOUT_S, True, SEED_LIMIT), reads.failed_tasks(timeout_s, reads.FAILED_LIMIT),
            reads.nodes(timeout_s), reads.nodes_summary(), reads.unplaced_placement_groups(timeout_s),
            reads.pending_tasks(timeout_s)]


MAX_EARLY_NODES = 16  # node details read ahead (a snapshot reads every node's; the rest when the engine is up)


def snapshot_follow_ups(actors: list[dict], nodes: bool = True, trainer_log: bool = True) -> list[reads.Read]:
    """What a snapshot reads as soon as the actors are in (``Monitor.poll_once``): the node details of every
    node with a live actor, and the log of verl's trainer (``TaskRunner``: its metrics). Sent while the engine
    is still being imported: the trainer's log alone took the dashboard 30-40 ms to serve."""
    from verltop.analysis.roles import base_role  # the engine's own rule for the trainer

    live = [a for a in actors if a.get("state") == "ALIVE"]
    out = [reads.node_detail(n) for n in sorted({a.get("node_id") for a in live if a.get("node_id")})
           ][:MAX_EARLY_NODES] if nodes else []
    trainers = [a for a in live if base_role(str(a.get("class_name") or ""), a.get("name")) == "controller"
                and a.get("actor_id")]
    if trainers and trainer_log:  # the last listed, as ``poll_training.trainer_actor`` picks it
        out.append(reads.actor_log(str(trainers[-1]["actor_id"]), reads.FIRST_LOG_LINES, "out"))
    return out


def prefetch_snapshot(endpoint: Endpoint, timeout_s: float, nodes: bool = True, trainer_log: bool = True
                      ) -> wire.Prefetch:
    """Send ``snapshot``'s reads now, while the engine is imported; pass the result to ``oneshot.monitor``.
    ``nodes``: every node's detail too (a snapshot that samples CPU itself reads only the other nodes');
    ``trainer_log``: the trainer's log (not when the metrics come from a file)."""
    pre = wire.Prefetch(endpoint.address, wire.headers(endpoint.token), snapshot_reads(timeout_s), timeout_s + 2)
    pre.follow(reads.actors(timeout_s, True), lambda rows: snapshot_follow_ups(rows, nodes, trainer_log))
    return pre


def tui_reads(timeout_s: float) -> list[reads.Read]:
    """What the live view's first frame waits for (``Monitor._first_answers``): the actors with their detail,
    the running tasks with theirs, the nodes and their summary, as the first poll of each asks."""
    return [reads.actors(timeout_s, True), reads.running_tasks(timeout_s, True), reads.nodes(timeout_s),
            reads.nodes_summary()]


def prefetch_tui(endpoint: Endpoint, timeout_s: float) -> wire.Prefetch:
    """Send the live view's first reads now, before Textual and the engine are imported (~0.4 s); the
    dashboard answers meanwhile, and the first poll takes the answers (``DashboardClient.prefetch``)."""
    return wire.Prefetch(endpoint.address, wire.headers(endpoint.token), tui_reads(timeout_s), timeout_s + 2)
