"""The controller's flags: one home for each flag's name, type, default and help.

``kubetrain controller run`` builds its options from these fields (``controller/cli.py``), and
tests and embedders construct ``Options`` directly, so the two cannot drift. The module imports
only the kind registry: ``kubetrain --help`` reads it without loading the controller, and what
the methods need (plugins, leader timings, certificates) is imported when they are called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from kubetrain import naming
from kubetrain.api import kinds as api_kinds

if TYPE_CHECKING:
    from kubetrain.controller.core.skeleton import Settings
    from kubetrain.controller.plugins.status_server import StatusServerPlugin
    from kubetrain.controller.statusserver.tls import ServingCert
    from kubetrain.kube import leader

T = TypeVar("T")

LOG_FORMATS = ("text", "json")
MANAGED_BY = ("compatible", "kubetrain")


def flag(default: T, help: str, *names: str, **option: Any) -> T:
    """A field that is also a ``controller run`` flag: its help, extra names, and typer settings."""
    return field(default=default, metadata={"help": help, "names": names, "option": option})


@dataclass
class Options:
    """The controller's flags (``kubetrain controller run --help``; docs/controller.md)."""

    kubeconfig: str | None = flag(None, "Kubeconfig (default: in-cluster, then $KUBECONFIG).")
    namespace: str | None = flag(None, "Watch one namespace only (default: all).")
    # --enable-scheme (repeatable, case-insensitive kind names) is parsed by the CLI into this.
    kinds: tuple[str, ...] = tuple(k.kind for k in api_kinds.JOBS)
    # Coroutines, not threads: a reconcile mostly waits on the API server, so many cost little. A burst
    # of submissions is created as fast as the workers can start jobs (docs/performance.md).
    workers: int = flag(32, "Concurrent reconciles per kind.", "--workers", "--controller-threads", min=1)
    kube_api_qps: float = flag(50.0, "Client-side request rate limit for each API kind (0 disables).")
    kube_api_burst: int = flag(100, "Client-side burst above the rate limit.")
    leader_elect: bool = flag(False, "Elect a leader through a Lease before acting.")
    leader_election_id: str = flag("kubetrain-controller", "Name of the Lease.")
    leader_election_namespace: str = flag("kubetrain-system", "Namespace of the Lease.")
    leader_election_lease_duration: float = flag(
        15.0, "Seconds a follower waits, from when it saw the last renew, to take over."
    )
    leader_election_renew_deadline: float = flag(
        10.0, "Seconds the leader may go without a successful renew before it exits."
    )
    leader_election_retry_period: float = flag(2.0, "Seconds between tries to acquire or renew the Lease.")
    metrics_bind_address: str = flag(":8080", "Serve /metrics here ('0' disables).")
    health_probe_bind_address: str = flag(":8081", "Serve /healthz and /readyz here ('0' disables).")
    gang_scheduler_name: str = flag(
        "",
        "Gang scheduling: 'kubernetes' (native PodGroup), 'volcano', or a scheduler-plugins scheduler name.",
    )
    managed_by: str = flag(
        "compatible",
        "'compatible': reconcile jobs with no managedBy or the upstream value too (drop-in replacement); "
        "'kubetrain': only jobs with managedBy kubetrain.dev/controller (run beside the upstream operator).",
    )
    pytorch_init_container: bool = flag(False, "Add the master-wait init container to PyTorch Workers.")
    pytorch_init_container_image: str = flag("alpine:3.10", "Image of the master-wait init container.")
    pytorch_init_container_max_tries: int = flag(100, "DNS lookups before the init container gives up.")
    watch_timeout: int = flag(300, "Seconds a watch runs before it is renewed.")
    log_format: str = flag("text", "text or json.")
    log_level: str = flag("info", "debug, info, warning or error.")
    status_server_bind_address: str = flag(
        "0", "Serve training pods' progress reports (HTTPS) here ('0' disables)."
    )
    status_server_url: str = flag(
        "",
        "Base URL pods reach the status server at "
        "(default: https://kubetrain-controller.<leader-election-namespace>.svc:<port>).",
    )
    status_server_cert_dir: str = flag(
        "", "tls.crt, tls.key and ca.crt of the status server (default: a CA of its own)."
    )

    def problems(self) -> dict[str, str]:
        """What is wrong with the flags, by flag name (empty when they are fine)."""
        found: dict[str, str] = {}
        if self.log_format not in LOG_FORMATS:
            found["--log-format"] = f"must be text or json (got {self.log_format!r})"
        if self.managed_by not in MANAGED_BY:
            found["--managed-by"] = f"must be compatible or kubetrain (got {self.managed_by!r})"
        try:
            self.leader_timings()
        except ValueError as exc:
            found["--leader-election-*"] = str(exc)
        return found

    @property
    def status_server_enabled(self) -> bool:
        return self.status_server_bind_address not in ("", "0")

    def status_server_base_url(self) -> str:
        """How pods reach the status server: the flag, else the controller's Service on the bound port."""
        if self.status_server_url:
            return self.status_server_url.rstrip("/")
        _, port = split_address(self.status_server_bind_address)
        return f"https://kubetrain-controller.{self.leader_election_namespace}.svc:{port}"

    def status_server_cert(self) -> ServingCert:
        """The server's certificate: from ``--status-server-cert-dir``, else a new CA's for the URL's host.

        ``cryptography`` is imported here, not with the module: about 8 MiB in every controller
        process, which only one that serves progress reports needs."""
        from kubetrain.controller.statusserver.tls import ServingCert, self_signed

        if self.status_server_cert_dir:
            return ServingCert.from_dir(Path(self.status_server_cert_dir))
        host = urlsplit(self.status_server_base_url()).hostname or "localhost"
        return self_signed([host, "localhost", "127.0.0.1"])

    def settings(self, status_server: StatusServerPlugin | None = None) -> Settings:
        from kubetrain.controller.core.skeleton import Settings
        from kubetrain.controller.plugins.gang import gang_scheduler
        from kubetrain.controller.plugins.master_wait import MasterWaitPlugin
        from kubetrain.controller.state import PodPlugin

        if problem := self.problems().get("--managed-by"):
            raise ValueError(f"--managed-by {problem}")
        managed: frozenset[str | None] = frozenset({naming.MANAGED_BY_KUBETRAIN})
        if self.managed_by == "compatible":
            managed |= {None, "", naming.MANAGED_BY_TRAINING_OPERATOR}
        plugins: dict[str, tuple[PodPlugin, ...]] = {}
        if self.pytorch_init_container:
            wait = MasterWaitPlugin(self.pytorch_init_container_image, self.pytorch_init_container_max_tries)
            plugins[api_kinds.PYTORCHJOB.kind] = (wait,)
        gang = gang_scheduler(self.gang_scheduler_name) if self.gang_scheduler_name else None
        return Settings(managed_by=managed, gang=gang, extra_plugins=plugins, status_server=status_server)

    def leader_timings(self) -> leader.Timings:
        """The leader-election timings (raises ValueError unless retry < renew deadline < lease)."""
        from kubetrain.kube import leader

        return leader.Timings(
            lease_duration=self.leader_election_lease_duration,
            renew_deadline=self.leader_election_renew_deadline,
            retry_period=self.leader_election_retry_period,
        )


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (an empty host means every interface) as a host and a port."""
    host, _, port = address.rpartition(":")
    return host or "0.0.0.0", int(port)  # the endpoints serve the cluster network
