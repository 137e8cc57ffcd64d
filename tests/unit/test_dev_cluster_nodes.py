"""Where pods land on the dev cluster: the simulated nodes' and the process node's taints, with and
without ``--process-node-default``, and the options of ``kubetrain dev up`` as documented."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, cast

import pytest
import typer

from kubetrain.devcluster import nodes
from kubetrain.devcluster.cli import app
from kubetrain.devcluster.cluster import ClusterOptions
from kubetrain.devcluster.errors import DevClusterError
from kubetrain.devcluster.processnode.agent import NODE_TAINT, Agent, Settings
from kubetrain.kube.client import KubeClient
from tests.docs_commands import REPO


def _taints(node: dict[str, Any]) -> list[dict[str, str]]:
    return cast(list[dict[str, str]], node["spec"].get("taints") or [])


def test_by_default_cpu_nodes_take_pods_that_ask_for_nothing() -> None:
    listed = nodes.fake_nodes(gpu_nodes=1, gpus_per_node=8, cpu_nodes=2)
    by_name = {n["metadata"]["name"]: n for n in listed}
    assert set(by_name) == {"kwok-gpu-0", "kwok-cpu-0", "kwok-cpu-1"}
    assert _taints(by_name["kwok-cpu-0"]) == [] and _taints(by_name["kwok-cpu-1"]) == []
    assert _taints(by_name["kwok-gpu-0"]) == [nodes.GPU_TAINT]
    assert all(n["metadata"]["labels"]["kubetrain.dev/simulated"] == "true" for n in listed)


def test_with_the_process_node_as_default_every_simulated_node_is_tainted() -> None:
    listed = nodes.fake_nodes(gpu_nodes=1, gpus_per_node=8, cpu_nodes=1, tainted=True)
    simulated = {"key": "kubetrain.dev/simulated", "value": "true", "effect": "NoSchedule"}
    assert [_taints(n) for n in listed] == [[nodes.GPU_TAINT, simulated], [simulated]]


def _process_node(tmp_path: Path, *, default_node: bool) -> dict[str, Any]:
    settings = Settings(
        name="kubetrain-process-node",
        state_dir=tmp_path,
        port=1,
        cert=tmp_path / "c",
        key=tmp_path / "k",
        ca=tmp_path / "ca",
        workdir=tmp_path,
        api_server="https://127.0.0.1:6443",
        default_node=default_node,
    )
    return Agent(settings, cast(KubeClient, None)).node()


def test_the_process_node_is_tainted_unless_it_is_the_default_node(tmp_path: Path) -> None:
    assert _taints(_process_node(tmp_path, default_node=False)) == [NODE_TAINT]
    default = _process_node(tmp_path, default_node=True)
    assert _taints(default) == []
    assert default["metadata"]["labels"]["kubetrain.dev/process-node"] == "true"


def test_the_process_node_cannot_be_the_default_without_running() -> None:
    with pytest.raises(DevClusterError, match="--process-node-default needs the process node"):
        ClusterOptions(process_node=False, process_node_default=True).validate()
    ClusterOptions(process_node_default=True).validate()


def test_the_dev_cluster_page_lists_every_option_of_dev_up() -> None:
    up = typer.main.get_command(app).commands["up"]  # type: ignore[attr-defined]
    options = {
        opt for param in up.params for opt in [*param.opts, *param.secondary_opts] if opt.startswith("--")
    }
    page = (REPO / "docs" / "dev-cluster.md").read_text()
    table = page[page.index("## `kubetrain dev up`") : page.index("## Simulated nodes")]
    listed = {opt for cell in re.findall(r"^\| `([^`]+)`", table, re.M) for opt in cell.split("/")}
    listed = {opt.split()[0] for opt in listed}
    assert options - {"--help"} <= listed, f"not in docs/dev-cluster.md: {sorted(options - listed)}"
    assert listed <= options, f"not options of dev up: {sorted(listed - options)}"
