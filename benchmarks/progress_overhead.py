"""What reporting progress every step costs a training loop: steps per second with and without it.

The loop is a tiny model's training step (a two-layer MLP, forward, backward and SGD on one small
batch, with torch on CPU), run STEPS times without reporting and STEPS times calling
``report_progress(step, total, metrics={"loss": loss.item()})`` every step, side by side ROUNDS times (in
ABBA order, so a drift in the machine's load hits both sides alike); the reports go over the real
transport (HTTPS with a bearer token) to a local server. The ratio is the median over rounds of
(steps/s with reporting) / (steps/s without); on a machine shared with other work single rounds
vary a lot, and the median of the paired ratios is what stays put. Also measured: the cost of one
``report`` call by itself.

A run must be long against the fixed cost of its reporter (a thread, the first HTTPS handshake, to
a server in this same process); a training job runs for minutes. One ``report`` call's cost
against the step time is the floor the ratio tends to.

Usage: python benchmarks/progress_overhead.py [--steps 6000 --rounds 10]
Results go to benchmarks/results/progress_overhead.{json,md}.
"""

from __future__ import annotations

import argparse
import http.server
import json
import ssl
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch

from kubetrain.controller.statusserver.tls import self_signed
from kubetrain.progress import ProgressReporter, Server

RESULTS = Path(__file__).resolve().parent / "results"


def local_server(directory: Path) -> tuple[Server, list[int]]:
    """An HTTPS server on loopback that takes reports (counted) and answers 200."""
    made = self_signed(["127.0.0.1"])
    for name, pem in (("tls.crt", made.cert), ("tls.key", made.key), ("ca.crt", made.ca), ("token", b"t")):
        (directory / name).write_bytes(pem)
    received: list[int] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            received.append(1)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(directory / "tls.crt", directory / "tls.key")
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = (
        f"https://127.0.0.1:{httpd.server_address[1]}/apis/kubeflow.org/v1/namespaces/n/pytorchjobs/j/status"
    )
    return Server(url, str(directory / "token"), str(directory / "ca.crt")), received


def steps_per_second(steps: int, reporter: ProgressReporter | None) -> float:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    inputs, labels = torch.randn(32, 64), torch.randint(0, 10, (32,))
    started = time.perf_counter()
    for step in range(steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(inputs), labels)
        loss.backward()
        optimizer.step()
        if reporter is not None:
            reporter.report(step + 1, total=steps, metrics={"loss": loss.item()})
    return steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as scratch:
        server, received = local_server(Path(scratch))
        plain, reporting, ratios = [], [], []

        def reporting_run() -> float:
            reporter = ProgressReporter(server.post, rank=lambda: 0)
            rate = steps_per_second(args.steps, reporter)
            reporter.flush()
            return rate

        for round_ in range(args.rounds):
            if round_ % 2:
                with_reports, without = reporting_run(), steps_per_second(args.steps, None)
            else:
                without, with_reports = steps_per_second(args.steps, None), reporting_run()
            plain.append(without)
            reporting.append(with_reports)
            ratios.append(with_reports / without)
        idle = ProgressReporter(lambda _: None, rank=lambda: 0)
        calls = 100_000
        started = time.perf_counter()
        for step in range(calls):
            idle.report(step, total=calls, metrics={"loss": 0.5})
        per_call_us = (time.perf_counter() - started) / calls * 1e6
        idle.flush()
    without, with_reports, ratio = (
        statistics.median(plain),
        statistics.median(reporting),
        statistics.median(ratios),
    )
    result = {
        "steps": args.steps,
        "rounds": args.rounds,
        "steps_per_second_without": round(without, 1),
        "steps_per_second_with": round(with_reports, 1),
        "ratio": round(ratio, 4),
        "overhead_percent": round(100 * (1 - ratio), 2),
        "ratio_min": round(min(ratios), 4),
        "ratio_max": round(max(ratios), 4),
        "report_share_of_step_percent": round(100 * per_call_us / (1e6 / without), 3),
        "report_call_us": round(per_call_us, 2),
        "reports_sent": len(received),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "progress_overhead.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "progress_overhead.md").write_text(
        "# Progress reporting overhead\n\n"
        f"A two-layer MLP's training step (torch, CPU, one thread), {args.steps} steps a run, "
        f"{args.rounds} rounds side by side; `report_progress` every step, sent over HTTPS to a local server. "
        "Steps/s are medians; the ratio is the median of the rounds' paired ratios.\n\n"
        "| | steps/s |\n|---|---|\n"
        f"| without reporting | {result['steps_per_second_without']} |\n"
        f"| reporting every step | {result['steps_per_second_with']} |\n"
        f"| ratio (median of the rounds) | {result['ratio']} ({result['overhead_percent']}% overhead) |\n"
        f"| the rounds' ratios | {result['ratio_min']} .. {result['ratio_max']} |\n\n"
        f"One `report` call by itself: {result['report_call_us']} µs, "
        f"{result['report_share_of_step_percent']}% of a step. Reports sent: {result['reports_sent']} "
        "(at most one per 5 s, and the last at the end of each round).\n"
    )
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
