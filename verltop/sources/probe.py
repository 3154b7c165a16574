"""Probe actors: one per node, pinned there, running py-spy locally and returning its JSON, reading the
process trees below given pids there (``procfs.ProcReader``), or running a plain function shipped to them
(``NodeRunner``: ``verltop doctor``).

Used for a remote dump when the dashboard's profiling endpoint is off (Ray ≥ 2.56 default), for the process
trees of other nodes when someone asks for them, and for ``verltop doctor``. This is the one place outside the
demo that imports ray. The actors live in their own namespace, take no CPU, are not detached, and are killed
when the job ends or verltop stops (and die with this driver anyway). What they run must not need verltop on
that node: py-spy's arguments are built here, ``procfs`` and ``node_check`` (stdlib only) are shipped by value.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from verltop.convert import one_line
from verltop.model import Problem, ProcessDump, ProcTree
from verltop.sources import procfs, pyspy
from verltop.sources.config import resolve_token
from verltop.sources.local import tree_from_plain
from verltop.sources.pyspy import DumpOptions

NAMESPACE = "verltop-probe"


def _probe_class() -> Any:
    import ray
    from ray import cloudpickle

    # ProcReader travels with the class, by value: the node may have no verltop to import it from
    cloudpickle.register_pickle_by_value(procfs)
    reader_cls = procfs.ProcReader

    @ray.remote(num_cpus=0, max_concurrency=64)
    class VerltopProbe:
        """Runs py-spy on its node, reads process trees there, and runs a function it is given."""

        def __init__(self) -> None:
            self._reader: Any = None
            self._lock = threading.Lock()

        def tree(self, roots: list[int], extra: list[int]) -> dict[str, Any]:
            """``ProcReader.read`` on this node; the reader is kept, so CPU % covers the time between calls."""
            with self._lock:
                if self._reader is None:
                    self._reader = reader_cls()
                return self._reader.read(roots, extra)

        def dump(self, args: list[str], timeout_s: float) -> tuple[int, str, str, float]:
            """py-spy with ``args`` (built by the caller: verltop need not be installed on this node)."""
            import os
            import shutil
            import subprocess
            import sys

            exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
            if not os.access(exe, os.X_OK):
                return (-2, "", "py-spy not found", 0.0)
            t0 = time.monotonic()
            try:
                p = subprocess.run([exe, *args], capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return (-1, "", f"py-spy did not finish within {timeout_s:g} s (killed)", time.monotonic() - t0)
            return (p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace"),
                    time.monotonic() - t0)

        def descendants(self, pids: list[int], limit: int) -> dict[int, list[tuple[int, int, str]]]:
            """``pid → [(child, its parent, title)]`` on this node, from /proc (as sources/children.py)."""
            import os

            ppid: dict[int, int] = {}
            for n in os.listdir("/proc"):
                if n.isdigit():
                    try:
                        with open(f"/proc/{n}/stat", "rb") as f:
                            rest = f.read().rsplit(b")", 1)[1].split()
                        if rest[0] not in (b"Z", b"X"):
                            ppid[int(n)] = int(rest[1])
                    except (OSError, IndexError, ValueError):
                        pass
            kids: dict[int, list[int]] = {}
            for c, pp in ppid.items():
                kids.setdefault(pp, []).append(c)
            out: dict[int, list[tuple[int, int, str]]] = {}
            for root in pids:
                found: list[tuple[int, int, str]] = []
                todo = sorted(kids.get(root, []))
                while todo and len(found) < limit:
                    c = todo.pop(0)
                    try:
                        with open(f"/proc/{c}/cmdline", "rb") as f:
                            args = [a.decode(errors="replace") for a in f.read(4096).rstrip(b"\0").split(b"\0")]
                    except OSError:
                        continue
                    # as sources/children.py title_of: setproctitle's title, else the command line
                    title = args[0] if len(args) <= 1 or "::" in args[0] else " ".join(args)[:200]
                    found.append((c, ppid[c], title))
                    todo.extend(sorted(kids.get(c, [])))
                out[root] = found
            return out
        def call(self, fn: Any, *args: Any) -> Any:
            """``fn(*args)`` here; ``fn`` is a plain function shipped by value (``NodeRunner``)."""
            return fn(*args)

    return VerltopProbe


def _in_daemon_thread(fn: Any, *args: Any) -> asyncio.Future:
    """``fn(*args)`` in a daemon thread. ray.init to a GCS it cannot reach retries for many minutes: neither
    asyncio.run's executor shutdown (``to_thread``) nor the interpreter's exit may wait for it, or a dump
    that gave up at its timeout would not end."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not fut.done():
            fut.set_result(value) if ok else fut.set_exception(value)

    def run() -> None:
        try:
            ok, value = True, fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the awaiting task
            ok, value = False, e
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name="verltop-probe-init", daemon=True).start()
    return fut


