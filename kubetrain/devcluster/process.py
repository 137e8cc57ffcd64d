"""Start, watch and stop the control-plane processes.

Each component runs in a session (process group) of its own, so stopping it
reaches every child, and outlives the ``kubetrain dev up`` command that started
it. Stopping is by recorded pid, never by name matching: SIGTERM to the group,
then SIGKILL after a grace period (or SIGKILL at once, as a crash would).
``tear_down`` stops what a state dir records, the last started first, and
removes the dir.

A component is ready when its probe says so: an HTTP(S) endpoint that answers
200 (``HealthCheck``), or a command that prints what readiness looks like
(``CommandCheck``: Postgres's ``pg_isready``, a query of Airflow's job table),
for processes that serve no health endpoint of their own. Our own components
(the process node, the provisioner) run their main loop with ``run_until_stopped``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubetrain.devcluster.errors import DevClusterError


class Probe(Protocol):
    """Tells whether a component is ready; ``what`` names the check in error messages."""

    @property
    def what(self) -> str: ...

    def probe(self, timeout: float = 2.0) -> bool: ...


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class HealthCheck:
    """An HTTP(S) endpoint that answers 200 once the component is ready; ``client_cert`` and
    ``client_key``: the certificate presented to a server that takes only known clients (etcd)."""

    url: str
    token: str | None = None
    ca_file: Path | None = None
    insecure: bool = False
    client_cert: Path | None = None
    client_key: Path | None = None

    @property
    def what(self) -> str:
        return self.url

    def probe(self, timeout: float = 2.0) -> bool:
        request = urllib.request.Request(self.url)
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        context: ssl.SSLContext | None = None
        if self.url.startswith("https"):
            context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
            if self.insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            if self.client_cert is not None:
                context.load_cert_chain(self.client_cert, self.client_key)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ssl.SSLError):
            return False


@dataclass(frozen=True)
class CommandCheck:
    """A command that exits 0 and prints ``expect`` once the component is ready."""

    argv: tuple[str, ...]
    expect: str
    env: dict[str, str] = field(default_factory=dict)

    @property
    def what(self) -> str:
        return " ".join(self.argv)

    def probe(self, timeout: float = 2.0) -> bool:
        try:
            done = subprocess.run(
                self.argv,
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
                env={**os.environ, **self.env},
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0 and self.expect in done.stdout


@dataclass
class Component:
    """A control-plane process: how to start it and how to tell it is healthy.

    ``user``: the account it runs as (Postgres refuses to run as root). ``unset_env``: prefixes of
    variables of the caller's environment it must not inherit (settings it takes from its own file)."""

    name: str
    argv: list[str]
    health: Probe
    port: int
    env: dict[str, str] = field(default_factory=dict)
    startup_timeout: float = 60.0
    user: str | None = None
    unset_env: tuple[str, ...] = ()


def environment(env: dict[str, str], unset: tuple[str, ...] = ()) -> dict[str, str]:
    """The caller's environment without the variables ``unset`` starts, with ``env`` on top."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(unset)} if unset else os.environ
    return {**inherited, **env}


def pid_alive(pid: int) -> bool:
    """True when ``pid`` is a running (not zombie) process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def log_tail(path: Path, lines: int = 25) -> str:
    """The last lines of a log file, for error messages."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(content[-lines:])


def start(component: Component, log_path: Path) -> subprocess.Popen[bytes]:
    """Start a component detached from the caller's session, logging to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(
            component.argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=environment(component.env, component.unset_env),
            user=component.user,
            group=component.user,
        )


def wait_healthy(component: Component, proc: subprocess.Popen[bytes], log_path: Path) -> float:
    """Block until the component's health endpoint answers; returns seconds waited."""
    started = time.monotonic()
    deadline = started + component.startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise DevClusterError(
                f"{component.name} exited with code {proc.returncode} during start-up; "
                f"its log ({log_path}) ends with:\n{log_tail(log_path)}"
            )
        if component.health.probe():
            return time.monotonic() - started
        time.sleep(0.2)
    raise DevClusterError(
        f"{component.name} was not healthy ({component.health.what}) after {component.startup_timeout:.0f}s; "
        f"its log ({log_path}) ends with:\n{log_tail(log_path)}"
    )


def stop(pid: int, *, grace: float = 10.0) -> None:
    """SIGTERM the process group of ``pid``, SIGKILL it after ``grace`` seconds."""
    if not pid_alive(pid):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.1)
    kill(pid)


def tear_down(
    root: Path,
    pids: Mapping[str, int],
    *,
    grace: float = 10.0,
    then: Callable[[], object] | None = None,
) -> bool:
    """Stop the processes recorded in ``pids`` (the last started first), call ``then`` (for what they
    may have left running), and remove ``root``; returns whether ``root`` was there."""
    for name in reversed(list(pids)):
        stop(pids[name], grace=grace)
    if then is not None:
        then()
    existed = root.exists()
    shutil.rmtree(root, ignore_errors=True)
    return existed


def kill(pid: int) -> None:
    """SIGKILL the process group of ``pid`` at once, as a crash or the OOM killer would, and wait
    (up to 10 s) until it is gone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for _ in range(100):
        _reap(pid)
        if not pid_alive(pid):
            return
        time.sleep(0.1)


def _reap(pid: int) -> None:
    """Collect the exit status when ``pid`` is our own child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


async def run_until_stopped(work: Coroutine[Any, Any, None]) -> None:
    """A component's main loop: run ``work`` until it ends or SIGTERM or SIGINT arrives, then cancel
    it. An error of ``work`` propagates."""
    task = asyncio.create_task(work)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({task, stopper}, return_when=asyncio.FIRST_COMPLETED)
    for pending in (task, stopper):
        pending.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pending
