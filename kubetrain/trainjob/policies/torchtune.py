"""torchtune's ``tune run``: the command the torch policy completes for the SDK's ``BuiltinTrainer``.

The ``kubeflow`` SDK's ``BuiltinTrainer(TorchTuneConfig(...))`` sends a trainer whose command is
``tune run`` and whose args are config overrides (``dtype=bf16``, ``model.lora_rank=8``, ...). As
upstream's torch plugin does, the command is completed here, so the pod runs

    tune run [--rdzv_endpoint=<tj>-node-0-0.<tj>:29500] <recipe> --config <model><suffix> <runtime paths>

with the SDK's args after it:

* the rendezvous endpoint only when more than one process trains (several nodes, several processes
  per node, or several GPUs left to ``auto``);
* the recipe and config from the nodes, the processes per node, the GPUs of a node and the LoRA,
  QLoRA or DoRA overrides among the args (``recipe``);
* the paths the runtime fixes (``output_dir``, ``tokenizer.path``, ``checkpointer.checkpoint_dir``,
  ``tokenizer.merges_file``), taken from the runtime's own ``tune run`` command.

The model comes from the runtime's name (``torchtune-llama3.2-1b`` fine-tunes ``llama3_2/1B``).
Upstream's webhook refuses what torchtune cannot run; kubetrain has no webhook, so ``check`` fails the
TrainJob at build time with the same rules, each naming its field.
"""

from __future__ import annotations

from kubetrain import naming
from kubetrain.trainjob.policies.common import PORT
from kubetrain.trainjob.state import NODE, TRAINER, BuildError, PodSet, TrainJobInfo

ENTRYPOINT = ["tune", "run"]
RENDEZVOUS_ARG = "--rdzv_endpoint"
# The config keys whose values are paths the runtime's volumes fix: users cannot set them.
RUNTIME_PATHS = ("output_dir", "tokenizer.path", "checkpointer.checkpoint_dir", "tokenizer.merges_file")
MODELS = ("llama3_2/1B", "llama3_2/3B", "llama3_3/70B", "qwen2_5/1.5B")
MULTI_NODE_MODELS = ("llama3_3/70B",)
LORA_MODULES = "model.lora_attn_modules"
QUANTIZE_BASE = "model.quantize_base"
USE_DORA = "model.use_dora"

FULL_SINGLE_DEVICE = ("full_finetune_single_device", "_full_single_device")
FULL_DISTRIBUTED = ("full_finetune_distributed", "_full")
FULL_MULTI_NODE = ("full_finetune_distributed", "_full_multinode")
LORA_SINGLE_DEVICE = ("lora_finetune_single_device", "_lora_single_device")
QLORA_SINGLE_DEVICE = ("lora_finetune_single_device", "_qlora_single_device")
LORA_DISTRIBUTED = ("lora_finetune_distributed", "_lora")
QLORA_DISTRIBUTED = ("lora_finetune_distributed", "_qlora")


def requested(info: TrainJobInfo) -> bool:
    """Whether the TrainJob asks for torchtune: its trainer's command is exactly ``tune run``."""
    return (info.spec.get("trainer") or {}).get("command") == ENTRYPOINT


def model_of(runtime_name: str) -> str:
    """``torchtune-llama3.2-1b`` -> ``llama3_2/1B``; empty for a name of another shape."""
    parts = runtime_name.split("-")
    if len(parts) != 3:
        return ""
    return f"{parts[1].replace('.', '_')}/{parts[2].upper()}"


def _lora(args: list[str]) -> bool:
    return any(LORA_MODULES in arg for arg in args)


def _enabled(args: list[str], key: str) -> bool:
    """A ``key=True`` override (any case) among the args."""
    for arg in args:
        name, sep, value = arg.partition("=")
        if sep and key in name and value.strip().lower() == "true":
            return True
    return False


def _qlora(args: list[str]) -> bool:
    return not _enabled(args, USE_DORA) and _enabled(args, QUANTIZE_BASE)


