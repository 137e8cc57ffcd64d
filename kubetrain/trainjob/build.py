"""What a TrainJob asks for, worked out from its runtime: the pod sets to run.

A TrainJob names a runtime whose template is a JobSet: replicated jobs, each an
Indexed Job of pods. kubetrain runs no JobSet or Job controller; this module
turns TrainJob + runtime into ``PodSet``s (``trainjob.state``) (one per replicated job, in the
runtime's order) the way upstream's pipeline does before it writes a JobSet:

1. start from the runtime's JobSet spec and merge the ``runtimePatches`` (v2.2+)
   or ``podTemplateOverrides`` (v2.1) into it;
2. size each pod set: ``parallelism``, or for the trainer ``numNodes``; order
   their start (``dependsOn``, or JobSet's ``startupPolicy: InOrder``);
3. apply the TrainJob's trainer (image, command, args, env, resources per node)
   and initializer settings to their containers;
4. let the ML policy (``trainjob.policies``) add the env that wires ranks together.

Everything is pure: the reconciler builds pods from the result. Errors a user
must fix are ``BuildError``s whose message names the field.
"""

from __future__ import annotations

import copy
import functools
import itertools

from kubetrain import naming
from kubetrain.api import v2
from kubetrain.api.objects import Obj
from kubetrain.kube.resources import PVCS
from kubetrain.kube.strategic import merge, upsert_env
from kubetrain.trainjob import policies
from kubetrain.trainjob.state import (
    DATASET_INITIALIZER,
    MODEL_INITIALIZER,
    NODE,
    TRAINER,
    BuildError,
    Extra,
    PodSet,
    TrainJobInfo,
)


def resolve_patches(job: Obj, runtime: Obj) -> Obj:
    """The runtime's JobSet template with the TrainJob's ``runtimePatches`` (or v2.1 overrides) merged in."""
    template = copy.deepcopy((runtime.get("spec") or {}).get("template") or {})
    jobset_spec: Obj = template.setdefault("spec", {})
    known = [r.get("name") for r in jobset_spec.get("replicatedJobs") or []]
    spec = job.get("spec") or {}
    for i, patch in enumerate(spec.get("runtimePatches") or []):
        patch_template = ((patch.get("trainingRuntimeSpec") or {}).get("template")) or {}
        for rjob in (patch_template.get("spec") or {}).get("replicatedJobs") or []:
            if rjob.get("name") not in known:
                raise BuildError(
                    f"spec.runtimePatches[{i}] ({patch.get('manager')}) patches replicated job "
                    f"{rjob.get('name')!r}, which runtime {_runtime_name(runtime)} does not have "
                    f"(it has {', '.join(map(str, known))})"
                )
        template = merge(template, patch_template)
    for i, override in enumerate(spec.get("podTemplateOverrides") or []):
        pod_patch = {k: override[k] for k in ("metadata", "spec") if override.get(k)}
        for target in override.get("targetJobs") or []:
            rjobs = [
                r for r in template["spec"].get("replicatedJobs") or [] if r.get("name") == target.get("name")
            ]
            if not rjobs:
                raise BuildError(
                    f"spec.podTemplateOverrides[{i}].targetJobs names {target.get('name')!r}, which runtime "
                    f"{_runtime_name(runtime)} does not have (it has {', '.join(map(str, known))})"
                )
            job_spec = rjobs[0].setdefault("template", {}).setdefault("spec", {})
            job_spec["template"] = merge(job_spec.get("template") or {}, pod_patch)
    return template


def _runtime_name(runtime: Obj) -> str:
    return f"{runtime.get('kind', 'runtime')} {runtime.get('metadata', {}).get('name')}"


