"""Service-account tokens verified in the server, against the cluster's own signing keys.

Why: asking the API server about a token (a TokenReview) is a request per unknown token, and anyone
who reaches the server can send tokens. The API server publishes the keys it signs service-account
tokens with (OIDC discovery: ``/.well-known/openid-configuration`` and the JWKS it names, readable by
every service account by default), so a token can be checked here: its signature, issuer, audience (the
job's status path) and expiry. A string that is not one of the cluster's tokens (random, forged,
expired, for another audience) then costs a signature check and no request at all, and a valid one no
TokenReview either. The answer has a TokenReview's shape, so one decision (``authz.bound_pod``) reads
either; the token's pod is still looked up (``authz.authorise``), so a deleted pod's token is refused.

Where the keys are not served (discovery off or unreadable), or a token names a key the server does not
know even after fetching the keys again (at most every ``REFRESH_SECONDS``), the server falls back to a
TokenReview, within its budget.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kubetrain.controller.statusserver.authz import POD_NAME_EXTRA, POD_UID_EXTRA
from kubetrain.kube import errors
from kubetrain.kube.client import KubeClient

log = logging.getLogger("kubetrain.controller.statusserver")
Obj = dict[str, Any]
DISCOVERY = "/.well-known/openid-configuration"
REFRESH_SECONDS = 60.0  # keys are fetched again at most this often (a token named a key not known)
RETRY_UNSERVED = 300.0  # discovery not served: ask again this much later
LEEWAY = 30  # seconds of clock skew allowed on exp / nbf / iat
ALGORITHMS = ["RS256", "ES256"]  # what kube-apiserver signs service-account tokens with


@dataclass(frozen=True)
class Keys:
    """The issuer the cluster's tokens name, and its public keys by key id."""

    issuer: str
    by_id: dict[str, Any]


def parse_keys(config: Obj, jwks: Obj) -> Keys:
    """The keys of a discovery document and its JWKS (the keys no algorithm here can use are left out)."""
    import jwt  # with cryptography: only a controller that serves progress reports loads them

    found = {}
    for key in jwt.PyJWKSet.from_dict(jwks).keys:
        if key.key_id:
            found[key.key_id] = key.key
    return Keys(str(config["issuer"]), found)


def not_authenticated(error: str) -> Obj:
    return {"status": {"authenticated": False, "error": error}}


def review_of(token: str, audience: str, keys: Keys) -> Obj | None:
    """What a TokenReview of ``token`` for ``audience`` would say, decided with ``keys``: authenticated
    with the token's pod in ``extra``, or not with why; None when no key here signed it (ask the API
    server)."""
    import jwt

    try:
        key = keys.by_id.get(str(jwt.get_unverified_header(token).get("kid", "")))
    except jwt.PyJWTError:
        return not_authenticated("not a service-account token")
    if key is None:
        return None
    try:
        claims = jwt.decode(
            token,
            key,
            algorithms=ALGORITHMS,
            audience=audience,
            issuer=keys.issuer,
            leeway=LEEWAY,
            options={"require": ["exp", "iss", "aud", "sub"]},
        )
    except jwt.PyJWTError as exc:
        return not_authenticated(str(exc))
    pod = ((claims.get("kubernetes.io") or {}).get("pod")) or {}
    extra = {POD_NAME_EXTRA: [pod["name"]], POD_UID_EXTRA: [pod["uid"]]} if pod.get("name") else {}
    audiences = claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    user = {"username": str(claims["sub"]), "extra": extra}
    return {"status": {"authenticated": True, "audiences": audiences, "user": user}}


class IssuerKeys:
    """The cluster's service-account keys, fetched through the API server when first needed and again
    when a token names one not known (at most every ``REFRESH_SECONDS``)."""

    def __init__(self, kube: KubeClient, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.clock = kube, clock
        self._keys: Keys | None = None
        self._next_fetch = 0.0
        self._fetching = asyncio.Lock()  # requests that arrive during a fetch wait for its keys

    async def review(self, token: str, audience: str) -> Obj | None:
        """``review_of`` with the cluster's keys; None when the API server must be asked instead."""
        if self._keys is None:
            await self._fetch()
        if self._keys is None:
            return None
        found = review_of(token, audience, self._keys)
        if found is None and await self._fetch():
            found = review_of(token, audience, self._keys)
        return found

    async def _fetch(self) -> bool:
        """Fetch the keys if it is time to; whether there are keys now that were not before."""
        async with self._fetching:
            return await self._fetch_now()

    async def _fetch_now(self) -> bool:
        import jwt

        now = self.clock()
        if now < self._next_fetch:
            return False
        self._next_fetch = now + REFRESH_SECONDS
        try:
            config = await self.kube.request("GET", DISCOVERY)
            jwks_path = urlsplit(str(config["jwks_uri"])).path
            jwks = await self.kube.request("GET", jwks_path, accept="application/jwk-set+json")
            keys = parse_keys(config, jwks)
        except (errors.APIError, KeyError, ValueError, jwt.PyJWTError) as exc:
            self._next_fetch = now + RETRY_UNSERVED
            log.info("service-account keys not served (%s): reports are checked by TokenReview", exc)
            return False
        changed = self._keys != keys
        self._keys = keys
        return changed
