#!/usr/bin/env python3
"""Capture verltop and raw views of the one-GPU job of ``device_gpu_job.py`` while it waits.

usage: device_gpu_capture.py OUTDIR

Waits for both ranks' ``hang_rank{r}.json`` markers, then (every step timed, into ``timings.json``):
raw NVML / nvidia-smi / dashboard views; ``python3 -m verltop snapshot --json`` (and text);
``dump --json``, ``dump --json --native``, ``dump`` (text); ``py-spy dump --native`` of rank 0; a Flight
Recorder dump through the debug-info pipe (``verltop.sources.flight_recorder.trigger_and_read``) read back;
``dump --json`` again (now with the Flight Recorder file); the TUI headless (``device_tui_capture.py``);
the dashboard's GPU data again, to see how stale it was.

``VT_WORLD=2`` (the two-GPU run, ``VT_PG_TIMEOUT_S`` the process group's timeout): ``main_x2``, in two phases.
Before the NCCL timeout (from 3 s after both markers): the raw views, ``snapshot --json``, ``dump --json``,
``--native``, text; py-spy of both ranks; the Flight Recorder through the pipe and ``dump --json`` again; the TUI
headless. Then it waits for the watchdog (each rank's error log through the dashboard's log API, as verltop reads
it, and the dump-on-timeout files), and after it: ``dump --json`` (Flight Recorder files and watchdog lines),
``dump --json`` with the Flight Recorder files moved aside (the watchdog log alone), ``dump`` (text),
``snapshot --json``, the state API again, the TUI headless again (``tui_after_*``). Every step is timed against
the hang (``rel_hang`` in ``timings.json``).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request

OUT = os.path.abspath(sys.argv[1])
HERE = os.path.dirname(os.path.abspath(__file__))
BASE = "http://127.0.0.1:8265"
TIMINGS: list[dict] = []
T0 = time.time()


def log(msg: str) -> None:
    print(f"[capture +{time.time() - T0:6.1f}s] {msg}", flush=True)


def write_json(name: str, obj: object) -> None:
    with open(os.path.join(OUT, name), "w") as fh:
        json.dump(obj, fh, indent=1)


def token() -> str:
    p = os.path.expanduser("~/.ray/auth_token")
    return open(p).read().strip() if os.path.exists(p) else ""


def get(path: str, fname: str | None, timeout: float = 30) -> object:
    req = urllib.request.Request(BASE + path)
    if token():
        req.add_header("Authorization", "Bearer " + token())
    t = time.time()
    status, body = None, b""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, body = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, body = e.code, e.read()
    except Exception as e:  # noqa: BLE001
        status, body = f"error {type(e).__name__}", repr(e).encode()
    dt = time.time() - t
    if fname:
        with open(os.path.join(OUT, fname), "wb") as f:
            f.write(body)
    TIMINGS.append({"what": "GET " + path, "file": fname, "status": status, "start": round(t, 3),
                    "seconds": round(dt, 3), "bytes": len(body)})
    try:
        return json.loads(body)
    except Exception:  # noqa: BLE001
        return body.decode(errors="replace")


def run(name: str, args: list[str], timeout: float = 120, env: dict | None = None) -> dict:
    """Run a command, stdout → ``name``, stderr → ``name.stderr``; time it."""
    t = time.time()
    m = time.monotonic()
    rc: object
    try:
        p = subprocess.run(args, capture_output=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = "timeout", e.stdout or b"", e.stderr or b""
    except OSError as e:
        rc, out, err = f"error {e}", b"", b""
    dt = time.monotonic() - m
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(out)
    if err:
        with open(os.path.join(OUT, name + ".stderr"), "wb") as f:
            f.write(err)
    rec = {"what": " ".join(args), "file": name, "rc": rc, "start": round(t, 3), "seconds": round(dt, 3),
           "bytes": len(out)}
    TIMINGS.append(rec)
    log(f"{name}: rc={rc} {dt:.2f}s {len(out)} bytes")
    return rec


def nvml(pids: dict[str, int], n: int = 3, tag: str = "") -> list[dict]:
    """NVML as verltop reads it, raw: device util/memory, per-process memory and SM util; psutil CPU."""
    out = []
    try:
        import psutil
        import pynvml
    except ImportError as e:
        return [{"error": repr(e)}]
    try:
        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001
        return [{"error": repr(e)}]
    procs = {k: psutil.Process(p) for k, p in pids.items() if p and psutil.pid_exists(p)}
    for p in procs.values():
        p.cpu_percent(None)
    last = int(time.time() * 1e6) - 2_000_000
    for i in range(n):
        time.sleep(1.0)
        s: dict = {"t": time.time(), "tag": tag, "gpus": [], "cpu_percent": {}}
        for k, p in procs.items():
            try:
                s["cpu_percent"][k] = p.cpu_percent(None)
                s.setdefault("proc_status", {})[k] = p.status()
            except Exception as e:  # noqa: BLE001
                s["cpu_percent"][k] = repr(e)
        for gi in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(gi)
            u = pynvml.nvmlDeviceGetUtilizationRates(h)
            m = pynvml.nvmlDeviceGetMemoryInfo(h)
            g = {"index": gi, "util_gpu": u.gpu, "util_mem": u.memory, "mem_used": m.used, "mem_total": m.total,
                 "compute_procs": [], "proc_util": []}
            try:
                g["power_mw"] = pynvml.nvmlDeviceGetPowerUsage(h)
                g["sm_clock_mhz"] = pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            except Exception:  # noqa: BLE001
                pass
            for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                g["compute_procs"].append({"pid": p.pid, "usedGpuMemory": p.usedGpuMemory})
            try:
                for su in pynvml.nvmlDeviceGetProcessUtilization(h, last):
                    g["proc_util"].append({"pid": su.pid, "smUtil": su.smUtil, "memUtil": su.memUtil,
                                           "timeStamp": su.timeStamp})
            except Exception as e:  # noqa: BLE001
                g["proc_util_error"] = repr(e)
            s["gpus"].append(g)
        last = int(time.time() * 1e6)
        out.append(s)
        del i
    pynvml.nvmlShutdown()
    return out


def dashboard_gpus(tag: str, save: bool = True) -> dict:
    """The dashboard's per-GPU view and how old it is (its ``now`` against the wall clock)."""
    t = time.time()
    d = get("/nodes?view=summary", f"nodes_view_summary.{tag}.json" if save else None)
    rec: dict = {"tag": tag, "asked_at": t}
    try:
        s = d["data"]["summary"][0]  # type: ignore[index]
        rec.update({"payload_now": s["now"], "age_s": round(t - s["now"], 2), "gpus": s["gpus"]})
    except Exception as e:  # noqa: BLE001
        rec["error"] = repr(e)
    return rec


