"""What a model call used, as its provider reported it, checked before anything counts it.

A provider's answer is hostile input like any other: an endpoint (or a proxy in front of it)
may report negative, fractional, not-a-number or absurd token counts, or such a cost. Counted
as given, they lower a budget's ledger (a run could spend without end) or make it useless. A
figure that is not a whole number from 0 to ``MAX_CALL_TOKENS`` (or, for a cost, a finite
amount from 0 to ``MAX_CALL_USD``) is refused: the call is counted as the size of what was sent
and received (``estimate_tokens``), its cost left to the price table.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, fields
from typing import Any

from llamaherd.types import Message, Reply, ToolSpec, Usage

MAX_CALL_TOKENS = 10_000_000  # more than any model's context and output together
MAX_CALL_USD = 1_000.0
CHARS_PER_TOKEN = 4  # what the estimate takes a token to be


def estimate_tokens(value: Any) -> int:
    """Tokens of ``value`` (text, or what JSON makes of it), at ``CHARS_PER_TOKEN``."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_CALL_TOKENS


def refused_figures(usage: Usage) -> list[str]:
    """The figures of ``usage`` that cannot be right ("input_tokens=-955000"), or none."""
    found = [
        f"{f.name}={getattr(usage, f.name)!r}"
        for f in fields(usage)
        if f.name != "cost_usd" and not _whole(getattr(usage, f.name))
    ]
    cost = usage.cost_usd
    if cost is not None and not (
        isinstance(cost, int | float)
        and not isinstance(cost, bool)
        and math.isfinite(cost)
        and 0 <= cost <= MAX_CALL_USD
    ):
        found.append(f"cost_usd={cost!r}")
    return found


def checked(reply: Reply, messages: list[Message], tools: list[ToolSpec]) -> list[str]:
    """Check ``reply.usage``; when a figure is refused, replace the usage by the call's size
    estimate (what was sent, what came back) and return the refused figures (else none)."""
    refused = refused_figures(reply.usage)
    if refused:
        sent = [m.to_dict() for m in messages] + [asdict(tool) for tool in tools]
        received = [reply.text, [asdict(call) for call in reply.tool_calls]]
        reply.usage = Usage(
            input_tokens=estimate_tokens(sent), output_tokens=estimate_tokens(received)
        )
    return refused
