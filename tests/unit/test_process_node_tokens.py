"""When the process node renews a pod's projected token: as a kubelet does, before a reader could hold
an expired one."""

from __future__ import annotations

from kubetrain.devcluster.processnode.volumes import MAX_TOKEN_AGE, renew_after


def test_a_token_is_renewed_once_four_fifths_of_its_life_have_passed() -> None:
    assert renew_after(3600) == 2880
    assert renew_after(600) == 480  # the shortest lifetime the API server issues


def test_a_long_lived_token_is_renewed_after_a_day_all_the_same() -> None:
    assert renew_after(7 * 24 * 3600) == MAX_TOKEN_AGE == 24 * 3600
