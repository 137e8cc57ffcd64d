"""Progress reports: the payload Kubeflow Trainer expects, one send per interval, never an error raised."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubetrain import jobs_cli, naming, progress
from kubetrain.client import kinds
from kubetrain.controller.statusserver.tls import self_signed
from kubetrain.progress import ProgressReporter, Report, Server, trainer_status
from tests.docs_commands import python_blocks
from tests.support import FakeClock

pytestmark = pytest.mark.unit


def test_the_payload_has_upstream_field_names_percent_eta_and_metrics_as_strings() -> None:
    first = Report(step=10, total=110, at=0.0)
    latest = Report(
        step=60,
        total=110,
        metrics={"loss": 0.123456789, "lr": 3e-4, "phase": "train"},
        at=100.0,
        wall=dt.datetime(2026, 1, 2, 3, 4, 5, 678, tzinfo=dt.UTC),
    )
    assert trainer_status(first, latest) == {
        "lastUpdatedTime": "2026-01-02T03:04:05Z",
        "progressPercentage": 54,
        "estimatedRemainingSeconds": 100,  # 50 steps left at 2 s a step
        "metrics": [
            {"name": "currentStep", "value": "60"},
            {"name": "totalSteps", "value": "110"},
            {"name": "loss", "value": "0.123457"},
            {"name": "lr", "value": "0.0003"},
            {"name": "phase", "value": "train"},
        ],
    }


def test_without_a_total_there_is_no_percent_or_eta_and_a_given_eta_wins() -> None:
    first, latest = Report(step=1, at=0.0), Report(step=5, at=8.0)
    status = trainer_status(first, latest)
    assert "progressPercentage" not in status and "estimatedRemainingSeconds" not in status
    given = Report(step=5, total=10, eta_seconds=42.4, at=8.0)
    assert trainer_status(first, given)["estimatedRemainingSeconds"] == 42


def test_percent_is_clamped_and_metrics_fit_the_crd_limits() -> None:
    many = {f"m{i}": i for i in range(300)}
    status = trainer_status(Report(step=0), Report(step=12, total=10, metrics={"x" * 80: "y" * 80, **many}))
    assert status["progressPercentage"] == 100
    assert len(status["metrics"]) == progress.MAX_METRICS
    assert all(len(m["name"]) <= 64 and len(m["value"]) <= 64 for m in status["metrics"])


def test_reports_every_step_become_one_send_per_interval_and_the_last_is_flushed() -> None:
    clock, sent = FakeClock(100.0), []
    reporter = ProgressReporter(sent.append, interval=5.0, clock=clock, rank=lambda: 0)
    reporter.report(1, total=100)
    assert reporter.delay(clock.now) == 0.0
    assert reporter.flush()  # stands in for the thread's first send (no sleeping in unit tests)
    for step in range(2, 50):
        clock.now += 0.01
        reporter.report(step, total=100)
    assert reporter.delay(clock.now) == pytest.approx(5.0 - 0.48)
    assert reporter.flush()
    assert [s["metrics"][0]["value"] for s in sent] == ["1", "49"]
    assert not reporter.flush(), "nothing new: nothing sent"


def test_the_thread_sends_soon_after_the_first_report() -> None:
    sent: list[dict[str, Any]] = []
    done = threading.Event()
    reporter = ProgressReporter(lambda s: (sent.append(s), done.set()), rank=lambda: 0)
    reporter.report(3, total=4, metrics={"loss": 1.5})
    assert done.wait(5), "the background thread sent nothing"
    assert sent[0]["progressPercentage"] == 75


def test_a_failing_transport_never_raises_into_training_code() -> None:
    def broken(_: dict[str, Any]) -> None:
        raise OSError("connection refused")

    reporter = ProgressReporter(broken, rank=lambda: 0)
    reporter.report(1)
    assert reporter.flush() is False
    reporter.report(2)  # and reporting goes on


def test_only_rank_zero_sends_and_outside_a_job_nothing_happens(monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[dict[str, Any]] = []
    worker = ProgressReporter(sent.append, rank=lambda: 3)
    worker.report(1)
    assert not worker.flush() and not sent
    monkeypatch.delenv(naming.ENV_TRAINER_SERVER_URL, raising=False)
    assert Server.from_env() is None
    idle = ProgressReporter(None)
    idle.report(1)
    assert not idle.enabled and not idle.flush()


def self_signed_server_cert(directory: Path) -> tuple[Path, Path, Path]:
    """Files of a new CA and a serving certificate it signs for 127.0.0.1."""
    directory.mkdir(parents=True, exist_ok=True)
    made = self_signed(["127.0.0.1"])
    paths = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
    for path, pem in zip(paths, (made.cert, made.key, made.ca), strict=True):
        path.write_bytes(pem)
    return paths


@pytest.fixture
def status_server(tmp_path: Path) -> Iterator[tuple[Server, list[dict[str, Any]], list[int]]]:
    """A real HTTPS server that checks the bearer token and answers with the status queued."""
    cert, key, ca = self_signed_server_cert(tmp_path)
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    received: list[dict[str, Any]] = []
    answers: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            ok = self.headers["Authorization"] == "Bearer secret-token"
            code = answers.pop(0) if answers else (200 if ok else 401)
            if code == 200:
                received.append({"path": self.path, **body})
            self.send_response(code)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"https://127.0.0.1:{httpd.server_address[1]}/apis/trainer.kubeflow.org/v1alpha1/namespaces/n/trainjobs/j/status"
    try:
        yield Server(url, str(token), str(ca)), received, answers
    finally:
        httpd.shutdown()


def test_a_report_is_an_https_post_with_the_token_verified_against_the_ca(
    status_server: tuple[Server, list[dict[str, Any]], list[int]],
) -> None:
    server, received, _ = status_server
    reporter = ProgressReporter(server.post, rank=lambda: 0)
    reporter.report(5, total=10, metrics={"loss": 0.5})
    assert reporter.flush()
    assert received[0]["path"].endswith("/trainjobs/j/status")
    assert received[0]["trainerStatus"]["progressPercentage"] == 50


def test_a_refused_report_or_an_untrusted_server_is_logged_not_raised(
    status_server: tuple[Server, list[dict[str, Any]], list[int]], tmp_path: Path
) -> None:
    server, received, answers = status_server
    answers.append(403)
    reporter = ProgressReporter(server.post, rank=lambda: 0)
    reporter.report(1)
    assert reporter.flush() is False
    other_ca = self_signed_server_cert(tmp_path / "other")[2]
    untrusting = ProgressReporter(Server(server.url, server.token_file, str(other_ca)).post, rank=lambda: 0)
    untrusting.report(1)
    assert untrusting.flush() is False
    assert not received


def test_the_documented_loop_runs_outside_a_job(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(naming.ENV_TRAINER_SERVER_URL, raising=False)
    progress.default_reporter.cache_clear()
    (loop,) = python_blocks("docs/observability.md")
    exec(compile(loop, "docs/observability.md", "exec"), {})
    assert not progress.default_reporter().enabled


def test_the_reported_progress_reads_the_same_from_a_trainjob_and_a_v1_job() -> None:
    reported = trainer_status(
        Report(step=0, at=0.0), Report(step=7, total=10, metrics={"loss": 0.25}, at=14.0)
    )
    trainjob = {"kind": "TrainJob", "metadata": {}, "status": {"trainerStatus": reported}}
    v1 = {
        "kind": "PyTorchJob",
        "metadata": {"annotations": {naming.ANNOTATION_TRAINER_STATUS: json.dumps(reported)}},
    }
    for job in (trainjob, v1):
        assert kinds.trainer_status(job) == reported
        assert kinds.progress_line(job) == "step 7/10, 70%, ETA 6s, loss 0.25"
    assert kinds.progress_line({"kind": "PyTorchJob", "metadata": {}}) == ""
    v1["metadata"].update(
        name="digits", namespace="team"
    )  # the line the Airflow tasks and kubetrain wait log
    assert kinds.status_line(v1) == "PyTorchJob team/digits: Pending; step 7/10, 70%, ETA 6s, loss 0.25"
    assert (kinds.duration(3725), kinds.duration(185), kinds.duration(9)) == ("1h02m", "3m05s", "9s")
    assert jobs_cli.progress_bar(70) == "[#######---]  70%"
    assert jobs_cli.progress_bar(None) == "-"
