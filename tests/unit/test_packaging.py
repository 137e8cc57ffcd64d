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
