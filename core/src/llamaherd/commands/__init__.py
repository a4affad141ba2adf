"""Core's subcommands, one module per area; each exposes ``register(cli)``."""

COMMAND_MODULES: tuple[str, ...] = (
    "llamaherd.commands.project",
    "llamaherd.commands.scheduler",
    "llamaherd.commands.history",
    "llamaherd.commands.creds",
    "llamaherd.commands.prompt",
    "llamaherd.commands.state",
    "llamaherd.commands.talk",
    "llamaherd.commands.doctor",
    "llamaherd.commands.update",
    "llamaherd.commands.configure",
    "llamaherd.commands.testing",
)
