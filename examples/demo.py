"""The demo: bring up the local cluster, install the CRDs and run a job on a simulated GPU node.

Run with ``make demo``; ``make demo-down`` stops everything.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path

from kubernetes_asyncio import client, config
from rich.console import Console
from rich.table import Table

from kubetrain.devcluster import build, paths
from kubetrain.devcluster.cluster import ClusterOptions, DevCluster
from kubetrain.devcluster.errors import DevClusterError

REPO = Path(__file__).resolve().parent.parent
console = Console()


async def run_gpu_pod(kubeconfig: Path) -> dict[str, str]:
    """Submit one pod asking for a GPU and follow it to completion."""
    api = await config.new_client_from_config(config_file=str(kubeconfig))
    async with api:
        core = client.CoreV1Api(api)
        name = f"hello-gpu-{int(time.time())}"
        pod = {
            "metadata": {"name": name, "annotations": {"sim.kubetrain.dev/run-duration": "3s"}},
            "spec": {
                "restartPolicy": "Never",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ],
            },
        }
        await core.create_namespaced_pod("default", pod)
        phases: list[str] = []
        with console.status(f"running pod {name} on a simulated GPU node"):
            while True:
                current = await core.read_namespaced_pod(name, "default")
                if not phases or phases[-1] != current.status.phase:
                    phases.append(current.status.phase)
                if current.status.phase in ("Succeeded", "Failed"):
                    break
                await asyncio.sleep(0.2)
        return {"pod": name, "node": current.spec.node_name, "phases": " → ".join(phases)}


def main() -> int:
    cluster = DevCluster(paths.default_state_dir())
    try:
        build.build(console=console)
        cluster.up(ClusterOptions(), console=console)
    except DevClusterError as exc:
        console.print(f"[red]error:[/] {exc}")
        return 1
    kubectl = str(build.binary_path("kubectl"))
    env = {**os.environ, "KUBECONFIG": str(cluster.kubeconfig)}
    with console.status("installing the CRDs"):
        subprocess.run(
            [kubectl, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "deploy" / "crds")],
            env=env,
            check=True,
            capture_output=True,
        )
    result = asyncio.run(run_gpu_pod(cluster.kubeconfig))
    table = Table("pod", "node", "phases", title="demo")
    table.add_row(result["pod"], result["node"], result["phases"])
    console.print(table)
    console.print(
        f"\nexport KUBECONFIG={cluster.kubeconfig}   # then: {kubectl} get nodes,pods\n"
        "Stop everything with `make demo-down`."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
