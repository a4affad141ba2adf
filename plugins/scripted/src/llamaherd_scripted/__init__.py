"""llamaherd-scripted: a deterministic, offline model for the demo and for tests.

It replays ``script.toml`` from the agent's folder, or, with no script, reports the trigger
with ``set_status``, returns a summary with ``return_value`` and ends. This docstring is the
reference of the file's format (``python3 -m pydoc llamaherd_scripted`` prints it)::

    [models.scripted]
    provider = "scripted"
    model = "scripted"
    # script = "script.toml"    # file in the agent's folder (default)

script.toml
-----------

One `[[turns]]` table per model call, in order. A turn has `text` (the model's answer; with no
`tool_calls` it ends the session), `tool_calls`, or both:

```toml
[[turns]]
tool_calls = [
  { name = "bash", arguments = { command = "gh issue view {{ payload.number }} -R {{ params.repo }}" } },
]

[[turns]]
tool_calls = [{ name = "set_status", arguments = { text = "saw: {{ last_result }}" } }]

[[turns]]
repeat = 3                  # answer the next 3 calls with this turn
tool_calls = [{ name = "bash", arguments = { command = "echo turn {{ turn }}" } }]

[[turns]]
loop = true                 # answer every call from here on (the last turn only)
tool_calls = [{ name = "bash", arguments = { command = "sleep 1" } }]
```

Which turn answers is the number of assistant messages already in the transcript, so the
provider keeps no state and a run resumed after a restart carries on. Past the last turn it
answers `Script finished.`

Templates (in `text` and in any string inside `arguments`): `{{ payload.a.b }}` (the trigger's
payload; list items by index, `payload.labels.0`; for a webhook run, the delivery's JSON body
with its fields laid over it: `payload.status` is the body's `status`, `payload.event`,
`payload.action`, `payload.repo`, `payload.number`, `payload.source` are the fields of its
`<webhook-trigger>` block, `payload.payload` is the whole body), `{{ params.k }}` (the agent's
`[params]`),
`{{ trigger.kind }}` / `trigger.source`, `{{ last_result }}` (the text of the latest tool
result), `{{ last_user }}` (the latest user message: a human's `al say` or `al reply`),
`{{ turn }}` (1-based call number), `{{ run_id }}`, `{{ agent }}`. A missing key renders
as an empty string; tables and lists render as JSON. Unknown variables and any other mistake
are reported as one line naming the file and key (`turns[2].tool_calls[0].arguments.command`).

Without a script
----------------

1. `set_status` with a line describing the trigger (kind, source, event/action/repo/number),
2. `return_value` with a short summary,
3. a final text answer. Steps whose tool is not offered are skipped.

Usage is reported as an estimate: 4 characters a token, unless a turn gives its own counts
(for budgets and cost figures; a `[models.scripted] pricing` table puts a price on them):

```toml
[[turns]]
usage = { input = 12000, output = 800 }   # and cached_input = N: input read from the cache
tool_calls = [{ name = "bash", arguments = { command = "make test" } }]
```
"""

from __future__ import annotations

from typing import Any

from llamaherd import hookimpl
from llamaherd.api import Message, ModelConfig, Pricing, Reply, ToolSpec

SCHEMA: dict[str, Any] = {
    "script": {
        "type": "string",
        "default": "script.toml",
        "description": "Script file, relative to the agent's folder.",
    },
}


class ScriptedProvider:
    """Answers from a script: no network, no key, the same reply for the same transcript."""

    name = "scripted"
    description = "Deterministic offline replies from the agent's script.toml (demo, tests)."
    schema = SCHEMA
    credential_type = None
    prices = {"*": Pricing(0.0, 0.0)}  # offline: every call is free (unless a table says otherwise)

    def complete(
        self,
        messages: list[Message],
        tools: list[ToolSpec],
        model: ModelConfig,
        options: dict[str, Any],
    ) -> Reply:
        from llamaherd_scripted.script import complete

        return complete(messages, tools, model, options)


@hookimpl
def register_providers(register: Any) -> None:
    register(ScriptedProvider())
