"""Dynamic context injection: ``!`command``` in a SKILL.md body, as Action Llama runs it.

After ``hooks.pre`` and before the session, each marker's command runs in the run's sandbox
(``/bin/sh``, the run's working directory, its env and setenv values, at most 60 s); its standard
output, trailing whitespace trimmed, replaces the marker. A command that fails (a non-zero exit,
a timeout) becomes ``[Error: <its standard error, or why>]`` and the run goes on, as with Action
Llama. One command's output is bounded, and so is what all of them add to the prompt; secret
values are masked before the text reaches the model or the store. A ``state`` command in one
only reads the state (its output is captured).
"""

from __future__ import annotations

import re
import secrets
import shlex
import threading
from typing import Any

from llamaherd.session import truncate

MARKER = re.compile(r"!`([^`]+)`")  # Action Llama's pattern: anywhere in the body
TIMEOUT = 60.0  # seconds per command (Action Llama's)
MAX_ERROR = 500  # characters of an error's text (Action Llama's)
MAX_OUTPUT = 64_000  # characters of one command's output kept
MAX_TOTAL = 256_000  # characters all of a body's commands may add
LOG_OUTPUT = 4000  # characters of an output kept in the run's `context` event


def command_script(command: str, nonce: str) -> str:
    """A shell script running ``command`` with its standard error aside: on failure it prints
    ``\\n<nonce><exit code>`` and then the error text, after the standard output."""
    return f"""\
__al_err=$(mktemp 2>/dev/null) || __al_err="${{TMPDIR:-/tmp}}/al-context-$$"
AL_CALL_STDOUT=captured; export AL_CALL_STDOUT
/bin/sh -c {shlex.quote(command)} 2>"$__al_err"
__al_rc=$?
if [ "$__al_rc" -ne 0 ]; then printf '\\n%s%s\\n' {nonce} "$__al_rc"; head -c {MAX_ERROR * 4} "$__al_err"; fi
rm -f "$__al_err"
exit "$__al_rc"
"""


def replacement(output: str, exit_code: int, timed_out: bool, nonce: str) -> str:
    """What a marker becomes, from its command's output (``command_script``)."""
    if timed_out:
        return f"[Error: timed out after {TIMEOUT:g} s]"
    stdout, found, tail = output.partition(f"\n{nonce}")
    if not found and exit_code == 0:
        return truncate(stdout.rstrip(), MAX_OUTPUT)
    code, _, stderr = tail.partition("\n")
    error = stderr.strip() or f"Command failed with exit code {code or exit_code}"
    return f"[Error: {error[:MAX_ERROR]}]"


def inject_context(ctx: Any, env: dict[str, str], cancel: threading.Event) -> str:
    """The agent's SKILL.md body with every marker replaced, run in ``ctx.sandbox``."""
    body = ctx.agent.body
    if not MARKER.search(body):
        return body
    left = MAX_TOTAL

    def run(match: re.Match[str]) -> str:
        nonlocal left
        command = match.group(1)
        if cancel.is_set():
            return "[Error: the run was stopped]"
        if left <= 0:
            return f"[Error: context injection added {MAX_TOTAL} characters already]"
        nonce = "__AL_CTX_" + secrets.token_hex(6) + "__"
        result = ctx.sandbox.exec(
            "/bin/sh -c " + shlex.quote(command_script(command, nonce)),
            cwd=ctx.sandbox.workdir,
            env=dict(env),
            timeout=TIMEOUT,
        )
        ctx.settle_after_call()
        text = ctx.redact_for_model(
            replacement(result.output, result.exit_code, result.timed_out, nonce)
        )
        text = text[:left]
        left -= len(text)
        ctx.log(
            "context",
            {
                "command": command,
                "exit_code": result.exit_code,
                "timed_out": result.timed_out,
                "duration": result.duration,
                "output": truncate(text, LOG_OUTPUT),
            },
        )
        return text

    return MARKER.sub(run, body)
