"""Text a command prints to a person's terminal: no credentials, no control characters.

A Redis URL carries its password (``redis://user:password@host``, or ``?password=``), and a CLI that echoes the
URL it was given puts it in shell scrollback, CI logs and bug reports. Names read back from Redis (the board
index) are whatever anyone wrote there: printed raw, ``\\x1b]...`` sequences retitle or rewrite the terminal.
"""

from __future__ import annotations

import re

MASK = "***"
#: ``scheme://userinfo@``: the userinfo runs to the *last* ``@`` before whitespace, so a password holding an
#: unencoded ``/ ? # @ :`` (which confuses URL parsers) is covered whole; over-masking a host is the safe error.
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<userinfo>\S*)@")
#: A query parameter whose name says it holds a secret (redis-py accepts ``?password=``).
_SECRET_PARAM = re.compile(r"(?P<name>[?&;][^=&;#\s]*(?:pass|secret|token)[^=&;#\s]*=)[^&;#\s]*", re.IGNORECASE)
#: The same in one URL read whole: its value runs to the next parameter, whitespace included.
_WHOLE_SECRET_PARAM = re.compile(_SECRET_PARAM.pattern.removesuffix(r"[^&;#\s]*") + "[^&;#]*", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the password of every URL in it masked; the user name stays (it says who connected)."""
    masked = _USERINFO.sub(lambda m: _masked(m["scheme"], m["userinfo"]), text)
    return _SECRET_PARAM.sub(lambda m: m["name"] + MASK, masked)


def redact_url(url: str) -> str:
    """One URL given whole (a ``--redis`` value): everything between ``://`` and its last ``@`` is userinfo,
    even a password with unencoded whitespace, which :func:`redact` on free text takes for the URL's end."""
    scheme, sep, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    whole = f"{_masked(scheme + sep, userinfo)}{host}" if sep and at else url
    return redact(_WHOLE_SECRET_PARAM.sub(lambda m: m["name"] + MASK, whole))


def _masked(scheme: str, userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    # no colon: the whole userinfo may be a token (``rediss://TOKEN@host``), so it is masked too
    return f"{scheme}{user}:{MASK}@" if colon else f"{scheme}{MASK}@"


def has_secret(url: str) -> bool:
    """Whether ``url`` holds something :func:`redact_url` masks."""
    return redact_url(url) != url


def escape(text: str) -> str:
    """``text`` with every non-printable character (C0, DEL, C1, bidi and other format characters, line and
    paragraph separators) and the backslash written as Python escapes, so one name is one visible line."""
    if text.isprintable() and "\\" not in text:
        return text  # the common case: one C-level scan
    return "".join(ch if ch.isprintable() and ch != "\\" else _escaped(ch) for ch in text)


def _escaped(ch: str) -> str:
    if ch == "\\":
        return "\\\\"
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
