"""The status server's pure parts: which job a path names, who may report, what is written, what pods get."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
import yaml
from aiohttp.test_utils import make_mocked_request

from kubetrain import naming
from kubetrain.api.kinds import PYTORCHJOB, TRAINJOB
from kubetrain.api.objects import JobIdentity
from kubetrain.controller.core import children
from kubetrain.controller.plugins.status_server import StatusServerPlugin
from kubetrain.controller.statusserver import admission
from kubetrain.controller.statusserver.authz import (
    POD_NAME_EXTRA,
    POD_UID_EXTRA,
    Target,
    authorise,
    bound_pod,
    target_of,
)
from kubetrain.controller.statusserver.server import StatusServer, job_patch, parse_report
from kubetrain.controller.statusserver.tls import self_signed
from kubetrain.controller.trainjob import jobset
from kubetrain.controller.trainjob.indexedjob import ChildJob
from kubetrain.controller.v1 import frameworks
from kubetrain.controller.v1.frameworks.base import job_info
from kubetrain.kube import errors
from kubetrain.trainjob.build import build

pytestmark = pytest.mark.unit
RUNTIMES = Path(__file__).resolve().parents[3] / "deploy" / "runtimes"
TRAINJOB_PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/mnist/status"
PYTORCHJOB_PATH = "/apis/kubeflow.org/v1/namespaces/team/pytorchjobs/digits/status"


def test_the_path_names_the_job_exactly_as_kubeflow_trainers_url_does() -> None:
    target = target_of(TRAINJOB_PATH)
    assert target == Target(TRAINJOB, "team", "mnist")
    assert target.path == TRAINJOB_PATH
    assert target_of(PYTORCHJOB_PATH) == Target(PYTORCHJOB, "team", "digits")
    for wrong in (
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainingruntimes/x/status",
        "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/mnist",
        "/status",
    ):
        assert target_of(wrong) is None


def review(
    *, audiences: list[str] | None = None, pod: str | None = "mnist-node-0-0", ns: str = "team"
) -> Any:
    extra = {POD_NAME_EXTRA: [pod], POD_UID_EXTRA: ["pod-uid"]} if pod else {}
    return {
        "status": {
            "authenticated": True,
            "audiences": [TRAINJOB_PATH] if audiences is None else audiences,
            "user": {"username": f"system:serviceaccount:{ns}:default", "extra": extra},
        }
    }


JOB_UID = "job-uid"


def pod(
    owner_kind: str = "TrainJob", owner: str = "mnist", uid: str = "pod-uid", owner_uid: str = JOB_UID
) -> dict[str, Any]:
    api = "trainer.kubeflow.org/v1alpha1" if owner_kind == "TrainJob" else "kubeflow.org/v1"
    reference = {"apiVersion": api, "kind": owner_kind, "name": owner, "uid": owner_uid, "controller": True}
    return {
        "metadata": {
            "name": "mnist-node-0-0",
            "namespace": "team",
            "uid": uid,
            "ownerReferences": [reference],
        }
    }


def test_a_token_of_a_pod_of_the_job_is_allowed() -> None:
    target = Target(TRAINJOB, "team", "mnist")
    assert bound_pod(review(), target) == ("mnist-node-0-0", "pod-uid")
    assert authorise(target, "pod-uid", pod(), job_uid=JOB_UID).allowed


def test_an_invalid_token_or_one_for_another_audience_is_401() -> None:
    target = Target(TRAINJOB, "team", "mnist")
    assert bound_pod({"status": {"authenticated": False, "error": "expired"}}, target).status == 401  # type: ignore[union-attr]
    other = review(audiences=["/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainjobs/other/status"])
    assert bound_pod(other, target).status == 401  # type: ignore[union-attr]


def test_a_token_of_no_pod_of_another_namespace_or_of_another_jobs_pod_is_403() -> None:
    target = Target(TRAINJOB, "team", "mnist")
    assert bound_pod(review(pod=None), target).status == 403  # type: ignore[union-attr]
    assert bound_pod(review(ns="elsewhere"), target).status == 403  # type: ignore[union-attr]
    assert authorise(target, "pod-uid", pod(owner="other"), job_uid=JOB_UID).status == 403
    other_kind = pod(owner_kind="PyTorchJob")  # same name, other kind
    assert authorise(target, "pod-uid", other_kind, job_uid=JOB_UID).status == 403
    assert authorise(target, "pod-uid", pod(uid="a-new-pod-of-that-name"), job_uid=JOB_UID).status == 403
    assert authorise(target, "pod-uid", None, job_uid=JOB_UID).status == 403
    # A pod left by an earlier job of the same name (deleted and created again) may not report.
    assert authorise(target, "pod-uid", pod(owner_uid="the-earlier-job"), job_uid=JOB_UID).status == 403


def parsed(body: Any) -> dict[str, Any]:
    return parse_report(json.dumps(body).encode(), now=NOW)


NOW = 1_800_000_000.0  # 2027-01-15


def test_a_report_is_validated_against_the_crd_and_its_fields_only() -> None:
    report = {
        "progressPercentage": 40,
        "metrics": [{"name": "loss", "value": "0.5"}],
        "lastUpdatedTime": "2026-01-01T00:00:00+00:00",
    }
    assert parsed({"trainerStatus": report}) == report
    assert "lastUpdatedTime" in parsed({"trainerStatus": {}})
    refused = {
        "progressPercentage": {"trainerStatus": {"progressPercentage": 140}},
        "is not a field": {"trainerStatus": {**report, "somethingElse": 1}},
        "and nothing else": {"trainerStatus": report, "more": 1},
        "trainerStatus": {"progress": 1},
        "estimatedRemainingSeconds: at most": {"trainerStatus": {"estimatedRemainingSeconds": 2**63}},
        "an RFC 3339 time": {"trainerStatus": {"lastUpdatedTime": "yesterday"}},
        "not in the future": {"trainerStatus": {"lastUpdatedTime": "2099-01-01T00:00:00Z"}},
        "larger than": {
            "trainerStatus": {"metrics": [{"name": f"m{i}", "value": "x" * 64} for i in range(256)]}
        },
    }
    for message, body in refused.items():
        with pytest.raises(ValueError, match=message):
            parsed(body)
    deep = ("[" * 100_000 + "]" * 100_000).encode()
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_report(b'{"trainerStatus": ' + deep + b"}")
    with pytest.raises(ValueError, match="not JSON"):
        parse_report(b"{")


def test_a_trainjob_report_replaces_trainer_status_and_a_v1_report_goes_to_annotations() -> None:
    status = {"progressPercentage": 40, "lastUpdatedTime": "t"}
    body, subresource = job_patch(Target(TRAINJOB, "team", "mnist"), status)
    assert subresource == "status"
    assert body["status"]["trainerStatus"] == {
        "progressPercentage": 40,
        "estimatedRemainingSeconds": None,  # a field the report leaves out is removed
        "metrics": None,
        "lastUpdatedTime": "t",
    }
    body, subresource = job_patch(Target(PYTORCHJOB, "team", "digits"), status)
    annotations = body["metadata"]["annotations"]
    assert subresource is None
    assert json.loads(annotations[naming.ANNOTATION_TRAINER_STATUS]) == status
    assert annotations[naming.ANNOTATION_PROGRESS] == "40"
    assert annotations[naming.ANNOTATION_ETA] is None


PLUGIN = StatusServerPlugin("https://controller.example:8082", "PEM")


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_every_container_of_a_v1_job_gets_the_contract_and_the_projected_token() -> None:
    template = {
        "spec": {"containers": [{"name": "pytorch", "image": "img"}, {"name": "side", "image": "img"}]}
    }
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "digits", "namespace": "team", "uid": "u1"},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": template}}},
    }
    info = job_info(job, frameworks.by_name("PyTorchJob"))
    built = children.build_pod(info, "Master", 0, [PLUGIN])
    for container in built["spec"]["containers"]:
        env = env_of(container)
        assert env[naming.ENV_TRAINER_SERVER_URL] == "https://controller.example:8082" + PYTORCHJOB_PATH
        assert env[naming.ENV_TRAINER_SERVER_TOKEN] == "/var/run/secrets/kubeflow/trainer/token"
        assert env[naming.ENV_TRAINER_SERVER_CA_CERT] == "/var/run/secrets/kubeflow/trainer/ca.crt"
    [volume] = [v for v in built["spec"]["volumes"] if v["name"] == "kubeflow-trainer-token"]
    token, ca = volume["projected"]["sources"]
    assert token["serviceAccountToken"] == {
        "audience": PYTORCHJOB_PATH,
        "expirationSeconds": 3600,
        "path": "token",
    }
    assert ca["configMap"]["name"] == "digits-tls-config"
    config = PLUGIN.tls_config(JobIdentity(job))
    assert config["data"] == {"ca.crt": "PEM"}
    assert config["metadata"]["ownerReferences"][0]["uid"] == "u1"


def test_only_a_trainjobs_trainer_pods_get_it_not_its_initializers() -> None:
    job = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "mnist", "namespace": "team", "uid": "u2"},
        "spec": {"runtimeRef": {"name": "torchtune-llama3.2-1b"}},
    }
    info = build(job, yaml.safe_load((RUNTIMES / "torchtune-llama3.2-1b.yaml").read_text()))
    urls = {}
    for pod_set in info.pod_sets:
        built = jobset.build_pod(info, ChildJob(pod_set, 0), 0, attempt=0, plugins=[PLUGIN])
        urls[pod_set.name] = env_of(built["spec"]["containers"][0]).get(naming.ENV_TRAINER_SERVER_URL)
    assert urls.pop("node") == "https://controller.example:8082" + TRAINJOB_PATH
    assert urls and not any(urls.values()), urls


class FakeKube:
    """The calls the server makes, answered from fixed data (a unit test of the handler only)."""

    def __init__(self, *, patch_error: Exception | None = None) -> None:
        self.reviews = 0
        self.patches: list[tuple[str, dict[str, Any], str | None]] = []
        self.patch_error = patch_error

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        raise errors.APINotFoundError(404, f"{path} is not served")  # no OIDC discovery: TokenReviews

    async def create(self, resource: Any, body: dict[str, Any], namespace: str | None = None) -> Any:
        self.reviews += 1
        return review() if body["spec"]["token"].startswith("good") else {"status": {"authenticated": False}}

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        return pod() if resource.kind == "Pod" else {"metadata": {"name": name, "uid": JOB_UID}}

    async def patch(self, resource: Any, name: str, body: Any, **kwargs: Any) -> Any:
        if self.patch_error is not None:
            raise self.patch_error
        self.patches.append((name, body, kwargs.get("subresource")))
        return {}


async def post(server: StatusServer, path: str, token: str, body: Any) -> int:
    return (await answer(server, path, token, body)).status


async def answer(server: StatusServer, path: str, token: str, body: Any) -> Any:
    request = make_mocked_request(
        "POST", path, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    )
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()

    async def read() -> bytes:
        return raw

    request.read = read  # type: ignore[method-assign]
    return await server.handle(request)


async def test_the_handler_answers_each_case_and_trusts_a_verdict_for_a_while() -> None:
    kube = FakeKube()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=lambda: 0.0)  # type: ignore[arg-type]
    report = {"trainerStatus": {"progressPercentage": 10}}
    assert await post(server, TRAINJOB_PATH, "good", report) == 200
    assert await post(server, TRAINJOB_PATH, "good", report) == 200
    assert kube.reviews == 1, "an allowed token is not reviewed again within VERDICT_TTL"
    assert kube.patches[0][0] == "mnist" and kube.patches[0][2] == "status"
    assert await post(server, TRAINJOB_PATH, "bad", report) == 401
    assert await post(server, "/apis/x/v1/namespaces/team/things/y/status", "good", report) == 404
    assert await post(server, TRAINJOB_PATH, "good", {"trainerStatus": {"progressPercentage": -1}}) == 400


async def test_a_write_the_api_server_refuses_is_a_503_to_try_again_and_a_missing_job_a_404() -> None:
    unavailable = StatusServer(
        FakeKube(patch_error=errors.APIError(500, "etcd timeout")),  # type: ignore[arg-type]
        self_signed(["127.0.0.1"]),
    )
    report = {"trainerStatus": {"progressPercentage": 10}}
    assert await post(unavailable, TRAINJOB_PATH, "good", report) == 503
    gone = StatusServer(
        FakeKube(patch_error=errors.APINotFoundError(404, "not found")),  # type: ignore[arg-type]
        self_signed(["127.0.0.1"]),
    )
    assert await post(gone, TRAINJOB_PATH, "good", report) == 404


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def test_a_body_is_read_only_after_the_token_is_accepted() -> None:
    kube = FakeKube()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=Clock())  # type: ignore[arg-type]
    nonsense = b"[" * 100_000
    assert await post(server, TRAINJOB_PATH, "bad", nonsense) == 401, "a refused token gets no parse"
    assert await post(server, TRAINJOB_PATH, "good", nonsense) == 400, "deep JSON is a 400, not a 500"


async def test_a_refused_token_is_answered_from_memory_and_unknown_tokens_have_a_budget() -> None:
    clock = Clock()
    kube = FakeKube()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=clock)  # type: ignore[arg-type]
    report = {"trainerStatus": {"progressPercentage": 10}}
    for _ in range(5):
        assert await post(server, TRAINJOB_PATH, "bad", report) == 401
    assert kube.reviews == 1, "the same refused token is reviewed once"
    statuses = [await post(server, TRAINJOB_PATH, f"random-{i}", report) for i in range(2000)]
    assert kube.reviews <= 1 + admission.REVIEWS_BURST, "unknown tokens cost the API server without limit"
    assert statuses.count(429) >= 2000 - admission.REVIEWS_BURST
    busy = await answer(server, TRAINJOB_PATH, "random-x", report)
    assert busy.status == 429 and int(busy.headers["Retry-After"]) >= 1
    clock.now += 1.0  # a second later the budget has room again
    assert await post(server, TRAINJOB_PATH, "good-pod", report) == 200


async def test_a_pod_reporting_in_a_tight_loop_gets_429_and_others_are_not_slowed() -> None:
    clock = Clock()
    kube = FakeKube()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=clock)  # type: ignore[arg-type]
    report = {"trainerStatus": {"progressPercentage": 10}}
    loop = [await post(server, TRAINJOB_PATH, "good-loop", report) for _ in range(50)]
    assert loop.count(200) == admission.REPORTS_BURST and loop.count(429) == 50 - admission.REPORTS_BURST
    assert len(kube.patches) == admission.REPORTS_BURST, "a refused report writes nothing"
    assert await post(server, TRAINJOB_PATH, "good-other", report) == 200, "another pod's budget is its own"
    clock.now += 1 / admission.REPORTS_QPS
    assert await post(server, TRAINJOB_PATH, "good-loop", report) == 200


def test_a_limiter_refuses_with_the_wait_and_forgets_the_oldest_keys() -> None:
    clock = Clock()
    limiter = admission.Limiter(2.0, 2, clock, max_keys=3)
    assert limiter.take("a") is None and limiter.take("a") is None
    assert limiter.take("a") == pytest.approx(0.5)
    clock.now = 0.5
    assert limiter.take("a") is None
    for key in ("b", "c", "d"):
        limiter.take(key)
    assert "a" not in limiter._buckets and len(limiter._buckets) == 3
    refusals = admission.Verdicts(clock)
    refusals.remember(("t", "/p"), 401, "no", ttl=10)
    assert refusals.get(("t", "/p")) == (401, "no")
    clock.now += 10
    assert refusals.get(("t", "/p")) is None


class DeletingKube(FakeKube):
    """The pod a good token is bound to, until it is deleted."""

    def __init__(self) -> None:
        super().__init__()
        self.pod_deleted = False

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        if resource.kind == "Pod" and self.pod_deleted:
            return None
        return await super().get(resource, name, namespace)


async def test_a_deleted_pods_token_is_asked_about_again_at_once() -> None:
    kube = DeletingKube()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=Clock())  # type: ignore[arg-type]
    report = {"trainerStatus": {"progressPercentage": 10}}
    assert await post(server, TRAINJOB_PATH, "good", report) == 200
    kube.pod_deleted = True
    server.pod_changed(pod(), None)  # the pod informer's delete event
    assert await post(server, TRAINJOB_PATH, "good", report) == 403, "trusted from memory after its pod went"
    assert kube.reviews == 2
    server.pod_changed(None, pod(uid="another"))  # an added pod forgets nothing
    assert await post(server, TRAINJOB_PATH, "good", report) == 403 and kube.reviews == 2


# -- tokens verified with the cluster's keys ------------------------------------------------------------
ISSUER = "https://kubernetes.default.svc.cluster.local"


class SigningCluster(FakeKube):
    """A cluster that serves its service-account keys (OIDC discovery) and signs pods' tokens."""

    def __init__(self) -> None:
        super().__init__()
        from cryptography.hazmat.primitives.asymmetric import rsa

        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        public = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        self.jwks = {"keys": [{**public, "kid": "k1", "alg": "RS256", "use": "sig"}]}
        self.fetches = 0

    async def request(self, method: str, path: str, **kwargs: Any) -> Any:
        self.fetches += 1
        if path == "/.well-known/openid-configuration":
            return {"issuer": ISSUER, "jwks_uri": "https://10.0.0.1:6443/openid/v1/jwks"}
        assert path == "/openid/v1/jwks"
        return self.jwks

    def token(
        self, *, audience: str = TRAINJOB_PATH, expires_in: int = 600, kid: str = "k1", **claims: Any
    ) -> str:
        now = int(time.time())
        body = {
            "iss": ISSUER,
            "sub": "system:serviceaccount:team:default",
            "aud": [audience],
            "iat": now,
            "nbf": now,
            "exp": now + expires_in,
            "kubernetes.io": {"namespace": "team", "pod": {"name": "mnist-node-0-0", "uid": "pod-uid"}},
            **claims,
        }
        return jwt.encode(body, self.key, algorithm="RS256", headers={"kid": kid})


