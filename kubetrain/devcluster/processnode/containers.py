"""One container run as a host process: its env, its log, its end.

The process runs in a session of its own, so stopping it reaches every
process it started (torchrun's workers included): SIGTERM to the group, SIGKILL
after the grace period, and finally any descendant that escaped the group.

A container outlives a node process that is killed (its session is its own):
when the node starts again, ``stop_leftovers`` ends what the previous one left,
as a node reboot would, before any pod runs again; the processes are known by
the pod uid in their env (``ENV_POD_UID``), which their children inherit.

Output goes to one log file per run of the container, one line per line of
output, each prefixed by its RFC 3339 time and stream, as the kubelet's CRI
logs are; the log endpoint serves them with or without the timestamps.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import errno
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ENV_POD_UID = "KUBETRAIN_POD_UID"  # every container process, and its children, carry their pod's uid
UNKNOWN_EXIT_CODE = 255  # a run whose end the node did not see, as a kubelet reports one after a reboot


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Run:
    """One run of a container: started, and (once it ends) its exit code."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_path: Path
    # What the program is started through (``confine``, ending in ``--``): it replaces itself with it.
    wrapper: list[str] = field(default_factory=list)
    process: asyncio.subprocess.Process | None = None
    started_at: str = ""
    finished_at: str = ""
    exit_code: int | None = None
    signalled: bool = False
    _pumps: list[asyncio.Task[None]] = field(default_factory=list)

    async def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.touch()
        self.process = await asyncio.create_subprocess_exec(
            *self._command(),
            env=self.env,
            cwd=str(self.cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        self.started_at = _now()
        assert self.process.stdout is not None and self.process.stderr is not None
        self._pumps = [
            asyncio.create_task(self._pump(self.process.stdout, "stdout")),
            asyncio.create_task(self._pump(self.process.stderr, "stderr")),
        ]

    def _command(self) -> list[str]:
        """``argv``, behind the wrapper if there is one, which is given the program's path and then
        ``argv`` as written; the program is looked up on the container's ``PATH`` here, so a missing one
        fails to start (``OSError``) as it does without a wrapper."""
        if not self.wrapper:
            return self.argv
        program = self.argv[0]
        if "/" not in program:
            found = shutil.which(program, path=self.env.get("PATH", os.defpath))
            if found is None:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
            program = found
        return [*self.wrapper, program, *self.argv]

    async def _pump(self, stream: asyncio.StreamReader, name: str) -> None:
        with self.log_path.open("a", encoding="utf-8") as log:
            while True:
                try:
                    line = await stream.readline()
                except ValueError:  # a line longer than the stream limit: take what is there
                    line = await stream.read(65536)
                if not line:
                    return
                text = line.decode(errors="replace").rstrip("\n")
                log.write(f"{_now()} {name} {text}\n")
                log.flush()

    async def wait(self) -> int:
        assert self.process is not None
        code = await self.process.wait()
        await asyncio.gather(*self._pumps, return_exceptions=True)
        self.finished_at = _now()
        self.exit_code = 128 - code if code < 0 else code  # a signal, as the kubelet reports it
        return self.exit_code

    async def stop(self, grace: float) -> None:
        """SIGTERM the process group; SIGKILL it and every straggler after ``grace`` seconds."""
        if self.process is None or self.process.returncode is not None:
            return
        self.signalled = True
        pid = self.process.pid
        descendants = _descendants(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(self.process.wait(), max(grace, 0.1))
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        for child in descendants:  # anything that left the process group
            with contextlib.suppress(psutil.Error):
                child.kill()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def stop_leftovers(pods_dir: Path, *, timeout: float = 10.0) -> list[int]:
    """SIGKILL every process of a pod whose files are in ``pods_dir`` (``<pods_dir>/<uid>``) and wait
    for them to go; returns their pids. Called before the node runs anything, so each one was left by
    an earlier run of the node, and would otherwise train beside its pod's new processes. A leftover
    may fork while the processes are read, so they are read again until none is found."""
    uids = {path.name for path in pods_dir.iterdir() if path.is_dir()} if pods_dir.is_dir() else set()
    stopped: list[int] = []
    if not uids:
        return stopped
    for _ in range(5):
        found = [p for p in psutil.process_iter() if _env_of(p).get(ENV_POD_UID) in uids]
        if not found:
            break
        for process in found:
            with contextlib.suppress(psutil.Error):
                process.kill()
        stopped += [process.pid for process in found if process.pid not in stopped]
        _wait_gone(found, timeout)
    return stopped


def _env_of(process: psutil.Process) -> dict[str, str]:
    try:
        return dict(process.environ())
    except psutil.Error:  # gone, a zombie, or not ours to read
        return {}


def _wait_gone(processes: list[psutil.Process], timeout: float) -> None:
    """Wait until each process has exited (a zombie has: its parent, gone too, no longer reaps it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(_running(process) for process in processes):
            return
        time.sleep(0.05)


def _running(process: psutil.Process) -> bool:
    try:
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def container_dir(pod_dir: Path, container: str) -> Path:
    """Where a container's files are: its termination log, and its ``log_dir``."""
    return pod_dir / "containers" / container


def log_dir(pod_dir: Path, container: str) -> Path:
    """Where a container's runs log: ``<restart count>.log`` each."""
    return container_dir(pod_dir, container) / "logs"


def earlier_runs(logs: Path) -> list[Run]:
    """The runs of a container that an earlier run of the node started, known by their log files
    (``<restart count>.log``, oldest first), so that ``kubectl logs`` (``--previous`` too) still
    finds them."""
    files = sorted((int(p.stem), p) for p in logs.glob("*.log") if p.stem.isdigit()) if logs.is_dir() else []
    return [Run(argv=[], env={}, cwd=logs, log_path=path, exit_code=UNKNOWN_EXIT_CODE) for _, path in files]


def read_log(path: Path, *, timestamps: bool = False, tail: int | None = None) -> list[str]:
    """Lines of a container log, as ``kubectl logs`` shows them."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    return [format_line(line, timestamps=timestamps) for line in lines]


def format_line(line: str, *, timestamps: bool) -> str:
    stamp, _, rest = line.partition(" ")
    _, _, text = rest.partition(" ")
    return f"{stamp} {text}" if timestamps else text
