"""NCCL RAS: the answers of a real hung 2-rank job (2x H200, NCCL 2.28.9; tests/fixtures/ras/README.md)
parsed, turned into findings, stalls and suspects, and queried over real TCP the way the RAS thread answers."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.analysis.helpers import row
from tests.net import free_port
from tests.ras_server import RasServer, captured
from tests.wait import wait_until_async
from verltop.analysis import ras as RAS
from verltop.analysis.dump import analyse
from verltop.engine import nccl_ras
from verltop.model import Problem, ProcessDump
from verltop.sources import ras
from verltop.sources.pyspy import parse_json
from verltop.text.ras import finding_text, ras_notes
from verltop.text.stalls import stall_reason, stall_tag
from verltop.text.suspects import suspect_reason

FIX = Path(__file__).parents[1] / "fixtures" / "ras"
RUN1, RUN2 = FIX / "run1", FIX / "run2"


def report(name: str, run: Path = RUN1):
    r, err = ras.parse((run / name).read_text())
    assert err is None and r is not None, err
    return r


def kinds(r) -> list[tuple[str, int | None, int | None]]:
    return [(f.kind, f.rank, f.pid) for f in RAS.findings(r)]


# ---------------------------------------------------------------- parsing the real answers


@pytest.mark.parametrize("name", sorted(p.name for p in RUN1.glob("*.out") if "edge_cases" not in p.name)
                         + [f"run2/{p.name}" for p in sorted(RUN2.glob("*.out"))])
def test_every_captured_report_parses(name):
    path = FIX / name if name.startswith("run2/") else RUN1 / name
    r, err = ras.parse(path.read_text())
    assert err is None and r.nccl_version == "2.28.9"


def test_json_of_the_hang_names_the_rank_that_is_behind():
    r = report("default_hang10_status_json.out")
    assert r.source == "json" and len(r.comms) == 2
    default = next(c for c in r.comms if c.hash == "5719f456d36bb3ac")
    assert [(x.rank, x.pid, x.cuda_dev, x.count("AllReduce")) for x in default.ranks] == [(0, 629, 0, 6), (1, 630, 1, 5)]
    (f,) = RAS.findings(r)  # the second communicator (3 AllReduce, 2 Broadcast on both) is healthy
    assert (f.kind, f.rank, f.pid, f.host, f.op, f.count, f.peers_count, f.peers) == \
        ("behind", 1, 630, "192.0.2.2", "AllReduce", 5, 6, (0,))
    assert "rank 1 (pid 630 on 192.0.2.2) issued 5 AllReduce, its peers 6" in finding_text(f)
    assert "never reached all_reduce #6" in finding_text(f)


def test_text_says_the_same_as_json():
    for at in ("hang10", "hang40"):
        assert kinds(report(f"default_{at}_status_text.out")) == kinds(report(f"default_{at}_status_json.out"))
    # NVIDIA's own ncclras (2.28.3) printed the same bytes as this parser's input in run 2
    assert kinds(report("ncclras_hang10_text.stdout", RUN2)) == [("behind", 1, 584)]


def test_healthy_job_has_no_finding():
    assert RAS.findings(report("default_healthy_status_json.out")) == []
    assert RAS.findings(report("default_healthy_status_text.out")) == []


def test_nccl_2_28_9_missing_comma_is_repaired():
    raw = (RUN1 / "default_stopped50_status_json.out").read_text()
    with pytest.raises(ValueError):
        json.loads(raw)  # the bug, as captured
    r = report("default_stopped50_status_json.out")
    assert [(f.kind, f.rank, f.pid) for f in RAS.findings(r)] == [("missing", 1, 630)] * 2
    assert r.comms[0].missing[0].unresponsive is True and r.comms[0].missing[0].considered_dead is False


def test_garbled_text_after_missing_ranks_is_dropped():
    # 2.28.9 prints a bogus "#1-0 (71bb000200000001) INCOMPLETE ... from 257 ranks" after a communicator
    # with missing ranks (fixed in 2.29.2); the real second communicator is only in the JSON
    r = report("default_stopped50_verbose_text.out")
    assert [c.hash for c in r.comms] == ["5719f456d36bb3ac"]
    assert r.missing_processes == ((630, "192.0.2.2"),)
    assert kinds(r) == [("missing", 1, 630)]


def test_dead_rank_is_missing_after_the_watchdog_abort():
    assert kinds(report("default_rank0dead_rank1cont_json.out")) == [("missing", 0, 629)] * 2
    assert kinds(report("default_rank0dead_rank1cont_text.out")) == [("missing", 0, 629)]


def test_not_a_report():
    r, err = ras.parse((RUN1 / "default_healthy_protocol_edge_cases.out").read_text())
    assert r is None and "not an NCCL RAS report" in err


@pytest.mark.parametrize("v,expect", [(None, ("127.0.0.1", 28028)), ("127.0.0.1:28100", ("127.0.0.1", 28100)),
                                      ("28100", ("127.0.0.1", 28100)), ("[::1]:28029", ("::1", 28029)),
                                      ("node7", ("node7", 28028))])
def test_ras_addr(v, expect):
    assert ras.parse_addr(v) == expect


# ---------------------------------------------------------------- a real socket


def test_query_over_tcp_json_and_text():
    reports = {"json": captured("default_hang10_status_json"), "text": captured("default_hang10_status_text")}
    with RasServer(reports) as srv:
        r, problem, dt = asyncio.run(ras.fetch("127.0.0.1", srv.port))
        assert problem is None and r.source == "json" and kinds(r) == [("behind", 1, 630)]
        assert dt < 1.0
    with RasServer(reports, json_ok=False) as old:  # NCCL before 2.28.7 speaks text only
        r, problem, _ = asyncio.run(ras.fetch("127.0.0.1", old.port))
        assert problem is None and r.source == "text" and kinds(r) == [("behind", 1, 630)]


def test_refused_says_how_to_arm_it():
    with RasServer({"json": "{}"}) as srv:
        port = srv.port
    r, problem, _ = asyncio.run(ras.fetch("127.0.0.1", port))
    assert r is None and problem.kind == "ras_unreachable" and "NCCL_RAS_ADDR" in problem.text


def test_a_stopped_listener_on_the_port_is_skipped():
    """Half the connections land on a socket nobody accepts (a SIGSTOPped rank): the client gives that one
    a short first-reply timeout and reconnects until the live rank answers."""
    with RasServer({"json": captured("default_stopped50_status_json"), "text": ""}) as srv:
        srv.freeze_half()
        got = []
        for _ in range(6):
            # the kernel spreads connections over the two listeners by hash: each try lands on the stopped one
            # with odds of a half, so 16 tries fail together once in 65,536 (8 did once in 256)
            body, problem = asyncio.run(ras.query("127.0.0.1", srv.port, first_reply_s=1.0, attempts=16))
            got.append((body is not None, problem))
        assert all(ok for ok, _ in got), got


def test_merged_read_of_two_addresses():
    a = {"json": captured("default_hang10_status_json"), "text": ""}
    b = {"json": (RUN2 / "addr28100_ours_json_port28100.out").read_text(), "text": ""}
    with RasServer(a) as s1, RasServer(b) as s2:
        merged, problems = asyncio.run(nccl_ras.read([("127.0.0.1", s1.port), ("127.0.0.1", s2.port)]))
    assert problems == [] and len(merged.comms) == 4


# ---------------------------------------------------------------- joined to actors: stalls and suspects


def _straggler_ranks():
    """The H200 straggler capture's py-spy stacks on two rows whose pids are the RAS capture's ranks."""
    run = Path(__file__).parents[1] / "fixtures" / "real-gpu-run" / "x2-straggler"
    r0 = replace(row("a0", group="x2s", rank=0, pid=629, gpu=100.0), world_size=2, node_ip="192.0.2.2")
    r1 = replace(row("a1", group="x2s", rank=1, pid=630), world_size=2, node_ip="192.0.2.2")
    samples = {"a0": [ProcessDump(629, threads=parse_json((run / "pyspy_rank0.json").read_text())[0])],
               "a1": [ProcessDump(630, threads=parse_json((run / "pyspy_rank1.json").read_text())[0])]}
    return [r0, r1], samples


def test_dump_suspects_and_notes_include_ras():
    rows, samples = _straggler_ranks()
    ras = report("default_hang10_status_json.out")
    rep = analyse(rows, samples, time.time(), ras=ras, notes=tuple(ras_notes(ras)))  # the notes as a dump adds them
    top = rep.suspects[0]
    assert top.actor_id == "a1" and "NCCL RAS" in suspect_reason(top) and "issued 5 AllReduce, its peers 6" in suspect_reason(top)
    assert not any(s.actor_id == "a0" for s in rep.suspects)  # rank 0 is in the collective: not a suspect
    assert any(n.startswith("NCCL RAS, communicator 5719f456") for n in rep.notes)
    # without RAS the stacks alone still name rank 1; with it, both reasons are on the line
    plain = analyse(rows, samples, time.time())
    assert plain.suspects[0].actor_id == "a1" and suspect_reason(plain.suspects[0]) in suspect_reason(top)


def test_ras_stall_on_the_lagging_rank():
    rows, _ = _straggler_ranks()
    st = RAS.stalls(report("default_hang10_status_json.out"), rows)
    assert list(st) == ["a1"]
    assert stall_tag(st["a1"]) == "RAS: behind in AllReduce"
    assert stall_reason(st["a1"]) == "NCCL RAS: it enqueued 5 AllReduce, its peers 6: it never reached AllReduce #6"
    gone = RAS.stalls(report("default_rank0dead_rank1cont_json.out"), rows)
    assert list(gone) == ["a0"] and stall_tag(gone["a0"]) == "RAS: not answering"


async def test_live_view_marks_the_rank_ras_names():
    """The engine asks RAS while ranks look stalled: the real 2-GPU cluster's dashboard capture (ranks pids
    2120, 2125 on 192.0.2.2, both past --stall-after in update_actor) with RAS answering what the real hung
    job answered (its pids 629/630 mapped onto these ranks): rank 1 carries the RAS stall, first."""
    from tests.replay_server import ReplayDashboard
    from verltop.analysis.stalls import StallSettings
    from verltop.engine import Intervals, Monitor
    from verltop.sources.config import Endpoint

    body = captured("default_hang10_status_json").replace('"pid": 629', '"pid": 2120').replace('"pid": 630', '"pid": 2125')
    now = 1795960279.73 + 60
    with ReplayDashboard() as d, RasServer({"json": body, "text": ""}) as srv:
        mon = Monitor(Endpoint(d.url, "--address", None, None), Intervals.every(0.2), StallSettings(stall_after_s=30),
                      use_local=True, use_nvml=False, clock=lambda: now, ras_addrs=(f"127.0.0.1:{srv.port}",))
        got = []
        mon.subscribe(got.append)
        mon.start()
        try:
            def ras_stall():
                rank1 = [a for s in got[-1:] for a in s.actors if a.rank == 1]
                return rank1 if rank1 and rank1[0].stalls and rank1[0].stalls[0].rule == "ras" else None

            rank1 = await wait_until_async(ras_stall, 30, "rank 1's RAS stall",
                                           detail=lambda: [a.stalls for s in got[-1:] for a in s.actors])
            assert stall_tag(rank1[0].stalls[0]) == "RAS: behind in AllReduce"
            rank0 = next(a for a in got[-1].actors if a.rank == 0)
            assert rank0.stalled and all(st.rule != "ras" for st in rank0.stalls)  # waiting in the collective
            assert srv.queries >= 1
        finally:
            await mon.stop()


def test_snapshot_cli_asks_ras():
    """`verltop snapshot --json --ras-addr …`: the rank RAS names carries the RAS stall in the JSON."""
    import os
    import subprocess
    import sys

    from tests.faults.helpers import clean_env
    from tests.replay_server import ReplayDashboard

    body = captured("default_hang10_status_json").replace('"pid": 629', '"pid": 2120').replace('"pid": 630', '"pid": 2125')
    env = clean_env(HOME=os.environ.get("HOME", "/"))
    with ReplayDashboard() as d, RasServer({"json": body, "text": ""}) as srv:
        p = subprocess.run([sys.executable, "-m", "verltop", "--address", d.url, "snapshot", "--json",
                            "--ras-addr", f"127.0.0.1:{srv.port}", "--cpu-window", "0"],
                           capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stderr
    by_rank = {a["rank"]: a for a in json.loads(p.stdout)["actors"] if a["worker_group"] == "abcd"}
    ras1 = [s for s in by_rank[1]["stalls"] if s["rule"] == "ras"]
    assert ras1 and ras1[0]["state"] == "behind" and ras1[0]["op"] == "AllReduce"
    assert (ras1[0]["count"], ras1[0]["expected"]) == (5, 6) and "NCCL RAS" in by_rank[1]["stall_reason"]
    assert not any(s["rule"] == "ras" for s in by_rank[0]["stalls"])


# ---------------------------------------------------------------- a second run: one GPU visible per rank

RUN3 = FIX / "run3"


@pytest.mark.parametrize("name", sorted(p.name for p in RUN3.glob("*.out")))
def test_run3_answers_parse_as_captured(name):
    """Whole conversations as the RAS port answered them (the handshake's ``SERVER PROTOCOL 2`` first), from
    ranks that each see one GPU: the text names it ``GPU 0 (NVML 1)``."""
    r, err = ras.parse((RUN3 / name).read_text())
    assert err is None and r.nccl_version == "2.28.9" and r.source == ("json" if "_json" in name else "text")


@pytest.mark.parametrize("shape,expect", [
    ("straggler_hang", [("behind", 1, 1835)]),
    ("kill_before", [("behind", 1, 5263)]),
    ("mismatch_hang", [("mismatch", 0, 3625), ("mismatch", 1, 3626)]),
    ("straggler_aborted", [("missing", 0, 1830)]),
])
def test_run3_text_and_json_agree(shape, expect):
    for fmt in ("json", "text"):
        assert kinds(report(f"{shape}_status_{fmt}.out", RUN3)) == expect, fmt


def test_run3_mismatch_names_both_collectives_and_counts():
    # text: one section per op whose counts differ (AllGather: rank 1 launched 1, rank 0 none; AllReduce 5 / 4)
    r = report("mismatch_hang_status_text.out", RUN3)
    (comm,) = r.comms
    assert sorted((x.rank, x.cuda_dev, dict(x.counts)) for x in comm.ranks) == \
        [(0, 0, {"AllGather": 0, "AllReduce": 5}), (1, 0, {"AllGather": 1, "AllReduce": 4})]
    texts = [finding_text(f) for f in RAS.findings(r)]
    assert texts[0].endswith("rank 0 (pid 3625 on 192.0.2.2) issued AllReduce while rank 1 issued AllGather "
                             "instead: different collectives on one communicator")


def test_run3_straggler_behind_names_the_collective_it_never_reached():
    (f,) = RAS.findings(report("straggler_hang_status_json.out", RUN3))
    assert (f.rank, f.pid, f.op, f.count, f.peers_count) == (1, 1835, "AllReduce", 4, 5)
    assert finding_text(f).endswith("issued 4 AllReduce, its peers 5 — it never reached all_reduce #5")


# ---------------------------------------------------------------- RAS on another node (through a probe)

def test_the_probe_side_conversation_against_a_real_listener():
    """``ras_remote.status`` (what a probe runs on another node: stdlib only) speaks the same protocol."""
    from verltop.sources import ras_remote

    body = (RUN3 / "straggler_hang_status_json.out").read_text()
    with RasServer({"json": body[body.index("{"):], "text": "unused"}) as srv:
        got, err = ras_remote.status("127.0.0.1", srv.port, 5.0)
    assert err is None and kinds(ras.parse(got)[0]) == [("behind", 1, 1835)]
    got, err = ras_remote.status("127.0.0.1", free_port(), 1.0)
    assert got is None and err.startswith("no NCCL RAS service at 127.0.0.1:")


def test_remote_nodes_prefer_the_node_with_most_nccl_ranks():
    from verltop.model import Node

    rows = [replace(row(f"a{k}", rank=k, pid=100 + k), node_id=n, gpu_index=None)
            for k, n in enumerate(["here", "n2", "n3", "n3"])]
    rows.append(replace(row("x", group=None, rank=None), node_id="n2"))  # not a rank: never counts
    gpu = (Node("n3", "10.0.0.3", None, gpus=(object(),)),  # type: ignore[arg-type]
           Node("n2", "10.0.0.2", None, gpus=(object(),)))  # type: ignore[arg-type]
    got = nccl_ras.remote_nodes(rows, frozenset({"here"}), gpu)
    assert got == [("n3", [("127.0.0.1", 28028)]), ("n2", [("127.0.0.1", 28028)])]
    assert nccl_ras.remote_nodes(rows, frozenset({"here"}), ()) == []  # no GPU, no NCCL_RAS_ADDR: no RAS


async def test_read_remote_tries_the_next_node_and_says_why():
    calls = []

    async def call(node_id, timeout_s, fn, *args):
        calls.append(node_id)
        if node_id == "n1":
            return None, Problem("probe", "cannot start a probe: ray.init failed")
        body = (RUN3 / "mismatch_hang_status_json.out").read_text()
        return (body, None), None

    rep, probs = await nccl_ras.read_remote(call, [("n1", [("127.0.0.1", 1)]), ("n2", [("127.0.0.1", 2)])])
    assert calls == ["n1", "n2"] and probs == [] and [f.kind for f in RAS.findings(rep)] == ["mismatch"] * 2
    rep, probs = await nccl_ras.read_remote(call, [("n1", [("127.0.0.1", 1)])])
    assert rep is None and probs[0].text.startswith("NCCL RAS on node n1: cannot start a probe")


async def test_read_remote_says_a_probe_failure_shared_by_its_nodes_once():
    """No probe can start anywhere (verltop not on the cluster): one line names both nodes tried."""
    async def call(node_id, timeout_s, fn, *args):
        return None, Problem("probe", "cannot start a probe: ray.init failed")

    rep, probs = await nccl_ras.read_remote(call, [("n1", [("127.0.0.1", 1)]), ("n2", [("127.0.0.1", 2)])])
    assert rep is None and [p.text for p in probs] == ["NCCL RAS on nodes n1, n2: cannot start a probe: ray.init failed"]
