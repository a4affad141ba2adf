"""llamaherd-mcp: ``al mcp serve`` (the project as an MCP server over stdio, with the official
``mcp`` SDK) and ``al mcp init`` (the client config that starts it).

The SDK is imported inside the commands, so ``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_commands(cli):
    from llamaherd_mcp.commands import mcp

    cli.add_command(mcp)
