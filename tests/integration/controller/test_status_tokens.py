"""The status server verifies pods' tokens against the cluster's own signing keys, as the API server
publishes them: a pod's token is read as a TokenReview would read it, with no TokenReview."""

from __future__ import annotations

from pathlib import Path

from kubernetes_asyncio import client

from kubetrain.controller.statusserver.authz import POD_NAME_EXTRA, POD_UID_EXTRA
from kubetrain.controller.statusserver.tokens import IssuerKeys
from kubetrain.kube.client import KubeClient
from tests.conftest import Kubectl

AUDIENCE = "/apis/kubeflow.org/v1/namespaces/team/pytorchjobs/digits/status"


async def test_a_pods_token_is_verified_with_the_keys_the_api_server_publishes(
    kubectl: Kubectl, kubeconfig: Path, core: client.CoreV1Api, namespace: str
) -> None:
    pod = await core.create_namespaced_pod(
        namespace, {"metadata": {"name": "reporter"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    )
    token = kubectl(
        "create",
        "token",
        "default",
        "-n",
        namespace,
        "--bound-object-kind=Pod",
        "--bound-object-name=reporter",
        f"--audience={AUDIENCE}",
    ).stdout.strip()
    kube = await KubeClient.from_kubeconfig(str(kubeconfig))
    try:
        keys = IssuerKeys(kube)
        review = await keys.review(token, AUDIENCE)
        assert review is not None, "the API server's keys were not fetched"
        status = review["status"]
        assert status["authenticated"] is True and status["audiences"] == [AUDIENCE]
        assert status["user"]["username"] == f"system:serviceaccount:{namespace}:default"
        assert status["user"]["extra"] == {POD_NAME_EXTRA: ["reporter"], POD_UID_EXTRA: [pod.metadata.uid]}
        wrong_audience = await keys.review(token, AUDIENCE.replace("digits", "other"))
        assert wrong_audience == {"status": {"authenticated": False, "error": "Audience doesn't match"}}
        random = await keys.review("not-a-token", AUDIENCE)
        assert random is not None and random["status"]["authenticated"] is False
    finally:
        await kube.close()
