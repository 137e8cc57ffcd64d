"""What CI builds is what was reviewed (docs/security.md#the-supply-chain): the control plane from the
committed go.sum, whatever the caller's go settings say."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kubetrain.devcluster import build

REPO = Path(__file__).resolve().parents[2]


# --- the control plane's Go build -----------------------------------------------------------------

# What a user's shell, CI or go env file might hold that would let a module in unchecked, or let
# something other than the committed go.mod/go.sum decide what is built.
HOSTILE = {
    "GOFLAGS": "-mod=mod -modfile=/tmp/other.mod -toolexec=/tmp/wrap -insecure",
    "GOSUMDB": "off",
    "GONOSUMDB": "*",
    "GONOSUMCHECK": "1",
    "GONOVERIFY": "1",
    "GOPRIVATE": "*",
    "GONOPROXY": "*",
    "GOINSECURE": "*",
    "GOVCS": "*:all",
    "GOWORK": "/tmp/go.work",
    "GOTOOLCHAIN": "go1.99.0",
    "GOENV": "/tmp/hostile-go-env",
}
SETTINGS = {
    "GOPROXY": "https://proxy.example.com/go,direct",
    "GOAUTH": "netrc",
    "GOPATH": "/home/dev/go",
    "GOMODCACHE": "/home/dev/go/pkg/mod",
    "GOCACHE": "/home/dev/.cache/go-build",
    "GOSUMDB": "sum.golang.org",
}


def test_no_go_setting_of_the_caller_can_weaken_checksum_verification() -> None:
    env = build.go_build_env({"PATH": "/usr/bin", "HOME": "/home/dev", **HOSTILE}, SETTINGS)
    assert env["GOFLAGS"] == "-mod=readonly -buildvcs=false"
    assert env["GOSUMDB"] == "sum.golang.org"
    assert env["GOENV"] == "off", "the go env file could set them all again"
    assert env["GOWORK"] == "off" and env["GOTOOLCHAIN"] == "local"
    for name in ("GONOSUMDB", "GONOSUMCHECK", "GONOVERIFY", "GOPRIVATE", "GONOPROXY", "GOINSECURE", "GOVCS"):
        assert name not in env, name
    assert env["PATH"] == "/usr/bin" and env["HOME"] == "/home/dev"


def test_where_modules_come_from_and_are_kept_stays_the_callers() -> None:
    env = build.go_build_env({"GOPROXY": "https://ignored.example.com"}, SETTINGS)
    for name in ("GOPROXY", "GOAUTH", "GOPATH", "GOMODCACHE", "GOCACHE"):
        assert env[name] == SETTINGS[name], name  # as `go env` resolved them, go env file included
    assert env["CGO_ENABLED"] == "0"
    assert build.go_build_env({"CGO_ENABLED": "1"}, {})["CGO_ENABLED"] == "1"
    assert "GOPROXY" not in build.go_build_env({}, {}), "no proxy of its own: the toolchain's default"


@pytest.mark.parametrize(
    ("setting", "used"),
    [
        ("sum.golang.org", "sum.golang.org"),
        ("sum.golang.google.cn", "sum.golang.google.cn"),
        (
            "sum.golang.org https://sumdb.mirror.example.com",
            "sum.golang.org https://sumdb.mirror.example.com",
        ),
        ("off", "sum.golang.org"),
        ("", "sum.golang.org"),
        ("sum.example.com+1a2b3c4d+AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=", "sum.golang.org"),
        ("sum.golang.org+1a2b3c4d+AQIDBAUGBwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyA=", "sum.golang.org"),
    ],
)
def test_only_sum_golang_orgs_own_key_checks_the_modules(setting: str, used: str) -> None:
    """A mirror of sum.golang.org serves answers signed with the key the go command has built in, so
    it can withhold them but not forge them; any other database, or another key, is replaced."""
    assert build.go_build_env({}, {"GOSUMDB": setting})["GOSUMDB"] == used


def test_every_go_command_of_the_build_runs_in_the_build_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in HOSTILE.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(build, "_go_settings", lambda go: dict(SETTINGS, GOSUMDB="off"))
    wrapper = next(t for t in build.TARGETS if t.version is None)
    release = next(t for t in build.TARGETS if t.version is not None)
    envs = [
        build._build_argv("go", wrapper, Path("/tmp/out"))[1],
        build._build_argv("go", release, Path("/tmp/out/kueue"))[1],
        build._go_env(),
        build._go_env(goflags="-mod=mod"),
    ]
    for env in envs:
        assert env["GOSUMDB"] == "sum.golang.org" and env["GOENV"] == "off" and env["GOWORK"] == "off"
        assert "GONOSUMDB" not in env and "GOPRIVATE" not in env and "GOINSECURE" not in env
        assert "-modfile" not in env["GOFLAGS"] and "-toolexec" not in env["GOFLAGS"]
    assert envs[0]["GOFLAGS"] == envs[1]["GOFLAGS"] == "-mod=readonly -buildvcs=false"


def test_no_go_command_of_the_build_is_given_another_environment() -> None:
    """Every subprocess of build.py gets its environment from _go_env (go_build_env), except the one
    that reads the caller's settings for it."""
    tree = ast.parse(Path(build.__file__).read_text())
    calls = []
    for function in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for call in (n for n in ast.walk(function) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Attribute) and call.func.attr in ("run", "Popen"):
                env = next((k.value for k in call.keywords if k.arg == "env"), None)
                calls.append((function.name, ast.unparse(env) if env else None))
    assert len(calls) >= 6
    for function, env in calls:
        if function == "_go_settings":
            continue
        assert env is not None and (env.startswith(("_go_env(", "{**_go_env(")) or env == "env"), (
            f"{function} runs go with env={env}"
        )
    assert ("_build_one", "env") in calls  # the env of _build_argv, tested above
