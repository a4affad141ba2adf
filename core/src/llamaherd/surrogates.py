"""Lone UTF-16 surrogates: text that no UTF-8 encoder takes, made valid where it comes in.

JSON may carry ``"\\ud800"``, and Python decodes it into a str holding a surrogate on its own.
Stored (JSON escapes it again), it broke whatever encoded it later: pages and JSON answers
failed with 500, ``al runs`` and ``al logs`` with an encoding error. So text from outside is
cleaned at each way in (the gateway, the control API, webhooks, model replies): every lone
surrogate becomes U+FFFD, as a decoder does with bytes it cannot read. What the store holds
from before is cleaned the same way as it is read (``loads``), so every renderer gets valid
text. A proper pair (an emoji written as two escapes) is one character once decoded, and kept.
"""

from __future__ import annotations

import json
import re
from typing import Any

REPLACEMENT = "\ufffd"
_LONE = re.compile("[\ud800-\udfff]")
# A surrogate written as a JSON escape: only then can decoded JSON hold a lone one.
_ESCAPED = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def clean(value: Any) -> Any:
    """``value`` (a str, or JSON-like dicts and lists of them) with every lone surrogate
    replaced by U+FFFD; the same object when there was none."""
    if isinstance(value, str):
        return _LONE.sub(REPLACEMENT, value) if _LONE.search(value) else value
    if isinstance(value, dict):
        pairs = [(clean(key), clean(item)) for key, item in value.items()]
        unchanged = all(
            k is key and v is item for (k, v), (key, item) in zip(pairs, value.items(), strict=True)
        )
        return value if unchanged else dict(pairs)
    if isinstance(value, list):
        items = [clean(item) for item in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def loads(text: str) -> Any:
    """``json.loads``, cleaned when the text escapes a surrogate (a proper pair costs a look)."""
    value = json.loads(text)
    return clean(value) if _ESCAPED.search(text) else value