def stale_series(seconds: float, every: float = 2.0) -> list[dict]:
    """The dashboard's GPU view every ``every`` s next to NVML's device util and per-process memory."""
    out = []
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
    except Exception as e:  # noqa: BLE001
        return [{"error": repr(e)}]
    end = time.time() + seconds
    while time.time() < end:
        rec = dashboard_gpus("series", save=False)
        rec["nvml"] = {"t": time.time(), "util_gpu": pynvml.nvmlDeviceGetUtilizationRates(h).gpu,
                       "procs": [(p.pid, p.usedGpuMemory) for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)]}
        out.append(rec)
        time.sleep(every)
    pynvml.nvmlShutdown()
    return out


async def fr_trigger() -> dict:
    """What the TUI's ``f`` does, timed: ask each local rank for a dump through its pipe and read it."""
    from verltop.engine.monitor import Monitor
    from verltop.sources.config import resolve
    from verltop.sources.flight_recorder import dump_path, read_local, trigger_and_read

    col = Monitor(resolve(None), use_local=True)
    await col.poll_once(seed=True)
    snap = col.snapshot()
    local = col.local_node_ids()
    await col.stop()
    ranks = [a for a in snap.actors if a.node_id in local and a.role != "controller"]
    rec: dict = {"ranks": [{"name": a.actor_name, "rank": a.rank, "fr_dump_prefix": a.fr_dump_prefix,
                            "fr_pipe_prefix": a.fr_pipe_prefix, "dump_path": dump_path(a)} for a in ranks]}
    before = {a.actor_name: _stat(dump_path(a)) for a in ranks}
    rec["before"] = before
    _, _, mt0 = read_local(ranks)
    t = time.time()
    m = time.monotonic()
    infos, notes = await trigger_and_read(ranks)
    rec["seconds"] = round(time.monotonic() - m, 3)
    rec["started"] = t
    rec["infos"] = {k: v.to_json() for k, v in infos.items()}
    rec["notes"] = notes
    rec["after"] = {a.actor_name: _stat(dump_path(a)) for a in ranks}
    _, _, mt1 = read_local(ranks)
    rec["fresh"] = {k: v >= t for k, v in mt1.items()}
    rec["mtimes_before"] = mt0
    rec["mtimes_after"] = mt1
    return rec


