"""llamaherd-deploy: named environments (``al env``, servers provisioned with ``al env prov``),
``al push`` over SSH, ``al service`` on the server, and a deployed environment's scheduler for
``-E NAME`` (hook ``open_control_channel``).

Heavy modules are imported inside the hooks so ``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_commands(cli):
    from llamaherd_deploy.commands import env_group, push_command, service_group

    for command in (env_group, push_command, service_group):
        cli.add_command(command)


@hookimpl
def open_control_channel(environment):
    from llamaherd_deploy.channel import open_channel

    return open_channel(environment)
