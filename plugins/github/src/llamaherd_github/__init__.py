"""llamaherd-github: the GitHub webhook source and GitHub credential types.

Heavy modules are imported inside the hooks so ``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_credential_types(register):
    from llamaherd_github.credentials import CREDENTIAL_TYPES

    for credential_type in CREDENTIAL_TYPES:
        register(credential_type)


@hookimpl
def register_language_skills(register):
    from llamaherd_github.credentials import GitHubSkill

    register(GitHubSkill())


@hookimpl
def register_webhook_sources(register):
    from llamaherd_github.source import GitHubSource

    register(GitHubSource())
