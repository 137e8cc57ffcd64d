"""Build the control-plane binaries from Go modules into the cache.

Why a build and not a download: the machines this project runs on reach the Go
module proxy but no release bucket or container registry, so every binary is
compiled from source. ``k8s.io/kubernetes`` cannot be ``go install``-ed (its
``go.mod`` replaces the staging modules with local paths), so each binary is
built from a small wrapper module of our own under ``gomod/`` that pins the
release and points every staging module at its published tag. The wrapper's
``go.mod``/``go.sum`` are committed, so every machine builds the same thing.

Kubernetes v1.36 was chosen: it is the newest release whose scheduler ships
the native gang-scheduling API (``scheduling.k8s.io/v1alpha2`` PodGroup, the
successor of the v1.35 Workload API) and whose client libraries match kwok
v0.8.0, so the dev cluster can schedule gangs for real.

Kueue (``kubetrain dev up --kueue``) is the exception to the wrapper modules: its
``go.mod`` replaces nothing, so it is ``go install``-ed at its release tag, into a
folder named after that release (``kueue-v0.17.0/``) so that a version bump never
runs a stale binary. Its CRDs and webhook manifests are read from the same module
in the Go module cache (``module_source``), never copied into the repository. The S3 server
(versitygw, ``kubetrain dev up --object-store``) is ``go install``-ed the same way.

The go commands run in an environment of the build's own (``go_build_env``): whatever the
caller's environment or go env file says, a module is checked against the committed ``go.sum`` and
the Go checksum database, never updated, replaced or fetched around them
(docs/security.md#the-supply-chain). Only where modules come from (``GOPROXY``) and where they are
kept are the caller's.

A build is idempotent: each binary has a stamp holding a digest of everything
that determines its bytes (module files, package, flags, Go version); a binary
whose stamp matches is left alone and reported as up to date.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from kubetrain.devcluster import paths
from kubetrain.devcluster.errors import DevClusterError

K8S_VERSION = "v1.36.3"
ETCD_VERSION = "v3.6.16"
KWOK_VERSION = "v0.8.0"
KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.17.0"
# The S3 server of `dev up --object-store` (objectstore.py): S3 over a directory, conditional writes included.
VERSITYGW_MODULE = "github.com/versity/versitygw"
VERSITYGW_VERSION = "v1.8.0"
MIN_GO = (1, 26)


def _k8s_ldflags() -> tuple[str, ...]:
    major, minor, _ = K8S_VERSION.lstrip("v").split(".")
    prefix = "k8s.io/component-base/version"
    return (
        f"-X {prefix}.gitVersion={K8S_VERSION}",
        f"-X {prefix}.gitMajor={major}",
        f"-X {prefix}.gitMinor={minor}",
        f"-X {prefix}.gitTreeState=clean",
        f"-X {prefix}.buildDate=1970-01-01T00:00:00Z",
    )


@dataclass(frozen=True)
class GoTarget:
    """One binary: which wrapper module builds it, from which main package; or, with ``version``, which
    release of a module that needs no wrapper is ``go install``-ed (``module`` is then unused)."""

    binary: str
    module: str
    package: str
    ldflags: tuple[str, ...] = ()
    version: str | None = None

    @property
    def path(self) -> Path:
        """Where the binary lives: installed releases in a folder of their own version."""
        folder = paths.bin_dir() / f"{self.binary}-{self.version}" if self.version else paths.bin_dir()
        return folder / self.binary


TARGETS: tuple[GoTarget, ...] = (
    GoTarget("etcd", "etcd", "go.etcd.io/etcd/server/v3"),
    GoTarget("kube-apiserver", "k8s", "k8s.io/kubernetes/cmd/kube-apiserver", _k8s_ldflags()),
    GoTarget("kube-scheduler", "k8s", "k8s.io/kubernetes/cmd/kube-scheduler", _k8s_ldflags()),
    GoTarget(
        "kube-controller-manager", "k8s", "k8s.io/kubernetes/cmd/kube-controller-manager", _k8s_ldflags()
    ),
    GoTarget("kubectl", "k8s", "k8s.io/kubernetes/cmd/kubectl", _k8s_ldflags()),
    GoTarget("kwok", "kwok", "sigs.k8s.io/kwok/cmd/kwok"),
    GoTarget("helm", "helm", "helm.sh/helm/v3/cmd/helm"),  # not part of the cluster: the chart's tests use it
    GoTarget("kueue", "", f"{KUEUE_MODULE}/cmd/kueue", version=KUEUE_VERSION),  # only with `dev up --kueue`
    # only with `dev up --object-store`
    GoTarget("versitygw", "", f"{VERSITYGW_MODULE}/cmd/versitygw", version=VERSITYGW_VERSION),
)

BINARIES = tuple(t.binary for t in TARGETS)


def binary_path(name: str) -> Path:
    """Path of a built binary; raises with the fix when it is missing."""
    path = next(t.path for t in TARGETS if t.binary == name)
    if not os.access(path, os.X_OK):
        raise DevClusterError(f"{name} is not built (looked for {path}); run `kubetrain dev build` first")
    return path


# The go command's settings that decide which bytes of a module a build trusts: whether the checksum
# database is asked (GOSUMDB, GONOSUMDB, GOPRIVATE), whether a module may be fetched around the proxy
# or over plain HTTP (GONOPROXY, GOINSECURE, GOVCS), whether go.mod and go.sum may be updated, swapped
# or bypassed (GOFLAGS=-mod=mod, -modfile, -insecure, -toolexec; a go.work named by GOWORK or found
# above the module), which toolchain runs (GOTOOLCHAIN), and the go env file that can set all of them
# (GOENV). The build sets each itself; a caller's values are ignored. GONOSUMCHECK and GONOVERIFY
# are no setting of today's go command, and are dropped all the same.
GO_ENV_IGNORED = frozenset(
    {
        "GOFLAGS",
        "GOSUMDB",
        "GONOSUMDB",
        "GONOSUMCHECK",
        "GONOVERIFY",
        "GOPRIVATE",
        "GONOPROXY",
        "GOINSECURE",
        "GOVCS",
        "GOWORK",
        "GOTOOLCHAIN",
        "GOENV",
    }
)
# What the build keeps of the caller's go settings (from the environment or the go env file, as
# `go env` resolves them): where modules come from and where they and the build cache are kept.
# The proxy serves bytes that go.sum and the checksum database then check.
GO_ENV_KEPT = ("GOPROXY", "GOAUTH", "GOPATH", "GOMODCACHE", "GOCACHE")
CHECKSUM_DB = "sum.golang.org"
# The names under which the go command knows sum.golang.org's public key (it has it built in); any other
# GOSUMDB (off, another database, or sum.golang.org with a key of the caller's) is replaced.
_CHECKSUM_DB_NAMES = ("sum.golang.org", "sum.golang.google.cn")
BUILD_GOFLAGS = "-mod=readonly -buildvcs=false"


def _is_checksum_db(value: str) -> bool:
    """Whether GOSUMDB names sum.golang.org by its built-in key: the name alone, or with the URL of a
    mirror (which serves signed answers, so it can only withhold them)."""
    words = value.split()
    return 1 <= len(words) <= 2 and words[0] in _CHECKSUM_DB_NAMES


def go_build_env(
    environ: Mapping[str, str], settings: Mapping[str, str], *, goflags: str = BUILD_GOFLAGS
) -> dict[str, str]:
    """The environment of every go command of the build, from the caller's ``environ`` and its go
    ``settings`` as ``go env -json`` resolves them.

    The settings in GO_ENV_IGNORED are the build's own: ``goflags`` (``-mod=readonly``: go.mod and
    go.sum are never updated, so every module is one go.sum names, with its hash), the checksum
    database ``sum.golang.org`` (or the caller's name for it, perhaps with a mirror's URL), no
    workspace, the local toolchain, and no go env file (``GOENV=off``), which could set them all again.
    The caller's proxy, its credentials and the module and build caches are kept (GO_ENV_KEPT); the
    rest of ``environ`` is passed on, with cgo off unless the caller turned it on.
    """
    env = {key: value for key, value in environ.items() if key not in GO_ENV_IGNORED}
    env.update({key: settings[key] for key in GO_ENV_KEPT if settings.get(key)})
    sumdb = settings.get("GOSUMDB", "")
    env.update(
        GOENV="off",
        GOFLAGS=goflags,
        GOSUMDB=sumdb if _is_checksum_db(sumdb) else CHECKSUM_DB,
        GOWORK="off",
        GOTOOLCHAIN="local",
    )
    env.setdefault("CGO_ENABLED", "0")
    return env


@cache
def _go_settings(go: str) -> dict[str, str]:
    """The caller's go settings that go_build_env keeps or checks, as the go command resolves them
    (environment first, then the go env file); read with the local toolchain."""
    done = subprocess.run(
        [go, "env", "-json", *GO_ENV_KEPT, "GOSUMDB"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GOTOOLCHAIN": "local", "GOFLAGS": BUILD_GOFLAGS, "GOWORK": "off"},
    )
    try:
        settings = json.loads(done.stdout) if done.returncode == 0 else {}
    except ValueError:
        settings = {}
    return {str(key): str(value) for key, value in settings.items()}


def _go_env(goflags: str = BUILD_GOFLAGS) -> dict[str, str]:
    go = shutil.which("go") or "go"
    return go_build_env(os.environ, _go_settings(go), goflags=goflags)


def go_executable() -> str:
    """The Go toolchain, checked to be new enough for the wrapper modules."""
    go = shutil.which("go")
    if go is None:
        raise DevClusterError(
            "no Go toolchain on PATH; install Go >= {}.{} (https://go.dev/dl) and retry".format(*MIN_GO)
        )
    out = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=False, env=_go_env()
    ).stdout
    match = re.match(r"go(\d+)\.(\d+)", out.strip())
    if match and (int(match[1]), int(match[2])) < MIN_GO:
        raise DevClusterError(
            f"Go {out.strip()} is too old to build the control plane; install Go >= {MIN_GO[0]}.{MIN_GO[1]}"
        )
    return go


# Upstream releases whose manifests (CRDs, webhooks) tests and benchmarks compare against, read from
# the Go module cache: the same source the Go module proxy serves the binaries from.
UPSTREAM_TRAINING_OPERATOR = ("github.com/kubeflow/training-operator", "v1.8.1")
UPSTREAM_TRAINER = ("github.com/kubeflow/trainer/v2", "v2.0.0")


def module_source(module: str, version: str) -> Path:
    """The source tree of a Go module release, downloaded into the Go module cache (read-only)."""
    go = go_executable()
    done = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        cwd=paths.cache_dir(),
        env=_go_env(goflags="-mod=mod"),
    )
    try:
        info = json.loads(done.stdout)
    except ValueError:
        info = {}
    if done.returncode != 0 or "Dir" not in info:
        raise DevClusterError(
            f"cannot download {module}@{version} from the Go module proxy: "
            f"{info.get('Error') or done.stderr.strip() or done.stdout.strip()}"
        )
    return Path(info["Dir"])


UPSTREAM_OPERATOR_BINARY = "training-operator.v1"


def upstream_operator(console: Console | None = None) -> Path:
    """The upstream Go training operator, ``go install``-ed into the binary cache on first use.

    Only the controller benchmark runs it, side by side with kubetrain's controller; unlike the control
    plane it is a plain Go module, so ``go install module/cmd/...@version`` builds exactly the release.
    """
    module, version = UPSTREAM_TRAINING_OPERATOR
    out = paths.bin_dir() / f"{UPSTREAM_OPERATOR_BINARY}-{version}"  # a new release is a new binary
    if os.access(out, os.X_OK):
        return out
    (console or Console(stderr=True)).print(f"building {module}@{version} (once; several minutes)")
    paths.bin_dir().mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [
            go_executable(),
            "install",
            "-trimpath",
            "-ldflags",
            "-s -w",
            f"{module}/cmd/{UPSTREAM_OPERATOR_BINARY}@{version}",
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=paths.cache_dir(),
        env={**_go_env(goflags="-buildvcs=false"), "GOBIN": str(paths.bin_dir())},
    )
    if done.returncode != 0:
        raise DevClusterError(
            f"building {module}@{version} failed (go install exited {done.returncode}); check the Go "
            f"module proxy is reachable and retry; last output:\n{done.stderr[-3000:]}"
        )
    (paths.bin_dir() / UPSTREAM_OPERATOR_BINARY).replace(out)
    return out


def kueue_source() -> Path:
    """The source tree of the Kueue release the dev cluster runs (its CRDs and webhooks live there)."""
    return module_source(KUEUE_MODULE, KUEUE_VERSION)


def _module_files(module: str) -> dict[str, bytes]:
    if not module:
        return {}
    folder = resources.files("kubetrain.devcluster").joinpath("gomod", module)
    return {name: folder.joinpath(name).read_bytes() for name in ("go.mod", "go.sum", "tools.go")}


def _stamp(target: GoTarget, go_version: str) -> str:
    digest = hashlib.sha256()
    for name, data in sorted(_module_files(target.module).items()):
        digest.update(name.encode() + b"\0" + data)
    release = (f"@{target.version}",) if target.version else ()
    digest.update("\0".join((target.package, *release, *target.ldflags, go_version)).encode())
    return digest.hexdigest()


def _stamp_path(target: GoTarget) -> Path:
    return target.path.parent / f".{target.binary}.stamp"


def is_up_to_date(target: GoTarget, go_version: str) -> bool:
    """Whether the cached binary was built from exactly these inputs."""
    binary = target.path
    stamp = _stamp_path(target)
    return (
        os.access(binary, os.X_OK)
        and stamp.exists()
        and stamp.read_text().strip() == _stamp(target, go_version)
    )


def _prepare_module(module: str) -> Path:
    """Copy a wrapper module out of the package, so a read-only install still builds."""
    workdir = paths.cache_dir() / "build" / module
    workdir.mkdir(parents=True, exist_ok=True)
    for name, data in _module_files(module).items():
        target = workdir / name
        if not target.exists() or target.read_bytes() != data:
            target.write_bytes(data)
    return workdir


def _count_deps(go: str, workdir: Path, package: str) -> int:
    proc = subprocess.run(
        [go, "list", "-deps", package],
        cwd=workdir,
        env=_go_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    return max(1, len(proc.stdout.split())) if proc.returncode == 0 else 1


def _build_argv(go: str, target: GoTarget, tmp: Path) -> tuple[list[str], dict[str, str]]:
    """The command that builds a target into ``tmp`` (a wrapper module's ``go build``, or a release's
    ``go install`` into the folder of ``tmp``, which then holds exactly that binary)."""
    flags = ["-trimpath", "-v", "-ldflags", " ".join(("-s", "-w", *target.ldflags))]
    if target.version is None:
        return [go, "build", *flags, "-o", str(tmp), target.package], _go_env()
    return [go, "install", *flags, f"{target.package}@{target.version}"], {
        **_go_env(),
        "GOBIN": str(tmp.parent),
    }


def _build_one(go: str, target: GoTarget, progress: Progress) -> None:
    workdir = _prepare_module(target.module) if target.module else paths.cache_dir()
    task = progress.add_task(f"{target.binary}: resolving", total=None)
    total = _count_deps(go, workdir, target.package) if target.module else None
    progress.update(task, total=total, description=f"{target.binary}: compiling")
    out = target.path
    out.parent.mkdir(parents=True, exist_ok=True)
    # An installed release lands under its own name, so it is built in a scratch folder beside it.
    tmp = out.parent / ".install" / out.name if target.version else out.with_suffix(".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    argv, env = _build_argv(go, target, tmp)
    tail: deque[str] = deque(maxlen=30)
    with subprocess.Popen(
        argv, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            tail.append(line.rstrip())
            progress.update(task, advance=1, description=f"{target.binary}: {line.strip()[:48]}")
    if proc.returncode != 0:
        progress.update(task, description=f"{target.binary}: failed")
        detail = "\n".join(tail)
        raise DevClusterError(
            f"building {target.binary} failed (go build exited {proc.returncode}); check the Go module proxy "
            f"is reachable and retry `kubetrain dev build`; last output:\n{detail}"
        )
    tmp.replace(out)
    progress.update(task, completed=total or 1, total=total or 1, description=f"{target.binary}: built")


def build(
    *, only: Iterable[str] | None = None, force: bool = False, console: Console | None = None
) -> list[str]:
    """Build every binary that is missing or stale; returns the names built."""
    console = console or Console(stderr=True)
    wanted = set(only) if only else set(BINARIES)
    unknown = wanted - set(BINARIES)
    if unknown:
        raise DevClusterError(f"unknown binary {sorted(unknown)}; choose from {', '.join(BINARIES)}")
    go = go_executable()
    go_version = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True, env=_go_env()
    ).stdout.strip()
    paths.bin_dir().mkdir(parents=True, exist_ok=True)
    targets = [t for t in TARGETS if t.binary in wanted]
    stale = [t for t in targets if force or not is_up_to_date(t, go_version)]
    if not stale:
        console.print(
            f"[green]All {len(targets)} binaries are up to date[/] in {paths.bin_dir()} (nothing to do)"
        )
        return []
    started = time.monotonic()
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description:<62}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        for number, target in enumerate(stale, 1):
            if not console.is_terminal:  # a CI log gets a line per binary instead of a live bar
                console.print(f"building {target.binary} ({number}/{len(stale)}) from {target.package}")
            begun = time.monotonic()
            _build_one(go, target, progress)
            _stamp_path(target).write_text(_stamp(target, go_version) + "\n")
            if not console.is_terminal:
                console.print(f"built {target.binary} in {time.monotonic() - begun:.0f}s")
    console.print(
        f"[green]Built {', '.join(t.binary for t in stale)}[/] into {paths.bin_dir()} "
        f"in {time.monotonic() - started:.0f}s"
    )
    return [t.binary for t in stale]
