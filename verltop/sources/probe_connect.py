"""Joining the Ray cluster from verltop's process: ``ray.init`` in a daemon thread (a GCS that does not answer
must hold neither a dump nor the exit), a one-sentence failure when nothing answers at the GCS address, and
the GCS's view of the nodes. Used by the probes (``probe``, ``probe_runner``); imports ray only when called.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from verltop.convert import one_line
from verltop.sources.config import resolve_token

NAMESPACE = "verltop-probe"

# The dashboard this process watches: with address "auto" and several Ray clusters on this machine, the probes
# join the one whose session logged this dashboard (ray.init would take the newest). One per process, as
# ray.init is.
_DASHBOARD: list[str] = []


def watch_cluster_of(dashboard_url: str) -> None:
    """Say which dashboard's cluster a probe of this process joins when its address is "auto"."""
    _DASHBOARD[:] = [dashboard_url]


def _auto_address() -> str:
    """"auto", or the GCS of the watched dashboard's cluster when this machine runs more than one."""
    if not _DASHBOARD or os.environ.get("RAY_ADDRESS", "").strip().lower() not in ("", "auto"):
        return "auto"
    try:
        from ray._private.services import find_gcs_addresses

        found = find_gcs_addresses()
    except Exception:  # noqa: BLE001 - Ray's own lookup then decides, as before
        return "auto"
    if len(found) < 2:
        return "auto"
    from verltop.sources.ray_session import gcs_port_for_dashboard

    port = gcs_port_for_dashboard(_DASHBOARD[0])
    mine = [a for a in found if port is not None and a.rpartition(":")[2] == str(port)]
    return mine[0] if len(mine) == 1 else "auto"


def in_daemon_thread(fn: Any, *args: Any) -> asyncio.Future:
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

    _set_auth_mode()
    # RAY_ADDRESS may hold the dashboard's URL (verltop reads it there); ray.init wants the GCS
    if address == "auto" and os.environ.get("RAY_ADDRESS", "").lower().startswith(("http://", "https://")):
        del os.environ["RAY_ADDRESS"]
    if address == "auto":
        address = _auto_address()
    _gcs_reachable(address)
    import ray

    # ray.init's warnings (token auth on, no SIGTERM handler off the main thread) are not ours to
    # show: they would land in the middle of the TUI or of `verltop dump` output
    logging.getLogger("ray").setLevel(logging.ERROR)
    if not ray.is_initialized():
        _lean_serialization()
        _fault_handler()
        ray.init(address=address, namespace=NAMESPACE, logging_level="ERROR", log_to_driver=False,
                 configure_logging=False)
        _mute_driver_messages()
    # address="auto" finds the cluster this machine runs; make sure it is the dashboard's cluster
    known = {n["NodeID"] for n in ray.nodes()}
    if not set(node_ids) <= known:
        raise RuntimeError("the Ray cluster on this machine is not the dashboard's cluster")


AUTH_PATH = "/api/authentication_mode"


def cluster_auth_mode(dashboard_url: str, timeout_s: float = 3.0) -> str | None:
    """``"token"`` or ``"disabled"``, as the cluster's dashboard says (``GET /api/authentication_mode``, public
    in Ray 2.60: the mode its head process runs with), or None when it does not say. A dashboard without that
    endpoint (404) is a Ray from before token auth: disabled."""
    import json

    from verltop.sources import wire

    assert wire.allowed(AUTH_PATH)
    status, body, _, err = wire.get(dashboard_url, AUTH_PATH, None, wire.headers(None), timeout_s)
    if err is not None or status is None:
        return None
    if status == 404:
        return "disabled"
    if status != 200 or body is None:
        return None
    try:
        mode = json.loads(body).get("authentication_mode")
    except (ValueError, AttributeError):
        return None
    return mode if mode in ("token", "disabled") else None


def auth_mode_for(env_mode: str | None, cluster_mode: str | None, have_token: bool) -> str | None:
    """The ``RAY_AUTH_MODE`` this process joins with, as Ray 2.60 decides it: what the user set wins; else the
    cluster's own mode; only when the cluster does not say, token auth when a token is at hand (as before).
    None: leave Ray's default."""
    if env_mode is not None:
        return None  # set already: Ray reads it
    if cluster_mode is not None:
        return cluster_mode
    return "token" if have_token else None


def _set_auth_mode() -> None:
    """Say the cluster's auth mode before Ray reads its config. Ray itself turns token auth on for
    address="auto" whenever a token file exists, and never for an explicit address: against a cluster without
    auth the first kills the probes (its workers cannot call back into a driver that wants a token), against one
    with auth the second is refused (its C++ client retrying, printing, for the whole timeout)."""
    import sys

    env = os.environ.get("RAY_AUTH_MODE")
    cluster = cluster_auth_mode(_DASHBOARD[0]) if env is None and _DASHBOARD else None
    mode = auth_mode_for(env, cluster, env is None and cluster is None and resolve_token()[0] is not None)
    _imported()  # ray, when preload() is importing it: never two threads in one package's import
    if mode is None:
        return
    os.environ["RAY_AUTH_MODE"] = mode
    if "ray" in sys.modules:
        try:
            from ray._raylet import Config

            Config.initialize("")
        except (ImportError, AttributeError):
            pass


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


def preload() -> None:
    """Import ray now, in a daemon thread, while the caller does its other start-up work (reads the dashboard):
    most of joining the cluster is ray's import. The auth mode said later still holds (``_set_auth_mode``
    re-reads Ray's config once ray is imported)."""
    def run() -> None:
        try:
            import ray
            import ray.util.scheduling_strategies  # noqa: F401
        except Exception:  # noqa: BLE001 - connect() imports it again and says why
            pass

    t = threading.Thread(target=run, name="verltop-ray-import", daemon=True)
    _PRELOAD.append(t)
    t.start()


_PRELOAD: list[threading.Thread] = []


def _imported() -> None:
    """Wait for ``preload``'s import of ray (a second thread importing the same package could see it half done)."""
    for t in list(_PRELOAD):
        t.join()


def _no_addons(context: Any) -> None:
    return None


def _lean_serialization() -> None:
    """On its first remote call a driver registers Ray's serializers for pydantic models, Starlette state and
    Arrow data, importing pydantic, pyarrow and numpy: a fifth of a second before the first probe can even be
    created. verltop's driver sends plain functions and lists to its probes and gets dicts and strings back,
    none of those kinds, so it skips that registration (its own process only; the probes are untouched)."""
    try:
        from ray.util import serialization_addons
    except ImportError:
        return
    serialization_addons.apply = _no_addons


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


def ray_nodes() -> dict[str, RayNode]:
    """Every node the GCS knows, alive or not, by node id."""
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

