"""llamaherd-webhooks: Trigger: HTTP webhooks with a generic HMAC source and wait matching.

Only hooks live here; the route, source, table and command modules load inside them so
``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_trigger_types(register):
    from llamaherd_webhooks.trigger import WebhooksTrigger

    register(WebhooksTrigger())


@hookimpl
def register_webhook_sources(register):
    from llamaherd_webhooks.sources import GenericSource

    register(GenericSource())


@hookimpl
def register_credential_types(register):
    from llamaherd_webhooks.sources import WebhookSecret

    register(WebhookSecret())


@hookimpl
def register_tables(register):
    from llamaherd_webhooks.receipts import TABLES

    register(TABLES)


@hookimpl
def register_routes(app):
    from llamaherd_webhooks.routes import add_routes

    add_routes(app)


@hookimpl
def register_commands(cli):
    from llamaherd_webhooks.commands import replay, webhooks

    cli.add_command(webhooks)
    cli.add_command(webhooks, name="webhook")  # Action Llama's `al webhook replay|simulate`
    webhooks.add_command(replay, name="simulate")


@hookimpl
def describe_triggers(agent, now):
    from llamaherd_webhooks.trigger import describe_entries

    return describe_entries(agent)
