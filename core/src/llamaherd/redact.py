"""Replace secret values with ``***`` in text, in JSON-able data and in log records.

The scheduler builds one :class:`Redactor` per run from the values of the credentials staged for
it and passes everything it stores or shows (tool output, status, return values, errors, logs)
through it. A secret is masked in every form it takes in output: as is, stripped, JSON-escaped,
line by line, and (for values of 8 characters or more) encoded, as CI systems mask them:
base64, hex (plain, byte by byte with ``:``, ``-`` or space between, or ``\\x`` before each),
URL-encoded (as ``quote`` does, and every byte ``%XX``) and JSON ``\\uXXXX`` for every
character.

Finding them: every form is at least :data:`MIN_LENGTH` characters, so the forms are kept in
buckets by their first four characters, longest first. One small regex over those distinct
prefixes (a prefix tree, so the engine follows one branch per position) finds where a secret may
start, and the bucket's forms are compared there. Forms made of hex digits are kept once, in
lower case, and compared ignoring case (``DE:AD``, ``%2f``, ``\\u004A`` all mean the same
bytes), in a bucket of their own. The leftmost match wins, and the longest form at that
position, so a secret that starts with another is replaced whole. Adding a secret costs time
and memory linear in that secret (its forms, as plain strings) plus, when it brings a prefix not
seen before, a recompile of the prefix regex, whose size is bounded by the number of forms rather
than their length. A run sets values at runtime (``setenv``), so this must stay cheap: a
character-level tree of whole secrets took gigabytes for a few megabytes of values.
"""

from __future__ import annotations

import base64
import functools
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


def _each_byte(data: bytes, before: str, width: int = 1) -> str:
    """``data`` as hex, ``before`` ahead of every ``width`` bytes (``%de%ad``, ``\\xde\\xad``,
    ``\\u00de\\u00ad`` of UTF-16 code units)."""
    return before + data.hex("\0", width).replace("\0", before)


# Separators hex dumps put between bytes: ``de:ad`` (fingerprints), ``de-ad``, ``de ad``.
HEX_SEPARATORS = (":", "-", " ")


def _variants(secret: str) -> tuple[set[str], set[str]]:
    """The forms a value takes in output: as is, stripped, JSON-escaped, line by line (a
    multi-line key printed with ``head`` or through a terminal's CRLF), and encoded; then the
    hex-digit forms, in lower case (compared ignoring case)."""
    stripped = secret.strip()
    forms = {
        secret,
        stripped,
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }
    folded: set[str] = set()
    if "\n" in stripped:
        forms.update(line.strip() for line in secret.splitlines())
    if len(stripped) >= MIN_ENCODED:
        data = stripped.encode()
        forms |= _base64_forms(data)
        forms.update((quote(stripped, safe=""), quote_plus(stripped)))
        folded.update(data.hex(separator) for separator in HEX_SEPARATORS)
        folded.update(
            (
                data.hex(),
                _each_byte(data, "%"),
                _each_byte(data, "\\x"),
                _each_byte(stripped.encode("utf-16-be"), "\\u", 2),  # JSON escapes every char
            )
        )
    return _long_enough(forms), _long_enough(folded)


def _long_enough(forms: set[str]) -> set[str]:
    return {form for form in forms if len(form) >= MIN_LENGTH}


_END = ""  # trie key marking that a prefix ends at this node
# Finders a redactor keeps before it merges them into one per kind (secrets added one by one,
# setenv's values, would otherwise make a scan each).
MAX_FINDERS = 6


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


