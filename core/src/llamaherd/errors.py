"""The errors shown to users as one line, each with the exit code of ``al`` (docs/cli.md).

Kept apart from ``llamaherd.types`` (which re-exports them) so that a command that only
reports errors does not build every dataclass and protocol of the plugin interfaces.
"""

from __future__ import annotations


class LlamaherdError(Exception):
    """Base class for errors shown to users as one clear line (no traceback). ``al`` exits
    with ``exit_code``: 2, a usage or configuration error (what the user typed or wrote is
    wrong), unless a subclass says otherwise. The contract is in docs/cli.md."""

    exit_code = 2


class CommandFailed(LlamaherdError):
    """What a command set out to do failed (a scheduler that did not start, a webhook the
    server refused), the command line and config being fine: ``al`` exits 1."""

    exit_code = 1


class Conflict(CommandFailed):
    """A valid request the current state refuses (an agent that is off, a run that is not
    waiting for an answer): the control API answers 409 with the message; ``al`` exits 1."""


class ConfigError(LlamaherdError):
    """Bad project or agent configuration: names the file, the key path and the expectation."""

    def __init__(self, file: str, key: str, message: str):
        self.file, self.key, self.message = file, key, message
        where = f"{file}: {key}: " if key else f"{file}: "
        super().__init__(where + message)


class ConfigWarning(ConfigError):
    """A finding of a plugin's ``validate`` that names its file and key like a ConfigError
    but fails nothing: ``al validate`` prints it as a warning and exits 0 (a schedule that
    never fires is allowed, as Action Llama allows it)."""


class ProviderError(CommandFailed):
    """A model call failed. Subclasses tell the session whether to retry or abort."""


class RateLimited(ProviderError):
    def __init__(self, message: str = "rate limited", retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class AuthError(ProviderError):
    """The key was refused (401/403): retrying will not help."""


class Transient(ProviderError):
    """5xx, connection reset, timeout: worth retrying."""


class Fatal(ProviderError):
    """Anything else: malformed reply, bad request. Not retried."""


class Unavailable(Transient):
    """The model cannot serve now and retrying soon will not help (quota exhausted, model not
    found): the chain falls back to the next model at once. A Transient, so never structural."""


class Aborted(ProviderError):
    """The call was cut off on our side (the run was switched off, killed or interrupted by a
    human's message): neither retried nor the provider's fault."""


class CredentialInvalid(CommandFailed):
    """Raised by a CredentialType's ``validate(values)`` when the service refuses the credential."""


class SandboxError(CommandFailed):
    """A runtime could not start or drive a sandbox (structural failure)."""


class SandboxBusy(SandboxError):
    """Raised by ``Runtime.start`` when the run cannot be placed now but can be later (every
    host of a pool full or unreachable). The runner puts the run back in its agent's queue,
    unstarted and unrecorded (``Store.unclaim``), and this scheduler claims none of the agent's
    items for ``retry_after`` seconds (a run of the agent ending here ends that pause early)."""

    def __init__(self, message: str, retry_after: float = 5.0):
        super().__init__(message)
        self.retry_after = retry_after


class SandboxLost(SandboxError):
    """Raised by a sandbox's methods when the sandbox went away with its host mid-run (a remote
    host down, the connection to it lost for good). The run ends ``error`` with reason
    ``interrupted: <message>`` and its trigger is queued again once, as for a run whose
    scheduler died (the agent's ``onInterrupted`` decides), instead of the model seeing one
    failing tool call after another."""
