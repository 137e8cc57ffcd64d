"""A TrainJob resolved against its runtime: pod sets, overrides, ML policy env, pods, and JobSet decisions."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubetrain.controller.plugins.checkpoint import CheckpointPlugin
from kubetrain.controller.plugins.gang import TrainJobGangPlugin, trainjob_gang
from kubetrain.controller.trainjob import jobset
from kubetrain.controller.trainjob.indexedjob import ChildJob
from kubetrain.trainjob.build import build
from kubetrain.trainjob.state import BuildError, TrainJobInfo
from tests.support import runtime_patch

RUNTIMES = Path(__file__).resolve().parents[3] / "deploy" / "runtimes"


def runtime(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((RUNTIMES / f"{name}.yaml").read_text())
    return loaded


def trainjob(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mnist", "namespace": "team", "uid": "uid-1", "annotations": annotations or {}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, **spec},
    }


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def node(info: TrainJobInfo, pod_set: str = "node") -> dict[str, Any]:
    found = info.pod_set(pod_set)
    assert found is not None
    container = found.container("node")
    assert container is not None
    return container


def test_torch_wires_torchrun_through_pet_env_and_the_trainer_overrides_the_container() -> None:
    info = build(
        trainjob(
            {
                "trainer": {
                    "numNodes": 2,
                    "image": "example.com/mnist:1",
                    "command": ["torchrun", "train.py"],
                    "env": [{"name": "LOG_LEVEL", "value": "info"}],
                    "resourcesPerNode": {"limits": {"nvidia.com/gpu": "4"}},
                }
            }
        ),
        runtime("torch-distributed"),
    )
    [pod_set] = info.pod_sets
    assert (pod_set.name, pod_set.count, pod_set.replicas) == ("node", 2, 1)
    container = node(info)
    assert container["image"] == "example.com/mnist:1"
    assert container["command"] == ["torchrun", "train.py"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "4"}}
    assert container["ports"] == [{"containerPort": 29500}]
    env = env_of(container)
    assert env["LOG_LEVEL"] == "info"
    assert env["PET_NNODES"] == "2"
    assert env["PET_NPROC_PER_NODE"] == "auto", "GPUs present: torchrun counts them itself"
    assert env["PET_MASTER_ADDR"] == "mnist-node-0-0.mnist"
    assert env["PET_MASTER_PORT"] == "29500"
    assert env["PET_NODE_RANK"] == {
        "fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}
    }
    assert next(e["name"] for e in container["env"]) == "LOG_LEVEL", "the policy's env comes after the user's"


@pytest.mark.parametrize(
    ("resources", "requested", "expected"),
    [
        ({"requests": {"cpu": "3500m"}}, None, "4"),
        ({"limits": {"cpu": "2"}}, None, "2"),
        ({}, None, "1"),
        ({"requests": {"nvidia.com/gpu": "2"}}, None, "auto"),
        ({"requests": {"cpu": "8"}}, 3, "3"),
    ],
)
def test_num_proc_per_node_auto_resolves_to_cpus_without_gpus(
    resources: dict[str, Any], requested: int | None, expected: str
) -> None:
    trainer: dict[str, Any] = {"resourcesPerNode": resources} if resources else {}
    if requested:
        trainer["numProcPerNode"] = requested
    info = build(trainjob({"trainer": trainer}), runtime("torch-distributed"))
    assert env_of(node(info))["PET_NPROC_PER_NODE"] == expected


def test_resources_per_node_merge_key_by_key_over_the_runtime() -> None:
    rt = runtime("torch-distributed")
    container = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]
    container["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}
    info = build(trainjob({"trainer": {"resourcesPerNode": {"requests": {"cpu": "4"}}}}), rt)
    assert node(info)["resources"] == {"requests": {"cpu": "4", "memory": "1Gi"}, "limits": {"memory": "2Gi"}}


def test_runtime_patches_merge_into_the_named_replicated_job() -> None:
    patch = runtime_patch(
        {
            "metadata": {"labels": {"team": "a"}},
            "spec": {
                "nodeSelector": {"accelerator": "h100"},
                "tolerations": [{"key": "a", "operator": "Exists"}],
                "containers": [{"name": "node", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}],
                "volumes": [{"name": "d", "emptyDir": {}}],
            },
        }
    )
    info = build(trainjob({"runtimePatches": [patch]}), runtime("torch-distributed"))
    template = info.pod_sets[0].template
    assert template["metadata"]["labels"] == {"team": "a"}
    assert template["spec"]["nodeSelector"] == {"accelerator": "h100"}
    assert template["spec"]["volumes"] == [{"name": "d", "emptyDir": {}}]
    assert node(info)["volumeMounts"] == [{"name": "d", "mountPath": "/d"}]
    assert node(info)["image"].startswith("pytorch/pytorch"), "fields the patch leaves alone stay"


def test_a_patch_for_a_replicated_job_the_runtime_lacks_names_it() -> None:
    patch = {
        "manager": "example.com/x",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [{"name": "launcher"}]}}},
    }
    with pytest.raises(BuildError, match=r"runtimePatches\[0\].*'launcher'.*has node"):
        build(trainjob({"runtimePatches": [patch]}), runtime("torch-distributed"))


def test_v21_pod_template_overrides_are_accepted() -> None:
    override = {"targetJobs": [{"name": "node"}], "spec": {"serviceAccountName": "trainer"}}
    info = build(trainjob({"podTemplateOverrides": [override]}), runtime("torch-distributed"))
    assert info.pod_sets[0].template["spec"]["serviceAccountName"] == "trainer"


def test_initializers_get_their_storage_uri_env_and_secret() -> None:
    job = trainjob(
        {
            "initializer": {
                "dataset": {"storageUri": "hf://org/data", "secretRef": {"name": "hf-token"}},
                "model": {"env": [{"name": "ACCESS_TOKEN", "value": "x"}]},
            }
        }
    )
    job["spec"]["runtimeRef"]["name"] = "torchtune-llama3.2-1b"
    info = build(job, runtime("torchtune-llama3.2-1b"))
    dataset = info.pod_set("dataset-initializer")
    model = info.pod_set("model-initializer")
    assert dataset is not None and model is not None
    data_container = dataset.container("dataset-initializer")
    assert data_container is not None
    assert env_of(data_container)["STORAGE_URI"] == "hf://org/data"
    assert data_container["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    model_container = model.container("model-initializer")
    assert model_container is not None
    assert env_of(model_container)["ACCESS_TOKEN"] == "x"
    assert env_of(model_container)["STORAGE_URI"].startswith("hf://meta-llama/")


def test_an_initializer_the_runtime_cannot_run_is_a_clear_error() -> None:
    with pytest.raises(
        BuildError, match=r"spec\.initializer\.dataset is set but .* has no dataset-initializer step"
    ):
        build(
            trainjob({"initializer": {"dataset": {"storageUri": "s3://b/k"}}}), runtime("torch-distributed")
        )


def test_volume_claim_policies_give_every_mounting_pod_the_shared_claim() -> None:
    info = build(trainjob({}), runtime("torchtune-llama3.2-1b"))
    claims = {extra.name: extra for extra in info.extras}
    assert sorted(claims) == ["initializer-mnist", "output-mnist"]
    assert claims["output-mnist"].retained and not claims["initializer-mnist"].retained
    claim = claims["initializer-mnist"]
    assert claim.name == "initializer-mnist"
    body = claim.make()
    assert body["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert body["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    for pod_set in info.pod_sets:
        assert {
            "name": "initializer",
            "persistentVolumeClaim": {"claimName": "initializer-mnist"},
        } in pod_set.template["spec"]["volumes"]


def test_jax_and_xgboost_policies_set_their_coordinator_env() -> None:
    jax = build(trainjob({"trainer": {"numNodes": 3}}), runtime("jax-distributed"))
    env = env_of(node(jax))
    assert env["JAX_NUM_PROCESSES"] == "3"
    assert env["JAX_COORDINATOR_ADDRESS"] == "mnist-node-0-0.mnist:29500"
    assert "fieldRef" in env["JAX_PROCESS_ID"]
    xgb = build(
        trainjob({"trainer": {"numNodes": 2, "resourcesPerNode": {"limits": {"nvidia.com/gpu": 4}}}}),
        runtime("xgboost-distributed"),
    )
    env = env_of(node(xgb))
    assert (env["DMLC_TRACKER_URI"], env["DMLC_TRACKER_PORT"], env["DMLC_NUM_WORKER"]) == (
        "mnist-node-0-0.mnist",
        "29500",
        "8",
    )


def test_mpi_runs_the_launcher_as_a_node_with_a_hostfile_and_ssh_key() -> None:
    info = build(trainjob({"trainer": {"numNodes": 3}}), runtime("deepspeed-distributed"))
    launcher, nodes = info.pod_set("launcher"), info.pod_set("node")
    assert launcher is not None and nodes is not None
    assert (launcher.count, nodes.count) == (1, 2)
    secret, hostfile = (e.make() for e in info.extras)
    assert secret["type"] == "kubernetes.io/ssh-auth" and secret["immutable"] is True
    assert set(secret["data"]) == {"ssh-privatekey", "ssh-publickey"}
    assert hostfile["data"]["hostfile"] == (
        "mnist-launcher-0-0.mnist slots=1\nmnist-node-0-0.mnist slots=1\nmnist-node-0-1.mnist slots=1\n"
    )
    launcher_container = launcher.container("node")
    assert launcher_container is not None
    assert env_of(launcher_container)["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert {"name": "mpi-ssh-auth", "mountPath": "/home/mpiuser/.ssh"} in launcher_container["volumeMounts"]


# -- pods ----------------------------------------------------------------------------------------------
def torch_info(nodes: int = 2, **spec: Any) -> TrainJobInfo:
    return build(trainjob({"trainer": {"numNodes": nodes}, **spec}), runtime("torch-distributed"))


def test_pods_carry_the_identity_jobset_and_the_job_controller_give_them() -> None:
    info = torch_info()
    pod = jobset.build_pod(info, ChildJob(info.pod_sets[0], 0), 1, attempt=0, plugins=[])
    meta, spec = pod["metadata"], pod["spec"]
    assert meta["name"].startswith("mnist-node-0-1-") and len(meta["name"]) == len("mnist-node-0-1-") + 5
    assert (spec["hostname"], spec["subdomain"]) == ("mnist-node-0-1", "mnist")
    assert spec["restartPolicy"] == "OnFailure"
    labels = meta["labels"]
    assert labels["jobset.sigs.k8s.io/jobset-name"] == "mnist"
    assert labels["jobset.sigs.k8s.io/replicatedjob-name"] == "node"
    assert labels["jobset.sigs.k8s.io/job-index"] == "0"
    assert labels["jobset.sigs.k8s.io/restart-attempt"] == "0"
    assert labels["batch.kubernetes.io/job-completion-index"] == "1"
    assert labels["batch.kubernetes.io/job-name"] == "mnist-node-0"
    assert meta["annotations"]["batch.kubernetes.io/job-completion-index"] == "1"
    assert meta["annotations"]["jobset.sigs.k8s.io/jobset-name"] == "mnist"
    assert meta["ownerReferences"][0]["kind"] == "TrainJob"
    assert "JOB_COMPLETION_INDEX" in env_of(spec["containers"][0])


def test_pod_names_are_deterministic_per_attempt_and_retry() -> None:
    info = torch_info()
    pod_set = info.pod_sets[0]
    names = {
        jobset.pod_name(info, ChildJob(pod_set, 0, failures=r), 0, attempt=a)
        for a in range(3)
        for r in range(3)
    }
    assert len(names) == 9
    child = ChildJob(pod_set, 0, failures=2)
    assert jobset.pod_name(info, child, 0, attempt=1) == jobset.pod_name(info, child, 0, attempt=1)


def test_the_checkpoint_contract_reaches_trainjob_pods() -> None:
    job = trainjob({"trainer": {"numNodes": 1}}, annotations={"kubetrain.dev/checkpoint-dir": "/ckpt"})
    info = build(job, runtime("torch-distributed"))
    pod = jobset.build_pod(info, ChildJob(info.pod_sets[0], 0), 0, attempt=0, plugins=[CheckpointPlugin()])
    env = env_of(pod["spec"]["containers"][0])
    assert env["KUBETRAIN_CHECKPOINT_DIR"] == "/ckpt"
    assert {"name": "kubetrain-checkpoints", "emptyDir": {}} in pod["spec"]["volumes"]


def test_the_headless_service_selects_every_pod_and_publishes_unready_ones() -> None:
    service = jobset.build_service(torch_info())
    assert service["metadata"]["name"] == "mnist"
    assert service["spec"] == {
        "clusterIP": "None",
        "selector": {"jobset.sigs.k8s.io/jobset-name": "mnist"},
        "publishNotReadyAddresses": True,
    }


# -- JobSet decisions ----------------------------------------------------------------------------------
def fake_pod(
    info: TrainJobInfo, pod_set: str, index: int, phase: str, *, attempt: int = 0, ready: bool = False
) -> dict[str, Any]:
    found = info.pod_set(pod_set)
    assert found is not None
    pod = jobset.build_pod(info, ChildJob(found, 0), index, attempt=attempt, plugins=[])
    pod["metadata"]["uid"] = pod["metadata"]["name"]
    pod["status"] = {
        "phase": phase,
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "containerStatuses": [
            {
                "name": "node",
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 3}} if phase == "Failed" else {},
            }
        ],
    }
    return pod


def test_the_job_completes_when_every_index_succeeded() -> None:
    info = torch_info()
    pods = [fake_pod(info, "node", 0, "Succeeded"), fake_pod(info, "node", 1, "Running")]
    assert not jobset.succeeded(info, jobset.observe(info, pods, 0))
    pods[1] = fake_pod(info, "node", 1, "Succeeded")
    assert jobset.succeeded(info, jobset.observe(info, pods, 0))


def test_a_failed_pod_is_replaced_until_the_backoff_limit_then_the_job_fails() -> None:
    info = torch_info()
    info.pod_sets[0].job_spec["backoffLimit"] = 1
    obs = jobset.observe(info, [fake_pod(info, "node", 0, "Failed"), fake_pod(info, "node", 1, "Running")], 0)
    [child] = obs.jobs
    assert not child.failed and child.missing() == [0]
    second = fake_pod(info, "node", 0, "Failed")
    second["metadata"]["name"] += "x"
    second["metadata"]["uid"] += "x"
    obs = jobset.observe(info, [fake_pod(info, "node", 0, "Failed"), second], 0)
    [child] = obs.jobs
    assert child.failed
    decision = jobset.on_job_failure(info, [child], 0)
    assert (decision.restart, decision.reason) == (False, "FailedJobs")
    assert "exited with code 3" in decision.message and "backoffLimit 1" in decision.message


def test_failures_are_counted_once_and_survive_the_failed_pod_being_garbage_collected() -> None:
    info = torch_info()
    info.pod_sets[0].job_spec["backoffLimit"] = 1
    failed = fake_pod(info, "node", 0, "Failed")
    running = fake_pod(info, "node", 1, "Running")
    first = jobset.observe(info, [failed, running], 0, job_failures={}, counted={})
    assert first.job_failures == {"node-0": 1} and first.counted == {failed["metadata"]["uid"]: 1}
    # The next pass sees the same failed pod: nothing new.
    again = jobset.observe(info, [failed, running], 0, job_failures=first.job_failures, counted=first.counted)
    assert again.job_failures == {"node-0": 1}
    # The pod garbage collector removes the failed pod: its failure stays counted.
    collected = jobset.observe(info, [running], 0, job_failures=again.job_failures, counted=again.counted)
    [child] = collected.jobs
    assert child.failures == 1 and not child.failed and collected.counted == {}


def test_a_replacement_pod_never_takes_the_name_of_a_pod_that_still_exists() -> None:
    info = torch_info()
    pod_set = info.pod_sets[0]
    first = jobset.build_pod(info, ChildJob(pod_set, 0), 0, attempt=0, plugins=[])
    first["metadata"]["uid"] = "first"
    first["status"] = {"phase": "Failed", "containerStatuses": []}
    obs = jobset.observe(info, [first], 0, job_failures={}, counted={})
    [child] = obs.jobs
    replacement = jobset.build_pod(info, child, 0, attempt=0, plugins=[])
    assert replacement["metadata"]["name"] != first["metadata"]["name"]
    # Even when an earlier failed pod of that index was garbage-collected meanwhile.
    later = jobset.observe(info, [first], 0, job_failures={"node-0": 5}, counted={"first": 1})
    again = jobset.build_pod(info, later.jobs[0], 0, attempt=0, plugins=[])
    assert again["metadata"]["name"] not in {first["metadata"]["name"], replacement["metadata"]["name"]}


def test_max_restarts_restarts_then_reports_reaching_the_limit() -> None:
    info = torch_info()
    info.jobset["spec"]["failurePolicy"] = {"maxRestarts": 2}
    info.pod_sets[0].job_spec["backoffLimit"] = 0
    [child] = jobset.observe(info, [fake_pod(info, "node", 0, "Failed")], 0).jobs
    assert jobset.on_job_failure(info, [child], 1).restart
    last = jobset.on_job_failure(info, [child], 2)
    assert (last.restart, last.reason) == (False, "ReachedMaxRestarts")


def test_a_fail_rule_overrides_max_restarts() -> None:
    info = torch_info()
    info.jobset["spec"]["failurePolicy"] = {
        "maxRestarts": 5,
        "rules": [{"name": "stop", "action": "FailJobSet", "onJobFailureReasons": ["BackoffLimitExceeded"]}],
    }
    info.pod_sets[0].job_spec["backoffLimit"] = 0
    [child] = jobset.observe(info, [fake_pod(info, "node", 0, "Failed")], 0).jobs
    decision = jobset.on_job_failure(info, [child], 0)
    assert (decision.restart, decision.reason) == (False, "FailJobSetFailurePolicyAction")


def test_pods_of_an_earlier_restart_attempt_are_stale() -> None:
    info = torch_info()
    obs = jobset.observe(info, [fake_pod(info, "node", 0, "Running", attempt=0)], 1)
    assert len(obs.stale) == 1 and obs.jobs[0].missing() == [0, 1]


def test_depends_on_waits_for_ready_or_complete() -> None:
    info = build(trainjob({"trainer": {"numNodes": 2}}), runtime("deepspeed-distributed"))
    launcher = info.pod_set("launcher")
    assert launcher is not None
    nodes = [fake_pod(info, "node", 0, "Running")]
    assert not jobset.depends_on_met(info, launcher, jobset.observe(info, nodes, 0))
    nodes = [fake_pod(info, "node", 0, "Running", ready=True)]
    assert jobset.depends_on_met(info, launcher, jobset.observe(info, nodes, 0))
    tune = build(trainjob({}), runtime("torchtune-llama3.2-1b"))
    trainer = tune.pod_set("node")
    assert trainer is not None
    pods = [
        fake_pod(tune, "dataset-initializer", 0, "Succeeded"),
        fake_pod(tune, "model-initializer", 0, "Running"),
    ]
    assert not jobset.depends_on_met(tune, trainer, jobset.observe(tune, pods, 0))
    pods[1] = fake_pod(tune, "model-initializer", 0, "Succeeded")
    assert jobset.depends_on_met(tune, trainer, jobset.observe(tune, pods, 0))


def test_success_policy_any_of_the_launcher() -> None:
    info = build(trainjob({"trainer": {"numNodes": 2}}), runtime("deepspeed-distributed"))
    pods = [fake_pod(info, "node", 0, "Running"), fake_pod(info, "launcher", 0, "Succeeded")]
    assert jobset.succeeded(info, jobset.observe(info, pods, 0)), "the launcher alone decides (successPolicy)"


def test_jobs_status_counts_child_jobs() -> None:
    info = torch_info()
    status = jobset.jobs_status(
        info, jobset.observe(info, [fake_pod(info, "node", 0, "Running", ready=True)], 0)
    )
    assert status == [{"name": "node", "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}]
    both = [fake_pod(info, "node", i, "Running", ready=True) for i in range(2)]
    assert jobset.jobs_status(info, jobset.observe(info, both, 0))[0]["ready"] == 1
    assert jobset.jobs_status(info, jobset.observe(info, [], 0), suspended=True)[0]["suspended"] == 1


def test_the_build_never_changes_the_runtime() -> None:
    rt = runtime("torch-distributed")
    before = copy.deepcopy(rt)
    build(trainjob({"trainer": {"numNodes": 4, "env": [{"name": "A", "value": "1"}]}}), rt)
    assert rt == before


def test_a_name_too_long_for_the_runtimes_hostnames_names_the_longest_allowed() -> None:
    job = trainjob({"trainer": {"numNodes": 2}})
    job["metadata"]["name"] = "n" * 57
    with pytest.raises(BuildError, match="more than 63; use a name of at most 54 characters"):
        build(job, runtime("torch-distributed"))
    job["metadata"]["name"] = "n" * 54
    build(job, runtime("torch-distributed"))


def test_resources_that_are_not_quantities_name_their_field() -> None:
    job = trainjob({"trainer": {"resourcesPerNode": {"limits": {"nvidia.com/gpu": "lots"}}}})
    with pytest.raises(BuildError, match=r"spec.trainer.resourcesPerNode: limits.nvidia.com/gpu 'lots'"):
        build(job, runtime("torch-distributed"))


def with_side_containers(base: dict[str, Any]) -> dict[str, Any]:
    """torch-distributed with an init container and a sidecar in its node job."""
    changed = copy.deepcopy(base)
    pod = changed["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["initContainers"] = [{"name": "preflight", "image": "example.com/check:1"}]
    pod["containers"].append({"name": "metrics", "image": "example.com/metrics:1"})
    return changed


def test_env_injection_gives_the_named_init_and_sidecar_containers_every_pet_variable() -> None:
    shipped = with_side_containers(runtime("torch-distributed"))
    shipped["spec"]["mlPolicy"]["torch"] = {
        "envInjection": {"targets": [{"jobName": "node", "containerNames": ["preflight", "metrics"]}]}
    }
    info = build(trainjob({"trainer": {"numNodes": 2}}), shipped)
    spec = info.pod_sets[0].template["spec"]
    preflight, metrics = spec["initContainers"][0], spec["containers"][1]
    for container in (preflight, metrics):
        env = env_of(container)
        assert env["PET_NNODES"] == "2" and env["PET_MASTER_ADDR"] == "mnist-node-0-0.mnist"
        assert env["PET_MASTER_PORT"] == "29500" and "PET_NODE_RANK" in env and "PET_NPROC_PER_NODE" in env
        assert "ports" not in container, "only the trainer opens the rendezvous port"
    plain = build(trainjob({"trainer": {"numNodes": 2}}), with_side_containers(runtime("torch-distributed")))
    assert "env" not in plain.pod_sets[0].template["spec"]["initContainers"][0], "without envInjection: none"


def test_env_injection_targets_keep_the_master_address_under_torchtune() -> None:
    shipped = runtime("torchtune-llama3.2-1b")
    shipped["spec"]["mlPolicy"]["torch"] = {
        "envInjection": {"targets": [{"jobName": "node", "containerNames": ["preflight"]}]}
    }
    pod = shipped["spec"]["template"]["spec"]["replicatedJobs"][2]["template"]["spec"]["template"]["spec"]
    pod["initContainers"] = [{"name": "preflight", "image": "example.com/check:1"}]
    job = trainjob({"trainer": {"command": ["tune", "run"]}})
    job["spec"]["runtimeRef"]["name"] = "torchtune-llama3.2-1b"
    info = build(job, shipped)
    trainer = info.pod_set("node")
    assert trainer is not None
    assert "PET_MASTER_ADDR" in env_of(trainer.template["spec"]["initContainers"][0])
    assert "PET_MASTER_ADDR" not in env_of(node(info)), "tune run gets its endpoint on the command line"


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            {"jobName": "launcher", "containerNames": ["x"]},
            r"targets\[0\]\.jobName 'launcher' is not a replicated job",
        ),
        (
            {"jobName": "node", "containerNames": ["ghost"]},
            r"targets\[0\]\.containerNames\[0\] 'ghost' is not a container",
        ),
    ],
)
def test_an_env_injection_target_the_runtime_lacks_names_it(target: dict[str, Any], message: str) -> None:
    shipped = runtime("torch-distributed")
    shipped["spec"]["mlPolicy"]["torch"] = {"envInjection": {"targets": [target]}}
    with pytest.raises(BuildError, match=r"spec\.mlPolicy\.torch\.envInjection\." + message):
        build(trainjob({"trainer": {"numNodes": 1}}), shipped)


def gang_pod(
    policy: dict[str, Any], scheduler_name: str | None = None
) -> tuple[TrainJobInfo, dict[str, Any]]:
    """Rank 0's pod of torch-distributed under ``podGroupPolicy``, its template naming a scheduler or not."""
    shipped = runtime("torch-distributed")
    shipped["spec"]["podGroupPolicy"] = policy
    if scheduler_name:
        pod = shipped["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
        pod["spec"]["schedulerName"] = scheduler_name
    info = build(trainjob({"trainer": {"numNodes": 2}}), shipped)
    gang = trainjob_gang(info.gang_policy, None)
    assert gang is not None
    plugins = [TrainJobGangPlugin(gang)]
    return info, jobset.build_pod(info, ChildJob(info.pod_sets[0], 0), 0, attempt=0, plugins=plugins)


@pytest.mark.parametrize("scheduler_name", [None, "my-scheduler"])
def test_a_coscheduled_trainjob_pod_gets_the_pod_group_label_and_keeps_the_runtimes_scheduler(
    scheduler_name: str | None,
) -> None:
    info, pod = gang_pod({"coscheduling": {}}, scheduler_name)
    assert pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "mnist"
    assert pod["spec"].get("schedulerName") == scheduler_name, "upstream adds the label only"
    assert not info.warnings


def test_a_volcano_trainjob_pod_gets_the_group_annotation_only() -> None:
    _, pod = gang_pod({"volcano": {}})
    assert pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "mnist"
    assert "volcano.sh/task-spec" not in pod["metadata"]["annotations"]
    assert "schedulerName" not in pod["spec"]


def test_the_volcano_pod_group_carries_the_runtimes_network_topology() -> None:
    shipped = runtime("torch-distributed")
    topology = {"mode": "hard", "highestTierAllowed": 2}
    shipped["spec"]["podGroupPolicy"] = {"volcano": {"networkTopology": topology}}
    info = build(trainjob({"trainer": {"numNodes": 2}}), shipped)
    gang = trainjob_gang(info.gang_policy, None)
    assert gang is not None
    assert gang.pod_group(info)["spec"]["networkTopology"] == topology
