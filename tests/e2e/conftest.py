"""End-to-end tests keep the in-process controller's INFO log, so a failure prints what it decided.

These tests run real training for tens of seconds under a controller in the test's own process; when
one times out in CI, its cluster is gone by the time anyone looks, and the log of that controller
(which pods it created, deleted and why) is what is left to read. pytest shows it only for a test
that failed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def controller_log(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.INFO, logger="kubetrain")
    yield
