"""Secrets a failed container printed never reach the job's status (``controller/redaction.py``)."""

from __future__ import annotations

import pytest

from kubetrain.controller.redaction import redact


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        ("to postgresql://trainer:hunter2@db:5432/runs", "to postgresql://trainer:***@db:5432/runs"),
        ("Authorization: Bearer abcdefghijklmnop123", "Authorization: Bearer ***"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY", "AWS_SECRET_ACCESS_KEY=***"),
        ('{"api_key": "sk-12345abcdef", "lr": 0.1}', '{"api_key": "***", "lr": 0.1}'),
        ("password: s3cr3t done", "password: *** done"),
        ("key id AKIAIOSFODNN7EXAMPLE used", "key id *** used"),
        ("token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.c2lnbmF0dXJl end", "token *** end"),
        (
            "-----BEGIN RSA PRIVATE KEY-----\nMIIE\nabc\n-----END RSA PRIVATE KEY-----\nnext",
            "[private key redacted]\nnext",
        ),
    ],
)
def test_the_obvious_forms_of_a_secret_are_masked(said: str, kept: str) -> None:
    assert redact(said) == kept


def test_an_ordinary_traceback_is_left_as_it_is() -> None:
    text = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 12, in <module>\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB; tokens_per_step=4096"
    )
    assert redact(text) == text, "a key that only contains a secret's name is not one"
