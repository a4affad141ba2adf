"""Replace secret values with ``***`` in text, in JSON-able data and in log records.

The scheduler builds one :class:`Redactor` per run from the values of the credentials staged for
it and passes everything it stores or shows (tool output, status, return values, errors, logs)
through it. All secrets are matched by one compiled regex, longest first, so a secret that
starts with another is replaced whole. The regex is built from a prefix tree of the secrets
(``ab(?:12|cd(?:ef)?)`` rather than ``abcdef|abcd|ab12``): at each position the engine follows one
branch instead of trying every secret, which keeps 1000 secrets about as cheap as 10.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from typing import Any

MASK = "***"
# Shorter values ("a", "no") would mask ordinary words; no real secret is that short.
MIN_LENGTH = 4


def _variants(secret: str) -> set[str]:
    """The forms a value takes in output: as is, stripped, JSON-escaped, and line by line
    (a multi-line key printed with ``head`` or through a terminal's CRLF)."""
    forms = {secret, secret.strip(), json.dumps(secret)[1:-1]}
    if "\n" in secret.strip():
        forms.update(line.strip() for line in secret.splitlines())
    return {form for form in forms if len(form) >= MIN_LENGTH}


_END = ""  # trie key marking that a secret ends at this node


def _trie(words: Iterable[str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[_END] = {}
    return root


def _trie_regex(node: dict[str, Any]) -> str:
    """Regex matching exactly the trie's words, preferring the longest at each position."""
    prefix = []
    while len(node) == 1 and _END not in node:  # walk chains iteratively: keys can be long
        ((char, node),) = node.items()
        prefix.append(re.escape(char))
    branches = [
        re.escape(char) + _trie_regex(child) for char, child in sorted(node.items()) if char != _END
    ]
    if not branches:
        return "".join(prefix)
    group = "(?:" + "|".join(branches) + ")"
    # A greedy "?" tries the longer continuations before settling for the word that ends here.
    return "".join(prefix) + (group + "?" if _END in node else group)


class Redactor:
    """Masks every value in ``secrets`` (values shorter than 4 characters are ignored)."""

    def __init__(self, secrets: Iterable[str]):
        self.secrets = frozenset(secret for secret in secrets if secret)
        forms = {form for secret in self.secrets for form in _variants(secret)}
        self._pattern = re.compile(_trie_regex(_trie(forms))) if forms else None

    def __bool__(self) -> bool:
        return self._pattern is not None

    def plus(self, secrets: Iterable[str]) -> Redactor:
        """A redactor masking ``secrets`` as well as this one's."""
        return Redactor([*self.secrets, *secrets])

    def redact(self, text: str) -> str:
        """``text`` with every secret replaced by ``***``."""
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(MASK, text)

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
