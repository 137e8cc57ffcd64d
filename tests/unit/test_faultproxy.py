"""The fault proxy's decisions, without sockets: which rule picks a request, how often it fires, how a
seeded run repeats, what is forwarded, and how kubeconfigs are read and rewritten."""

from __future__ import annotations

import base64
import dataclasses
import random
import re
import ssl
from pathlib import Path

import pytest
import yaml

from kubetrain.devcluster import certs, pki
from tests.docs_commands import REPO
from tests.faultinjection import faultproxy
from tests.faultinjection.faultproxy import Call, Exchange, Rule, choose

PATCH_STATUS = Call("PATCH", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/a/status", body=b'{"x":1}')
LIST_PODS = Call("GET", "/api/v1/namespaces/ns/pods")
WATCH_PODS = Call("GET", "/api/v1/namespaces/ns/pods", query={"watch": "true", "resourceVersion": "5"})


def fire_pattern(rules: list[Rule], calls: list[Call], seed: int) -> list[int | None]:
    """Which rule (by index) decided each call, for one seeded run."""
    chance = random.Random(seed)
    decided = [choose(rules, call, chance) for call in calls]
    return [None if rule is None else rules.index(rule) for rule in decided]


def test_a_rule_without_filters_matches_every_request() -> None:
    rule = Rule(faultproxy.drop())
    assert all(rule.matches(call) for call in (PATCH_STATUS, LIST_PODS, WATCH_PODS))


def test_method_is_compared_without_regard_to_case() -> None:
    rule = Rule(faultproxy.drop(), method="patch")
    assert rule.matches(PATCH_STATUS)
    assert not rule.matches(LIST_PODS)


def test_path_is_a_regular_expression_searched_in_the_path() -> None:
    status = Rule(faultproxy.drop(), path=r"/pytorchjobs/[^/]+/status$")
    assert status.matches(PATCH_STATUS)
    assert not status.matches(Call("PATCH", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/a"))
    assert Rule(faultproxy.drop(), path="pods").matches(LIST_PODS)
    with pytest.raises(re.error):
        Rule(faultproxy.drop(), path="(")


def test_body_is_a_substring_of_the_request_body() -> None:
    call = Call("PATCH", "/x", body=b'{"status":{"conditions":[{"type":"Succeeded"}]}}')
    assert Rule(faultproxy.drop(), body="Succeeded").matches(call)
    assert not Rule(faultproxy.drop(), body="Failed").matches(call)
    assert not Rule(faultproxy.drop(), body="Succeeded").matches(LIST_PODS)


@pytest.mark.parametrize(
    ("call", "is_watch"),
    [
        (WATCH_PODS, True),
        (Call("GET", "/api/v1/pods", query={"watch": "True"}), True),  # kubernetes_asyncio's spelling
        (Call("GET", "/api/v1/pods", query={"watch": "1"}), True),
        (Call("GET", "/api/v1/watch/namespaces/ns/pods"), True),  # the old watch paths
        (Call("GET", "/api/v1/pods", query={"watch": "false"}), False),
        (LIST_PODS, False),
    ],
)
def test_watch_requests_are_told_from_the_rest(call: Call, is_watch: bool) -> None:
    assert call.watch is is_watch
    assert Rule(faultproxy.drop(), watch=True).matches(call) is is_watch
    assert Rule(faultproxy.drop(), watch=False).matches(call) is not is_watch
    assert Rule(faultproxy.drop(), watch=None).matches(call)


def test_client_filter_matches_only_that_clients_requests() -> None:
    rule = Rule(faultproxy.drop(), client="replica-a")
    assert rule.matches(Call("GET", "/api", client="replica-a"))
    assert not rule.matches(Call("GET", "/api", client="replica-b"))
    assert not rule.matches(Call("GET", "/api"))


def test_the_first_rule_that_matches_decides() -> None:
    conflict = Rule(faultproxy.respond(409), method="PATCH")
    anything = Rule(faultproxy.drop())
    assert fire_pattern([conflict, anything], [PATCH_STATUS, LIST_PODS], seed=1) == [0, 1]


def test_times_caps_the_firings_then_later_rules_decide() -> None:
    twice = Rule(faultproxy.respond(503), times=2)
    slow = Rule(faultproxy.delay(1))
    assert fire_pattern([twice, slow], [LIST_PODS] * 4, seed=1) == [0, 0, 1, 1]
    assert (twice.fired, slow.fired) == (2, 2)
    assert twice.exhausted


def test_skip_lets_the_first_matches_through_untouched() -> None:
    third = Rule(faultproxy.drop(), skip=2, times=1)
    assert fire_pattern([third], [LIST_PODS] * 5, seed=1) == [None, None, 0, None, None]
    assert (third.matched, third.fired) == (3, 1)


def test_a_request_the_filters_reject_does_not_count_towards_skip() -> None:
    rule = Rule(faultproxy.drop(), method="PATCH", skip=1)
    assert fire_pattern([rule], [LIST_PODS, PATCH_STATUS, LIST_PODS, PATCH_STATUS], seed=1) == [
        None,
        None,
        None,
        0,
    ]


def test_probability_fires_a_share_of_requests_and_a_seed_repeats_the_run() -> None:
    def run(seed: int) -> list[int | None]:
        return fire_pattern([Rule(faultproxy.respond(429), probability=0.3)], [LIST_PODS] * 1000, seed)

    first = run(7)
    assert first == run(7)
    assert first != run(8)
    assert 230 <= first.count(0) <= 370
    assert fire_pattern([Rule(faultproxy.drop(), probability=0.0)], [LIST_PODS] * 50, seed=1) == [None] * 50


def test_a_certain_rule_does_not_shift_the_random_choices_of_the_others() -> None:
    calls = [PATCH_STATUS, LIST_PODS] * 100
    alone = fire_pattern([Rule(faultproxy.drop(), method="GET", probability=0.5)], calls, seed=3)
    with_certain = fire_pattern(
        [
            Rule(faultproxy.respond(409), method="PATCH"),
            Rule(faultproxy.drop(), method="GET", probability=0.5),
        ],
        calls,
        seed=3,
    )
    gets = slice(1, None, 2)
    assert [i is not None for i in alone[gets]] == [i is not None for i in with_certain[gets]]


def test_invalid_rules_and_actions_are_refused() -> None:
    for make in (
        lambda: Rule(faultproxy.drop(), probability=1.5),
        lambda: Rule(faultproxy.drop(), times=-1),
        lambda: Rule(faultproxy.drop(), skip=-1),
        lambda: faultproxy.respond(99),
        lambda: faultproxy.respond(429, retry_after=-1),
        lambda: faultproxy.delay(-1),
        lambda: faultproxy.cut(-0.5),
        lambda: faultproxy.lose_response(1000),
    ):
        with pytest.raises(ValueError):
            make()


def test_an_injected_answer_reads_like_the_api_servers_own() -> None:
    throttled = faultproxy.status_body(429, reason=None, message="slow down", retry_after=2)
    assert throttled == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": "slow down",
        "reason": "TooManyRequests",
        "code": 429,
        "details": {"retryAfterSeconds": 2},
    }
    assert faultproxy.status_body(409, reason=None, message="m", retry_after=None)["reason"] == "Conflict"
    assert faultproxy.status_body(503, reason="Custom", message="m", retry_after=None)["reason"] == "Custom"


def test_the_client_prefix_is_split_off_the_path() -> None:
    assert faultproxy.split_client("/_c/replica-a/api/v1/pods") == ("replica-a", "/api/v1/pods")
    assert faultproxy.split_client("/_c/replica-a") == ("replica-a", "/")
    assert faultproxy.split_client("/api/v1/pods") == (None, "/api/v1/pods")
    assert faultproxy.split_client("/_c/") == (None, "/_c/")


def test_end_to_end_headers_are_forwarded_and_hop_by_hop_ones_are_not() -> None:
    headers = faultproxy.forwarded_headers(
        [
            ("Authorization", "Bearer t"),
            ("Accept", "application/json"),
            ("Host", "127.0.0.1:1"),
            ("Connection", "keep-alive, X-Hop"),
            ("X-Hop", "1"),
            ("Keep-Alive", "timeout=5"),
            ("Transfer-Encoding", "chunked"),
            ("Content-Length", "3"),
            ("Content-Type", "application/merge-patch+json"),
        ]
    )
    assert sorted(headers.items()) == [
        ("Accept", "application/json"),
        ("Authorization", "Bearer t"),
        ("Content-Type", "application/merge-patch+json"),
    ]


def test_rules_load_from_the_documented_rules_file() -> None:
    # docs/dev-cluster.md shows a rules file for `python -m tests.faultinjection.faultproxy --rules`.
    text = (REPO / "docs" / "dev-cluster.md").read_text()
    (block,) = re.findall(r"^```yaml\n(# faults\.yaml\n.*?)^```", text, re.S | re.M)
    conflicts, throttle, cuts = faultproxy.rules_from_config(yaml.safe_load(block))
    assert conflicts.action == faultproxy.respond(409) and conflicts.times == 2
    assert conflicts.matches(PATCH_STATUS) and not conflicts.matches(LIST_PODS)
    assert throttle.action == faultproxy.respond(429, retry_after=1) and throttle.probability == 0.1
    assert cuts.action == faultproxy.cut(30) and cuts.matches(WATCH_PODS) and not cuts.matches(LIST_PODS)


@pytest.mark.parametrize(
    ("entries", "error"),
    [
        ({"action": "drop"}, "must be a list"),
        ([{"status": 409}], "`action` key"),
        ([{"action": "explode"}], "unknown action 'explode'"),
        ([{"action": "drop", "seconds": 1}], "unknown keys ['seconds']"),
        ([{"action": "respond"}], "rule 1:"),
        ([{"action": "drop"}, {"action": "delay", "seconds": -1}], "rule 2: seconds must not be negative"),
        ([{"action": "drop", "path": "("}], "rule 1:"),
    ],
)
def test_a_bad_rules_file_is_refused_with_the_rule_named(entries: object, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        faultproxy.rules_from_config(entries)


def _dev_kubeconfig(tmp_path: Path) -> dict[str, object]:
    ca = tmp_path / "ca.crt"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    text = pki.kubeconfig(server="https://127.0.0.1:6443", ca_cert=ca, token="secret", user="me")
    config: dict[str, object] = yaml.safe_load(text)
    return config


def test_the_upstream_is_read_from_the_current_context(tmp_path: Path) -> None:
    upstream = faultproxy.read_upstream(_dev_kubeconfig(tmp_path), tmp_path)
    assert upstream.server == "https://127.0.0.1:6443"
    assert upstream.ca_pem == (tmp_path / "ca.crt").read_bytes()
    assert not upstream.insecure and upstream.client_cert_pem is None


def test_a_client_certificate_user_is_presented_upstream(tmp_path: Path) -> None:
    issued = certs.generate(tmp_path / "pki")
    upstream = faultproxy.Upstream(
        "https://127.0.0.1:6443",
        ca_pem=issued.ca_cert.read_bytes(),
        client_cert_pem=issued.kubelet_client_cert.read_bytes(),
        client_key_pem=issued.kubelet_client_key.read_bytes(),
    )
    context = faultproxy.upstream_ssl_context(upstream)
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    # Requests that come with a token of their own go upstream without the certificate, which the
    # API server would otherwise take for the client's identity.
    plain = faultproxy.upstream_ssl_context(upstream, client_cert=False)
    assert isinstance(plain, ssl.SSLContext) and plain.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ssl.SSLError):
        faultproxy.upstream_ssl_context(dataclasses.replace(upstream, client_key_pem=b"not a key"))


def test_a_ca_file_path_is_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    config = {
        "clusters": [{"name": "c", "cluster": {"server": "https://h:1/", "certificate-authority": "ca.pem"}}],
        "users": [{"name": "u", "user": {"client-certificate-data": base64.b64encode(b"CERT").decode()}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    (tmp_path / "ca.pem").write_bytes(b"PEM")
    upstream = faultproxy.read_upstream(config, tmp_path)
    assert (upstream.server, upstream.ca_pem, upstream.client_cert_pem) == ("https://h:1", b"PEM", b"CERT")
    with pytest.raises(ValueError, match="no context named 'other'"):
        faultproxy.read_upstream(config, tmp_path, context="other")


def test_the_proxied_kubeconfig_points_at_the_proxy_with_the_same_credentials(tmp_path: Path) -> None:
    original = _dev_kubeconfig(tmp_path)
    proxied = faultproxy.proxied_config(original, "https://127.0.0.1:9/_c/a", b"PROXY CA")
    (cluster,) = proxied["clusters"]
    assert cluster["cluster"] == {
        "server": "https://127.0.0.1:9/_c/a",
        "certificate-authority-data": base64.b64encode(b"PROXY CA").decode(),
    }
    assert proxied["users"] == original["users"]
    assert proxied["contexts"] == original["contexts"]
    assert original["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:6443"  # type: ignore[index]


def test_writes_are_filtered_by_client_method_and_path() -> None:
    proxy = faultproxy.FaultProxy(faultproxy.Upstream("https://127.0.0.1:1"))

    def record(client: str | None, method: str, path: str) -> Exchange:
        exchange = Exchange(client, method, path, {}, b"", started=0.0)
        proxy.exchanges.append(exchange)
        return exchange

    create = record("a", "POST", "/api/v1/namespaces/ns/pods")
    record("a", "GET", "/api/v1/namespaces/ns/pods")
    status = record("b", "PATCH", "/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j/status")
    delete = record(None, "DELETE", "/api/v1/namespaces/ns/pods/p")
    assert proxy.writes() == [create, status, delete]
    assert proxy.writes(client="a") == [create]
    assert proxy.writes(method="patch") == [status]
    assert proxy.writes(path="/pods") == [create, delete]
