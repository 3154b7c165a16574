"""`verltop dump --samples 1` against its floor and against the by-hand path, side by side in one run.

The floor is the least any tool can do for the same answer, as one fresh process: Python's start and
verltop's import, one GET of the actors, and py-spy of the same pids 8 at a time. The by-hand path is what a
user types: `ray list actors --detail` and then one `py-spy dump --pid` per actor. The three are run in turn,
round after round, so that a busy moment of the machine hits all of them; each figure is a median, and the
CPU time of each (its process and its children: `RUSAGE_CHILDREN`) is reported beside the wall time, since on a
loaded machine wall time measures the other work as much as this.

    python -m scripts.bench_floor --address http://127.0.0.1:8265 [--rounds 9]

`python -m scripts.bench` runs it on the demo's hung cluster (its live rows).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
BIN = Path(PY).parent

# The floor, as one process: what it prints are its own parts (the GET and the py-spy batches), in ms.
FLOOR = r"""
import json, subprocess, sys, time, urllib.request
import verltop.cli  # verltop's import (the command line's entry)
t0 = time.perf_counter()
addr, token, pyspy, *pids = sys.argv[1:]
hdr = {"Authorization": "Bearer " + token} if token else {}
req = urllib.request.Request(addr + "/api/v0/actors?detail=true&limit=10000", headers=hdr)
rows = json.loads(urllib.request.urlopen(req, timeout=10).read())["data"]["result"]["result"]
t1 = time.perf_counter()
for i in range(0, len(pids), 8):
    ps = [subprocess.Popen([pyspy, "dump", "--pid", p], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
          for p in pids[i:i + 8]]
    for p in ps:
        p.communicate()
t2 = time.perf_counter()
print(json.dumps({"get_ms": (t1 - t0) * 1000, "pyspy_ms": (t2 - t1) * 1000, "rows": len(rows)}))
"""


def compiled() -> None:
    """Write verltop's bytecode first: an installed verltop has it, and a checkout whose ``.pyc`` are stale
    or never written (``PYTHONDONTWRITEBYTECODE``) would measure Python's compiler on every start."""
    import compileall

    compileall.compile_dir(ROOT / "verltop", quiet=1)


def env_for(token: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if token:
        env.update(RAY_AUTH_TOKEN=token, RAY_AUTH_MODE="token")  # `ray list` reads the token only in token mode
    return env


def timed(cmds: list[list[str]], env: dict[str, str]) -> tuple[float, float, list[str]]:
    """Wall and CPU seconds (children's user + system) of running ``cmds`` one after the other."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    outs = []
    for cmd in cmds:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd[:6])}… exited {p.returncode}: {p.stderr.strip()[-500:]}")
        outs.append(p.stdout)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime), outs


def measure(address: str, token: str | None, rounds: int) -> dict[str, Any]:
    """Rounds of: verltop's dump, the floor, the by-hand path (interleaved); wall and CPU per round."""
    env = env_for(token)
    vt = [PY, "-m", "verltop", "--address", address, "dump", "--json", "--samples", "1"]
    pyspy = str(BIN / "py-spy")
    # as installed: bytecode written once
    subprocess.run([PY, "-m", "compileall", "-q", str(ROOT / "verltop")], check=True, capture_output=True)
    _, _, (first,) = timed([vt], env)
    pids = [str(r["pid"]) for r in json.loads(first)["ranks"] if r["pid"] and r["error"] is None]
    floor_cmd = [PY, "-c", FLOOR, address, token or "", pyspy, *pids]
    hand = [[str(BIN / "ray"), "list", "actors", "--detail", "--address", address],
            *([pyspy, "dump", "--pid", p] for p in pids)]
    out: dict[str, list[tuple[float, float]]] = {"verltop": [], "floor": [], "hand": []}
    parts: list[dict] = []
    timed(hand, env)  # the page cache warm for every side
    for _ in range(rounds):
        w, c, _ = timed([vt], env)
        out["verltop"].append((w, c))
        w, c, (o,) = timed([floor_cmd], env)
        out["floor"].append((w, c))
        parts.append(json.loads(o.strip().splitlines()[-1]))
        w, c, _ = timed(hand, env)
        out["hand"].append((w, c))
    start = [timed([[PY, "-c", "import verltop.cli"]], env)[0] for _ in range(rounds)]
    return {"pids": len(pids), "runs": out, "get_ms": statistics.median(p["get_ms"] for p in parts),
            "pyspy_ms": statistics.median(p["pyspy_ms"] for p in parts), "start_ms": statistics.median(start) * 1000,
            "load": os.getloadavg()[0]}


def rows(m: dict[str, Any]) -> list[tuple]:
    """The bench's rows: verltop, the floor and the by-hand path, wall (CPU) medians, with the targets."""
    def med(k: str, i: int) -> float:
        return statistics.median(x[i] for x in m["runs"][k])

    v, f, h = med("verltop", 0), med("floor", 0), med("hand", 0)
    vc, fc, hc = med("verltop", 1), med("floor", 1), med("hand", 1)
    n = len(m["runs"]["verltop"])
    return [
        (f"`verltop dump --json --samples 1`, {m['pids']} ranks, median of {n} rounds, wall (CPU)",
         f"{v:.2f} s ({vc:.2f} s); {v / f:.2f}× the floor, {v / h:.2f} of by hand", "≤ 1.5× floor, ≤ 0.25 of hand",
         v <= 1.5 * f and v <= 0.25 * h),
        (f"  the floor: start + `import verltop.cli` ({m['start_ms']:.0f} ms), one GET of the actors "
         f"({m['get_ms']:.0f} ms), py-spy 8 at a time ({m['pyspy_ms']:.0f} ms)", f"{f:.2f} s ({fc:.2f} s)", "-", None),
        (f"  by hand: `ray list actors --detail` + {m['pids']} × `py-spy dump --pid`", f"{h:.2f} s ({hc:.2f} s)",
         "-", None),
    ]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--address", required=True)
    ap.add_argument("--token", default=os.environ.get("RAY_AUTH_TOKEN"))
    ap.add_argument("--rounds", type=int, default=9)
    a = ap.parse_args()
    compiled()
    m = measure(a.address, a.token, a.rounds)
    print(json.dumps(m), file=sys.stderr)
    for r in rows(m):
        print(" | ".join(str(x) for x in r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
