"""What the images and CI install is what was reviewed (docs/security.md#the-supply-chain): every Python
package from a lock, pinned and hashed, that matches pyproject.toml; the image's base by digest; and
the control plane built from the committed go.sum whatever the caller's go settings say."""

from __future__ import annotations

import ast
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from kubetrain.devcluster import build
from tests.docs_commands import documented

REPO = Path(__file__).resolve().parents[2]
MAKEFILE = (REPO / "Makefile").read_text()


# --- the Python locks -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    name: str
    version: Version
    hashes: int
    via: frozenset[str]


def pins(lock: Path) -> list[Pin]:
    """The entries of a lock written by `uv pip compile --generate-hashes` (annotations split)."""
    found = []
    for block in re.split(r"\n(?=[A-Za-z0-9])", lock.read_text()):
        head = re.match(r"([A-Za-z0-9._-]+)==([^\s;\\]+)", block)
        if head is None:
            continue
        via = re.findall(r"^    #(?: via |   )(.+)$", block, re.M)
        found.append(
            Pin(
                canonicalize_name(head[1]),
                Version(head[2]),
                block.count("--hash=sha256:"),
                frozenset(v.strip() for v in via if v.strip() != "via"),
            )
        )
    return found


@dataclass(frozen=True)
class LockRecipe:
    """One line of `make lock`: the lock it writes and what it is resolved from."""

    lock: str
    extras: tuple[str, ...]
    inputs: tuple[str, ...]  # requirements/*.in files


def lock_recipes() -> list[LockRecipe]:
    recipe = MAKEFILE.split("\nlock:", 1)[1].split("\n\n", 1)[0]
    found = []
    for line in recipe.splitlines()[1:]:
        if "$(LOCK)" not in line:
            continue
        found.append(
            LockRecipe(
                lock=re.search(r"-o (\S+)", line)[1],  # type: ignore[index]
                extras=tuple(re.findall(r"--extra (\S+)", line)),
                inputs=tuple(re.findall(r"(requirements/\S+\.in)\b", line)),
            )
        )
    return found


