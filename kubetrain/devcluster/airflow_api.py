"""A small client of Airflow's REST API, the same calls on Airflow 3 (``/api/v2``, a JWT from
``/auth/token``) and Airflow 2.11 (``/api/v1``, basic auth), for ``kubetrain dev airflow`` and for
the tests and benchmarks that drive a local deployment as a user does.

Why not Airflow's own client: ``apache-airflow-client`` is a separate package per API version, and
these few calls (trigger a run, read task instances, their tries, XComs and links, set a state,
clear) differ between the two lines only in the prefix, the authentication and two request bodies.
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from kubetrain.devcluster.errors import DevClusterError

TERMINAL_RUN_STATES = ("success", "failed")


class AirflowApiError(DevClusterError):
    """The API answered with an error status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


class AirflowApi:
    """Calls to one deployment's REST API as its admin user."""

    def __init__(self, base_url: str, major: int, user: str, password: str, *, timeout: float = 30) -> None:
        self.base_url = base_url.rstrip("/")
        self.major = major
        self.user = user
        self.password = password
        self.timeout = timeout
        self._token: str | None = None

    @property
    def prefix(self) -> str:
        return "/api/v2" if self.major >= 3 else "/api/v1"

    def _authorization(self) -> str:
        if self.major < 3:
            pair = f"{self.user}:{self.password}".encode()
            return "Basic " + base64.b64encode(pair).decode()
        if self._token is None:
            answer = self._send(
                "POST", "/auth/token", {"username": self.user, "password": self.password}, auth=False
            )
            self._token = str(answer["access_token"])
        return f"Bearer {self._token}"

    def _send(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if auth:
            request.add_header("Authorization", self._authorization())
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 401 and auth and self._token is not None:
                self._token = None  # expired: fetch a new one, once
                return self._send(method, path, body)
            raise AirflowApiError(method, path, exc.code, exc.read().decode(errors="replace")) from None
        return json.loads(text) if text else None

    def call(self, method: str, path: str, body: Any = None, **query: Any) -> Any:
        """``method`` on ``prefix + path`` with ``query`` parameters; the decoded JSON answer."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        return self._send(method, self.prefix + path, body)

    # -- the calls the tests and benchmarks make -----------------------------------------------------
    def dag(self, dag_id: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.call("GET", f"/dags/{dag_id}")
        except AirflowApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    def import_errors(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/importErrors")["import_errors"])

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any] | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"dag_run_id": run_id, "conf": conf or {}}
        if self.major >= 3:
            body["logical_date"] = None
        run: dict[str, Any] = self.call("POST", f"/dags/{dag_id}/dagRuns", body)
        return run

    def dag_run(self, dag_id: str, run_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self.call("GET", f"/dags/{dag_id}/dagRuns/{_q(run_id)}")
        return run

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        """Every task instance of a run, page by page (the API serves at most 100 at a time)."""
        path = f"/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances"
        found: list[dict[str, Any]] = []
        while True:
            page = self.call("GET", path, limit=100, offset=len(found))
            found.extend(page["task_instances"])
            if not page["task_instances"] or len(found) >= int(page["total_entries"]):
                return found

    def task_instance(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, Any]:
        found: dict[str, Any] = self.call("GET", self._ti(dag_id, run_id, task_id, map_index))
        return found

    def tries(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> list[dict[str, Any]]:
        """Every try of one task instance so far, oldest first."""
        found = self.call("GET", self._ti(dag_id, run_id, task_id, map_index) + "/tries")
        return sorted(found["task_instances"], key=lambda t: int(t["try_number"]))

    def xcom(
        self, dag_id: str, run_id: str, task_id: str, key: str = "return_value", map_index: int = -1
    ) -> Any:
        path = f"/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances/{task_id}/xcomEntries/{key}"
        if self.major >= 3:
            return self.call("GET", path, map_index=map_index)["value"]
        value = self.call("GET", path, map_index=map_index, deserialize="true", stringify="false")["value"]
        return json.loads(value) if isinstance(value, str) else value

    def links(self, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> dict[str, str]:
        found: dict[str, Any] = self.call("GET", self._ti(dag_id, run_id, task_id, map_index) + "/links")
        links = found.get("extra_links", found)  # Airflow 3 wraps them
        return {k: v for k, v in links.items() if k != "total_entries"}

    def set_state(self, dag_id: str, run_id: str, task_id: str, state: str) -> None:
        """Mark a task instance ``state`` as a user does in the UI (``failed``, ``success``)."""
        body: dict[str, Any] = {"new_state": state}
        if self.major < 3:
            body["dry_run"] = False
        self.call("PATCH", self._ti(dag_id, run_id, task_id, -1), body)

    def clear(self, dag_id: str, run_id: str, task_ids: list[str]) -> None:
        """Clear task instances of one run, as the UI's Clear does: they run again."""
        body: dict[str, Any] = {
            "dry_run": False,
            "task_ids": task_ids,
            "dag_run_id": run_id,
            "only_failed": False,
            "reset_dag_runs": True,
        }
        self.call("POST", f"/dags/{dag_id}/clearTaskInstances", body)

    def _ti(self, dag_id: str, run_id: str, task_id: str, map_index: int) -> str:
        path = f"/dags/{dag_id}/dagRuns/{_q(run_id)}/taskInstances/{task_id}"
        return path + (f"/{map_index}" if map_index >= 0 else "")


def _q(value: str) -> str:
    return urllib.parse.quote(value, safe="")
