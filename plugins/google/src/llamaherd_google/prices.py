"""Default prices of Gemini models, USD per million tokens: input, output, cached input. For
the models that charge more for prompts over 200k tokens (2.5 Pro, 3 Pro) these are the rates
up to 200k; set ``[models.<name>] pricing`` to bill long prompts at the higher tier.
"""

from llamaherd.api import Pricing as P

PRICES = {
    "gemini-1.5-flash": P(0.075, 0.3, 0.01875),
    "gemini-1.5-pro": P(1.25, 5, 0.3125),
    "gemini-2.0-flash": P(0.1, 0.4, 0.025),
    "gemini-2.0-flash-lite": P(0.075, 0.3),
    "gemini-2.5-flash": P(0.3, 2.5, 0.075),
    "gemini-2.5-flash-lite": P(0.1, 0.4, 0.025),
    "gemini-2.5-pro": P(1.25, 10, 0.31),
    "gemini-3-flash-preview": P(0.5, 3, 0.05),
    "gemini-3-pro-preview": P(2, 12, 0.2),
    "gemini-3.1-flash-lite-preview": P(0.25, 1.5, 0.025),
    "gemini-3.1-pro-preview": P(2, 12, 0.2),
    "gemini-flash-latest": P(0.3, 2.5, 0.075),
    "gemini-flash-lite-latest": P(0.1, 0.4, 0.025),
}
