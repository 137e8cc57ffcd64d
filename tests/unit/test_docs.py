"""The docs stay true: every command they show is run by a test, every reference page lists what the
code has (and nothing it lacks), and every link resolves."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import typer
import yaml

from tests.docs_commands import REPO, commands, doc_files

# Commands CI cannot run as written, and where the same thing is exercised instead.
NOT_RUN_AS_WRITTEN = {
    "make test": "CI runs it (.ci/run)",
    "make demo": "it builds, then runs examples/demo.py, which tests/e2e/test_demo.py runs on the test cluster",
    "make demo-down": "it runs `kubetrain dev down`, as every make test run does at its end",
    "pip install 'kubetrain[airflow]'": "make airflow-venvs installs this extra into both Airflow environments",
    "make airflow-venvs": "make test runs it before the Airflow tests",
    "source .venv-airflow/bin/activate": (
        "the Airflow deployment tests run `kubetrain dev airflow` from the environment they run in"
    ),
    "kubetrain dev build": "make build runs it before every test run",
    "kubetrain dev up": "make test starts its cluster with it (and the devcluster tests start their own)",
    "kubetrain dev down": "make test stops its cluster with it",
    "KUBETRAIN_TEST_CLUSTER=": "how to run this suite on a running cluster; CI runs the suite",
    "docker ": "needs a Docker engine and a registry, which CI does not have",
    "kind ": "needs a Docker engine, which CI does not have",
    "kubetrain controller run": "the controller_process fixture runs `kubetrain controller run` for its namespace",
    "KUBECONFIG=~/.cache/kubetrain/dev-cluster/kubeconfig kubetrain controller run": (
        "the controller_process fixture runs `kubetrain controller run` with the test cluster's kubeconfig"
    ),
    ".venv-kfp/bin/python examples/kfp_pipeline.py run": "make demo runs it (step 4), so tests/e2e/test_demo.py does",
}


def claims() -> set[tuple[str, str]]:
    """(doc, prefix) of every ``documented(...)``/``run_documented(...)``/``walkthrough(...)`` call in
    the tests."""
    found = set()
    for path in (REPO / "tests").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if name not in ("documented", "run_documented", "run_documented_async", "walkthrough"):
                continue
            literals = [
                a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
            found |= {(literals[0], prefix) for prefix in literals[1:]}
    return found


def test_every_command_in_the_docs_is_run_by_a_test() -> None:
    claimed = claims()
    unclaimed = [
        f"{c.doc}: {c.text}"
        for c in commands()
        if not any(doc == c.doc and c.text.startswith(prefix) for doc, prefix in claimed)
        and not any(c.text.startswith(prefix) for prefix in NOT_RUN_AS_WRITTEN)
    ]
    assert not unclaimed, "no test runs these documented commands:\n" + "\n".join(unclaimed)
    every = [c.text for c in commands()]
    stale = [f"{doc}: {prefix}" for doc, prefix in claimed if not any(t.startswith(prefix) for t in every)]
    assert not stale, "tests claim commands the docs no longer show:\n" + "\n".join(stale)


def test_every_relative_link_resolves() -> None:
    broken = []
    for path in doc_files():
        for target in re.findall(r"\]\(([^)\s]+)\)", path.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            linked = (path.parent / file).resolve() if file else path
            if not linked.exists():
                broken.append(f"{path.relative_to(REPO)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{path.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def _anchors(path: Path) -> set[str]:
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _table_rows(text: str) -> dict[str, list[str]]:
    """First-column backticked names of a markdown table -> the row's cells."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and cells[0].startswith("`"):
            for name in re.findall(r"`([^`]+)`", cells[0]):
                rows[name] = cells
    return rows


def _section(text: str, heading: str) -> str:
    start = text.index(heading)
    end = text.find("\n## ", start + len(heading))
    return text[start : end if end >= 0 else None]


def _keyword_arguments(path: Path, cls: str) -> set[str]:
    tree = ast.parse(path.read_text())
    node = next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls)
    init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return {a.arg for a in init.args.kwonlyargs}


@pytest.mark.parametrize(
    ("source", "cls", "heading", "extra"),
    [
        ("operators/operators.py", "TrainingJobOperator", "## `TrainingJobOperator`", {"durable"}),
        ("operators/sensors.py", "TrainingJobSensor", "## `TrainingJobSensor`", set()),
    ],
)
def test_the_operator_reference_lists_every_argument(
    source: str, cls: str, heading: str, extra: set[str]
) -> None:
    page = (REPO / "docs" / "reference" / "operators.md").read_text()
    documented = set(_table_rows(_section(page, heading)))
    arguments = _keyword_arguments(REPO / source, cls) | extra
    assert documented == arguments, (
        f"missing from the page: {sorted(arguments - documented)}; not arguments: {sorted(documented - arguments)}"
    )


def _component_default(cell: str) -> object:
    if cell.startswith('`""`'):
        return ""
    number = re.match(r"-?\d+(\.\d+)?", cell)
    return float(number.group()) if number else None


