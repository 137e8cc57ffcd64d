"""The layers of the code base, enforced: each import points down, one library has one home.

From the top: the applications (the controller, the Airflow provider, the KFP components, the
``kubetrain`` CLI, the dev cluster) over the TrainJob resolution (``kubetrain.trainjob``), over the job
client (``kubetrain.client``), over the API models (``kubetrain.api``), over the Kubernetes runtime
(``kubetrain.kube``), over the leaf modules (``naming``, ``quantity``, ``checkpoint``, ``progress``) that
import no other layer. Applications do not import each other; only the ``kubetrain`` entry point gathers
them. ``kubernetes_asyncio`` is used by the runtime and the client only, ``prometheus_client`` by the
controller only.

Within and across packages, no modules import each other in a circle: a circle is a strongly
connected part of the module import graph, counting every import (in a function or under
``TYPE_CHECKING`` too), since a circle ties its modules into one unit that can only be read,
tested and changed as a whole.

Imports are read from the source (``ast``), so the check sees exactly what is written, also in
modules no test imports. ``KNOWN`` and ``KNOWN_CIRCLES`` list the exceptions that remain, each with
why; a test fails when a new one appears and when a listed one is gone (so the lists only shrink).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# Import name -> folder (the controller, provider and components live in top-level folders).
FOLDERS = {
    "kubetrain.controller": "controller",
    "kubetrain.operators": "operators",
    "kubetrain.components": "components",
    "kubetrain": "kubetrain",
}
LEAVES = (
    "kubetrain.naming",
    "kubetrain.quantity",
    "kubetrain.checkpoint",
    "kubetrain.checkpoint_objects",
    "kubetrain.checkpoint_sharded",
    "kubetrain.checkpoint_async",
    "kubetrain.locations",
    "kubetrain.progress",
    "kubetrain.tabular",
    "kubetrain.layouts",
    "kubetrain.integrations",
)
APPS = (
    "kubetrain.controller",
    "kubetrain.operators",
    "kubetrain.components",
    "kubetrain.devcluster",
    "kubetrain.jobs_cli",
    "kubetrain.cli",
    "kubetrain.__main__",
)
RANKS = {
    **dict.fromkeys(LEAVES, 0),
    "kubetrain.kube": 1,
    "kubetrain.api": 2,
    "kubetrain.client": 3,
    "kubetrain.trainjob": 4,
}
ENTRY_POINTS = ("kubetrain.cli", "kubetrain.__main__")
LIBRARY_HOMES = {
    "kubernetes_asyncio": ("kubetrain.kube", "kubetrain.client"),
    "prometheus_client": ("kubetrain.controller",),
}
KNOWN = {
    # The CLI reports the client's API errors in the API server's words.
    ("kubetrain.jobs_cli", "kubernetes_asyncio"),
    # The provider's shared watch and its runtime lookups talk to the API directly.
    ("kubetrain.operators.operators", "kubernetes_asyncio"),
    ("kubetrain.operators.triggers", "kubernetes_asyncio"),
}

KNOWN_CIRCLES = {
    # The checkpoint manager hands sharded, background and object-store saves to the modules that
    # build on its Checkpoint (imported in the functions that need them, so torch.distributed and
    # fsspec load only then).
    frozenset(
        {
            "kubetrain.checkpoint",
            "kubetrain.checkpoint_async",
            "kubetrain.checkpoint_objects",
            "kubetrain.checkpoint_sharded",
        }
    ),
}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, folder in FOLDERS.items():
        for path in (REPO / folder).rglob("*.py"):
            parts = list(path.relative_to(REPO / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            found.setdefault(name, path)  # kubetrain/ holds no controller/ operators/ components/ folders
    return found


def group(name: str) -> str:
    """The layer unit a module belongs to: its application, layer package or leaf module."""
    for unit in (*APPS, *RANKS):
        if name == unit or name.startswith(unit + "."):
            return unit
    return name


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def imported_modules(path: Path, known: Iterable[str]) -> set[str]:
    """The modules among ``known`` that ``path`` imports, each import naming the most specific one:
    ``from a.b import c`` imports the module ``a.b.c`` if there is one, else ``a.b``. A package's
    ``__init__`` that runs first is no edge of its own (every submodule would be in a circle with a
    package that imports it)."""
    names = set(known)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.name
                while name and name not in names:
                    name = name.rpartition(".")[0]
                if name:
                    found.add(name)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                member = f"{node.module}.{alias.name}"
                if member in names:
                    found.add(member)
                elif node.module in names:
                    found.add(node.module)
    return found


def reachable(graph: Mapping[str, set[str]], start: str) -> set[str]:
    """Every module that ``start`` imports, directly or through others (itself only in a circle)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for imported in graph.get(todo.pop(), set()) - seen:
            seen.add(imported)
            todo.append(imported)
    return seen


def circles(graph: Mapping[str, set[str]]) -> set[frozenset[str]]:
    """The circles of an import graph: each module that reaches itself, with every module it reaches
    that reaches it back (a strongly connected part of the graph)."""
    reach = {name: reachable(graph, name) for name in graph}
    return {
        frozenset(other for other in reach[name] if name in reach[other])
        for name in graph
        if name in reach[name]
    }