def wanted(recipe: LockRecipe) -> list[Requirement]:
    """The requirements a lock must satisfy: kubetrain's own and its extras', and its .in files'."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in recipe.extras:
        lines += project["optional-dependencies"][extra]
    for name in recipe.inputs:
        lines += [
            line.strip()
            for line in (REPO / name).read_text().splitlines()
            if line.strip()[:1] not in ("", "#")
        ]
    return [Requirement(line) for line in lines]


def top_level(pin: Pin, recipe: LockRecipe) -> bool:
    sources = {"kubetrain (pyproject.toml)", *(f"-r {name}" for name in recipe.inputs)}
    return bool(pin.via & sources)


def test_make_lock_writes_a_lock_for_every_environment_and_the_image() -> None:
    locks = {r.lock for r in lock_recipes()}
    assert locks == {
        f"requirements/{name}.txt" for name in ("dev", "airflow3", "airflow2", "kfp", "sdk", "image")
    }
    assert all((REPO / lock).exists() for lock in locks)
    for recipe in lock_recipes():
        # The image builds kubetrain with its base's setuptools; every environment with the lock's.
        assert ("requirements/build.in" in recipe.inputs) == (recipe.lock != "requirements/image.txt")


@pytest.mark.parametrize("recipe", lock_recipes(), ids=lambda r: Path(r.lock).stem)
def test_a_lock_is_up_to_date_with_pyproject_and_its_inputs(recipe: LockRecipe) -> None:
    """A requirement added to pyproject.toml or a requirements/*.in file, or one whose range no longer
    holds the pinned version, fails here until `make lock` has been run; so does one removed."""
    locked = pins(REPO / recipe.lock)
    required = wanted(recipe)
    names = {canonicalize_name(r.name) for r in required}
    listed = {p.name for p in locked if top_level(p, recipe)}
    assert listed == names, (
        f"{recipe.lock} is stale (run `make lock`): not locked {sorted(names - listed)}, "
        f"no longer required {sorted(listed - names)}"
    )
    for requirement in required:
        for pin in (p for p in locked if p.name == canonicalize_name(requirement.name)):
            assert requirement.specifier.contains(pin.version, prereleases=True), (
                f"{recipe.lock} pins {pin.name}=={pin.version}, outside {requirement} (run `make lock`)"
            )


@pytest.mark.parametrize("lock", sorted((REPO / "requirements").glob("*.txt")), ids=lambda p: p.stem)
def test_every_package_of_a_lock_is_pinned_with_its_hashes(lock: Path) -> None:
    text = lock.read_text()
    entries = [line for line in text.splitlines() if re.match(r"[A-Za-z0-9]", line)]
    locked = pins(lock)
    assert len(locked) == len(entries) > 0, f"{lock.name}: an entry that is not name==version"
    unhashed = [p.name for p in locked if p.hashes == 0]
    assert not unhashed, f"{lock.name}: no hash for {unhashed}"
    assert "#    make lock" in text, f"{lock.name} was not written by `make lock`"


def test_the_build_inputs_are_what_pyproject_builds_with() -> None:
    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    recipe = next(r for r in lock_recipes() if r.lock == "requirements/dev.txt")
    assert {str(Requirement(r)) for r in requires} <= {str(r) for r in wanted(recipe)}


def test_every_environment_installs_its_lock_with_hashes_and_kubetrain_without_dependencies() -> None:
    define = MAKEFILE.split("define install_locked\n", 1)[1].split("endef", 1)[0]
    sync, editable = define.strip().splitlines()
    assert "pip sync" in sync and "--require-hashes" in sync and "$(2)" in sync
    assert "--no-deps" in editable and "--no-build-isolation" in editable and editable.endswith("-e .")
    environments = {
        "$(VENV)": "dev",
        "$(AIRFLOW3_VENV)": "airflow3",
        "$(AIRFLOW2_VENV)": "airflow2",
        "$(KFP_VENV)": "kfp",
        "$(SDK_VENV)": "sdk",
    }
    for venv, lock in environments.items():
        rule = MAKEFILE.split(f"\n{venv}/.installed:", 1)[1].split("\n\n", 1)[0]
        assert f"requirements/{lock}.txt" in rule.splitlines()[0], (
            f"{venv} is not rebuilt when its lock changes"
        )
        assert f",requirements/{lock}.txt)" in rule and "$(call install_locked," in rule, venv
    # The only other pip install is uv's own, from its lock.
    installs = [line for line in MAKEFILE.splitlines() if "pip install" in line and "define" not in line]
    assert [line for line in installs if "--require-hashes" not in line] == [define.splitlines()[1]]
    uv_version = re.search(r"^UV_VERSION := (\S+)$", MAKEFILE, re.M)[1]  # type: ignore[index]
    assert [(p.name, str(p.version)) for p in pins(REPO / "requirements" / "uv.txt")] == [("uv", uv_version)]


def test_the_airflow_environments_pin_everything_airflow_brings() -> None:
    """Airflow is installed from a constraints file of our own (its lock), not from open ranges: both
    Airflow lines, each with every package it pulls in pinned and hashed."""
    for lock, major in (("airflow3", 3), ("airflow2", 2)):
        locked = {p.name: p for p in pins(REPO / "requirements" / f"{lock}.txt")}
        assert locked["apache-airflow"].version.major == major
        assert "apache-airflow-providers-cncf-kubernetes" in locked
        assert len(locked) > 100, f"{lock}: Airflow's own dependencies are locked too"
    airflow2 = {p.name: p.version for p in pins(REPO / "requirements" / "airflow2.txt")}
    assert airflow2["cryptography"] < Version("51")


def test_the_lock_command_in_the_docs_is_the_makefile_target() -> None:
    assert documented("docs/security.md", "make lock") == "make lock"
    assert re.search(r"^lock: .*## ", MAKEFILE, re.M)


# --- the image --------------------------------------------------------------------------------------

DOCKERFILE = (REPO / "Dockerfile").read_text()


def test_every_base_image_is_pinned_by_digest() -> None:
    stages: set[str] = set()
    froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", DOCKERFILE, re.M | re.I)
    assert froms
    for image, stage in froms:
        if image not in stages:
            assert re.fullmatch(r"[a-z0-9./-]+:[\w.-]+@sha256:[0-9a-f]{64}", image), (
                f"FROM {image}: name the tag and pin its digest (docs/security.md#the-supply-chain)"
            )
        if stage:
            stages.add(stage)


def test_the_image_installs_its_lock_with_hashes_and_kubetrain_without_dependencies() -> None:
    installs = [line for line in DOCKERFILE.splitlines() if "pip install" in line]
    assert len(installs) == 2
    locked, project = installs
    assert "--require-hashes" in locked and "--no-deps" in locked and "-r requirements/image.txt" in locked
    assert "--no-deps" in project and "--no-build-isolation" in project and project.endswith(" .")


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