async def test_a_pods_token_is_verified_with_the_clusters_keys_and_costs_no_token_review() -> None:
    kube = SigningCluster()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=Clock())  # type: ignore[arg-type]
    report = {"trainerStatus": {"progressPercentage": 10}}
    assert await post(server, TRAINJOB_PATH, kube.token(), report) == 200
    statuses = [await post(server, TRAINJOB_PATH, f"random-{i}", report) for i in range(2000)]
    assert set(statuses) == {401}, "a string that is not a token of the cluster is refused here"
    assert await post(server, TRAINJOB_PATH, kube.token(expires_in=-120), report) == 401
    assert await post(server, TRAINJOB_PATH, kube.token(audience=PYTORCHJOB_PATH), report) == 401
    forged = SigningCluster().token()  # signed by another key of the same id
    assert await post(server, TRAINJOB_PATH, forged, report) == 401
    assert (
        await post(server, TRAINJOB_PATH, kube.token(**{"kubernetes.io": {"namespace": "team"}}), report)
        == 403
    )
    assert kube.reviews == 0 and kube.fetches == 2, "no TokenReview; the keys were fetched once"


async def test_a_token_of_a_key_not_served_is_asked_about_by_token_review() -> None:
    kube = SigningCluster()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=Clock())  # type: ignore[arg-type]
    report = {"trainerStatus": {"progressPercentage": 10}}
    assert await post(server, TRAINJOB_PATH, kube.token(kid="rotated"), report) == 401
    assert kube.reviews == 1, "the API server was asked (and the fake refuses what is not 'good...')"
    assert kube.fetches == 2, "the keys are not fetched again within REFRESH_SECONDS"


async def test_reports_that_arrive_while_the_keys_are_fetched_wait_for_them() -> None:
    kube = SigningCluster()
    server = StatusServer(kube, self_signed(["127.0.0.1"]), clock=Clock())  # type: ignore[arg-type]
    report = {"trainerStatus": {"progressPercentage": 10}}
    statuses = await asyncio.gather(*(post(server, TRAINJOB_PATH, f"random-{i}", report) for i in range(32)))
    assert set(statuses) == {401} and kube.reviews == 0, "a request during the first fetch fell back"
    assert kube.fetches == 2
