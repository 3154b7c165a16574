"""Soak: the TUI (headless, driven by Pilot) against the real demo job for a long time, with faults.

    python -m scripts.soak                 # 30 minutes (from the repository root)
    python -m scripts.soak --minutes 5     # shorter

This process starts the demo (a local Ray cluster running the verl job, ``verltop.demo.cluster``) and puts
a TCP proxy in front of its dashboard; a child process runs verltop's TUI under Textual's Pilot through
that proxy, presses keys the whole time (moves, sorts, regroups, opens details, dumps every rank now and
then) and every 10 s samples itself: RSS, asyncio tasks, open fds, threads. Faults, on a 5-minute cycle:

- the dashboard killed and started again for real (its own process, same command line and environment);
- the proxy cut (connection refused) and later stalled (connections accepted, never answered);
- actors killed for real: SIGKILL of a worker process (Ray restarts it) and ``ray.kill`` (it stays dead);
- the demo's hang: one rank stops taking part in ``update_actor`` for a minute, then rejoins.

At the end it prints, as Markdown: each figure at start (after a 60 s warm-up), at the end and its max,
whether it grew, and each fault with how long the TUI took to show it and to recover from it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

CYCLE_S = 300.0
# (offset in the cycle, fault, duration or None)
SCHEDULE = [
    (40.0, "kill_worker", None),
    (70.0, "proxy_cut", 25.0),
    (120.0, "ray_kill", None),
    (150.0, "dashboard_restart", None),
    (190.0, "hang", 60.0),
    (260.0, "proxy_stall", 25.0),
]


# ---------------------------------------------------------------------------------------------- proxy


class Proxy:
    """A TCP proxy on 127.0.0.1:<port> to the dashboard: ``pass`` forwards, ``cut`` refuses connections
    (nothing listens), ``stall`` accepts and never answers."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.mode = "pass"
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.StreamWriter] = set()
        threading.Thread(target=self._loop.run_forever, name="soak-proxy", daemon=True).start()
        self._call(self._listen())

    def _call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    async def _listen(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port, reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._conns.add(writer)
        try:
            if self.mode == "stall":
                while await reader.read(65536):
                    pass
                return
            try:
                ur, uw = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            except OSError:
                return
            self._conns.add(uw)

            async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                try:
                    while data := await r.read(65536):
                        w.write(data)
                        await w.drain()
                except (OSError, asyncio.CancelledError):
                    pass
                finally:
                    with contextlib.suppress(Exception):
                        w.close()

            await asyncio.gather(pipe(reader, uw), pipe(ur, writer))
            self._conns.discard(uw)
        finally:
            self._conns.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    async def _drop_all(self) -> None:
        for w in list(self._conns):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._conns.clear()

    async def _cut(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        await self._drop_all()

    def set(self, mode: str) -> None:
        if mode == "cut":
            self._call(self._cut())
        else:
            if self._server is None:
                self._call(self._listen())
            if mode != self.mode:
                self._call(self._drop_all())
        self.mode = mode


# ---------------------------------------------------------------------------------------------- parent


def dashboard_process(port: int) -> Any:
    import psutil

    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(a.endswith("dashboard/dashboard.py") for a in cmd) and f"--port={port}" in cmd:
            return p
    return None


def restart_dashboard(port: int, url: str, token: str | None, started: list[Any]) -> float:
    """Kill the dashboard (and its module processes) and start it again from its own command line and
    environment, as a supervisor would; returns the seconds until it answers again."""
    import psutil

    dash = dashboard_process(port)
    if dash is None:
        raise RuntimeError("no dashboard process found")
    cmd, env, cwd = dash.cmdline(), dash.environ(), dash.cwd()
    procs = [dash, *dash.children(recursive=True)]
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.kill()
    psutil.wait_procs(procs, timeout=10)
    t0 = time.monotonic()
    logs = Path(env.get("TMPDIR", "/tmp")) / "verltop-soak-dashboard.log"
    with open(logs, "ab") as out:
        new = subprocess.Popen(cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                               start_new_session=True)
    started.append(new)
    while time.monotonic() - t0 < 120:
        if dashboard_answers(url, token):
            return time.monotonic() - t0
        time.sleep(0.5)
    raise RuntimeError("the restarted dashboard did not answer within 120 s")


def dashboard_answers(url: str, token: str | None) -> bool:
    req = urllib.request.Request(url + "/api/version")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


class Victims:
    """Actors of this soak (not the demo's): killed for real, replaced by new ones."""

    def __init__(self) -> None:
        import ray

        @ray.remote(num_cpus=0, max_restarts=1)
        class SoakVictim:
            def pid(self) -> int:
                return os.getpid()

        self.cls = SoakVictim
        self.n = 0
        self.live: list[Any] = []
        for _ in range(2):
            self.spawn()

    def spawn(self) -> Any:
        import ray

        a = self.cls.options(name=f"soak_victim_{self.n}").remote()
        self.n += 1
        ray.get(a.pid.remote(), timeout=60)
        self.live.append(a)
        return a

    def kill_worker(self) -> str:
        """SIGKILL the process of one: Ray restarts it (max_restarts=1)."""
        import ray

        a = self.live[0]
        pid = ray.get(a.pid.remote(), timeout=60)
        os.kill(pid, signal.SIGKILL)
        return f"SIGKILL pid {pid} (Ray restarts it)"

    def ray_kill(self) -> str:
        import ray

        a = self.live.pop(0)
        ray.kill(a, no_restart=True)
        self.spawn()
        return "ray.kill (stays DEAD), one new actor started"


def parent(args: argparse.Namespace) -> int:
    from verltop.demo.cluster import start_demo

    print(f"soak: starting the demo (a local Ray cluster and the verl job), {args.minutes:g} min", file=sys.stderr)
    demo = start_demo(hang_after=None)
    restarted: list[subprocess.Popen] = []
    child: subprocess.Popen | None = None
    faults: list[dict[str, Any]] = []
    samples: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    try:
        port = int(demo.address.rsplit(":", 1)[1])
        proxy = Proxy(port)
        victims = Victims()
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
        if demo.token:
            env["RAY_AUTH_TOKEN"] = demo.token
        child = subprocess.Popen(
            [sys.executable, "-m", "scripts.soak", "--child", "--address", f"http://127.0.0.1:{proxy.port}",
             "--minutes", str(args.minutes), "--sample-s", str(args.sample_s)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
        assert child.stdout is not None
        lines: list[str] = []
        threading.Thread(target=lambda: lines.extend(iter(child.stdout.readline, "")), daemon=True).start()
        t0 = time.monotonic()
        end = t0 + args.minutes * 60
        pending = [(t0 + c * CYCLE_S + off, kind, dur) for c in range(int(args.minutes * 60 // CYCLE_S) + 1)
                   for off, kind, dur in SCHEDULE]
        pending = sorted(p for p in pending if p[0] < end - 30)
        undo: list[tuple[float, str]] = []
        while child.poll() is None:
            now = time.monotonic()
            while pending and pending[0][0] <= now:
                _, kind, dur = pending.pop(0)
                rec = {"t": round(now - t0, 1), "fault": kind, "note": ""}
                try:
                    if kind == "kill_worker":
                        rec["note"] = victims.kill_worker()
                    elif kind == "ray_kill":
                        rec["note"] = victims.ray_kill()
                    elif kind == "dashboard_restart":
                        rec["note"] = f"back after {restart_dashboard(port, demo.address, demo.token, restarted):.1f} s"
                    elif kind in ("proxy_cut", "proxy_stall"):
                        proxy.set(kind.split("_")[1])
                        undo.append((now + (dur or 0), "proxy_pass"))
                        rec["note"] = f"for {dur:g} s"
                    elif kind == "hang":
                        demo.request_hang()
                        undo.append((now + (dur or 0), "release"))
                        rec["note"] = f"one rank hangs in update_actor for {dur:g} s"
                except Exception as e:  # noqa: BLE001 - a fault that could not be injected is reported
                    rec["note"] = f"NOT INJECTED: {e}"
                faults.append(rec)
                print(f"soak: {rec['t']:7.1f} s  {kind}: {rec['note']}", file=sys.stderr, flush=True)
            for u in [u for u in undo if u[0] <= now]:
                undo.remove(u)
                if u[1] == "proxy_pass":
                    proxy.set("pass")
                else:
                    demo.release_hang()
                print(f"soak: {now - t0:7.1f} s  {u[1]}", file=sys.stderr, flush=True)
            time.sleep(0.2)
        for ln in lines:
            with contextlib.suppress(ValueError):
                d = json.loads(ln)
                (samples if d.get("kind") == "sample" else events).append(d)
        if child.returncode != 0:
            print(f"soak: the TUI process exited with {child.returncode}", file=sys.stderr)
    finally:
        if child is not None and child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
        import psutil

        for p in restarted:  # the dashboards this soak started are not known to ray.shutdown
            with contextlib.suppress(psutil.Error):
                for q in [psutil.Process(p.pid), *psutil.Process(p.pid).children(recursive=True)]:
                    with contextlib.suppress(psutil.Error):
                        q.kill()
        demo.stop()
    text = report(samples, events, faults, args)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
        with open(Path(args.out).with_suffix(".jsonl"), "w") as f:  # the raw figures, for a closer look
            for d in [*samples, *events, *({"kind": "fault", **x} for x in faults)]:
                f.write(json.dumps(d) + "\n")
    return 0 if child is not None and child.returncode == 0 else 1


def report(samples: list[dict], events: list[dict], faults: list[dict], args: argparse.Namespace) -> str:
    out: list[str] = []
    w = out.append
    if not samples:
        return "no samples from the TUI process"
    warm = [s for s in samples if s["t"] >= args.warmup_s] or samples
    first, last = warm[0], samples[-1]
    rows = [("RSS (MiB)", "rss_mib", 1.10, 16.0), ("asyncio tasks", "tasks", 1.0, 2), ("open fds", "fds", 1.0, 4),
            ("threads", "threads", 1.0, 2)]
    w(f"### verltop soak: {args.minutes:g} min against the demo, {len(faults)} faults injected\n")
    w(f"Samples every {args.sample_s:g} s; start = first sample after a {args.warmup_s:g} s warm-up "
          f"(t = {first['t']:.0f} s), end = last sample (t = {last['t']:.0f} s).\n")
    w("| figure | at start | at end | max | grew? |")
    w("| --- | --- | --- | --- | --- |")
    for label, key, ratio, slack in rows:
        vals = [s[key] for s in warm]
        grew = last[key] > first[key] * ratio + slack
        w(f"| {label} | {first[key]:g} | {last[key]:g} | {max(vals):g} | {'**yes**' if grew else 'no'} |")
    w(f"| snapshots built | {first['built']} | {last['built']} | | |")
    w("\n| t (s) | fault | what | TUI showed it after | TUI clear again after |")
    w("| --- | --- | --- | --- | --- |")
    states = [e for e in events if e["kind"] == "state"]
    for f in faults:
        seen, back = detect(f, events, states)
        w(f"| {f['t']:.0f} | {f['fault']} | {f['note']} | {seen} | {back} |")
    dumps = [e for e in events if e["kind"] == "dump"]
    if dumps:
        each = ", ".join(f"{d['dumped']}/{d['ranks']}" for d in dumps)
        w(f"\nDumps of every rank during the run (D): {len(dumps)}; ranks dumped each time: {each}.")
    return "\n".join(out)


def detect(f: dict, events: list[dict], states: list[dict]) -> tuple[str, str]:
    """When the TUI first showed a fault, and when it showed everything well again."""
    t = f["t"]
    after = [e for e in states if e["t"] >= t - 0.5]
    before = next((e for e in reversed(states) if e["t"] < t - 0.5), {"victims": [], "stalled": 0})
    if f["fault"] in ("proxy_cut", "proxy_stall", "dashboard_restart"):
        shown = next((e for e in events if e["kind"] == "stale" and t - 1 <= e["t"] < t + 120), None)
        if shown is None:
            return "-", "-"
        clear = next((e for e in events if e["kind"] == "fresh" and e["t"] > shown["t"]), None)
        return (f"{shown['t'] - t:.0f} s ({shown['why'][:50]})",
                f"{clear['t'] - t:.0f} s" if clear else "not by the end")
    if f["fault"] == "hang":
        shown = next((e for e in after if e["stalled"] > 0), None)
        clear = next((e for e in after if shown and e["t"] > shown["t"] and e["stalled"] == 0), None)
    else:
        old = {v[0]: v for v in before["victims"]}
        if f["fault"] == "kill_worker":  # restarted by Ray: RESTARTING, or already a new pid
            def hit(e: dict) -> bool:
                return any(v[1] == "RESTARTING" or (v[0] in old and v[2] != old[v[0]][2]) for v in e["victims"])
        else:
            def hit(e: dict) -> bool:
                return any(v[1] == "DEAD" and old.get(v[0], [None, "ALIVE"])[1] != "DEAD" for v in e["victims"])
        shown = next((e for e in after if hit(e)), None)
        clear = next((e for e in after if shown and e["t"] >= shown["t"]
                      and all(v[1] in ("ALIVE", "DEAD") for v in e["victims"])), None)
    if shown is None:
        return "-", "-"
    return f"{shown['t'] - t:.0f} s", (f"{clear['t'] - t:.0f} s" if clear else "not by the end")


# ---------------------------------------------------------------------------------------------- child


def child(args: argparse.Namespace) -> int:
    return asyncio.run(_child(args))


async def _child(args: argparse.Namespace) -> int:
    import psutil

    from verltop.engine.monitor import Intervals
    from verltop.sources.config import resolve
    from verltop.ui.app import VerltopApp
    from verltop.ui.widgets.actor_table import ActorTable

    me = psutil.Process()
    app = VerltopApp.live(resolve(args.address), Intervals(), use_local=True)
    t0 = time.monotonic()
    end = t0 + args.minutes * 60

    def emit(**kw: Any) -> None:
        print(json.dumps({"t": round(time.monotonic() - t0, 1), **kw}), flush=True)

    def main_screen() -> Any:
        return next(s for s in app.screen_stack if type(s).__name__ == "MainScreen")

    def header_problem() -> str | None:
        h = main_screen().query_one("#header")
        if not h.has_class("-stale"):
            return None
        lines = h.text.plain.splitlines()
        return lines[-1] if lines else "stale"

    def job_state() -> dict[str, Any]:
        """What the TUI shows of the job: stalled rows, and this soak's own actors (state, pid)."""
        snap = app.snapshot
        if snap is None:
            return {}
        return {"stalled": sum(1 for a in snap.actors if a.stalled and a.role != "other"),
                "victims": sorted([a.actor_name or "", a.state, a.pid or 0] for a in snap.actors
                                  if (a.actor_name or "").startswith("soak_victim_"))}

    async with app.run_test(headless=True, size=(200, 50)) as pilot:
        next_sample = 0.0
        stale: str | None = None
        last_state: dict[str, Any] = {}
        step = 0
        while time.monotonic() < end:
            now = time.monotonic() - t0
            if now >= next_sample:
                next_sample += args.sample_s
                mem = me.memory_info().rss
                table = main_screen().query_one(ActorTable)
                emit(kind="sample", rss_mib=round(mem / 2**20, 1), tasks=len(asyncio.all_tasks()),
                     fds=me.num_fds(), threads=me.num_threads(), built=app.engine.snapshots_built, rows=table.row_count)
            p = header_problem()
            if (p is None) != (stale is None):
                emit(kind="stale" if p else "fresh", why=p or "")
            stale = p
            js = job_state()
            if js and js != last_state:
                emit(kind="state", **js)
                last_state = js
            step += 1
            if type(app.screen).__name__ == "MainScreen":
                if step % 5 == 0:
                    await pilot.press("j")
                if step % 37 == 0:
                    await pilot.press("s")
                if step % 53 == 0:
                    await pilot.press("g")
                if step % 97 == 0:
                    await pilot.press("enter")  # details and its log tail
                    await pilot.pause(2.0)
                    await pilot.press("escape")
                if step % 900 == 450:  # every ~3 min: dump every rank (py-spy), then back
                    await pilot.press("D")
                    rep = None
                    for _ in range(600):
                        await pilot.pause(0.1)
                        rep = getattr(app.screen, "report", None)
                        if rep is not None:
                            break
                    emit(kind="dump", ranks=len(rep.ranks) if rep else 0,
                         dumped=sum(1 for r in rep.ranks if r.error is None) if rep else 0,
                         suspects=[f"{x.worker_group}:{x.rank}" for x in rep.suspects] if rep else [])
                    await pilot.press("escape")
            await pilot.pause(0.2)
        mem = me.memory_info().rss
        emit(kind="sample", rss_mib=round(mem / 2**20, 1), tasks=len(asyncio.all_tasks()), fds=me.num_fds(),
             threads=me.num_threads(), built=app.engine.snapshots_built,
             rows=main_screen().query_one(ActorTable).row_count)
        await pilot.press("q")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--sample-s", type=float, default=10.0)
    p.add_argument("--warmup-s", type=float, default=60.0)
    p.add_argument("--out", metavar="FILE", help="also write the report (Markdown) to FILE")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--address", help=argparse.SUPPRESS)
    args = p.parse_args()
    return child(args) if args.child else parent(args)


if __name__ == "__main__":
    sys.exit(main())
