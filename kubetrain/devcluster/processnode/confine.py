"""Start a container's program with the cluster's state dir out of its sight.

``python -I -S confine.py --hide DIR [--keep PATH]... -- PROGRAM ARGV0 ARG...``: in a mount namespace of
its own, ``DIR`` (the cluster's state dir: its keys, tokens, kubeconfigs, etcd's data) is covered by
an empty read-only tmpfs, each ``--keep`` path under it (the pod's own directory, its claims'
volumes, the port shim) is put back where it was, and then ``PROGRAM`` (a path) replaces this process
with ``ARGV0 ARG...`` as its arguments (same pid, same environment, same working directory, its
``argv[0]`` as the container wrote it), so the process node supervises it as before.

How, by who runs the node:

* root: a mount namespace, then every capability is taken out of the bounding set before the
  ``exec`` (and ``no_new_privs`` set), so the program, root by uid, cannot mount, unmount, or look
  into another process's root through ``/proc`` (that needs the capabilities it no longer has).
* anyone else: a user namespace mapping only the caller's uid and gid, and a mount namespace owned
  by it; the program, not root in it, has no capabilities after the ``exec``, and the mounts it was
  given are locked for any namespace it makes itself.

It imports nothing but the standard library (it runs with ``-I -S``, before every container start).
Where the kernel refuses the namespaces (user namespaces turned off, a seccomp profile), it exits
with ``CANNOT`` and says why; the process node checks that once when it starts (``--check``) and
then runs pods without it, logging that they can read the state dir (docs/process-node.md).
"""

from __future__ import annotations

import ctypes
import os
import sys

CANNOT = 121  # the exit code when the namespaces cannot be had
CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 0x1, 0x2, 0x4, 0x20
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 38, 47, 4

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: object) -> None:
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}{args}: {os.strerror(err)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call("mount", _bytes(source), target.encode(), _bytes(fstype), ctypes.c_ulong(flags), _bytes(data))


def _bytes(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _prctl(option: int, arg: int = 0) -> None:
    zero = ctypes.c_ulong(0)
    _call("prctl", ctypes.c_int(option), ctypes.c_ulong(arg), zero, zero, zero)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _namespaces() -> None:
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:
        _call("unshare", CLONE_NEWNS)
        return
    _call("unshare", CLONE_NEWUSER | CLONE_NEWNS)
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as out:
            out.write(text)


def _cover(hidden: str, keep: list[str]) -> None:
    """An empty read-only tmpfs over ``hidden``, with the ``keep`` paths under it bound back."""
    kept: list[str] = []
    for path in sorted(keep, key=len):  # a path under one already kept comes with it
        if _within(path, hidden) and not any(_within(path, k) for k in kept) and os.path.exists(path):
            kept.append(path)
    handles = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in kept}
    _mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=64k")
    for path, handle in handles.items():
        if os.path.isdir(f"/proc/self/fd/{handle}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, "w").close()
        _mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC)
        os.close(handle)
    _mount(None, hidden, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)


def _drop_capabilities() -> None:
    """Root keeps its uid but no capability survives the ``exec`` (nor can one be gained again)."""
    last = int(open("/proc/sys/kernel/cap_last_cap").read())  # noqa: SIM115
    for cap in range(last + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)


def confine(hide: list[str], keep: list[str]) -> None:
    """Make this process's view of the file system the confined one (see the module's docstring)."""
    _namespaces()
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing done here reaches the host's view
    for hidden in hide:
        if os.path.isdir(hidden):
            _cover(hidden, keep)
    if os.getuid() == 0:
        _drop_capabilities()
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def _parse(argv: list[str]) -> tuple[list[str], list[str], bool, list[str]]:
    hide: list[str] = []
    keep: list[str] = []
    check = False
    rest = list(argv)
    while rest and rest[0] != "--":
        flag = rest.pop(0)
        if flag == "--check":
            check = True
        elif flag in ("--hide", "--keep") and rest:
            (hide if flag == "--hide" else keep).append(os.path.realpath(rest.pop(0)))
        else:
            raise SystemExit(f"confine: unknown argument {flag!r}")
    return hide, keep, check, rest[1:]


def main(argv: list[str]) -> int:
    hide, keep, check, program = _parse(argv)
    try:
        confine(hide, keep)
    except OSError as exc:
        print(f"confine: cannot hide {', '.join(hide)} from the container: {exc}", file=sys.stderr)
        return CANNOT
    if check:  # what the process node asks once: the state dir reads empty from here
        return 0 if all(not os.listdir(h) for h in hide if os.path.isdir(h)) else CANNOT
    if len(program) < 2:
        raise SystemExit("confine: no program and argv[0] after --")
    try:
        os.execv(program[0], program[1:])  # replaces this process: no return
    except OSError as exc:
        print(f"confine: cannot run {program[0]!r}: {exc}", file=sys.stderr)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
