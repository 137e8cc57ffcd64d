"""The work queue deduplicates keys, never hands one key to two workers, and backs off failures."""

from __future__ import annotations

import asyncio

import pytest

from kubetrain.kube.workqueue import ShutDownError, WorkQueue


async def test_adding_a_waiting_key_twice_queues_it_once() -> None:
    queue = WorkQueue("t")
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]


async def test_a_key_added_while_processing_comes_back_after_done() -> None:
    queue = WorkQueue("t")
    queue.add("a")
    key = await queue.get()
    queue.add("a")
    assert len(queue) == 0, "a key being processed is not handed out again"
    queue.done(key)
    assert len(queue) == 1 and await queue.get() == "a"


async def test_add_after_keeps_the_earliest_time() -> None:
    queue = WorkQueue("t")
    queue.add_after("a", 10)
    queue.add_after("a", 0.01)
    assert await asyncio.wait_for(queue.get(), 2) == "a"


async def test_failures_back_off_exponentially_and_forget_resets() -> None:
    queue = WorkQueue("t", base_delay=0.01)
    delays = [queue._item_delay(n) for n in range(4)]
    assert delays == [0.01, 0.02, 0.04, 0.08]
    queue.add_rate_limited("a")
    queue.add_rate_limited("a")
    assert queue.failures("a") == 2
    queue.forget("a")
    assert queue.failures("a") == 0
    assert queue._item_delay(40) == queue.max_delay


async def test_shutdown_wakes_idle_workers() -> None:
    queue = WorkQueue("t")
    waiter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.shut_down()
    with pytest.raises(ShutDownError):
        await asyncio.wait_for(waiter, 2)


async def test_waiting_workers_get_distinct_keys() -> None:
    queue = WorkQueue("t")
    workers = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    for key in ("a", "b", "c"):
        queue.add(key)
    assert sorted(await asyncio.gather(*workers)) == ["a", "b", "c"]
