"""Checkpoint locations: a path inside the pods, or an object-store URL, and which URLs are usable.

One home for the rule, read by the job client (a bad location is refused before anything is
submitted), the controller (a URL mounts nothing) and ``kubetrain.checkpoint`` (a URL makes the
object-store manager). It imports nothing, so none of them pulls in what another needs.
"""

from __future__ import annotations

# The object stores a checkpoint location may name (each needs its fsspec package: s3fs, gcsfs, adlfs).
OBJECT_STORE_SCHEMES = ("s3", "gs", "gcs", "az", "abfs", "abfss")


def is_url(location: str) -> bool:
    """Whether ``location`` names an object store (``s3://…``, ``gs://…``) rather than a path."""
    scheme, sep, _ = location.partition("://")
    return bool(sep) and scheme not in ("", "file", "local")


def location_problem(location: str) -> str | None:
    """What is wrong with ``location`` as a checkpoint location, or None: it must be an absolute path
    in the pods or ``<scheme>://bucket[/prefix]`` of a supported object store."""
    if not is_url(location):
        return (
            None if location.startswith("/") else "an absolute path inside the pods, or an object-store URL"
        )
    scheme, _, rest = location.partition("://")
    if scheme not in OBJECT_STORE_SCHEMES:
        return f"an object-store URL of {', '.join(OBJECT_STORE_SCHEMES)} (not {scheme}://)"
    if not rest.strip("/"):
        return f"{scheme}://BUCKET or {scheme}://BUCKET/PREFIX: the URL names no bucket"
    return None
