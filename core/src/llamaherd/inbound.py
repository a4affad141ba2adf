"""JSON values from outside that break whatever encodes them later, made valid where they come
in, and the shape such a value may have.

- Lone UTF-16 surrogates. JSON may carry ``"\\ud800"``, and Python decodes it into a str
  holding a surrogate on its own, which no UTF-8 encoder takes. Stored (JSON escapes it
  again), it broke whatever encoded it later: pages and JSON answers failed with 500,
  ``al runs`` and ``al logs`` with an encoding error. Each becomes U+FFFD, as a decoder does
  with bytes it cannot read. A proper pair (an emoji written as two escapes) is one character
  once decoded, and kept.
- Numbers that are not finite. JSON has no NaN or Infinity, yet Python's parser takes ``NaN``,
  ``Infinity`` and a number too large for a float (``1e999``, read as infinity), and its
  encoder writes them back as tokens no strict reader takes: one in a return value or a
  webhook body made every listing that showed it fail (500, exit 1). Each becomes null, as
  JavaScript's ``JSON.stringify`` writes them.
- Shape. A value from outside nests at most ``MAX_DEPTH`` arrays and objects and holds
  integers of at most ``MAX_INT_DIGITS`` digits (what a double can hold the size of): ``admit``
  refuses one that does not with ``OverLimit``, naming the limit (a delivery nested 600 deep
  used to fail deep inside, logged only as "could not be processed").

Text from outside is made valid at each way in (the gateway, the control API, webhooks, model
replies, ``al run --payload``: ``admit``, or ``clean`` where there is nothing to refuse). What
the store holds from before is made valid the same way as it is read (``loads``), so every
renderer gets valid JSON.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

REPLACEMENT = "\ufffd"
_LONE = re.compile("[\ud800-\udfff]")
# A surrogate written as a JSON escape: only then can decoded JSON hold a lone one.
_ESCAPED = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
MAX_DEPTH = 100  # arrays and objects within each other
MAX_INT_DIGITS = 308  # an integer beyond is larger than any double
_TOO_BIG = 10**MAX_INT_DIGITS


class OverLimit(ValueError):
    """A value from outside is well-formed JSON but beyond a limit of ``admit``'s."""


def too_deep() -> OverLimit:
    return OverLimit(f"nested deeper than {MAX_DEPTH} levels of arrays and objects (the limit)")


def clean(value: Any) -> Any:
    """``value`` (a str, or JSON-like dicts and lists of them) with every lone surrogate
    replaced by U+FFFD and every number that is not finite by None; the same object when
    there was none. What nests deeper than ``MAX_DEPTH`` is left as it is."""
    return _valid(value, MAX_DEPTH, False)


def admit(value: Any) -> Any:
    """``clean(value)`` for a value from outside, or ``OverLimit`` when it nests deeper than
    ``MAX_DEPTH`` or holds an integer of more than ``MAX_INT_DIGITS`` digits."""
    return _valid(value, MAX_DEPTH, True)


def parse(text: str | bytes) -> Any:
    """JSON text from outside, ``admit``-ed: ValueError when it is not JSON, ``OverLimit``
    when it is beyond a limit (the parser's own nesting limit included)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise too_deep() from None
    return admit(value)


def loads(text: str) -> Any:
    """Stored JSON: ``json.loads``, NaN and infinities read as None and the result cleaned
    when the text escapes a surrogate (a proper pair costs a look)."""
    value = json.loads(text, parse_constant=_no_number)
    return clean(value) if _ESCAPED.search(text) else value


def _no_number(token: str) -> None:
    """``NaN``, ``Infinity`` or ``-Infinity`` in stored JSON (Python's encoder writes them)."""
    return None


def _valid(value: Any, depth: int, strict: bool) -> Any:
    if isinstance(value, str):
        return _LONE.sub(REPLACEMENT, value) if _LONE.search(value) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        if depth == 0:
            return _too_deep(value, strict)
        pairs = [
            (_valid(key, 0, strict), _valid(item, depth - 1, strict)) for key, item in value.items()
        ]
        unchanged = all(
            k is key and v is item for (k, v), (key, item) in zip(pairs, value.items(), strict=True)
        )
        return value if unchanged else dict(pairs)
    if isinstance(value, list):
        if depth == 0:
            return _too_deep(value, strict)
        items = [_valid(item, depth - 1, strict) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    if strict and isinstance(value, int) and not -_TOO_BIG < value < _TOO_BIG:
        raise OverLimit(f"holds an integer of more than {MAX_INT_DIGITS} digits (the limit)")
    return value


def _too_deep(value: Any, strict: bool) -> Any:
    if strict:
        raise too_deep()
    return value  # from before the limit: shown as it is
