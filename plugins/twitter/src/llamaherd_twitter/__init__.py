"""llamaherd-twitter: the X (Twitter) webhook source and the X credential types.

Only hooks live here; the source and credential modules load inside them so ``al --help``
stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_credential_types(register):
    from llamaherd_twitter.credentials import CREDENTIAL_TYPES

    for credential_type in CREDENTIAL_TYPES:
        register(credential_type)


@hookimpl
def register_webhook_sources(register):
    from llamaherd_twitter.source import TwitterSource

    register(TwitterSource())