def _stat(p: str | None) -> dict | None:
    if not p or not os.path.exists(p):
        return None
    st = os.stat(p)
    return {"path": p, "size": st.st_size, "mtime": st.st_mtime}


def copy_fr(tag: str) -> None:
    os.makedirs(os.path.join(OUT, "fr"), exist_ok=True)
    for d in ("/tmp",):
        for f in sorted(os.listdir(d)):
            if f.startswith(("fr_rank_", "fr_inproc_")) and os.path.isfile(os.path.join(d, f)):
                shutil.copy2(os.path.join(d, f), os.path.join(OUT, "fr", f"{f}.{tag}"))
    ls = subprocess.run("ls -la --time-style=full-iso /tmp/fr_* 2>&1", shell=True, capture_output=True, text=True)
    with open(os.path.join(OUT, "fr", f"ls.{tag}.txt"), "w") as fh:
        fh.write(ls.stdout)


def main() -> None:
    os.makedirs(OUT, exist_ok=True)
    meta: dict = {"capture_start": T0}
    hang: dict = {}
    while time.time() < T0 + 240 and len(hang) < 2:
        for r in range(2):
            f = os.path.join(OUT, f"hang_rank{r}.json")
            if r not in hang and os.path.exists(f):
                try:
                    with open(f) as fh:
                        hang[r] = json.load(fh)
                except ValueError:
                    pass
        time.sleep(0.5)
    meta["hang"] = hang
    if len(hang) < 2:
        log(f"hang markers missing: {sorted(hang)}")
        write_json("capture_meta.json", meta)
        return
    t_hang = max(v["t"] for v in hang.values())
    meta["t_hang"] = t_hang
    time.sleep(max(0.0, t_hang + 8 - time.time()))
    pids = {"rank0": hang[0]["pid"], "rank1": hang[1]["pid"]}
    acts = get("/api/v0/actors?detail=1&limit=1000", "api_v0_actors.json")
    try:
        for a in acts["data"]["result"]["result"]:  # type: ignore[index]
            if a.get("name") == "TaskRunner":
                pids["TaskRunner"] = a["pid"]
    except Exception as e:  # noqa: BLE001
        log(f"actors: {e!r}")
    meta["pids"] = pids
    get("/api/v0/tasks?detail=1&limit=1000", "api_v0_tasks.json")
    nodes = get("/api/v0/nodes?detail=1", "api_v0_nodes.json")
    node_id = hang[0].get("node_id")
    try:
        node_id = nodes["data"]["result"]["result"][0]["node_id"]  # type: ignore[index]
    except Exception:  # noqa: BLE001
        pass
    stale = [dashboard_gpus("t08")]
    meta["nvml_first"] = nvml(pids, 3, "before verltop")
    run("nvidia-smi.txt", ["nvidia-smi"])
    run("nvidia-smi-compute-apps.csv", ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv"])
    run("nvidia-smi-gpu.csv", ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used,memory.total,power.draw,"
                               "clocks.sm", "--format=csv"])
    py = sys.executable
    # verltop itself
    run("verltop_snapshot.json", [py, "-m", "verltop", "snapshot", "--json"])
    run("verltop_snapshot.txt", [py, "-m", "verltop", "snapshot"])
    run("verltop_dump.json", [py, "-m", "verltop", "dump", "--json"])
    run("verltop_dump_native.json", [py, "-m", "verltop", "dump", "--json", "--native"])
    run("verltop_dump.txt", [py, "-m", "verltop", "dump"])
    stale.append(dashboard_gpus("after_dumps"))
    # raw py-spy of rank 0, to compare with what verltop said
    pyspy = shutil.which("py-spy") or "py-spy"
    for who in ("rank0", "rank1"):
        run(f"pyspy_{who}.native.txt", [pyspy, "dump", "--native", "--pid", str(pids[who])], timeout=60)
        run(f"pyspy_{who}.json", [pyspy, "dump", "--json", "--pid", str(pids[who])], timeout=60)
    if node_id:
        get(f"/worker/traceback?pid={pids['rank0']}&node_id={node_id}&native=1", "worker_traceback_rank0_native1.txt",
            timeout=60)
        get(f"/nodes/{node_id}", "nodes_NODE_ID.json")
    # Flight Recorder through the debug-info pipe, as the TUI's `f` does
    copy_fr("before_trigger")
    try:
        meta["fr_trigger"] = asyncio.run(fr_trigger())
    except Exception as e:  # noqa: BLE001
        meta["fr_trigger"] = {"error": repr(e)}
    log(f"fr trigger: {json.dumps(meta['fr_trigger'])[:600]}")
    copy_fr("after_trigger")
    run("verltop_dump_after_fr.json", [py, "-m", "verltop", "dump", "--json"])
    # the TUI, headless (main screen, stack screen, stack screen after `f`)
    run("tui_capture.log", [py, os.path.join(HERE, "device_tui_capture.py"), OUT], timeout=150)
    copy_fr("after_tui_f")
    run("verltop_snapshot_end.json", [py, "-m", "verltop", "snapshot", "--json"])
    # the stall rules on a pegged GPU: the task has run past --stall-after by now
    run("verltop_snapshot_stall20.json", [py, "-m", "verltop", "snapshot", "--json", "--stall-after", "20"])
    meta["dashboard_gpu_series"] = stale_series(float(os.environ.get("VT_SERIES_S", "0")))
    stale.append(dashboard_gpus("end"))
    meta["nvml_end"] = nvml(pids, 2, "end")
    meta["dashboard_gpu_views"] = stale
    meta["t_end_rel_hang"] = round(time.time() - t_hang, 2)
    write_json("capture_meta.json", meta)
    write_json("timings.json", TIMINGS)
    log("capture done")


