"""Every package in the tree is in the distribution, under its kubetrain.* name (docs/architecture.md)."""

from __future__ import annotations

import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_in_pyproject() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config["package-dir"]
    listed = set(config["packages"])
    found = set()
    for name, folder in mapping.items():
        root = REPO / folder
        for init in root.rglob("__init__.py"):
            relative = init.parent.relative_to(root)
            found.add(".".join([name, *relative.parts]) if relative.parts else name)
    assert found - listed == set(), "add these to [tool.setuptools] packages"


def test_package_data_files_exist() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    for package, patterns in config["package-data"].items():
        folder = REPO / config["package-dir"].get(package, package.replace(".", "/"))
        for pattern in patterns:
            assert list(folder.glob(pattern)), f"{package}: nothing matches {pattern}"


def shipped_modules() -> set[str]:
    """Every module the distribution holds, as setuptools collects them: the ``.py`` files of each
    listed package's own folder (``package-dir`` maps a name to its folder)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = config["package-dir"]
    found = set()
    for package in config["packages"]:
        home = max((name for name in mapping if package == name or package.startswith(f"{name}.")), key=len)
        folder = REPO / mapping[home] / Path(*package.removeprefix(home).split(".")[1:])
        found.update(f"{package}.{path.stem}" for path in folder.glob("*.py"))
    return found


def test_the_fault_injection_is_test_support_that_the_distribution_does_not_ship() -> None:
    shipped = shipped_modules()
    assert {"kubetrain.devcluster.cluster", "kubetrain.controller.main"} <= shipped  # it reads the tree
    faults = {name for name in shipped if name.rpartition(".")[2] in ("faultproxy", "faultrules")}
    assert not faults, "the fault proxy belongs in tests/faultinjection/"
    assert not any(package.split(".")[0] == "tests" for package in {n.rpartition(".")[0] for n in shipped})
