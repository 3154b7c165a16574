"""Where the dashboard is and how to authenticate, resolved once at start."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_ADDRESS = "http://127.0.0.1:8265"


@dataclass(frozen=True, slots=True)
class Endpoint:
    address: str
    address_from: str  # "--address" | "RAY_DASHBOARD_ADDRESS" | "RAY_ADDRESS" | "default" | "local Ray session"
    token: str | None  # never printed, logged or saved
    token_from: str | None  # where it came from (safe to show)

    def __repr__(self) -> str:  # keep the token out of tracebacks and logs
        return f"Endpoint(address={self.address!r}, token={'set' if self.token else 'none'})"


def _http(v: str | None) -> str | None:
    if v and v.strip().lower().startswith(("http://", "https://")):
        return v.strip().rstrip("/")
    return None


def resolve_address(cli: str | None, env: dict[str, str] | None = None) -> tuple[str, str]:
    """``--address``, else ``RAY_DASHBOARD_ADDRESS``, else ``RAY_ADDRESS`` if http(s), else the default."""
    env = os.environ if env is None else env
    if cli:
        a = cli.strip().rstrip("/")
        if "://" not in a:
            a = "http://" + a
        return a, "--address"
    v = env.get("RAY_DASHBOARD_ADDRESS")
    if v:
        a = v.strip().rstrip("/")
        return (a if "://" in a else "http://" + a), "RAY_DASHBOARD_ADDRESS"
    a = _http(env.get("RAY_ADDRESS"))
    if a:
        return a, "RAY_ADDRESS"
    return DEFAULT_ADDRESS, "default"


TOKEN_PLACES = "RAY_AUTH_TOKEN, the file in RAY_AUTH_TOKEN_PATH, or ~/.ray/auth_token"


def resolve_token(env: dict[str, str] | None = None, home: Path | None = None) -> tuple[str | None, str | None]:
    """The Ray auth token from ``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``."""
    env = os.environ if env is None else env
    tok = env.get("RAY_AUTH_TOKEN")
    if tok and tok.strip():
        return tok.strip(), "RAY_AUTH_TOKEN"
    path = env.get("RAY_AUTH_TOKEN_PATH")
    if path:
        try:
            t = Path(path).expanduser().read_text().strip()
            if t:
                return t, "RAY_AUTH_TOKEN_PATH"
        except OSError:
            pass
    p = (home or Path.home()) / ".ray" / "auth_token"
    try:
        t = p.read_text().strip()
        if t:
            return t, "~/.ray/auth_token"
    except OSError:
        pass
    return None, None


def local_session_address(env: dict[str, str] | None = None, answers: Callable[[str], bool] | None = None) -> str | None:
    """The latest local Ray session's dashboard when the default address does not answer, else None.

    Only when nothing names another cluster: a non-http ``RAY_ADDRESS`` (a GCS address) must be that
    session's GCS (``ray start --head`` then ``export RAY_ADDRESS=host:6379``)."""
    from verltop.sources import ray_session  # only when no address was given

    env = os.environ if env is None else env
    named = env.get("RAY_ADDRESS", "").strip()
    if named not in ("", "auto", "local"):
        port = named.rsplit(":", 1)[-1]
        if not (port.isdigit() and int(port) in ray_session.session_gcs_ports(env)):
            return None
    answers = answers or ray_session.answers
    if answers(DEFAULT_ADDRESS):
        return None
    found = ray_session.session_dashboard(env)
    return found if found and found != DEFAULT_ADDRESS and answers(found) else None


def resolve(cli_address: str | None = None) -> Endpoint:
    """The dashboard (flag, variables, the default, else the local Ray session's) and the token."""
    addr, src = resolve_address(cli_address)
    if src == "default":
        found = local_session_address()
        if found:
            addr, src = found, "local Ray session"
    tok, tsrc = resolve_token()
    return Endpoint(address=addr, address_from=src, token=tok, token_from=tsrc)