def build(job: Obj, runtime: Obj) -> TrainJobInfo:
    """Resolve a TrainJob against its runtime into pod sets (the ML policy has not run yet)."""
    jobset = resolve_patches(job, runtime)
    jobset_spec = jobset.get("spec") or {}
    spec = job.get("spec") or {}
    trainer_spec = spec.get("trainer") or {}
    ml_policy = (runtime.get("spec") or {}).get("mlPolicy")
    pod_sets: list[PodSet] = []
    for rjob in jobset_spec.get("replicatedJobs") or []:
        job_template = rjob.get("template") or {}
        job_spec = dict(job_template.get("spec") or {})
        pod_template = copy.deepcopy(job_spec.pop("template", None) or {})
        ancestor = ((job_template.get("metadata") or {}).get("labels") or {}).get(
            naming.LABEL_TRAINJOB_ANCESTOR
        )
        count = int(job_spec.get("parallelism") or 1)
        if ancestor == TRAINER:
            if ml_policy is not None:
                count = int(trainer_spec.get("numNodes") or ml_policy.get("numNodes") or 1)
            elif trainer_spec.get("numNodes"):
                count = int(trainer_spec["numNodes"])
        replicas = 1 if ancestor else int(rjob.get("replicas") or 1)
        pod_sets.append(
            PodSet(
                name=str(rjob["name"]),
                ancestor=ancestor,
                replicas=replicas,
                count=count,
                template=pod_template,
                job_spec=job_spec,
                depends_on=list(rjob.get("dependsOn") or []),
                group=str(rjob.get("groupName") or "default"),
            )
        )
    if not pod_sets:
        raise BuildError(f"{_runtime_name(runtime)} has no spec.template.spec.replicatedJobs")
    if ((jobset_spec.get("startupPolicy") or {}).get("startupPolicyOrder")) == "InOrder":
        # JobSet's InOrder start: each replicated job once every Job of the one before it has started.
        for before, pod_set in itertools.pairwise(pod_sets):
            pod_set.depends_on.append({"name": before.name, "status": "Ready"})
    network = jobset_spec.get("network") or {}
    info = TrainJobInfo(
        job=job,
        runtime=runtime,
        jobset=jobset,
        pod_sets=pod_sets,
        subdomain=str(network.get("subdomain") or job["metadata"]["name"]),
    )
    _apply_initializers(info)
    _apply_trainer(info)
    _apply_volume_claims(info)
    policies.apply(info)
    _check_name_length(info)
    info.coordinator = _coordinator(info)
    return info


def _coordinator(info: TrainJobInfo) -> str | None:
    """JobSet's ``coordinator``: the endpoint of the pod it names, a label value on every pod."""
    coordinator = (info.jobset.get("spec") or {}).get("coordinator")
    if not coordinator:
        return None
    where = "spec.template.spec.coordinator"
    pod_set = info.pod_set(str(coordinator.get("replicatedJob")))
    job_index, pod_index = int(coordinator.get("jobIndex") or 0), int(coordinator.get("podIndex") or 0)
    if pod_set is None:
        raise BuildError(
            f"{where}.replicatedJob {coordinator.get('replicatedJob')!r} is not a replicated job"
        )
    if job_index >= pod_set.replicas or pod_index >= pod_set.count:
        raise BuildError(
            f"{where} names pod {pod_index} of job {job_index} of {pod_set.name}, which has {pod_set.replicas} "
            f"job(s) of {pod_set.count} pod(s)"
        )
    endpoint = info.endpoint(pod_set.name, job_index, pod_index)
    if len(endpoint) > v2.DNS_LABEL_MAX:
        raise BuildError(
            f"{where}: the coordinator's endpoint {endpoint} is longer than {v2.DNS_LABEL_MAX} characters, so it "
            "cannot be the value of the jobset.sigs.k8s.io/coordinator label; use a shorter TrainJob name"
        )
    return endpoint


def _check_name_length(info: TrainJobInfo) -> None:
    """Every pod's hostname, ``<trainjob>-<replicated job>-<job index>-<pod index>``, is a DNS label of
    at most 63 characters (without DNS hostnames, the child Job name ``<trainjob>-<replicated job>-<job
    index>`` still is, as a label value). The CRD cannot know the runtime's names, so the limit of a
    TrainJob's name is checked here, and the message gives the longest name this runtime allows."""
    network = (info.jobset.get("spec") or {}).get("network") or {}
    hostnames = network.get("enableDNSHostnames", True) is not False

    def longest_child(pod_set: PodSet) -> str:
        last_job, last_pod = max(pod_set.replicas - 1, 0), max(pod_set.count - 1, 0)
        if hostnames:
            return naming.trainjob_hostname(info.name, pod_set.name, last_job, last_pod)
        return naming.trainjob_job_name(info.name, pod_set.name, last_job)

    longest = max((longest_child(s) for s in info.pod_sets), key=len)
    if len(longest) <= v2.DNS_LABEL_MAX:
        return
    allowed = v2.DNS_LABEL_MAX - (len(longest) - len(info.name))
    what = "pod hostname" if hostnames else "child Job name"
    fix = (
        f"use a name of at most {allowed} characters"
        if allowed > 0
        else "its replicated job names leave no room for any name: shorten them in the runtime"
    )
    raise BuildError(
        f"metadata.name is too long for {_runtime_name(info.runtime)}: {what} {longest} would have "
        f"{len(longest)} characters, more than {v2.DNS_LABEL_MAX}; {fix}"
    )


