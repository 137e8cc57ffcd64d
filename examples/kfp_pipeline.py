"""A KFP pipeline: train with a PyTorchJob, continue with a TrainJob from its checkpoint, evaluate.

    python examples/kfp_pipeline.py compile digits.yaml   # the pipeline for a KFP installation
    python examples/kfp_pipeline.py run                    # run it here with kfp.local, on the dev cluster

Both jobs keep their checkpoints in one object-store location (``checkpoint_dir``, an ``s3://`` URL),
with the credentials in the Secret ``checkpoint_secret`` names: on the dev cluster (started with
``--object-store``) ``kubetrain dev object-store --secret object-store`` makes it. For a shared volume
instead, pass a path as ``checkpoint_dir`` and the claim as ``checkpoint_volume``. The TrainJob starts
from the PyTorchJob's last checkpoint (``resume_from``) and trains on. The evaluation step reads both
jobs' Metrics and fails the run when accuracy got worse or stayed too low.

The step counts are strings: KFP hands integer parameters to f-strings as numbers ("60.0").

Run locally, the steps are processes of this machine (``kfp.local.SubprocessRunner``) and the jobs
run on the dev cluster's process node, through ``examples/trainjob-runtime-local.yaml``.
"""

import os
import sys

from kfp import compiler, dsl, local
from kfp.dsl import Input, Metrics

from kubetrain.components.launchers import IMAGE, pytorchjob_launcher, trainjob_launcher

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ON_PROCESS_NODE = {
    "node_selector": {"kubetrain.dev/process-node": "true"},
    "tolerations": [{"key": "kubetrain.dev/process-node", "operator": "Exists", "effect": "NoSchedule"}],
}


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def evaluate(first: Input[Metrics], second: Input[Metrics], min_accuracy: float) -> float:
    """Fail unless the continued training kept or improved accuracy and reached ``min_accuracy``."""
    before, after = first.metadata["accuracy"], second.metadata["accuracy"]
    print(f"accuracy: {before:.3f} after the PyTorchJob, {after:.3f} after the TrainJob")
    if after < min_accuracy:
        raise ValueError(f"accuracy {after:.3f} is below min_accuracy {min_accuracy}")
    if after + 0.05 < before:
        raise ValueError(f"the TrainJob made the model worse: {before:.3f} -> {after:.3f}")
    return float(after)


@dsl.pipeline(name="digits-pytorchjob-then-trainjob")
def digits_pipeline(
    namespace: str = "default",
    checkpoint_dir: str = "s3://kubetrain/kfp-digits",
    checkpoint_secret: str = "object-store",
    checkpoint_volume: str = "",
    runtime: str = "torch-distributed-local",
    first_steps: str = "60",
    total_steps: str = "120",
    min_accuracy: float = 0.5,
    wait_timeout: float = 3600.0,
) -> None:
    both = {  # the two steps' jobs run the same image and checkpoint to the same location
        "namespace": namespace,
        "image": IMAGE,
        "checkpoint_dir": checkpoint_dir,
        "checkpoint_secret": checkpoint_secret,
        "checkpoint_volume": checkpoint_volume,
        "ttl_seconds_after_finished": 3600,
        "wait_timeout": wait_timeout,
    }
    first = pytorchjob_launcher(
        job_name="digits-pytorchjob",
        command=["python", "examples/train_ddp.py", "--checkpoint-every=20"],
        args=[f"--steps={first_steps}"],
        num_workers=1,
        working_dir=REPO,
        **both,
        **ON_PROCESS_NODE,
    )
    second = trainjob_launcher(
        runtime=runtime,
        job_name="digits-trainjob",
        command=["torchrun", "examples/train_ddp.py", "--checkpoint-every=20"],
        args=[f"--steps={total_steps}"],
        num_nodes=2,
        resume_from=first.outputs["last_checkpoint"],
        **both,
    )
    evaluate(first=first.outputs["metrics"], second=second.outputs["metrics"], min_accuracy=min_accuracy)


def main() -> None:
    if len(sys.argv) >= 2 and sys.argv[1] == "compile":
        compiler.Compiler().compile(
            digits_pipeline, sys.argv[2] if len(sys.argv) > 2 else "digits-pipeline.yaml"
        )
    elif len(sys.argv) >= 2 and sys.argv[1] == "run":
        local.init(
            runner=local.SubprocessRunner(use_venv=False), pipeline_root=os.path.join(REPO, "build", "kfp")
        )
        namespace = os.environ.get("KUBETRAIN_NAMESPACE", "default")
        digits_pipeline(namespace=namespace, checkpoint_dir=f"s3://kubetrain/{namespace}/kfp-digits")
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
