"""llamaherd-linear: the Linear webhook source and the Linear credential types.

Only hooks live here; the source and credential modules load inside them so ``al --help``
stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_credential_types(register):
    from llamaherd_linear.credentials import CREDENTIAL_TYPES

    for credential_type in CREDENTIAL_TYPES:
        register(credential_type)


@hookimpl
def register_webhook_sources(register):
    from llamaherd_linear.source import LinearSource

    register(LinearSource())
