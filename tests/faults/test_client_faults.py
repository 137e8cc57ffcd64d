"""The clients' writes under faults: a submission, a cancellation, a suspension whose answer is lost.

The Airflow operator, the KFP launcher and the CLI submit through ``lineage.prepare`` and cancel
through ``AsyncJobClient.delete``. Each test puts the fault proxy between that client and the API
server and loses the answer to a write the API server carried out, the way a dropped connection or
a gateway timeout does: the client retries, and must then neither fail a step whose job exists nor
submit a second job beside it. No controller runs: what is checked is what the client wrote.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from kubetrain.client import AsyncJobClient, lineage
from kubetrain.client.lineage import Action
from kubetrain.components.launch import LaunchRequest
from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import FaultProxy, Rule
from tests.support import eventually

pytestmark = pytest.mark.usefixtures("crds")

LOST_ANSWERS = [
    pytest.param(None, id="connection-dropped"),
    pytest.param(504, id="gateway-timeout"),
]


@pytest.fixture
async def proxied_client(proxied_kubeconfig: Path) -> AsyncIterator[AsyncJobClient]:
    async with await AsyncJobClient.connect(kubeconfig=str(proxied_kubeconfig)) as api:
        yield api


@pytest.fixture
async def direct_client(kubeconfig: Path) -> AsyncIterator[AsyncJobClient]:
    async with await AsyncJobClient.connect(kubeconfig=str(kubeconfig)) as api:
        yield api


def lose_answers(fault_proxy: FaultProxy, status: int | None, *, method: str, path: str) -> Rule:
    """Lose the answer to the first ``method`` request on ``path``, after the API server acted on it."""
    return fault_proxy.add(Rule(faultproxy.lose_response(status), method=method, path=path, times=1))


def sent(fault_proxy: FaultProxy, method: str, path: str) -> list[str | None]:
    """The faults of each ``method`` request on ``path`` the client sent (None: answered as is)."""
    return [exchange.fault for exchange in fault_proxy.writes(method=method, path=path)]


def step(namespace: str, **inputs: Any) -> lineage.Request:
    """A KFP launcher step's lineage request, as the launcher builds it."""
    inputs = {"run_id": "run-1", "task_name": "train", **inputs}
    request = LaunchRequest(kind="PyTorchJob", image="example.com/train:1", num_workers=0, **inputs)
    request.check()
    return request.lineage_request(namespace)


async def names(client: AsyncJobClient, namespace: str) -> list[str]:
    return sorted(j["metadata"]["name"] for j in await client.list(kind="PyTorchJob", namespace=namespace))


@pytest.mark.parametrize("status", LOST_ANSWERS)
async def test_a_submission_whose_answer_was_lost_reattaches_to_the_job_it_created(
    fault_proxy: FaultProxy,
    proxied_client: AsyncJobClient,
    direct_client: AsyncJobClient,
    namespace: str,
    status: int | None,
) -> None:
    lost = lose_answers(fault_proxy, status, method="POST", path=r"/pytorchjobs$")
    prepared = await proxied_client.prepare_attempt(step(namespace, job_name="lost"), log=lambda line: None)
    assert lost.fired == 1, "the submission's answer was never lost: the test proves nothing"
    assert len(sent(fault_proxy, "POST", r"/pytorchjobs$")) == 2, "the create was not sent again"
    # The retried create met the job the first one made: the step waits for that job, it neither
    # fails nor submits another.
    assert prepared.decision.action is Action.REATTACH, prepared.decision.reason
    assert await names(direct_client, namespace) == [prepared.job["metadata"]["name"]]


async def cancel(client: AsyncJobClient, name: str, namespace: str) -> None:
    await client.delete("PyTorchJob", name, namespace)


async def suspend(client: AsyncJobClient, name: str, namespace: str) -> None:
    await client.set_suspended("PyTorchJob", name, namespace, True)


async def cancelled(client: AsyncJobClient, name: str, namespace: str) -> bool:
    return await client.get("PyTorchJob", name, namespace) is None


async def suspended(client: AsyncJobClient, name: str, namespace: str) -> bool:
    return (await client.require("PyTorchJob", name, namespace))["spec"]["runPolicy"]["suspend"] is True


Write = Callable[[AsyncJobClient, str, str], Awaitable[Any]]


@pytest.mark.parametrize("status", LOST_ANSWERS)
@pytest.mark.parametrize(
    ("method", "write", "done"),
    [
        pytest.param("DELETE", cancel, cancelled, id="cancellation"),
        pytest.param("PATCH", suspend, suspended, id="suspension"),
    ],
)
async def test_a_write_whose_answer_was_lost_is_sent_again_and_takes_effect(
    fault_proxy: FaultProxy,
    proxied_client: AsyncJobClient,
    direct_client: AsyncJobClient,
    namespace: str,
    status: int | None,
    method: str,
    write: Write,
    done: Write,
) -> None:
    job = (await direct_client.prepare_attempt(step(namespace, job_name="lost"), log=lambda line: None)).job
    name, path = job["metadata"]["name"], rf"/pytorchjobs/{job['metadata']['name']}$"
    lost = lose_answers(fault_proxy, status, method=method, path=path)
    await write(proxied_client, name, namespace)  # raises if the lost answer reached the caller
    assert lost.fired == 1
    assert sent(fault_proxy, method, path)[1:] == [None], f"the {method} was not sent again"
    await eventually(lambda: done(direct_client, name, namespace), what=f"the {method} to take effect")
