"""Restarts are counted once per pod, however often a pass repeats and whatever happens to the pods."""

from __future__ import annotations

from kubetrain.controller.core.restarts import tally


def test_a_new_failure_is_counted_once() -> None:
    first = tally({}, {"a": 1})
    assert (first.total, first.counted) == (1, {"a": 1})
    # The pod's DELETE failed: the next pass sees the same failed pod and counts nothing.
    again = tally(first.counted, {"a": 1})
    assert (again.total, again.counted) == (0, {"a": 1})


def test_in_place_restarts_count_what_is_above_the_mark() -> None:
    assert tally({"a": 2}, {"a": 5}).new == {"a": 3}


def test_a_pod_that_is_gone_drops_out_of_the_bookkeeping_and_its_replacement_counts_fresh() -> None:
    result = tally({"a": 3}, {"b": 1})
    assert (result.new, result.counted) == ({"b": 1}, {"b": 1})


def test_a_pod_that_is_replaced_mid_pass_loses_nothing_of_another_pods_restart() -> None:
    # Pod a (3 restarts) went away while pod b restarted once: b's restart still counts.
    result = tally({"a": 3, "b": 0}, {"b": 1})
    assert result.total == 1


def test_a_status_from_before_the_bookkeeping_counts_nothing_twice() -> None:
    result = tally(None, {"a": 2, "b": 0})
    assert (result.total, result.counted) == (0, {"a": 2})
