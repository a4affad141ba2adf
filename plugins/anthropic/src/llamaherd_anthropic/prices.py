"""Default prices of Anthropic's models, USD per million tokens: input, output, prompt-cache
reads, prompt-cache writes (5-minute cache). Dated snapshots match their family's entry
(``llamaherd.pricing``); ``[models.<name>] pricing`` overrides an entry.
"""

from llamaherd.api import Pricing as P

PRICES = {
    "claude-3-5-haiku": P(0.8, 4, 0.08, 1),
    "claude-3-5-sonnet": P(3, 15, 0.3, 3.75),
    "claude-3-7-sonnet": P(3, 15, 0.3, 3.75),
    "claude-3-haiku": P(0.25, 1.25, 0.03, 0.3),
    "claude-3-opus": P(15, 75, 1.5, 18.75),
    "claude-haiku-4-5": P(1, 5, 0.1, 1.25),
    "claude-opus-4": P(15, 75, 1.5, 18.75),
    "claude-opus-4-0": P(15, 75, 1.5, 18.75),
    "claude-opus-4-1": P(15, 75, 1.5, 18.75),
    "claude-opus-4-5": P(5, 25, 0.5, 6.25),
    "claude-opus-4-6": P(5, 25, 0.5, 6.25),
    "claude-sonnet-4": P(3, 15, 0.3, 3.75),
    "claude-sonnet-4-0": P(3, 15, 0.3, 3.75),
    "claude-sonnet-4-5": P(3, 15, 0.3, 3.75),
    "claude-sonnet-4-6": P(3, 15, 0.3, 3.75),
}