def connect(address: str, node_ids: Iterable[str]) -> None:
    """``ray.init`` (once per process, in namespace ``verltop-probe``) into the cluster that holds ``node_ids``.
    Raises when it cannot, or when the cluster it found is not the one those node ids come from."""
    import logging
    import sys

    # Ray turns token auth on by itself only for address="auto" without RAY_ADDRESS; with an explicit
    # address its GCS refuses us (and its C++ client retries, printing, for the whole timeout). The
    # token verltop found is in the places Ray's loader reads: say that auth is on (before Ray reads
    # its config at import).
    if "RAY_AUTH_MODE" not in os.environ and resolve_token()[0]:
        os.environ["RAY_AUTH_MODE"] = "token"
        if "ray" in sys.modules:
            try:
                from ray._raylet import Config

                Config.initialize("")
            except (ImportError, AttributeError):
                pass
    # RAY_ADDRESS may hold the dashboard's URL (verltop reads it there); ray.init wants the GCS
    if address == "auto" and os.environ.get("RAY_ADDRESS", "").lower().startswith(("http://", "https://")):
        del os.environ["RAY_ADDRESS"]
    _gcs_reachable(address)
    import ray

    # ray.init's warnings (token auth on, no SIGTERM handler off the main thread) are not ours to
    # show: they would land in the middle of the TUI or of `verltop dump` output
    logging.getLogger("ray").setLevel(logging.ERROR)
    if not ray.is_initialized():
        _fault_handler()
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False,
                 configure_logging=False)
        _mute_driver_messages()
    # address="auto" finds the cluster this machine runs; make sure it is the dashboard's cluster
    known = {n["NodeID"] for n in ray.nodes()}
    if not set(node_ids) <= known:
        raise RuntimeError("the Ray cluster on this machine is not the dashboard's cluster")