def import_circles(sources: dict[str, Path] | None = None) -> set[frozenset[str]]:
    """The circles among every module (or ``sources``)."""
    sources = modules() if sources is None else sources
    graph = {name: imported_modules(path, sources) - {name} for name, path in sources.items()}
    return circles(graph)


def violations(sources: dict[str, Path] | None = None) -> set[tuple[str, str, str]]:
    """(module, what it imports, the rule it breaks), over every module (or ``sources``)."""
    found: set[tuple[str, str, str]] = set()
    for name, path in (modules() if sources is None else sources).items():
        mine = group(name)
        for imported in imports(path):
            library = imported.split(".")[0]
            if library in LIBRARY_HOMES:
                if not any(mine == home for home in LIBRARY_HOMES[library]):
                    found.add((name, library, f"{library} is used only in {LIBRARY_HOMES[library]}"))
                continue
            if library != "kubetrain" or imported == "kubetrain":
                continue
            theirs = group(imported)
            if theirs == mine or theirs not in (*APPS, *RANKS):
                continue
            if theirs in APPS:
                if mine not in ENTRY_POINTS:
                    found.add((name, theirs, "applications do not import each other"))
            elif mine in RANKS and RANKS[theirs] > RANKS[mine]:
                found.add((name, theirs, f"{mine} is below {theirs}"))
    return found


def test_every_import_points_down_and_each_library_has_its_home() -> None:
    broken = {v for v in violations() if (v[0], v[1]) not in KNOWN}
    listed = "\n".join(f"  {module} imports {what}: {rule}" for module, what, rule in sorted(broken))
    assert not broken, f"imports that break the layers (docs/architecture.md):\n{listed}"


def test_the_known_exceptions_still_exist() -> None:
    present = {(module, what) for module, what, _ in violations()}
    assert present >= KNOWN, f"fixed, so remove from KNOWN: {sorted(KNOWN - present)}"


def test_the_check_sees_each_kind_of_wrong_import(tmp_path: Path) -> None:
    upward, sideways = tmp_path / "upward.py", tmp_path / "sideways.py"
    upward.write_text("import prometheus_client\nfrom kubetrain.client import JobClient\n")
    sideways.write_text("from kubetrain.controller.kube import client\nfrom kubetrain import naming\n")
    found = violations({"kubetrain.kube.upward": upward, "kubetrain.devcluster.sideways": sideways})
    assert {(module, what) for module, what, _ in found} == {
        ("kubetrain.kube.upward", "prometheus_client"),
        ("kubetrain.kube.upward", "kubetrain.client"),
        ("kubetrain.devcluster.sideways", "kubetrain.controller"),
    }


def test_no_modules_import_each_other_in_a_circle() -> None:
    new = import_circles() - KNOWN_CIRCLES
    listed = "\n".join(f"  {' <-> '.join(sorted(circle))}" for circle in sorted(new, key=sorted))
    assert not new, f"modules that import each other in a circle (docs/architecture.md):\n{listed}"


def test_the_known_circles_still_exist() -> None:
    gone = KNOWN_CIRCLES - import_circles()
    assert not gone, f"broken, so remove from KNOWN_CIRCLES: {[sorted(circle) for circle in gone]}"


def test_the_check_sees_a_circle_through_a_function_level_import_and_not_through_a_package(
    tmp_path: Path,
) -> None:
    files = {
        "pkg": "from pkg.a import A\n",  # the package gathers its modules: no circle with them
        "pkg.a": "from pkg import b\nA = 1\n",
        "pkg.b": "def late() -> None:\n    import pkg.c\n",
        "pkg.c": "from pkg.a import A\n",
        "pkg.d": "from pkg.c import A\n",  # imports the circle, is no part of it
    }
    sources = {}
    for name, text in files.items():
        sources[name] = tmp_path / f"{name}.py"
        sources[name].write_text(text)
    assert import_circles(sources) == {frozenset({"pkg.a", "pkg.b", "pkg.c"})}


CONTRACT = re.compile(  # label, annotation and managedBy keys of ours, upstream's and the gang schedulers'
    r"^(kubetrain\.dev|training\.kubeflow\.org|trainer\.kubeflow\.org|kubeflow\.org|jobset\.sigs\.k8s\.io"
    r"|batch\.kubernetes\.io|kueue\.x-k8s\.io|scheduling\.x-k8s\.io|scheduling\.k8s\.io|(scheduling\.)?volcano\.sh)"
    r"/(?!v\d)[\w.-]+(=.*)?$"  # an API version (kubeflow.org/v1) is the kind registry's
)


def contract_literals(sources: dict[str, Path]) -> set[tuple[str, str]]:
    """(module, literal) for each label, annotation or key written out instead of taken from naming."""
    found = set()
    for name, path in sources.items():
        if name == "kubetrain.naming":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and CONTRACT.match(node.value):
                found.add((name, node.value))
    return found


def test_every_label_and_annotation_key_is_named_once_in_naming(tmp_path: Path) -> None:
    written_out = contract_literals(modules())
    assert not written_out, f"use the constants of kubetrain.naming: {sorted(written_out)}"
    probe = tmp_path / "probe.py"
    probe.write_text(
        'SELECTOR = f"training.kubeflow.org/job-name={name}"\n"""A docstring naming kubetrain.dev/attempt."""\n'
    )
    assert contract_literals({"probe": probe}) == {("probe", "training.kubeflow.org/job-name=")}
