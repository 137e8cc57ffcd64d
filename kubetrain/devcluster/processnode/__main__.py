"""``python -m kubetrain.devcluster.processnode``: run the process node (``kubetrain dev up`` starts it)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path

from kubetrain import naming
from kubetrain.devcluster.process import run_until_stopped
from kubetrain.devcluster.processnode.agent import Agent, Settings
from kubetrain.kube.client import KubeClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default=naming.PROCESS_NODE)
    parser.add_argument("--state-dir", type=Path, required=True, help="where pods' files and volumes live")
    parser.add_argument("--kubeconfig", required=True, help="the node's own identity (system:node:<name>)")
    parser.add_argument(
        "--port", type=int, required=True, help="HTTPS port of the log endpoint, on 127.0.0.1"
    )
    parser.add_argument("--cert", type=Path, required=True)
    parser.add_argument("--key", type=Path, required=True)
    parser.add_argument("--ca", type=Path, required=True, help="CA whose client certificates may read logs")
    parser.add_argument(
        "--workdir", type=Path, default=Path.cwd(), help="working directory of containers that set none"
    )
    parser.add_argument(
        "--gpus", dest="fake_gpus", type=int, default=0, help="GPUs to advertise when the host has none"
    )
    parser.add_argument(
        "--pod-python",
        default=sys.executable,
        help="the Python pods run with: its directory comes first on their PATH (default: this one)",
    )
    parser.add_argument(
        "--hide",
        type=Path,
        action="append",
        default=[],
        help="a directory pods must not see (the cluster's state dir); repeatable (confine.py says how)",
    )
    parser.add_argument(
        "--default-node",
        action="store_true",
        help="register the node without its taint, so pods that name no node run here",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    asyncio.run(run(args))


async def run(args: argparse.Namespace) -> None:
    options = vars(args)  # every option but the kubeconfig is a field of Settings, by the same name
    kube = await KubeClient.from_kubeconfig(options.pop("kubeconfig"))
    settings = Settings(**options, api_server=kube.api.configuration.host or "")
    await run_until_stopped(Agent(settings, kube).run())
    await kube.close()


if __name__ == "__main__":
    main()