def _gcs_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Fail at once, in one sentence, when nothing answers at the GCS address ray.init would use; ray.init
    itself would retry for its whole timeout, its C++ client printing to fd 2 meanwhile."""
    import socket

    try:
        from ray._private.services import canonicalize_bootstrap_address

        gcs = canonicalize_bootstrap_address(address)
    except Exception as e:  # noqa: BLE001 - "no running Ray instance" and friends: ray's sentence says it
        raise RuntimeError(one_line(e, 200)) from None
    if not gcs:
        raise RuntimeError("no Ray cluster address (RAY_ADDRESS) and no Ray cluster running on this machine")
    host, _, port = gcs.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as e:
        why = getattr(e, "strerror", None) or str(e) or type(e).__name__
        raise RuntimeError(f"nothing answers at the Ray cluster's GCS address {gcs} ({why})") from None


_DEVNULL: list[Any] = []


def _fault_handler() -> None:
    """ray.init enables faulthandler on ``sys.stderr``; under the TUI that is Textual's capture, which has no
    file descriptor, and ray.init fails. Enable it first, on a descriptor that stays valid."""
    import faulthandler
    import io

    if faulthandler.is_enabled():
        return
    try:
        faulthandler.enable(all_threads=False)
    except (ValueError, RuntimeError, io.UnsupportedOperation, AttributeError):  # RuntimeError: fileno() -1
        if not _DEVNULL:
            _DEVNULL.append(open(os.devnull, "w"))  # noqa: SIM115 - kept open for the process's life
        faulthandler.enable(file=_DEVNULL[0], all_threads=False)


def _mute_driver_messages() -> None:
    """A driver prints the cluster's error messages ("(raylet) The node ... has been marked dead") to this
    process's stdout from a thread of its own, even with ``log_to_driver=False``: into the middle of the TUI or
    of ``--json`` output. verltop reports what matters to it (a node that left) itself, so they are dropped."""
    try:
        import ray._private.worker as w

        w.print_to_stdstream = lambda *args, **kwargs: None
    except (ImportError, AttributeError):
        pass


class ProbePool:
    """Lazily connects to the cluster and starts one probe per node that is asked for."""

    def __init__(self, opts: DumpOptions, address: str = "auto", schedule_timeout_s: float = 15.0) -> None:
        self.opts = opts
        self.address = address
        self.schedule_timeout_s = schedule_timeout_s
        self._actors: dict[str, Any] = {}
        self._failed: dict[str, str] = {}
        self._lock = asyncio.Lock()
        self._init_error: str | None = None
        self._inited = False

    def _init(self, node_id: str) -> None:
        connect(self.address, [node_id])

    async def _actor(self, node_id: str) -> Any:
        async with self._lock:
            if not self._inited:
                self._inited = True
                try:
                    await asyncio.wait_for(_in_daemon_thread(self._init, node_id), self.schedule_timeout_s)
                except asyncio.TimeoutError:
                    self._init_error = "cannot start a probe: connecting to the Ray cluster timed out"
                except Exception as e:  # noqa: BLE001 - ray raises many kinds; all mean "no probe"
                    self._init_error = ("cannot start a probe: ray.init failed "
                                        f"({one_line(e, 160)}); run verltop on the head node")
            if self._init_error:
                raise RuntimeError(self._init_error)
            if node_id in self._failed:
                raise RuntimeError(self._failed[node_id])
            if node_id not in self._actors:
                from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

                cls = _probe_class()
                self._actors[node_id] = cls.options(
                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
                    namespace=NAMESPACE,
                    name=None,
                ).remote()
            return self._actors[node_id]

    async def dump(self, node_id: str, pid: int) -> ProcessDump:
        started = time.time()
        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return ProcessDump(pid, error=Problem("probe", str(e)), taken_at=started)
        import ray

        ref = actor.dump.remote(pyspy.dump_args(pid, self.opts.native, self.opts.nonblocking),
                                self.opts.per_process_timeout)
        try:
            rc, out, err, dt = await asyncio.wait_for(
                asyncio.wrap_future(ref.future()), self.opts.per_process_timeout + self.schedule_timeout_s
            )
        except asyncio.TimeoutError:
            self._failed[node_id] = "probe actor could not be scheduled on that node (no answer)"
            try:  # force=True raises for actor tasks; a queued call is dropped without it
                ray.cancel(ref)
            except Exception:  # noqa: BLE001 - best effort: the probe is killed in close() anyway
                pass
            return ProcessDump(pid, error=Problem("probe", self._failed[node_id]), taken_at=started)
        except Exception as e:  # noqa: BLE001 - actor died, node left: all are "no stack here"
            return ProcessDump(pid, error=Problem("probe", f"probe failed: {one_line(e, 160)}"), taken_at=started)
        if rc == -2:
            return ProcessDump(pid, error=pyspy.no_pyspy_problem(" (on that node)"), taken_at=started)
        if rc == -1:
            return ProcessDump(pid, error=pyspy.timeout_problem(self.opts.per_process_timeout), taken_at=started,
                               duration_s=dt)
        if rc != 0:
            return ProcessDump(pid, error=pyspy.explain_error(err + out, rc), taken_at=started, duration_s=dt)
        threads, perr = pyspy.parse_json(out)
        return ProcessDump(pid, threads=threads, error=Problem("pyspy", perr) if perr else None,
                           native=self.opts.native, taken_at=started, duration_s=dt)

    async def tree(self, node_id: str, roots: list[int], extra: list[int] | None = None) -> ProcTree:
        """The processes below ``roots`` on ``node_id`` (and the loose ones, ``extra``: its GPU holders)."""
        started = time.time()

        def failed(msg: str) -> ProcTree:
            return ProcTree(started, tuple(sorted(roots)), node_id=node_id, error=Problem("probe", msg))

        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return failed(str(e))
        ref = actor.tree.remote(list(roots), list(extra or ()))
        try:
            plain = await asyncio.wait_for(asyncio.wrap_future(ref.future()), self.schedule_timeout_s)
        except asyncio.TimeoutError:
            self._failed[node_id] = "probe actor could not be scheduled on that node (no answer)"
            return failed(self._failed[node_id])
        except Exception as e:  # noqa: BLE001 - actor died, node left, no /proc there: all are "no tree"
            return failed(f"probe failed: {one_line(e, 160)}")
        return tree_from_plain(plain, roots, node_id)

    async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, Problem | None]:
        """``fn(*args)`` on that node through its probe (``fn`` shipped by value): ``(value, None)`` or
        ``(None, why)``."""
        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return None, Problem("probe", str(e))
        _ship_by_value(fn)
        ref = actor.call.remote(fn, *args)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), timeout_s + self.schedule_timeout_s), None
        except Exception as e:  # noqa: BLE001 - timeout, actor died, node left, the function raised
            return None, Problem("probe", f"probe failed: {one_line(e, 160) or e.__class__.__name__}")

    async def descendants(self, node_id: str, pids: list[int], limit: int = 64
                          ) -> dict[int, list[tuple[int, int, str]]] | Problem:
        """The descendant processes of ``pids`` on that node, through its probe."""
        try:
            actor = await self._actor(node_id)
        except RuntimeError as e:
            return Problem("probe", str(e))
        ref = actor.descendants.remote(pids, limit)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(ref.future()), self.schedule_timeout_s)
        except Exception as e:  # noqa: BLE001 - timeout, actor died, node left: no children known there
            return Problem("probe", f"probe failed: {one_line(e, 160)}")

    async def close(self) -> None:
        _kill_all(self._actors)


# ---------------------------------------------------------------- plain functions on every node


@dataclass(frozen=True, slots=True)
class RayNode:
    """What the GCS says of a node (``ray.nodes()``)."""

    node_id: str
    alive: bool
    ip: str | None
    hostname: str | None
    session_dir: str | None
    gpus: float
    death: str | None = None


def _ray_nodes() -> dict[str, RayNode]:
    import ray

    out = {}
    for n in ray.nodes():
        sock = n.get("RayletSocketName") or ""
        # <session dir>/sockets/raylet[.N]: where this node's Ray writes its logs
        session = os.path.dirname(os.path.dirname(sock)) if "/sockets/" in sock else None
        death = n.get("DeathReasonMessage") or n.get("DeathReason") or None
        out[n["NodeID"]] = RayNode(n["NodeID"], bool(n.get("Alive")), n.get("NodeManagerAddress"),
                                   n.get("NodeManagerHostname"), session, float((n.get("Resources") or {}).get("GPU", 0)),
                                   str(death) if death else None)
    return out


def _ship_by_value(fn: Any) -> None:
    """verltop may not be installed on the node: pickle verltop's module of ``fn`` by value, not by name."""
    import sys

    mod = sys.modules.get(getattr(fn, "__module__", "") or "")
    if mod is not None and mod.__name__.startswith("verltop."):
        from ray import cloudpickle

        cloudpickle.register_pickle_by_value(mod)