def recipe(nodes: int, procs: int | None, gpus: int, args: list[str]) -> tuple[str, str]:
    """The recipe and the config suffix: ``procs`` is the processes per node, None for ``auto``."""
    if nodes == 1 and (procs == 1 or gpus == 1):
        if _qlora(args):
            return QLORA_SINGLE_DEVICE
        return LORA_SINGLE_DEVICE if _lora(args) else FULL_SINGLE_DEVICE
    if nodes == 1 and _qlora(args):
        return QLORA_DISTRIBUTED
    if nodes == 1 and _lora(args):
        return LORA_DISTRIBUTED
    return FULL_MULTI_NODE if nodes > 1 else FULL_DISTRIBUTED


def distributed(nodes: int, procs: int | None, gpus: int) -> bool:
    """Whether more than one process trains, so they need a rendezvous endpoint."""
    return nodes > 1 or (procs is not None and procs > 1) or (procs is None and gpus > 1)


def runtime_paths(info: TrainJobInfo) -> list[str]:
    """The runtime's fixed paths: those ``key=value`` words of its trainer command, in its order."""
    for rjob in (info.jobset.get("spec") or {}).get("replicatedJobs") or []:
        template = rjob.get("template") or {}
        labels = (template.get("metadata") or {}).get("labels") or {}
        if labels.get(naming.LABEL_TRAINJOB_ANCESTOR) != TRAINER:
            continue
        pod_spec = ((template.get("spec") or {}).get("template") or {}).get("spec") or {}
        for container in pod_spec.get("containers") or []:
            if container.get("name") == NODE:
                return [w for w in container.get("command") or [] if w.split("=")[0] in RUNTIME_PATHS]
    return []


def check(info: TrainJobInfo, nodes: int, procs: int | None, gpus: int) -> None:
    """Upstream's admission rules for torchtune, as a ``BuildError`` naming the field to fix."""
    trainer = info.spec.get("trainer") or {}
    args = [str(a) for a in trainer.get("args") or []]
    runtime = str((info.spec.get("runtimeRef") or {}).get("name") or "")
    model = model_of(runtime)
    if model not in MODELS:
        raise BuildError(
            f"spec.runtimeRef.name {runtime!r}: torchtune needs a runtime named torchtune-<model>-<size> "
            f"for one of the supported models ({', '.join(MODELS)}); got model {model!r}"
        )
    if nodes > 1 and model not in MULTI_NODE_MODELS:
        raise BuildError(f"spec.trainer.numNodes must be 1 for torchtune model {model} (got {nodes})")
    if nodes > 1 and (_lora(args) or _qlora(args)):
        raise BuildError(
            "spec.trainer.numNodes: LoRA fine-tuning is not supported for multi-node training in torchtune; "
            "use one node"
        )
    suffix = recipe(nodes, procs, gpus, args)[1]
    if suffix.startswith(QLORA_DISTRIBUTED[1]):
        if model == "qwen2_5/1.5B":
            raise BuildError(f"spec.runtimeRef.name {runtime!r}: QLoRA is not supported for model {model}")
        if suffix != QLORA_SINGLE_DEVICE[1] and model in ("llama3_2/1B", "llama3_2/3B"):
            raise BuildError(
                f"spec.trainer.numProcPerNode and spec.trainer.resourcesPerNode: QLoRA on model {model} runs on "
                "one device; set numProcPerNode to 1 (or leave it auto) and request 1 GPU per node"
            )
    for i, arg in enumerate(args):
        key = arg.split("=", 1)[0]
        if key in RUNTIME_PATHS:
            raise BuildError(
                f"spec.trainer.args[{i}] ({arg}) sets {key}, which the runtime fixes (its volumes are mounted "
                "there); remove it"
            )


def command(info: TrainJobInfo, trainer: PodSet, procs: int | None, gpus: int) -> list[str]:
    """The completed ``tune run`` command of the trainer's ``node`` container."""
    nodes = trainer.count
    check(info, nodes, procs, gpus)
    args = [str(a) for a in (info.spec.get("trainer") or {}).get("args") or []]
    words = list(ENTRYPOINT)
    if distributed(nodes, procs, gpus):
        words.append(f"{RENDEZVOUS_ARG}={info.endpoint(trainer.name)}:{PORT}")
    name, suffix = recipe(nodes, procs, gpus, args)
    model = model_of(str((info.spec.get("runtimeRef") or {}).get("name") or ""))
    return [*words, name, "--config", f"{model}{suffix}", *runtime_paths(info)]
