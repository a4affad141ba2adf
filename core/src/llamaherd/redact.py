"""Replace secret values with ``***`` in text, in JSON-able data and in log records.

The scheduler builds one :class:`Redactor` per run from the values of the credentials staged for
it and passes everything it stores or shows (tool output, status, return values, errors, logs)
through it. A secret is masked in every form it takes in output: as is, stripped, JSON-escaped,
line by line, and (for values of 8 characters or more) base64-, hex- and URL-encoded, as CI
systems mask them.

Finding them: every form is at least :data:`MIN_LENGTH` characters, so the forms are kept in
buckets by their first four characters, longest first. One small regex over those distinct
prefixes (a prefix tree, so the engine follows one branch per position) finds where a secret may
start, and the bucket's forms are compared there. The leftmost match wins, and the longest form at
that position, so a secret that starts with another is replaced whole. Adding a secret costs time
and memory linear in that secret (its forms, as plain strings) plus, when it brings a prefix not
seen before, a recompile of the prefix regex, whose size is bounded by the number of forms rather
than their length. A run sets values at runtime (``setenv``), so this must stay cheap: a
character-level tree of whole secrets took gigabytes for a few megabytes of values.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "***"
# Shorter values ("a", "no") would mask ordinary words; no real secret is that short.
MIN_LENGTH = 4
# Encoded forms of a shorter value are a few characters of noise that ordinary encoded data
# (a base64 blob, a hex digest) contains by chance.
MIN_ENCODED = 8


def _base64_forms(data: bytes) -> set[str]:
    """``data`` base64-encoded alone, and the characters that stand for it wherever it falls in
    a longer encoded stream: at each of the three byte offsets, only the characters whose six
    bits all come from ``data`` (those at the edges mix in the neighbouring bytes)."""
    forms = {base64.b64encode(data).decode(), base64.urlsafe_b64encode(data).decode()}
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + data).decode()
        inner = encoded[-(-8 * offset // 6) : 8 * (offset + len(data)) // 6]
        forms.update((inner, inner.replace("+", "-").replace("/", "_")))
    return forms


def _variants(secret: str) -> set[str]:
    """The forms a value takes in output: as is, stripped, JSON-escaped, line by line (a
    multi-line key printed with ``head`` or through a terminal's CRLF), and encoded."""
    stripped = secret.strip()
    forms = {secret, stripped, json.dumps(secret)[1:-1]}
    if "\n" in stripped:
        forms.update(line.strip() for line in secret.splitlines())
    if len(stripped) >= MIN_ENCODED:
        data = stripped.encode()
        forms |= _base64_forms(data)
        forms.update(
            (data.hex(), data.hex().upper(), quote(stripped, safe=""), quote_plus(stripped))
        )
    return {form for form in forms if len(form) >= MIN_LENGTH}


_END = ""  # trie key marking that a prefix ends at this node


def _trie_regex(words: Iterable[str]) -> str:
    """Regex matching exactly ``words`` (equally long: the forms' prefixes) as a prefix tree:
    ``ab(?:12|cd)`` rather than ``ab12|abcd``."""
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[_END] = {}
    return _node_regex(root)


def _node_regex(node: dict[str, Any]) -> str:
    branches = [
        re.escape(char) + _node_regex(child) for char, child in sorted(node.items()) if char
    ]
    if not branches:
        return ""
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


class Redactor:
    """Masks every value in ``secrets`` (values shorter than 4 characters are ignored)."""

    def __init__(self, secrets: Iterable[str] = ()):
        self.secrets: frozenset[str] = frozenset()
        self._buckets: dict[str, tuple[str, ...]] = {}  # first 4 characters -> forms, longest first
        self._finder: re.Pattern[str] | None = None
        self._add(secrets)

    def _add(self, secrets: Iterable[str]) -> None:
        new = {secret for secret in secrets if secret} - self.secrets
        if not new:
            return
        self.secrets = self.secrets | new
        grown: dict[str, set[str]] = {}
        for secret in new:
            for form in _variants(secret):
                grown.setdefault(form[:MIN_LENGTH], set()).add(form)
        fresh = grown.keys() - self._buckets.keys()
        for prefix, forms in grown.items():
            merged = forms.union(self._buckets.get(prefix, ()))
            self._buckets[prefix] = tuple(sorted(merged, key=len, reverse=True))
        if fresh:
            self._finder = re.compile(_trie_regex(self._buckets))

    def __bool__(self) -> bool:
        return self._finder is not None

    def plus(self, secrets: Iterable[str]) -> Redactor:
        """A redactor masking ``secrets`` as well as this one's (this one is unchanged)."""
        other = Redactor()
        other.secrets, other._buckets, other._finder = (
            self.secrets,
            dict(self._buckets),
            self._finder,
        )
        other._add(secrets)
        return other

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        finder = self._finder
        if finder is None or not text:
            return text
        parts, done, pos = [], 0, 0
        while (found := finder.search(text, pos)) is not None:
            start = found.start()
            form = next(
                (f for f in self._buckets[found.group()] if text.startswith(f, start)), None
            )
            if form is None:  # only the prefix: a secret may still start at the next character
                pos = start + 1
                continue
            parts += (text[done:start], MASK)
            done = pos = start + len(form)
        if not parts:
            return text
        parts.append(text[done:])
        return "".join(parts)

    def redact_obj(self, obj: Any) -> Any:
        """A copy of JSON-able ``obj`` with secrets masked in every string, keys included."""
        if isinstance(obj, str):
            return self.redact(obj)
        if isinstance(obj, dict):
            return {self.redact_obj(key): self.redact_obj(value) for key, value in obj.items()}
        if isinstance(obj, list | tuple):
            items = [self.redact_obj(item) for item in obj]
            return items if isinstance(obj, list) else tuple(items)
        return obj


class RedactingFilter(logging.Filter):
    """A logging filter that masks secrets in the formatted message, traceback and stack.

    Attach it to handlers (a logger's own filters do not see records propagated from children).
    ``redactor`` may be replaced at any time, e.g. when the set of staged secrets changes.
    """

    def __init__(self, redactor: Redactor, name: str = ""):
        super().__init__(name)
        self.redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = self.redactor
        if not redactor:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: the handler reports it, we must not raise
            return True
        record.msg, record.args = redactor.redact(message), None
        if record.exc_info and not record.exc_text:
            # Formatters reuse a cached exc_text, so format the traceback here to mask it.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redactor.redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redactor.redact(record.stack_info)
        return True