class NodeRunner:
    """One probe actor per node that runs plain functions there. Each call has its own timeout, and a node
    that leaves the cluster meanwhile fails its calls within about ``watch_s`` (the GCS is asked)."""

    def __init__(self, address: str = "auto", connect_timeout_s: float = 15.0, watch_s: float = 1.0) -> None:
        self.address = address
        self.connect_timeout_s = connect_timeout_s
        self.watch_s = watch_s
        self._cls: Any = None
        self._actors: dict[str, Any] = {}
        self._nodes: dict[str, RayNode] = {}
        self._watch: asyncio.Task | None = None

    async def connect(self, node_ids: Iterable[str]) -> Problem | None:
        """Join the cluster (``ray.init`` in a daemon thread); the problem when that is not possible."""
        ids = list(node_ids)
        remedy = "run verltop on a node of the cluster (the head), or set RAY_ADDRESS to its GCS address (host:6379)"
        try:
            await asyncio.wait_for(_in_daemon_thread(connect, self.address, ids), self.connect_timeout_s)
        except asyncio.TimeoutError:
            return Problem("probe", "cannot start the probes: connecting to the Ray cluster timed out", remedy)
        except ImportError:
            return Problem("probe", "cannot start the probes: ray is not installed in verltop's Python",
                           "pip install ray (the cluster's version) next to verltop")
        except Exception as e:  # noqa: BLE001 - ray raises many kinds; all mean "no probe"
            return Problem("probe", f"cannot start the probes: {one_line(e, 160)}", remedy)
        self._nodes = await asyncio.to_thread(_ray_nodes)
        return None

    @property
    def nodes(self) -> dict[str, RayNode]:
        """The GCS's view of the nodes, refreshed while calls are pending."""
        return self._nodes

    async def _refresh(self) -> None:
        try:
            self._nodes = await asyncio.to_thread(_ray_nodes)
        except Exception:  # noqa: BLE001 - the GCS did not answer this time; calls still time out
            pass

    async def _watcher(self) -> None:
        while True:
            await asyncio.sleep(self.watch_s)
            await self._refresh()

    def _left(self, node_id: str) -> Problem | None:
        n = self._nodes.get(node_id)
        if n is None or n.alive:
            return None
        why = f" ({one_line(n.death, 160)})" if n.death else ""
        return Problem("node_left", f"the node left the cluster during the check{why}",
                       "see `ray status` and the raylet log of that node")

    def _actor(self, node_id: str) -> Any:
        if node_id not in self._actors:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            if self._cls is None:
                self._cls = _probe_class()
            self._actors[node_id] = self._cls.options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False), namespace=NAMESPACE,
            ).remote()
        return self._actors[node_id]

    async def call(self, node_id: str, timeout_s: float, fn: Any, *args: Any) -> tuple[Any, Problem | None]:
        """``fn(*args)`` on the node (its probe is started on first use): ``(value, None)`` or ``(None, why)``."""
        if (left := self._left(node_id)) is not None:
            return None, left
        import ray

        if self._watch is None:
            self._watch = asyncio.create_task(self._watcher(), name="verltop-node-watch")
        _ship_by_value(fn)
        ref = self._actor(node_id).call.remote(fn, *args)
        fut = asyncio.wrap_future(ref.future())
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    return None, Problem("no_answer", f"no answer within {timeout_s:g} s",
                                         "the node may be overloaded or its raylet hung: see `ray status` and "
                                         "the raylet log there")
                done, _ = await asyncio.wait({fut}, timeout=min(left_s, self.watch_s / 2))
                if done:
                    return fut.result(), None
                if (left := self._left(node_id)) is not None:
                    return None, left
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the actor died, the node left, the function raised
            await self._refresh()
            if (left := self._left(node_id)) is not None:
                return None, left
            return None, Problem("probe", f"the probe failed: {one_line(e, 200)}")
        finally:
            if not fut.done():
                fut.cancel()
                try:  # force=True raises for actor tasks; a queued call is dropped without it
                    ray.cancel(ref)
                except Exception:  # noqa: BLE001 - best effort: the probe is killed in close() anyway
                    pass

    async def close(self) -> None:
        """Kill every probe (they are not detached, so they die with this process anyway)."""
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        _kill_all(self._actors)


def _kill_all(actors: dict[str, Any]) -> None:
    """Kill the probes and forget them (ray is imported only when there are some)."""
    if not actors:
        return
    import ray

    for a in actors.values():
        try:
            ray.kill(a)
        except Exception:  # noqa: BLE001 - already gone
            pass
    actors.clear()