def _apply_volume_claims(info: TrainJobInfo) -> None:
    """JobSet's ``volumeClaimPolicies``: one claim ``<name>-<trainjob>`` per template, given to every
    pod that mounts a volume of the template's name; deleted with the TrainJob unless retained."""
    for policy in info.jobset.get("spec", {}).get("volumeClaimPolicies") or []:
        owned = ((policy.get("retentionPolicy") or {}).get("whenDeleted") or "Delete") == "Delete"
        for template in policy.get("templates") or []:
            meta = template.get("metadata") or {}
            volume = str(meta.get("name"))
            claim = f"{volume}-{info.name}"
            body: Obj = {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {
                    "name": claim,
                    "labels": {**(meta.get("labels") or {}), naming.JOBSET_NAME: info.name},
                    "annotations": dict(meta.get("annotations") or {}),
                    **({"ownerReferences": [info.owner_reference()]} if owned else {}),
                },
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
            info.extras.append(Extra(PVCS, claim, functools.partial(copy.deepcopy, body), retained=not owned))
            for pod_set in info.pod_sets:
                spec = pod_set.template.setdefault("spec", {})
                containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
                mounted = any(
                    m.get("name") == volume for c in containers for m in c.get("volumeMounts") or []
                )
                if mounted and not any(v.get("name") == volume for v in spec.get("volumes") or []):
                    spec.setdefault("volumes", []).append(
                        {"name": volume, "persistentVolumeClaim": {"claimName": claim}}
                    )


def _apply_initializers(info: TrainJobInfo) -> None:
    initializer = info.spec.get("initializer") or {}
    for step, key in ((DATASET_INITIALIZER, "dataset"), (MODEL_INITIALIZER, "model")):
        settings = initializer.get(key)
        if not settings:
            continue
        pod_set = next((s for s in info.pod_sets if s.ancestor == step), None)
        container = pod_set.container(step) if pod_set else None
        if container is None:
            raise BuildError(
                f"spec.initializer.{key} is set but {_runtime_name(info.runtime)} has no {step} step "
                f"(a replicated job labelled {naming.LABEL_TRAINJOB_ANCESTOR}={step} with a container named {step})"
            )
        env = list(settings.get("env") or [])
        if settings.get("storageUri"):
            env.insert(0, {"name": "STORAGE_URI", "value": settings["storageUri"]})
        upsert_env(container, env)
        if settings.get("secretRef"):
            container.setdefault("envFrom", []).append({"secretRef": dict(settings["secretRef"])})


def _apply_trainer(info: TrainJobInfo) -> None:
    trainer = info.spec.get("trainer")
    if not trainer:
        return
    pod_set = info.trainer()
    container = pod_set.container(NODE) if pod_set else None
    if container is None:
        raise BuildError(
            f"spec.trainer is set but {_runtime_name(info.runtime)} has no trainer step (a replicated job "
            f"labelled {naming.LABEL_TRAINJOB_ANCESTOR}=trainer, or named node, with a container named node)"
        )
    targets = [container]
    mpi = info.ml_policy.get("mpi") or {}
    node_set = info.pod_set(NODE)
    if mpi.get("runLauncherAsNode") and node_set is not None and node_set is not pod_set:
        node_container = node_set.container(NODE)
        if node_container is not None:
            targets.append(node_container)  # MPI: env and resources reach the node pods as well
    for key in ("image", "command", "args"):
        if trainer.get(key) is not None:
            container[key] = copy.deepcopy(trainer[key])
    for target in targets:
        if trainer.get("resourcesPerNode"):
            target["resources"] = merge(target.get("resources") or {}, trainer["resourcesPerNode"])
        if trainer.get("env"):
            upsert_env(target, trainer["env"])


def retained_claim_of(claim: Obj, trainjob: str) -> bool:
    """Whether ``claim`` is a retained claim of TrainJob ``trainjob``: no owner controls it, it is not
    being deleted, and it carries the TrainJob's name label (the controller made it for this TrainJob or
    an earlier one of the same name, whose retained claim the new one reuses, as JobSet's do)."""
    meta = claim.get("metadata") or {}
    controlled = any(ref.get("controller") for ref in meta.get("ownerReferences") or [])
    labels = meta.get("labels") or {}
    return not controlled and not meta.get("deletionTimestamp") and labels.get(naming.JOBSET_NAME) == trainjob