@functools.lru_cache(maxsize=32)
def _prepared(
    secrets: frozenset[str],
) -> tuple[frozenset[str], dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], tuple[Any, ...]]:
    """What a redactor of ``secrets`` starts from: (secrets, buckets, folded buckets, finders);
    shared, so never changed (a redactor copies the buckets)."""
    empty = Redactor.__new__(Redactor)
    empty.secrets, empty._buckets, empty._folded, empty._finders = frozenset(), {}, {}, ()
    empty._add(secrets)
    return empty.secrets, empty._buckets, empty._folded, empty._finders


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
        # Made once per set of secrets (each run of a project masks the same credentials and
        # model keys: their forms and finders cost a few milliseconds to build).
        found = _prepared(frozenset(secret for secret in secrets if secret))
        self.secrets: frozenset[str] = found[0]
        # First 4 characters -> forms, longest first: compared exactly, and (hex digits, in
        # lower case) ignoring case.
        self._buckets: dict[str, tuple[str, ...]] = dict(found[1])
        self._folded: dict[str, tuple[str, ...]] = dict(found[2])
        # Where a form may start: one regex per kind of bucket (one alternation of both lost
        # the regex engine's scan for a first character: 3 times slower), and one more per
        # kind for each group of secrets added since (``plus``: a run's own token).
        self._finders: tuple[re.Pattern[str], ...] = found[3]

    def _add(self, secrets: Iterable[str]) -> None:
        new = {secret for secret in secrets if secret} - self.secrets
        if not new:
            return
        self.secrets = self.secrets | new
        grown: tuple[dict[str, set[str]], dict[str, set[str]]] = ({}, {})
        for secret in new:
            for forms, into in zip(_variants(secret), grown, strict=True):
                for form in forms:
                    into.setdefault(form[:MIN_LENGTH], set()).add(form)
        finders = []
        for buckets, forms_by_prefix, flags in zip(
            (self._buckets, self._folded), grown, (0, re.IGNORECASE), strict=True
        ):
            fresh = forms_by_prefix.keys() - buckets.keys()
            for prefix, forms in forms_by_prefix.items():
                merged = forms.union(buckets.get(prefix, ()))
                buckets[prefix] = tuple(sorted(merged, key=len, reverse=True))
            if fresh:  # a finder of the new prefixes only: the others' are compiled already
                finders.append(re.compile(_trie_regex(fresh), flags))
        self._finders += tuple(finders)
        if len(self._finders) > MAX_FINDERS:  # each is one more scan of every text: merge
            self._finders = tuple(
                re.compile(_trie_regex(buckets), flags)
                for buckets, flags in ((self._buckets, 0), (self._folded, re.IGNORECASE))
                if buckets
            )

    def __bool__(self) -> bool:
        return bool(self._finders)

    def plus(self, secrets: Iterable[str]) -> Redactor:
        """A redactor masking ``secrets`` as well as this one's (this one is unchanged)."""
        other = Redactor()
        other.secrets, other._buckets, other._folded, other._finders = (
            self.secrets,
            dict(self._buckets),
            dict(self._folded),
            self._finders,
        )
        other._add(secrets)
        return other

    def _form_at(self, text: str, start: int) -> int:
        """The length of the longest form found at ``start`` (0: none, only a prefix)."""
        prefix = text[start : start + MIN_LENGTH]
        exact = next((f for f in self._buckets.get(prefix, ()) if text.startswith(f, start)), "")
        folded = next(
            (
                f
                for f in self._folded.get(prefix.lower(), ())
                if text[start : start + len(f)].lower() == f
            ),
            "",
        )
        return max(len(exact), len(folded))

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        finders = self._finders
        if not finders or not text:
            return text
        parts, done, pos = [], 0, 0
        beyond = len(text) + 1
        ahead = [-1] * len(finders)  # where each finder found a prefix last (-1: look again)
        while True:
            for i, finder in enumerate(finders):
                if ahead[i] < pos:
                    found = finder.search(text, pos)
                    ahead[i] = beyond if found is None else found.start()
            start = min(ahead)
            if start == beyond:
                break
            length = self._form_at(text, start)
            if not length:  # only the prefix: a secret may still start at the next character
                pos = start + 1
                continue
            parts += (text[done:start], MASK)
            done = pos = start + length
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