def test_the_component_reference_lists_every_input_with_its_default() -> None:
    page = (REPO / "docs" / "reference" / "components.md").read_text()
    rows = _table_rows(_section(page, "| input |"))
    which = {"both": {"PyTorchJob", "TrainJob"}, "PyTorchJob": {"PyTorchJob"}, "TrainJob": {"TrainJob"}}
    seen: dict[str, set[str]] = {}
    for kind, file in (("PyTorchJob", "pytorchjob_launcher.yaml"), ("TrainJob", "trainjob_launcher.yaml")):
        spec = yaml.safe_load((REPO / "components" / file).read_text())
        (component,) = spec["components"].values()
        for name, definition in component["inputDefinitions"]["parameters"].items():
            assert name in rows, f"{file}: input {name} is not on the page"
            seen.setdefault(name, set()).add(kind)
            documented = _component_default(rows[name][2])
            if name != "task_config":
                assert documented == definition.get("defaultValue"), f"{name}: the page says {rows[name][2]}"
        outputs = {
            **component["outputDefinitions"]["parameters"],
            **component["outputDefinitions"]["artifacts"],
        }
        output_rows = _table_rows(_section(page, "## Outputs"))
        assert set(outputs) == set(output_rows), f"{file}: the outputs are {sorted(outputs)}"
    for name, kinds in seen.items():
        assert which[rows[name][3]] == kinds, (
            f"{name}: the page says {rows[name][3]}, it is in {sorted(kinds)}"
        )


def test_the_env_reference_names_every_variable_kubetrain_sets_or_reads() -> None:
    page = (REPO / "docs" / "reference" / "env.md").read_text()
    sources = [
        p
        for folder in ("kubetrain", "controller", "operators", "components", "dags", "examples")
        for p in (REPO / folder).rglob("*.py")
    ]
    used = {name for p in sources for name in re.findall(r"\bKUBETRAIN_[A-Z0-9_]+", p.read_text())}
    framework = {
        name
        for folder in ("controller/v1/frameworks", "kubetrain/trainjob", "controller/plugins")
        for p in (REPO / folder).rglob("*.py")
        for name in re.findall(r'(?:env_value\(|"name": |_env\()"([A-Z][A-Z0-9_]+)"', p.read_text())
    }
    missing = sorted(name for name in used | framework if f"`{name}" not in page)
    assert not missing, f"not in docs/reference/env.md: {missing}"
    assert len(framework) > 30, "the pattern for the frameworks' env finds them"


def exported_metrics() -> list[str]:
    """The names of every series the controller serves on /metrics, read from its sources."""
    sources = "".join((REPO / "controller" / f).read_text() for f in ("metrics.py", "jobmetrics.py"))
    return re.findall(r'(?:Counter|Gauge|Histogram|GaugeMetricFamily)\(\s*"([a-z_]+)"', sources)


def test_the_grafana_dashboard_graphs_only_what_the_controller_serves() -> None:
    dashboard = json.loads((REPO / "deploy" / "grafana" / "kubetrain-training.json").read_text())
    queries = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    served = set(exported_metrics())
    used = {
        re.sub(r"_(bucket|sum|count)$", "", n)
        for q in queries
        for n in re.findall(r"\b(?:training_operator|kubetrain)_[a-z_]+", q)
    }
    assert len(queries) >= 6 and used, "the dashboard has its panels"
    assert used <= served, (
        f"the dashboard queries series the controller does not serve: {sorted(used - served)}"
    )


def test_the_metrics_reference_lists_every_metric() -> None:
    page = (REPO / "docs" / "reference" / "metrics.md").read_text()
    names = exported_metrics()
    assert len(names) > 15
    missing = [n for n in names if f"`{n}" not in page]
    assert not missing, f"not in docs/reference/metrics.md: {missing}"


def test_the_cli_reference_lists_every_command_and_option() -> None:
    from kubetrain.cli import app

    page = (REPO / "docs" / "reference" / "cli.md").read_text()
    group = typer.main.get_command(app)
    missing = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if name in ("dev", "controller"):
            continue
        if f"`kubetrain {name}" not in page:
            missing.append(name)
        for param in command.params:
            longest = max(param.opts, key=len)
            if longest.startswith("--") and longest != "--help" and longest not in page:
                missing.append(f"{name} {longest}")
    assert not missing, f"not in docs/reference/cli.md: {missing}"


def test_the_controller_page_lists_every_flag() -> None:
    from kubetrain.cli import app

    page = (REPO / "docs" / "controller.md").read_text()
    run = typer.main.get_command(app).commands["controller"].commands["run"]  # type: ignore[attr-defined]
    flags = [o for p in run.params for o in p.opts if o.startswith("--") and o != "--help"]
    assert flags
    missing = [f for f in flags if f"`{f}`" not in page]
    assert not missing, f"not in docs/controller.md: {missing}"


def test_the_install_page_lists_every_chart_value() -> None:
    page = (REPO / "docs" / "installing.md").read_text()
    values = yaml.safe_load((REPO / "deploy" / "chart" / "values.yaml").read_text())

    def flat(value: object) -> bool:  # a group of settings (image.tag), not a Kubernetes object (resources)
        return (
            isinstance(value, dict) and bool(value) and not any(isinstance(v, dict) for v in value.values())
        )

    keys = [
        f"{key}.{sub}" if flat(value) else key
        for key, value in values.items()
        for sub in (value if flat(value) else [None])
    ]
    missing = [k for k in keys if f"`{k}`" not in page]
    assert not missing, f"not in docs/installing.md: {missing}"
