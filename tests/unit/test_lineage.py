"""The lineage rules, without a cluster: identities, spec hashes, and what the next run of a caller does.

Every Airflow retry, KFP retry and ``kubetrain resume`` goes through ``lineage.decide``; these tests
are its contract (docs/checkpoints.md has the same table in words).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from kubetrain import naming
from kubetrain.client import lineage
from kubetrain.client.lineage import Action, Attempt, Identity, Mode, Request

TASK = Identity.airflow("nightly", "train", "scheduled__2026-01-01T00:00:00+00:00", None)
MANIFEST: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {
        "name": "train-1a2b3c4d",
        "labels": {"kubetrain.dev/try-number": "1"},
        "annotations": {"kubetrain.dev/checkpoint-dir": "/ckpt"},
    },
    "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}}},
}
SPEC = lineage.spec_hash(MANIFEST)


def request(**overrides: Any) -> Request:
    fields: dict[str, Any] = {
        "identity": TASK,
        "kind": "PyTorchJob",
        "namespace": "team-a",
        "base_lineage": "train-1a2b3c4d",
        "spec_hash": SPEC,
        "template": MANIFEST,
        "first_name": "train-1a2b3c4d",
    }
    return Request(**{**fields, **overrides})


def attempt(number: int, state: str, **overrides: Any) -> Attempt:
    fields: dict[str, Any] = {
        "name": "train-1a2b3c4d" if number == 1 else f"train-1a2b3c4d-a{number}",
        "number": number,
        "state": state,
        "lineage": "train-1a2b3c4d",
        "identity": TASK.text,
        "spec_hash": SPEC,
        "created": f"2026-01-01T00:0{number}:00Z",
    }
    return Attempt(**{**fields, **overrides})


# -- identity ---------------------------------------------------------------------------------------
def test_task_ids_that_label_values_cannot_tell_apart_are_different_identities() -> None:
    training, evaluation = (Identity.airflow("d", task, "r", None) for task in ("训练", "評価"))
    assert naming.label_value("训练") == naming.label_value("評価") == "", "the readable label loses them"
    assert training.hash != evaluation.hash and training.text != evaluation.text


def test_run_ids_differing_only_in_separators_are_different_identities() -> None:
    runs = ["manual__2026-01-01T00:00:00+00:00", "manual__2026-01-01T00_00_00_00_00", "manual__2026~01"]
    assert len({naming.label_value(r) for r in runs[:2]}) == 1, "the readable label merges them"
    assert len({Identity.airflow("d", "t", r, None).hash for r in runs}) == 3


def test_every_field_of_an_identity_counts_and_no_field_can_spill_into_another() -> None:
    base = Identity.airflow("d", "t", "r", 0)
    assert base != Identity.airflow("d", "t", "r", 1)
    assert base != Identity.airflow("d", "t", "r", None)
    # Naive joining would make ("a/b", "c") and ("a", "b/c") one identity.
    assert Identity.kfp("a/b", "c", "") != Identity.kfp("a", "b/c", "")
    assert Identity.kfp("run", "task", "") != Identity.job("PyTorchJob", "task")


def test_the_identity_hash_is_a_label_value_and_the_identity_survives_the_annotation() -> None:
    identity = Identity.kfp("9b1f…", "pytorchjob-launcher", "数字")
    assert len(identity.hash) == 40 and identity.hash == naming.label_value(identity.hash)
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "x", "annotations": {"kubetrain.dev/identity": identity.text}},
    }
    assert Identity.of_job(job) == identity


def test_a_job_without_an_identity_belongs_to_its_own_lineage() -> None:
    job = {
        "kind": "PyTorchJob",
        "metadata": {"name": "flaky-a2", "labels": {"kubetrain.dev/lineage": "flaky"}},
    }
    assert Identity.of_job(job) == Identity.job("PyTorchJob", "flaky")
    assert Identity.of_job({"kind": "pytorchjobs", "metadata": {"name": "flaky"}}) == Identity.job(
        "PyTorchJob", "flaky"
    )


# -- spec hash --------------------------------------------------------------------------------------
def test_the_spec_hash_ignores_what_changes_per_attempt_and_sees_what_the_caller_asked_for() -> None:
    retried = {
        **MANIFEST,
        "metadata": {
            "name": "train-1a2b3c4d-a2",
            "labels": {"kubetrain.dev/try-number": "2"},
            "annotations": {
                "kubetrain.dev/checkpoint-dir": "/ckpt",
                "kubetrain.dev/attempt": "2",
                "kubetrain.dev/last-checkpoint": "/ckpt/step-40",
                "kubetrain.dev/training-report": "{}",
            },
        },
        "status": {"conditions": []},
    }
    assert lineage.spec_hash(retried) == SPEC
    changed = {
        **MANIFEST,
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1}, "Worker": {"replicas": 2}}},
    }
    assert lineage.spec_hash(changed) != SPEC
    moved = {
        **MANIFEST,
        "metadata": {**MANIFEST["metadata"], "annotations": {"kubetrain.dev/checkpoint-dir": "/x"}},
    }
    assert lineage.spec_hash(moved) != SPEC, "another checkpoint dir is another run"


# -- decisions --------------------------------------------------------------------------------------
def test_nothing_found_starts_the_first_attempt_under_the_callers_name() -> None:
    decision = lineage.decide(request(), [])
    assert (decision.action, decision.number, decision.name) == (Action.START, 1, "train-1a2b3c4d")
    kfp = lineage.decide(request(first_name=""), [])
    assert kfp.name == "train-1a2b3c4d-a1"


@pytest.mark.parametrize("state", ["Pending", "Running", "Restarting"])
def test_an_attempt_that_runs_is_reattached_to(state: str) -> None:
    decision = lineage.decide(request(), [attempt(1, "Failed"), attempt(2, state)])
    assert (decision.action, decision.name) == (Action.REATTACH, "train-1a2b3c4d-a2")
    assert "reattaching" in decision.reason


def test_a_succeeded_attempt_is_returned_unless_a_cleared_task_asks_to_train_again() -> None:
    done = attempt(1, "Succeeded")
    assert lineage.decide(request(), [done]).action is Action.REATTACH
    assert lineage.decide(request(rerun_succeeded=True), [done]).action is Action.REATTACH, (
        "a retry after the worker died before returning the result returns it"
    )
    delivered = attempt(1, "Succeeded", delivered=True, last_checkpoint="/ckpt/step-100")
    rerun = lineage.decide(request(rerun_succeeded=True), [delivered])
    assert (rerun.action, rerun.number, rerun.name) == (Action.RESUBMIT, 2, "train-1a2b3c4d-a2")
    assert lineage.decide(request(), [delivered]).action is Action.REATTACH, "the default returns the result"


def test_a_failed_attempt_is_followed_by_the_next_resuming_from_its_last_checkpoint() -> None:
    failed = attempt(2, "Failed", last_checkpoint="/ckpt/step-00000040")
    decision = lineage.decide(request(), [attempt(1, "Failed", last_checkpoint="/ckpt/step-20"), failed])
    assert (decision.action, decision.number, decision.name) == (Action.RESUBMIT, 3, "train-1a2b3c4d-a3")
    assert decision.last_checkpoint == "/ckpt/step-00000040" and decision.current == failed
    assert "resuming from /ckpt/step-00000040" in decision.reason


def test_nothing_is_submitted_while_an_earlier_attempt_has_live_pods() -> None:
    failed = attempt(1, "Failed", live_pods=("train-worker-0 (Running)",))
    decision = lineage.decide(request(), [failed])
    assert decision.action is Action.WAIT and decision.waiting_on == ("train-worker-0 (Running)",)
    assert "train-worker-0 (Running)" in decision.reason and decision.number == 2
    # The pods of an attempt being deleted count as well, until they are gone.
    deleting = attempt(1, "Running", deleting=True, live_pods=("train-master-0 (Pending)",))
    assert lineage.decide(request(), [deleting]).action is Action.WAIT
    assert lineage.decide(request(), [attempt(1, "Failed")]).action is Action.RESUBMIT


def test_attempts_being_deleted_are_skipped_and_their_numbers_are_not_reused() -> None:
    gone = [attempt(1, "Failed", deleting=True), attempt(2, "Running", deleting=True)]
    decision = lineage.decide(request(), gone)
    assert (decision.action, decision.number, decision.name) == (Action.START, 3, "train-1a2b3c4d-a3")
    assert decision.lineage == "train-1a2b3c4d" and "being deleted" in decision.reason
    # A failed attempt behind one being deleted: the next attempt comes after both.
    after = lineage.decide(request(), [attempt(1, "Failed"), attempt(2, "Running", deleting=True)])
    assert (after.action, after.number, after.current) == (Action.RESUBMIT, 3, attempt(1, "Failed"))


def test_a_suspended_attempt_is_resumed_not_waited_on() -> None:
    for suspended in (attempt(2, "Suspended", suspended=True), attempt(2, "Running", suspended=True)):
        decision = lineage.decide(request(), [attempt(1, "Failed"), suspended])
        assert (decision.action, decision.name) == (Action.RESUME, "train-1a2b3c4d-a2")
    finished = attempt(1, "Failed", suspended=True)
    assert lineage.decide(request(), [finished]).action is Action.RESUBMIT


def test_another_spec_is_a_lineage_of_its_own_that_never_touches_the_first() -> None:
    running_old = attempt(1, "Running", spec_hash="0" * 16, checkpoints=("/elsewhere", ""))
    decision = lineage.decide(request(), [running_old])
    assert decision.action is Action.START and decision.current is None
    assert decision.lineage == f"train-1a2b3c4d-{SPEC[:8]}" and decision.name == f"{decision.lineage}-a1"
    assert "ran another spec" in decision.reason
    # Its own attempts are found again by its spec, whatever the first lineage does.
    mine = attempt(1, "Failed", lineage=decision.lineage, name=decision.name)
    again = lineage.decide(request(), [running_old, mine])
    assert (again.action, again.lineage, again.number) == (Action.RESUBMIT, decision.lineage, 2)


def test_two_lineages_never_write_to_one_checkpoint_place_at_once() -> None:
    place = ("/ckpt", "")  # MANIFEST's
    running_old = attempt(1, "Running", spec_hash="0" * 16, checkpoints=place)
    refused = lineage.decide(request(), [running_old])
    assert refused.action is Action.ERROR
    assert "attempt 1 (train-1a2b3c4d) of this run runs another spec and is Running" in refused.reason
    assert "writing checkpoints to /ckpt" in refused.reason
    assert "delete PyTorchJob team-a/train-1a2b3c4d" in refused.reason
    # Failed, its pods still going: waited for like the pods of the lineage's own attempts.
    ending = attempt(
        1, "Failed", spec_hash="0" * 16, checkpoints=place, live_pods=("old-worker-0 (Running)",)
    )
    assert lineage.decide(request(), [ending]).waiting_on == ("old-worker-0 (Running)",)
    # Gone, finished or suspended, it does not stand in the way.
    for quiet in (
        attempt(1, "Failed", spec_hash="0" * 16, checkpoints=place),
        attempt(1, "Running", spec_hash="0" * 16, checkpoints=place, deleting=True),
        attempt(1, "Suspended", spec_hash="0" * 16, checkpoints=place, suspended=True),
    ):
        assert lineage.decide(request(), [quiet]).action is Action.START
    # The same holds for a resubmission, and for resuming a suspended attempt, of this spec.
    mine = attempt(1, "Failed", lineage="train-1a2b3c4d-x", name="train-1a2b3c4d-x-a1")
    assert lineage.decide(request(), [running_old, mine]).action is Action.ERROR
    paused = attempt(1, "Suspended", suspended=True, lineage="train-1a2b3c4d-x", name="train-1a2b3c4d-x-a1")
    assert lineage.decide(request(), [running_old, paused]).action is Action.ERROR
    # Other volume, or no checkpoint dir at all: nothing shared.
    apart = attempt(1, "Running", spec_hash="0" * 16, checkpoints=("/ckpt", "claim-b"))
    assert lineage.decide(request(), [apart]).action is Action.START
    bare = request(template={**MANIFEST, "metadata": {"name": "train-1a2b3c4d"}})
    assert lineage.decide(bare, [attempt(1, "Running", spec_hash="0" * 16)]).action is Action.START


def test_another_identitys_job_is_never_one_of_ours() -> None:
    stranger = attempt(1, "Running", identity=Identity.airflow("nightly", "評価", "r", None).text)
    decision = lineage.decide(request(), [stranger])
    assert decision.action is Action.START and decision.current is None


def test_resume_mode_only_continues_a_lineage_that_stopped() -> None:
    resume = request(mode=Mode.RESUME)
    assert lineage.decide(resume, [attempt(1, "Failed")]).action is Action.RESUBMIT
    assert lineage.decide(resume, [attempt(1, "Suspended", suspended=True)]).action is Action.RESUME
    for state in ("Running", "Succeeded"):
        refused = lineage.decide(resume, [attempt(1, state)])
        assert refused.action is Action.ERROR
        assert f"is {state}: only Suspended or Failed jobs resume" in refused.reason
    # Resuming an older attempt continues from the lineage's latest.
    latest = lineage.decide(resume, [attempt(1, "Failed"), attempt(2, "Failed")])
    assert latest.name == "train-1a2b3c4d-a3"


# -- manifests --------------------------------------------------------------------------------------
def test_a_new_attempt_carries_its_identity_lineage_spec_and_number() -> None:
    body = lineage.attempt_manifest(
        {**MANIFEST, "status": {"conditions": []}},
        identity=TASK,
        lineage="train-1a2b3c4d",
        number=3,
        name="train-1a2b3c4d-a3",
        namespace="team-a",
        spec=SPEC,
        last_checkpoint="/ckpt/step-40",
    )
    meta = body["metadata"]
    assert meta["name"] == "train-1a2b3c4d-a3" and meta["namespace"] == "team-a" and "status" not in body
    assert meta["labels"] == {
        "kubetrain.dev/try-number": "1",
        "kubetrain.dev/lineage": "train-1a2b3c4d",
        "kubetrain.dev/identity-hash": TASK.hash,
    }
    assert meta["annotations"] == {
        "kubetrain.dev/checkpoint-dir": "/ckpt",
        "kubetrain.dev/attempt": "3",
        "kubetrain.dev/identity": TASK.text,
        "kubetrain.dev/spec-hash": SPEC,
        "kubetrain.dev/last-checkpoint": "/ckpt/step-40",
    }
    assert lineage.spec_hash(body) == SPEC


def test_the_successor_of_a_hand_submitted_job_continues_its_lineage() -> None:
    job = {
        **MANIFEST,
        "metadata": {
            "name": "flaky",
            "namespace": "team-a",
            "uid": "u1",
            "annotations": {
                "kubetrain.dev/last-checkpoint": "/ckpt/step-20",
                "kubetrain.dev/training-report": "{}",
            },
        },
        "spec": {"pytorchReplicaSpecs": {}, "runPolicy": {"suspend": True}},
    }
    body = lineage.successor(job)
    meta = body["metadata"]
    assert meta["name"] == "flaky-a2" and meta["labels"]["kubetrain.dev/lineage"] == "flaky"
    assert meta["annotations"]["kubetrain.dev/attempt"] == "2"
    assert meta["annotations"]["kubetrain.dev/last-checkpoint"] == "/ckpt/step-20"
    assert "kubetrain.dev/training-report" not in meta["annotations"]
    assert Identity.of_job(body) == Identity.job("PyTorchJob", "flaky") == Identity.of_job(job)
    assert meta["labels"]["kubetrain.dev/identity-hash"] == Identity.job("PyTorchJob", "flaky").hash
    assert body["spec"]["runPolicy"]["suspend"] is False
    assert lineage.successor(body)["metadata"]["name"] == "flaky-a3"


def test_an_attempt_is_read_from_its_job() -> None:
    job = {
        "kind": "TrainJob",
        "metadata": {
            "name": "llm-a2",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:05:00Z",
            "labels": {"kubetrain.dev/lineage": "llm"},
            "annotations": {"kubetrain.dev/attempt": "2", "kubetrain.dev/result-delivered": "true"},
        },
        "spec": {"suspend": True},
        "status": {"conditions": [{"type": "Failed", "status": "True"}]},
    }
    found = Attempt.of(job, ["llm-node-0-0-x (Running)"])
    assert (found.number, found.state, found.lineage, found.suspended, found.deleting, found.delivered) == (
        2,
        "Failed",
        "llm",
        True,
        True,
        True,
    )
    assert found.live_pods == ("llm-node-0-0-x (Running)",) and found.spec_hash == lineage.spec_hash(job)


def test_the_lineage_rules_do_not_import_the_client_that_runs_them() -> None:
    """``AsyncJobClient`` imports this module; this module takes any client with the verbs it needs
    (``LineageClient``), so the two never import each other, not even inside a function."""
    imported: set[str] = set()
    for node in ast.walk(ast.parse(Path(lineage.__file__).read_text())):
        if isinstance(node, ast.Import):
            imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.update([node.module, *(f"{node.module}.{alias.name}" for alias in node.names)])
    clients = ("kubetrain.client.aio", "kubetrain.client.sync", "kubetrain.client.AsyncJobClient")
    assert not {name for name in imported if name.startswith(clients)}
