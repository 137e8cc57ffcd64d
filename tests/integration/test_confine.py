"""confine.py on this host, without a cluster: the program it starts sees an empty, read-only state dir
but for what it keeps, cannot undo that, and is the same process with the same argv[0]."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubetrain.devcluster.processnode import confine

CONFINE = [sys.executable, "-I", "-S", confine.__file__]
PROGRAM = r"""
import ctypes, os, sys
state, kept = sys.argv[1], sys.argv[2]
def attempt(what, action):
    try:
        action()
        print(what, "done")
    except OSError as exc:
        print(what, "refused", exc.errno)
attempt("read the key", lambda: open(os.path.join(state, "pki", "ca.key")).read())
attempt("write the state dir", lambda: open(os.path.join(state, "new"), "w").close())
attempt("read through pid 1's root", lambda: open(f"/proc/1/root{state}/pki/ca.key").read())
attempt("write its own dir", lambda: open(os.path.join(kept, "mine"), "w").write("ok"))
print("umount", "done" if ctypes.CDLL(None).umount2(state.encode(), 0) == 0 else "refused")
print("listing", sorted(os.listdir(state)))
print("argv0", sys.argv[0], os.getpid())
"""


@pytest.fixture
def state(tmp_path: Path) -> Path:
    root = tmp_path / "state"
    (root / "pki").mkdir(parents=True)
    (root / "pki" / "ca.key").write_text("secret")
    (root / "process-node" / "pods" / "uid").mkdir(parents=True)
    check = subprocess.run(
        [*CONFINE, "--hide", str(root), "--check"], capture_output=True, text=True, check=False
    )
    if check.returncode != 0:
        pytest.skip(f"this host does not let confine.py hide a directory: {check.stderr.strip()}")
    return root


def test_the_state_dir_is_empty_read_only_and_stays_so_but_for_what_the_pod_keeps(state: Path) -> None:
    kept = state / "process-node" / "pods" / "uid"
    program = [sys.executable, "python", "-c", PROGRAM, str(state), str(kept)]  # its path, then argv
    proc = subprocess.Popen(
        [*CONFINE, "--hide", str(state), "--keep", str(kept), "--", *program],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "read the key refused 2\n" in out, out  # ENOENT: not there at all
    assert "write the state dir refused 30\n" in out, out  # EROFS
    assert "read through pid 1's root refused" in out, out
    assert "write its own dir done\n" in out, out
    assert "umount refused\n" in out, out
    assert "listing ['process-node']\n" in out, out
    assert (kept / "mine").read_text() == "ok"
    assert not (state / "new").exists() and (state / "pki" / "ca.key").read_text() == "secret"
    assert out.splitlines()[-1] == f"argv0 -c {proc.pid}", out  # exec'd in place, argv[0] as written
