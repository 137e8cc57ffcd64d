"""KFP v2 components that launch and track a PyTorchJob or a TrainJob.

Each component runs in the kubetrain image (``KUBETRAIN_COMPONENT_IMAGE`` at
compile time overrides it) and blocks until its job finishes: KFP has no
sensors, so the step's lifetime is the job's. The work is done by
``kubetrain.components.launch``; this module only declares the inputs and
outputs (KFP embeds a component's source, so everything it uses is imported
inside the function).

Identity: a step's jobs are found again (a retry, a preempted step) by its
pipeline run, task and job name. Called in a pipeline, the components fill
``run_id`` and ``task_name`` with KFP's ``PIPELINE_JOB_ID_PLACEHOLDER`` and
``PIPELINE_TASK_NAME_PLACEHOLDER`` unless given: KFP resolves placeholders only
where a pipeline passes them, never in a component's defaults.

Outputs: ``state``, ``job_name`` and ``last_checkpoint`` as values, the
training report's metrics as a ``Metrics`` artifact, the metric curves of the
step's attempts (``kubetrain plot``'s PNG, from rank 0's logs) as an ``HTML``
artifact the KFP UI shows, and a ``Model`` artifact pointing at the final
checkpoint (claim and path). The TrainJob launcher takes
the step's resources, env, node selector and tolerations from the pipeline
(``set_cpu_limit``, ``set_accelerator_limit``...) through KFP's task config
passthrough and gives them to the trainer nodes.
"""

import os
from typing import NamedTuple, Optional

from kfp import dsl
from kfp.dsl import HTML, Metrics, Model, Output, TaskConfig
from kfp.dsl.pipeline_task import PipelineTask
from kfp.dsl.python_component import PythonComponent

IMAGE = os.environ.get("KUBETRAIN_COMPONENT_IMAGE", "kubetrain/kubetrain:0.1.0")

_TASK_CONFIG = [
    dsl.TaskConfigField.RESOURCES,
    dsl.TaskConfigField.ENV,
    dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
    dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
]


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def pytorchjob_launcher(
    metrics: Output[Metrics],
    model: Output[Model],
    curves: Output[HTML],
    job_name: str = "",
    run_id: str = "",
    task_name: str = "",
    namespace: str = "",
    manifest: Optional[dict] = None,
    image: str = "",
    command: Optional[list] = None,
    args: Optional[list] = None,
    num_workers: int = 1,
    gpus: int = 0,
    resources: Optional[dict] = None,
    env: Optional[dict] = None,
    checkpoint_dir: str = "",
    checkpoint_volume: str = "",
    checkpoint_secret: str = "",
    resume_from: str = "",
    ttl_seconds_after_finished: int = -1,
    active_deadline_seconds: int = 0,
    backoff_limit: int = -1,
    stall_timeout_seconds: int = 0,
    wait_timeout: float = 0.0,
    queue_name: str = "",
    priority_class: str = "",
    node_selector: Optional[dict] = None,
    tolerations: Optional[list] = None,
    working_dir: str = "",
) -> NamedTuple("Outputs", [("state", str), ("job_name", str), ("last_checkpoint", str)]):
    """Run a PyTorchJob (a Master and ``num_workers`` Workers) and wait for it."""
    inputs = dict(locals())
    from kubetrain.components.launch import run_component

    return run_component("PyTorchJob", inputs)  # KFP reads a plain tuple in the order of the Outputs


@dsl.component(base_image=IMAGE, install_kfp_package=False, task_config_passthroughs=_TASK_CONFIG)
def trainjob_launcher(
    metrics: Output[Metrics],
    model: Output[Model],
    curves: Output[HTML],
    task_config: TaskConfig,
    runtime: str = "",
    job_name: str = "",
    run_id: str = "",
    task_name: str = "",
    namespace: str = "",
    manifest: Optional[dict] = None,
    image: str = "",
    command: Optional[list] = None,
    args: Optional[list] = None,
    num_nodes: int = 1,
    gpus: int = 0,
    resources: Optional[dict] = None,
    env: Optional[dict] = None,
    checkpoint_dir: str = "",
    checkpoint_volume: str = "",
    checkpoint_secret: str = "",
    resume_from: str = "",
    ttl_seconds_after_finished: int = -1,
    active_deadline_seconds: int = 0,
    stall_timeout_seconds: int = 0,
    wait_timeout: float = 0.0,
    queue_name: str = "",
    priority_class: str = "",
    node_selector: Optional[dict] = None,
    tolerations: Optional[list] = None,
) -> NamedTuple("Outputs", [("state", str), ("job_name", str), ("last_checkpoint", str)]):
    """Run a TrainJob on a (Cluster)TrainingRuntime and wait for it."""
    inputs = dict(locals())
    from kubetrain.components.launch import run_component

    return run_component("TrainJob", inputs)  # KFP reads a plain tuple in the order of the Outputs


class _KnowsItsRun(PythonComponent):
    """A launcher that, called in a pipeline, passes the run and task it runs in as ``run_id`` and
    ``task_name`` (unless given), so every retry of the step finds its own job and no other run's."""

    def __call__(self, *args: object, **kwargs: object) -> PipelineTask:
        kwargs.setdefault("run_id", dsl.PIPELINE_JOB_ID_PLACEHOLDER)
        kwargs.setdefault("task_name", dsl.PIPELINE_TASK_NAME_PLACEHOLDER)
        task: PipelineTask = super().__call__(*args, **kwargs)
        return task


for _launcher in (pytorchjob_launcher, trainjob_launcher):
    _launcher.__class__ = _KnowsItsRun
