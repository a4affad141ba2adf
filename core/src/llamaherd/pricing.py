"""What a model call cost: price tables and the arithmetic over ``Usage``.

A provider's ``prices`` maps model ids to ``Pricing`` (USD per million tokens). An id matches
its own entry, else the entry it extends by a snapshot suffix: a date (``claude-sonnet-4-5``
prices ``claude-sonnet-4-5-20250929``, ``gpt-4.1`` prices ``gpt-4.1-2025-04-14``), a
three-digit revision (``gemini-2.0-flash-001``) or ``-latest``. Never a different model that
merely shares a prefix: ``gpt-4o`` does not price ``gpt-4o-mini``, ``claude-opus-4`` does not
price ``claude-opus-4-5``. A table lists a snapshot whose price differs from its family's
under its own id. The entry ``"*"`` prices every model (an offline provider is free).

Who wins, per call: the ``pricing`` of the project's ``[models.<name>]`` table, then the figure
the provider's API reported (``Usage.cost_usd``), then the provider's table; with none of them
the cost is unknown (None).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from llamaherd.types import Pricing, Usage

# A snapshot suffix: a date (2024-08-06, 20250929), a revision (001) or the rolling alias.
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{3}|latest)$")
PER = 1_000_000


def price_for(prices: Mapping[str, Pricing], model_id: str) -> Pricing | None:
    """The entry of ``prices`` for ``model_id`` (see the module docstring), or None."""
    for candidate in (model_id, _SNAPSHOT.sub("", model_id), "*"):
        if candidate in prices:
            return prices[candidate]
    return None


def cost_usd(usage: Usage, pricing: Pricing) -> float:
    """The cost of ``usage`` at ``pricing``: uncached input, cache reads, cache writes, output."""
    cached = max(0, min(usage.cached_input_tokens, usage.input_tokens))
    written = max(0, min(usage.cache_write_tokens, usage.input_tokens - cached))
    fresh = usage.input_tokens - cached - written
    read_rate = pricing.input if pricing.cached_input is None else pricing.cached_input
    write_rate = pricing.input if pricing.cache_write is None else pricing.cache_write
    total = (
        fresh * pricing.input
        + cached * read_rate
        + written * write_rate
        + usage.output_tokens * pricing.output
    )
    return round(total / PER, 10)


def call_cost(
    usage: Usage, configured: Pricing | None, table: Mapping[str, Pricing], model_id: str
) -> float | None:
    """The cost of one call by the precedence in the module docstring."""
    if configured is not None:
        return cost_usd(usage, configured)
    if usage.cost_usd is not None:
        return usage.cost_usd
    pricing = price_for(table, model_id)
    return None if pricing is None else cost_usd(usage, pricing)


PRICING_KEYS = ("input", "output", "cached_input", "cache_write")


def parse_pricing(value: Any) -> Pricing | None:
    """A ``Pricing`` from a config table ``{input = 3.0, output = 15.0, ...}``; None when the
    value is not such a table (the caller reports it)."""
    if not isinstance(value, dict) or not {"input", "output"} <= value.keys():
        return None
    if set(value) - set(PRICING_KEYS):
        return None
    if not all(
        isinstance(v, int | float) and not isinstance(v, bool) and v >= 0 for v in value.values()
    ):
        return None
    return Pricing(**{k: float(v) for k, v in value.items()})
