"""Ray's death causes reduced to the line that says why (real Ray 2.60 texts), secrets redacted."""

from __future__ import annotations

import json
from pathlib import Path

from verltop.sources import parse
from verltop.sources.causes import death_parts, log_cause, redact, telling_line

FIX = Path(__file__).parent.parent / "fixtures" / "pending"


def final_actors() -> dict[str, dict]:
    rows = json.loads((FIX / "failures/final/api_v0_actors.json").read_text())["data"]["result"]["result"]
    return {r["name"]: r for r in rows}


def test_each_real_death_text_reduces_to_its_reason():
    want = {
        "pip_fail_actor": ("runtime_env_failed",
                           "ERROR: No matching distribution found for this-package-does-not-exist-xyz==9.9"),
        "conda_fail_actor": ("runtime_env_failed", "ValueError: Could not find Conda executable at conda."),
        "import_error_actor": ("creation_task_failure",
                               "ModuleNotFoundError: No module named 'this_module_does_not_exist_xyz'"),
        "raise_in_init_restarts_actor": ("creation_task_failure", "ValueError: boom in __init__ (max_restarts=2)"),
        "restart_loop_actor": ("actor_died", "worker process died (SYSTEM_ERROR): Worker unexpectedly exits with a "
                                             "connection error code 2. End of file."),
    }
    rows = final_actors()
    for name, (kind, line) in want.items():
        k, text, _ = death_parts(rows[name]["death_cause"])
        assert (k, telling_line(k, text)) == (kind, line), name
        assert parse.death_cause_text(rows[name]["death_cause"]) == line
    # Ray's preamble is never taken for the reason, and the ANSI colour codes of its repr are gone
    k, text, _ = death_parts(rows["import_error_actor"]["death_cause"])
    assert "\x1b" not in text and "[36m" not in text and text.count("ModuleNotFoundError") == 2


def test_owner_death_and_kill_read_plainly():
    rows = json.loads((FIX / "busy/released/api_v0_actors.json").read_text())["data"]["result"]["result"]
    killed = next(r for r in rows if r["name"] == "job1wgDemoWorker_0:0")
    assert parse.death_cause_text(killed["death_cause"]) == "The actor is dead because it was killed by `ray.kill`."
    owner_gone = {"actor_died_error_context": {
        "error_message": "The actor is dead because its owner has died. Owner Id: 02000000ffff Owner Ip address: "
                         "192.0.2.2 Owner worker exit type: INTENDED_USER_EXIT Worker exit detail: Owner's worker "
                         "process has crashed.", "never_started": True}}
    kind, text, never = death_parts(owner_gone)
    assert never is True and telling_line(kind, text) == ("its owner (the process that created it) died "
                                                          "(INTENDED_USER_EXIT)")


def test_secrets_in_pip_output_are_redacted_in_the_kept_text():
    msg = ("Could not create the actor because its associated runtime env failed to be created.\n"
           "    Looking in indexes: https://alice:s3cr3t-pw@pypi.corp.example/simple\n"
           "    pip install --extra-index-url https://__token__:pypi-AgEIcHlwaS5vcmc@host/x token=abc123\n"
           "    ERROR: No matching distribution found for private-pkg==1.0\n")
    kind, text, _ = death_parts({"runtime_env_failed_context": {"error_message": msg}})
    assert "s3cr3t" not in text and "pypi-AgEI" not in text and "abc123" not in text
    assert "https://***@pypi.corp.example/simple" in text and "token=***" in text
    assert telling_line(kind, text) == "ERROR: No matching distribution found for private-pkg==1.0"
    assert redact("Authorization: Bearer abcdefgh12345678") == "Authorization: Bearer ***"


def test_shell_and_uv_errors_are_reasons_too():
    text = ("Could not create the actor because its associated runtime env failed to be created.\n"
            "Traceback (most recent call last):\n  File \"x.py\", line 1\nRuntimeError: setup failed\n"
            "/bin/sh: 1: conda: command not found\n")
    assert telling_line("runtime_env_failed", text) == "/bin/sh: 1: conda: command not found"
    uv = "...\n  × No solution found when resolving dependencies:\n  ╰─▶ Because nothing-here was not found\n"
    assert telling_line("runtime_env_failed", uv) == "× No solution found when resolving dependencies:"


def test_a_dead_incarnations_stderr_tail():
    assert log_cause(None) is None and log_cause("just some logging\n") is None
    tail = ("INFO worker.py:1 starting\nTraceback (most recent call last):\n  File \"w.py\", line 3, in f\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert log_cause(tail) == "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert log_cause("Fatal Python error: Segmentation fault\n\nThread 0x1 (most recent call first):\n") == \
        "Fatal Python error: Segmentation fault"


def test_actor_rows_keep_the_whole_text_and_the_setup_kinds_only():
    rows, _ = parse.actors(json.loads((FIX / "failures/final/api_v0_actors.json").read_text()))
    by = {a.name: a for a in rows}
    pip = by["pip_fail_actor"]
    assert (pip.death_kind, pip.env_setup) == ("runtime_env_failed", ("pip",))
    assert pip.death_text.startswith("Could not create the actor") and len(pip.death_text) > 2000
    assert by["conda_fail_actor"].env_setup == ("conda",)
    assert "this-package-does-not-exist" not in repr(pip.env)  # runtime-env values are never kept
