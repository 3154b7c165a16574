"""A child process's title: for a narrow column (the table) and for a rank's label (dumps, chains)."""

from __future__ import annotations

from verltop.analysis.merge import label_title
from verltop.text.processes import narrow_title


def test_narrow_title_drops_the_engine_prefix_and_the_interpreter_flags():
    assert narrow_title("VLLM::Worker_TP1") == "Worker_TP1"
    assert narrow_title("sglang::scheduler_TP0") == "scheduler_TP0"
    assert narrow_title("/usr/bin/python3 -u -m pkg.mod --x") == "python3 -m pkg.mod"
    assert narrow_title("python -c import sys") == "python -c …"
    assert narrow_title("/usr/lib/python3.11/multiprocessing.resource_tracker x") == "resource_tracker"
    assert narrow_title(None) == "?"


def test_label_title_keeps_setproctitle_names_whole():
    assert label_title("VLLM::Worker_TP1") == "VLLM::Worker_TP1"
    assert label_title("/usr/bin/python3 -c import sys; do_a_lot_of_things_here()") == "python3 …"
    assert label_title("python sandbox.py") == "python sandbox.py"
