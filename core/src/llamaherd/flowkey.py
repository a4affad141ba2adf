"""Flow expressions: the key and the priority an agent's ``[flow]`` picks out of a trigger.

An expression is JMESPath (https://jmespath.org), evaluated against the trigger's document
(``document``); nothing is ever ``eval``-ed. A key may also be a template: text with ``{expr}``
placeholders, e.g. ``"{repository.full_name}#{issue.number}"`` (``{{`` and ``}}`` are literal
braces). A string holding a ``{`` is a template, any other string an expression.

The document of a trigger:

- a webhook: the delivery's JSON body at the root (``pull_request.number``), and under
  ``trigger`` its context: ``kind``, ``source``, and the fields its source type normalises
  (``event``, ``action``, ``repo``, ``number``, ``sender``, ``delivery``, ...);
- an agent call: ``context``, ``caller_agent``, ``caller_run``, ``depth`` at the root;
- a manual run: the payload given with it at the root, ``trigger.prompt`` its prompt;
- any trigger: ``trigger.kind`` and ``trigger.source``.

``trigger`` is reserved: a body's own top-level ``trigger`` is shadowed by it.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from llamaherd.errors import LlamaherdError

MAX_KEY = 200  # characters of a key kept as it is; a longer one is cut and given a digest
PRIORITY_RANGE = 1_000_000_000  # a priority is clamped to +/- this


class ExpressionError(LlamaherdError):
    """An expression that does not parse; the message says where."""


@dataclass(frozen=True)
class Expression:
    """A compiled key or priority expression (``compile_expression``)."""

    text: str
    parts: tuple[Any, ...]  # literal strings and compiled JMESPath expressions, in order
    template: bool

    def value(self, doc: dict[str, Any]) -> Any:
        """The raw value the expression yields for ``doc`` (a template: its text)."""
        if not self.template:
            return self.parts[0].search(doc)
        return "".join(
            part if isinstance(part, str) else _text(part.search(doc)) for part in self.parts
        )


@lru_cache(maxsize=256)
def compile_expression(text: str) -> Expression:
    """``text`` compiled once (cached: every trigger of an agent evaluates the same one);
    ExpressionError naming the problem when it does not parse."""
    if not isinstance(text, str) or not text.strip():
        raise ExpressionError("expected a JMESPath expression or a {template}, got nothing")
    if "{" not in text:
        return Expression(text, (_jmespath(text),), template=False)
    return Expression(text, tuple(_template(text)), template=True)


def _jmespath(text: str) -> Any:
    import jmespath  # here: only an agent with [flow] keys compiles one
    from jmespath.exceptions import JMESPathError

    try:
        return jmespath.compile(text)
    except JMESPathError as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExpressionError(f"{text!r} is not a valid JMESPath expression: {detail}") from None


def _template(text: str) -> list[Any]:
    """Literal text and ``{expr}`` placeholders (braces nest inside one: ``{a.{b: c}}``)."""
    parts: list[Any] = []
    literal: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "{}" and text[i : i + 2] == ch * 2:
            literal.append(ch)
            i += 2
            continue
        if ch == "}":
            raise ExpressionError(f"{text!r}: a '}}' without its '{{' (write '}}}}' for one)")
        if ch != "{":
            literal.append(ch)
            i += 1
            continue
        depth, j = 1, i + 1
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        if depth:
            raise ExpressionError(f"{text!r}: a '{{' without its '}}' (write '{{{{' for one)")
        inner = text[i + 1 : j - 1].strip()
        if not inner:
            raise ExpressionError(f"{text!r}: an empty {{}} placeholder")
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append(_jmespath(inner))
        i = j
    if literal:
        parts.append("".join(literal))
    return parts


def _text(value: Any) -> str:
    """A value as it appears in a key: numbers without a needless ``.0``, JSON for the rest."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, str | int | float):
        return str(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def document(
    kind: str, payload: Any, prompt: str = "", source: str | None = None
) -> dict[str, Any]:
    """The document expressions read for a trigger (see the module docstring)."""
    payload = payload if isinstance(payload, dict) else {}
    context: dict[str, Any] = {"kind": kind, "source": source}
    if kind == "webhook" and "source_type" in payload:
        body = payload.get("payload")
        context.update((k, v) for k, v in payload.items() if k != "payload")
        doc = dict(body) if isinstance(body, dict) else {}
    else:
        doc = dict(payload)
    if prompt:
        context["prompt"] = prompt
    doc["trigger"] = context
    return doc


def key_of(expression: Expression, doc: dict[str, Any]) -> str:
    """The key ``expression`` yields for ``doc``: text, "" when it yields nothing (every such
    trigger shares the one empty key). A long key is cut and given a digest of the whole."""
    key = _text(expression.value(doc))
    if len(key) <= MAX_KEY:
        return key
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return f"{key[: MAX_KEY - 17]}~{digest}"


def priority_of(expression: Expression, doc: dict[str, Any]) -> float:
    """The priority ``expression`` yields for ``doc``: a number (true is 1), 0 for anything
    else, clamped to +/- PRIORITY_RANGE."""
    value = expression.value(doc)
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return 0.0
    if not isinstance(value, int | float) or not math.isfinite(value):
        return 0.0
    return float(max(-PRIORITY_RANGE, min(PRIORITY_RANGE, value)))
