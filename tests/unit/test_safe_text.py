"""What a command may print: URLs without their passwords, names without control characters."""

from __future__ import annotations

import pytest

from hotboard.safe_text import escape, has_secret, redact, redact_url


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://:s3cret@redis:6379/0", "redis://:***@redis:6379/0"),
        ("redis://reader:s3cret@redis:6379/0", "redis://reader:***@redis:6379/0"),
        ("rediss://tok3n@redis:6380/0?ssl_ca_certs=/ca.crt", "rediss://***@redis:6380/0?ssl_ca_certs=/ca.crt"),
        ("redis://u:p%40ss@h/0", "redis://u:***@h/0"),
        ("redis://u:a/b?c#d@e:f@host:1/0", "redis://u:***@host:1/0"),  # unencoded / ? # @ : in the password
        ("redis://host/0?password=s3cret&db=1", "redis://host/0?password=***&db=1"),
        ("redis://host/0?db=1&ssl_PASSWORD=s3cret", "redis://host/0?db=1&ssl_PASSWORD=***"),
        (
            "unreachable at redis://:pw1@a/0 and redis://u:pw2@b/0: refused",
            "unreachable at redis://:***@a/0 and redis://u:***@b/0: refused",
        ),
        (
            "invalid --redis 'redis://:pw@[::1/0': Invalid IPv6 URL",
            "invalid --redis 'redis://:***@[::1/0': Invalid IPv6 URL",
        ),
        ("no url here, user@example.com", "no url here, user@example.com"),
    ],
)
def test_redact_masks_every_password(text: str, expected: str) -> None:
    assert redact(text) == expected
    if " " not in text:  # one URL: the same, read whole
        assert redact_url(text) == expected
    assert redact(expected) == expected  # idempotent: a message redacted twice reads the same
    assert has_secret(text) is (text != expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("b000", "b000"),
        ("Zoë 🎮", "Zoë 🎮"),
        ("\x1b]0;pwned\x07x", "\\x1b]0;pwned\\x07x"),
        ("a\tb\nc\rd", "a\\x09b\\x0ac\\x0dd"),
        ("del\x7f c1\x9b", "del\\x7f c1\\x9b"),
        ("rtl\u202eevil", "rtl\\u202eevil"),
        ("line\u2028sep", "line\\u2028sep"),
        ("back\\slash", "back\\\\slash"),
        ("surrogate\udcff", "surrogate\\udcff"),
        ("tag\U000e0041", "tag\\U000e0041"),
    ],
)
def test_escape_leaves_no_control_character(text: str, expected: str) -> None:
    shown = escape(text)
    assert shown == expected
    assert shown.isprintable()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("redis://u:pa ss w@host:1/0", "redis://u:***@host:1/0"),  # unencoded whitespace: free text ends at it
        ("redis://:\tx y@host/0?password=z z", "redis://:***@host/0?password=***"),
        ("redis://host:1/0", "redis://host:1/0"),
        ("not a url @ all", "not a url @ all"),
    ],
)
def test_redact_url_reads_one_url_whole(url: str, expected: str) -> None:
    assert redact_url(url) == expected
    assert has_secret(url) is (url != expected)