def log_tails(ranks: dict[int, str], tag: str | None = None) -> dict[int, dict]:
    """Each rank's error log tail through the dashboard's log API (what verltop reads) and its watchdog facts."""
    from verltop.sources.watchdog import parse_watchdog

    out: dict[int, dict] = {}
    for r, aid in ranks.items():
        fname = f"log_tail_rank{r}.{tag}.err.txt" if tag else None
        body = get(f"/api/v0/logs/file?actor_id={aid}&lines=400&suffix=err", fname)
        info = parse_watchdog(body if isinstance(body, str) else json.dumps(body))
        out[r] = {"t": time.time(), "watchdog": info.to_json() if info else None}
    return out


def main_x2(timeout_s: float) -> None:
    """The world-size-2 run: what verltop says before the NCCL timeout, then after the watchdog fired."""
    os.makedirs(OUT, exist_ok=True)
    meta: dict = {"capture_start": T0, "pg_timeout_s": timeout_s}
    hang: dict = {}
    while time.time() < T0 + 150 and len(hang) < 2:
        for r in range(2):
            f = os.path.join(OUT, f"hang_rank{r}.json")
            if r not in hang and os.path.exists(f):
                try:
                    with open(f) as fh:
                        hang[r] = json.load(fh)
                except ValueError:
                    pass
        if len(hang) < 2 and os.path.exists(os.path.join(OUT, "driver_error.txt")):
            break  # the job failed before it hung: nothing to capture
        time.sleep(0.5)
    meta["hang"] = hang
    if len(hang) < 2:
        log(f"hang markers missing: {sorted(hang)}")
        write_json("capture_meta.json", meta)
        return
    t_hang = max(v["t"] for v in hang.values())
    meta["t_hang"] = t_hang
    t_timeout = t_hang + timeout_s

    def rel() -> float:
        return round(time.time() - t_hang, 2)

    def step(name: str, args: list[str], timeout: float = 120, latest_rel: float | None = None) -> None:
        if latest_rel is not None and rel() > latest_rel:
            log(f"{name}: skipped at hang+{rel()} s (> {latest_rel} s: the NCCL timeout is near)")
            meta.setdefault("skipped", []).append(name)
            return
        rec = run(name, args, timeout)
        rec["rel_hang"] = round(rec["start"] - t_hang, 2)

    time.sleep(max(0.0, t_hang + 3 - time.time()))
    pids = {"rank0": hang[0]["pid"], "rank1": hang[1]["pid"]}
    actor_ids = {r: hang[r]["actor_id"] for r in (0, 1)}
    acts = get("/api/v0/actors?detail=1&limit=1000", "api_v0_actors.json")
    try:
        for a in acts["data"]["result"]["result"]:  # type: ignore[index]
            if a.get("name") == "TaskRunner":
                pids["TaskRunner"] = a["pid"]
    except Exception as e:  # noqa: BLE001
        log(f"actors: {e!r}")
    meta["pids"] = pids
    meta["actor_ids"] = actor_ids
    get("/api/v0/tasks?detail=1&limit=1000", "api_v0_tasks.json")
    nodes = get("/api/v0/nodes?detail=1", "api_v0_nodes.json")
    node_id = hang[0].get("node_id")
    try:
        node_id = nodes["data"]["result"]["result"][0]["node_id"]  # type: ignore[index]
    except Exception:  # noqa: BLE001
        pass
    meta["node_id"] = node_id
    stale = [dashboard_gpus("t03")]
    meta["nvml_first"] = nvml(pids, 3, "before verltop")
    run("nvidia-smi.txt", ["nvidia-smi"])
    run("nvidia-smi-compute-apps.csv", ["nvidia-smi", "--query-compute-apps=pid,used_memory,gpu_bus_id",
                                        "--format=csv"])
    run("nvidia-smi-gpu.csv", ["nvidia-smi", "--query-gpu=index,pci.bus_id,utilization.gpu,memory.used,"
                               "memory.total,power.draw,clocks.sm", "--format=csv"])
    py = sys.executable
    late = timeout_s - 6  # nothing of the "before" phase may start later than this
    step("verltop_snapshot.json", [py, "-m", "verltop", "snapshot", "--json"], latest_rel=late)
    step("verltop_dump.json", [py, "-m", "verltop", "dump", "--json"], latest_rel=late)
    step("verltop_dump_native.json", [py, "-m", "verltop", "dump", "--json", "--native"], latest_rel=late - 6)
    step("verltop_dump.txt", [py, "-m", "verltop", "dump"], latest_rel=late)
    pyspy = shutil.which("py-spy") or "py-spy"
    for who in ("rank0", "rank1"):
        step(f"pyspy_{who}.native.txt", [pyspy, "dump", "--native", "--pid", str(pids[who])], 30, late - 3)
        step(f"pyspy_{who}.json", [pyspy, "dump", "--json", "--pid", str(pids[who])], 30, late)
    meta["logs_before"] = log_tails(actor_ids, "before")
    copy_fr("before_trigger")
    if rel() < late - 3:
        try:
            meta["fr_trigger"] = asyncio.run(fr_trigger())
            meta["fr_trigger"]["rel_hang"] = round(meta["fr_trigger"]["started"] - t_hang, 2)
        except Exception as e:  # noqa: BLE001
            meta["fr_trigger"] = {"error": repr(e)}
        log(f"fr trigger: {json.dumps(meta['fr_trigger'])[:600]}")
        copy_fr("after_trigger")
        step("verltop_dump_after_fr.json", [py, "-m", "verltop", "dump", "--json"], latest_rel=late)
    step("tui_capture.log", [py, os.path.join(HERE, "device_tui_capture.py"), OUT], 60, latest_rel=late - 16)
    stale.append(dashboard_gpus("before_timeout"))
    meta["before_done_rel_hang"] = rel()
    log(f"before-timeout phase done at hang+{rel()} s (timeout at +{timeout_s:g} s)")

    # ---- the NCCL timeout: wait for both ranks' watchdog lines (through the dashboard) and dump files
    def fr_mtimes() -> dict[int, float | None]:
        out = {}
        for r in (0, 1):
            p = f"/tmp/fr_rank_{r}"
            out[r] = os.stat(p).st_mtime if os.path.exists(p) else None
        return out

    time.sleep(max(0.0, t_timeout - time.time()))
    seen: dict[str, float] = {}
    deadline = t_timeout + float(os.environ.get("VT_AFTER_WAIT_S", "30"))
    while time.time() < deadline:
        tails = log_tails(actor_ids)
        for r, v in tails.items():
            w = v["watchdog"]
            if w and w.get("last_enqueued") is not None:
                seen.setdefault(f"log_rank{r}", round(v["t"] - t_hang, 2))
        for r, m in fr_mtimes().items():
            if m and m > t_timeout:
                seen.setdefault(f"fr_rank{r}", round(m - t_hang, 2))
        if len(seen) == 4:
            break
        time.sleep(1.0)
    meta["after_seen_rel_hang"] = seen  # when each rank's watchdog facts / dump-on-timeout file appeared
    log(f"after the timeout: {seen}")
    time.sleep(1.0)
    meta["logs_after"] = log_tails(actor_ids, "after")
    copy_fr("after_timeout")
    step("verltop_dump_after_timeout.json", [py, "-m", "verltop", "dump", "--json"])
    # the watchdog log alone: move the dump files aside for one dump, then put them back
    moved = []
    for r in (0, 1):
        p = f"/tmp/fr_rank_{r}"
        if os.path.exists(p):
            os.rename(p, p + ".aside")
            moved.append(p)
    step("verltop_dump_after_timeout_logs.json", [py, "-m", "verltop", "dump", "--json"])
    for p in moved:
        os.rename(p + ".aside", p)
    meta["fr_moved_aside"] = moved
    step("verltop_dump_after_timeout.txt", [py, "-m", "verltop", "dump"])
    step("verltop_snapshot_after_timeout.json", [py, "-m", "verltop", "snapshot", "--json"])
    get("/api/v0/actors?detail=1&limit=1000", "api_v0_actors.after_timeout.json")
    get("/api/v0/tasks?detail=1&limit=1000", "api_v0_tasks.after_timeout.json")
    meta["nvml_after"] = nvml(pids, 2, "after timeout")
    step("tui_after_capture.log", [py, os.path.join(HERE, "device_tui_capture.py"), OUT, "200", "40", "tui_after"],
         60)
    copy_fr("end")
    stale.append(dashboard_gpus("end"))
    meta["dashboard_gpu_views"] = stale
    meta["alive_end"] = {k: bool(p) and os.path.exists(f"/proc/{p}") for k, p in pids.items()}
    meta["t_end_rel_hang"] = rel()
    write_json("capture_meta.json", meta)
    write_json("timings.json", TIMINGS)
    log("capture done")


if __name__ == "__main__":
    if os.environ.get("VT_WORLD", "1") == "2":
        main_x2(float(os.environ.get("VT_PG_TIMEOUT_S", "45")))
    else:
        main()
