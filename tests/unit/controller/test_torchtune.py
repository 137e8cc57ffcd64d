"""torchtune through the kubeflow SDK's BuiltinTrainer: the pod command and env upstream's torch plugin gives.

The SDK (``kubeflow`` 0.5) sends ``command: [tune, run]`` and the config overrides of its
``TorchTuneConfig`` as ``args`` (``tests.support.TORCHTUNE_SDK``: what it sends for each config). The expected command
lines are upstream's (Kubeflow Trainer v2.3's torch plugin on its torchtune runtimes, whose commands the
shipped runtimes keep); the ``test-job`` cases are those of upstream's own build tests.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.trainjob.build import build
from kubetrain.trainjob.state import BuildError, TrainJobInfo
from tests.support import TORCHTUNE_SDK

RUNTIMES = Path(__file__).resolve().parents[3] / "deploy" / "runtimes"
TORCHTUNE = ["torchtune-llama3.2-1b", "torchtune-llama3.2-3b", "torchtune-qwen2.5-1.5b"]


def runtime(name: str, rename: str | None = None) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((RUNTIMES / f"{name}.yaml").read_text())
    if rename:
        loaded["metadata"]["name"] = rename
    return loaded


def gpus(n: float) -> dict[str, Any]:
    return {"limits": {"nvidia.com/gpu": n}, "requests": {"nvidia.com/gpu": n}}


SDK = {k: v for k, v in TORCHTUNE_SDK.items() if k != "dataset"}

CONFIG = {"torchtune-llama3.2-1b": "llama3_2/1B", "torchtune-llama3.2-3b": "llama3_2/3B", "torchtune-qwen2.5-1.5b": "qwen2_5/1.5B"}  # fmt: skip
PATHS = {
    "torchtune-llama3.2-1b": [
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ],
    "torchtune-llama3.2-3b": [
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/original/tokenizer.model",
        "checkpointer.checkpoint_dir=/workspace/model",
    ],
    "torchtune-qwen2.5-1.5b": [
        "output_dir=/workspace/output",
        "tokenizer.path=/workspace/model/vocab.json",
        "tokenizer.merges_file=/workspace/model/merges.txt",
        "checkpointer.checkpoint_dir=/workspace/model",
    ],
}
RDZV = "--rdzv_endpoint=tune-node-0-0.tune:29500"
# SDK config -> (rendezvous endpoint or not, recipe, config suffix), on every shipped torchtune runtime.
EXPECTED = {
    "empty": (True, "full_finetune_distributed", "_full"),  # the runtime's 2 GPUs, numProcPerNode auto
    "full": (True, "full_finetune_distributed", "_full"),
    "lora": (True, "lora_finetune_distributed", "_lora"),
    "qlora": (False, "lora_finetune_single_device", "_qlora_single_device"),  # one GPU: one process
    "cpu": (True, "full_finetune_distributed", "_full"),  # no GPU: one process per CPU, 2
}


def trainjob(runtime_name: str, trainer: dict[str, Any], name: str = "tune") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "team", "uid": "uid-1"},
        "spec": {"runtimeRef": {"name": runtime_name}, "trainer": copy.deepcopy(trainer)},
    }


def node(info: TrainJobInfo) -> dict[str, Any]:
    trainer = info.trainer()
    assert trainer is not None
    container = trainer.container("node")
    assert container is not None
    return container


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


RANK = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}


# QLoRA is refused for qwen2.5 (the next test).
RUNS = [(r, c) for r in TORCHTUNE for c in sorted(SDK) if (r, c) != ("torchtune-qwen2.5-1.5b", "qlora")]


@pytest.mark.parametrize(("runtime_name", "config"), RUNS)
def test_the_sdk_builtin_trainer_runs_upstreams_tune_command_on_every_torchtune_runtime(
    runtime_name: str, config: str
) -> None:
    info = build(trainjob(runtime_name, SDK[config]), runtime(runtime_name))
    rdzv, recipe, suffix = EXPECTED[config]
    container = node(info)
    assert container["command"] == [
        "tune",
        "run",
        *([RDZV] if rdzv else []),
        recipe,
        "--config",
        CONFIG[runtime_name] + suffix,
        *PATHS[runtime_name],
    ]
    assert container["args"] == SDK[config]["args"], "the SDK's overrides follow the command unchanged"
    env = env_of(container)
    procs = {"qlora": "auto", "cpu": "2"}.get(config, "auto")
    assert {k: v for k, v in env.items() if k.startswith("PET_")} == {
        "PET_NNODES": "1",
        "PET_NPROC_PER_NODE": procs,
        "PET_NODE_RANK": RANK,
    }, "torchtune rendezvous through the command: no PET_MASTER_ADDR or PET_MASTER_PORT"
    assert container["ports"] == [{"containerPort": 29500}]


def test_qlora_is_refused_for_qwen() -> None:
    with pytest.raises(
        BuildError, match=r"spec.runtimeRef.name .*QLoRA is not supported for model qwen2_5/1.5B"
    ):
        build(trainjob("torchtune-qwen2.5-1.5b", SDK["qlora"]), runtime("torchtune-qwen2.5-1.5b"))


# Upstream's build tests: a TrainJob on torchtune-llama3.2-1b with one CPU and N "example.com/gpu".
def upstream_trainer(args: list[str], gpu: str) -> dict[str, Any]:
    return {
        "image": "test:trainjob",
        "command": ["tune", "run"],
        "args": args,
        "numNodes": 1,
        "resourcesPerNode": {"requests": {"cpu": "1", "example.com/gpu": gpu}},
    }


UPSTREAM_PATHS = [
    "output_dir=/workspace/output",
    "tokenizer.path=/workspace/model/original/tokenizer.model",
    "checkpointer.checkpoint_dir=/workspace/model",
]
LORA_DISTRIBUTED = [
    "tune",
    "run",
    "--rdzv_endpoint=test-job-node-0-0.test-job:29500",
    "lora_finetune_distributed",
    "--config",
    "llama3_2/1B_lora",
    *UPSTREAM_PATHS,
]
LORA_ARGS = [
    "dataset.data_dir=/workspace/dataset/data",
    "model.apply_lora_to_mlp=True",
    "model.lora_attn_modules=[q_proj,k_proj,v_proj,output_proj]",
]
DATASET_ARGS = ["dataset=torchtune.datasets.instruct_dataset", "dataset.source=parquet"]


@pytest.mark.parametrize(
    ("args", "gpu", "command"),
    [
        pytest.param(
            [*LORA_ARGS, *DATASET_ARGS],
            "2",
            LORA_DISTRIBUTED,
            id="lora",
        ),
        pytest.param(
            [*LORA_ARGS, "model.quantize_base=True", *DATASET_ARGS],
            "1",
            [
                "tune",
                "run",
                "lora_finetune_single_device",
                "--config",
                "llama3_2/1B_qlora_single_device",
                *UPSTREAM_PATHS,
            ],
            id="qlora",
        ),
        pytest.param(
            [*LORA_ARGS, "model.quantize_base=True", "model.use_dora=True", *DATASET_ARGS],
            "2",
            LORA_DISTRIBUTED,
            id="dora",
        ),
    ],
)
def test_upstreams_build_cases_give_upstreams_command_lines(
    args: list[str], gpu: str, command: list[str]
) -> None:
    name = "torchtune-llama3.2-1b"
    info = build(trainjob(name, upstream_trainer(args, gpu), name="test-job"), runtime(name))
    container = node(info)
    assert container["image"] == "test:trainjob"
    assert container["command"] == command
    assert container["args"] == args


def test_multi_node_full_fine_tuning_of_the_70b_model() -> None:
    name = "torchtune-llama3.3-70b"
    trainer = {"command": ["tune", "run"], "numNodes": 2, "numProcPerNode": 8, "resourcesPerNode": gpus(8)}
    info = build(trainjob(name, trainer), runtime("torchtune-llama3.2-1b", rename=name))
    assert node(info)["command"][:6] == [
        "tune",
        "run",
        RDZV,
        "full_finetune_distributed",
        "--config",
        "llama3_3/70B_full_multinode",
    ]
    assert env_of(node(info))["PET_NNODES"] == "2"


def test_a_trainjob_that_keeps_the_runtimes_command_runs_it_as_it_is_with_torchruns_env() -> None:
    name = "torchtune-llama3.2-1b"
    shipped = runtime(name)
    info = build(trainjob(name, {"numNodes": 1}), shipped)
    runtime_node = shipped["spec"]["template"]["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]
    assert node(info)["command"] == runtime_node["spec"]["containers"][0]["command"]
    env = env_of(node(info))
    assert env["PET_MASTER_ADDR"] == "tune-node-0-0.tune" and env["PET_MASTER_PORT"] == "29500"


@pytest.mark.parametrize(
    ("runtime_name", "trainer", "message"),
    [
        (
            "torchtune-llama3.2-1b",
            {"numNodes": 2},
            r"spec.trainer.numNodes must be 1 for torchtune model llama3_2/1B",
        ),
        ("torchtune-gemma-2b-it", {}, r"spec.runtimeRef.name 'torchtune-gemma-2b-it'.*supported models"),
        (
            "torchtune-llama3.2-1b",
            {"args": ["output_dir=/tmp/out"]},
            r"spec.trainer.args\[0\] \(output_dir=/tmp/out\) sets output_dir",
        ),
        (
            "torchtune-llama3.3-70b",
            {"numNodes": 2, "args": ["model.lora_attn_modules=[q_proj]"]},
            r"spec.trainer.numNodes: LoRA fine-tuning is not supported for multi-node training",
        ),
        (
            "torchtune-llama3.2-3b",
            {"numProcPerNode": 2, "args": ["model.quantize_base=True"]},
            r"spec.trainer.numProcPerNode and spec.trainer.resourcesPerNode: QLoRA on model llama3_2/3B runs on one device",
        ),
    ],
)
def test_what_torchtune_cannot_run_fails_the_build_naming_the_field(
    runtime_name: str, trainer: dict[str, Any], message: str
) -> None:
    base = "torchtune-llama3.2-3b" if "3b" in runtime_name else "torchtune-llama3.2-1b"
    job = trainjob(runtime_name, {"command": ["tune", "run"], **trainer})
    with pytest.raises(BuildError, match=message):
        build(job, runtime(base, rename=runtime_name))
