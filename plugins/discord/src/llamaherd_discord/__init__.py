"""llamaherd-discord: the Discord interactions webhook source and the discord_bot credential.

Only hooks live here; the source (and ``cryptography``) load inside them so ``al --help`` stays
fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_credential_types(register):
    from llamaherd_discord.credentials import DiscordBot

    register(DiscordBot())


@hookimpl
def register_webhook_sources(register):
    from llamaherd_discord.source import DiscordSource

    register(DiscordSource())
