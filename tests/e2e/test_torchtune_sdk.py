"""The kubeflow SDK's torchtune BuiltinTrainer, end to end on the process node.

The TrainJob is the one ``TrainerClient().train(runtime=..., trainer=BuiltinTrainer(TorchTuneConfig(...)))``
creates (kubeflow 0.5: ``command: [tune, run]``, the config as args); the runtime is the shipped
``torchtune-llama3.2-1b`` with its steps moved to the process node, its initializers standing in for the
downloads and ``tests/e2e/standins/tune`` for torchtune. The pod must get upstream's command line, and
``tune run`` must run with it, writing into the retained output claim.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from tests.conftest import REPO, Kubectl
from tests.e2e.test_process_node_training import claim_dir
from tests.support import TORCHTUNE_SDK, Jobs

TJ = "TrainJob"
# Not "tune": the process node resolves a word of the command that names a Service (the TrainJob's
# headless one) to the Service's address, and would run "tune" as an IP.
RUNTIME = "torchtune-llama3.2-1b"  # the model comes from the runtime's name, as upstream
STANDINS = REPO / "tests" / "e2e" / "standins"
PROCESS_NODE = {
    "nodeSelector": {"kubetrain.dev/process-node": "true"},
    "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}],
    "terminationGracePeriodSeconds": 5,
}
SDK_TRAINER = TORCHTUNE_SDK["dataset"]  # BuiltinTrainer(TorchTuneConfig(dataset_preprocess_config=...))


def local_torchtune_runtime() -> dict[str, Any]:
    runtime: dict[str, Any] = yaml.safe_load((REPO / "deploy" / "runtimes" / f"{RUNTIME}.yaml").read_text())
    runtime["kind"] = "TrainingRuntime"
    for rjob in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]["spec"]
        pod.update(PROCESS_NODE)
        container = pod["containers"][0]
        if rjob["name"] == "node":
            container.pop("resources", None)  # no GPU on the process node
            container["env"] = [{"name": "PATH", "value": f"{STANDINS}:/usr/bin:/bin"}]
        else:
            container["command"] = ["python", "-c", f"print('{rjob['name']}: nothing to download')"]
    return runtime


async def test_the_sdks_builtin_trainer_runs_upstreams_tune_command_on_the_process_node(
    controller: Any, jobs: Jobs, core: client.CoreV1Api, namespace: str, kubectl: Kubectl
) -> None:
    await jobs.create(local_torchtune_runtime())
    await jobs.create(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "alpaca"},
            "spec": {
                "runtimeRef": {"name": RUNTIME, "kind": "TrainingRuntime"},
                "trainer": SDK_TRAINER,
                "initializer": {"dataset": {"storageUri": "hf://tatsu-lab/alpaca/data"}},
            },
        }
    )
    await jobs.wait_condition("alpaca", "Complete", kind=TJ, timeout=240)
    [pod] = [
        p
        for p in await jobs.trainjob_pods("alpaca", live=False)
        if p.metadata.labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    ]
    node = next(c for c in pod.spec.containers if c.name == "node")
    # One node without GPUs: one process, so one device and no rendezvous endpoint.
    assert node.command == [
        "tune",
        "run",
        "full_finetune_single_device",
        "--config",
        "llama3_2/1B_full_single_device",
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ]
    assert node.args == SDK_TRAINER["args"]
    # kubectl, not the client: the client would parse a log line that is JSON into a dict.
    seen = json.loads(
        kubectl("logs", pod.metadata.name, "-c", "node", "-n", namespace).stdout.strip().splitlines()[-1]
    )
    argv = seen["argv"]
    assert argv[:4] == ["run", "full_finetune_single_device", "--config", "llama3_2/1B_full_single_device"]
    # The process node runs the command with /workspace where the claim lives on this host.
    args = argv[-len(SDK_TRAINER["args"]) :]
    assert args[1:] == SDK_TRAINER["args"][1:]
    assert args[0].startswith("dataset.data_dir=") and args[0].endswith("/initializer-alpaca/dataset/data")
    assert seen["env"] == {"PET_NNODES": "1", "PET_NODE_RANK": "0", "PET_NPROC_PER_NODE": "1"}
    model = Path(await claim_dir(core, namespace, "output-alpaca")) / "stand-in-model.json"
    assert json.loads(model.read_text())["argv"] == argv, "tune wrote into the retained output claim"
