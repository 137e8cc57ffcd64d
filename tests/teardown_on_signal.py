"""A pytest plugin: SIGTERM ends a test run as Ctrl-C does, with every fixture's teardown.

Fixtures start processes that outlive the test process unless their teardown stops them: a dev
cluster, a controller, an Airflow deployment (Postgres and four Airflow processes, each in a session
of its own). Python dies on SIGTERM without running any of that, so a run stopped by a CI timeout, a
supervisor or ``kill`` left them all running. On SIGTERM this raises ``KeyboardInterrupt``, which
pytest answers as it answers Ctrl-C: the running test stops and every fixture tears down. A second
SIGTERM kills at once, as the default does.
"""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the teardown may be waited on; a second one ends it
    raise KeyboardInterrupt(f"stopped by signal {signum}; tearing the fixtures down")
