"""Database URLs as people see them: ``shown`` is the one function every place that prints,
logs, stores or names something after a URL goes through -- error messages, the status
header, worker and launcher log lines, the dashboard's footer, the launcher's keys, its state
file and its log file names.

A URL carries secrets in two places: its password, and query-string parameters that drivers
read as secrets (libpq's ``?password=`` and ``?sslpassword=``, and the like).  Both are shown
as ``***``.  Paths (``passfile``, ``sslkey``) stay: they say where a secret is kept, not what
it is, and an operator needs them to find a misconfiguration.
"""

from __future__ import annotations

import re
from urllib.parse import quote_plus

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

MASK = "***"
# A query key holding any of these words is a secret (case-insensitive): password,
# sslpassword, passwd (MySQL drivers), pwd (ODBC), and tokens or keys handed to a proxy.
SECRET_WORDS = ("password", "passwd", "pwd", "secret", "token", "apikey", "api_key")

# For text that is not a URL at all (an error about it must not print its secret either):
# everything between the user name and the last "@", and the value of each secret parameter.
# Patterns, compiled (and cached by ``re``) at their first use: a worker imports this module
# and may never mask a text.
_USERINFO = r"(://[^:/?#@]*:).*@"
_PARAMETER = r"([?&;]([^=&;#]*)=)([^&;#]*)"


def is_secret(key: str) -> bool:
    """Whether a query-string parameter's value is a secret."""
    lowered = key.lower()
    return any(word in lowered for word in SECRET_WORDS)


def shown(url: str | URL) -> str:
    """``url`` as it may be shown anywhere: its password and secret parameters as ``***``.
    Never raises: text that does not parse as a URL is masked as text."""
    if isinstance(url, str):
        raw = url
        try:
            url = make_url(raw)
        except (ArgumentError, ValueError):
            return _masked_text(raw)
    text = url.set(query={}).render_as_string(hide_password=True)
    pairs = [
        f"{quote_plus(key)}={MASK if is_secret(key) else quote_plus(value)}"
        for key in sorted(url.query)
        for value in _values(url.query[key])
    ]
    return f"{text}?{'&'.join(pairs)}" if pairs else text


def _values(value: str | tuple[str, ...]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else value


def _masked_text(text: str) -> str:
    text = re.sub(_USERINFO, rf"\g<1>{MASK}@", text)
    return re.sub(
        _PARAMETER,
        lambda m: m.group(1) + MASK if is_secret(m.group(2)) else m.group(0), text
    )
