"""llamaherd-host-user: run an agent's tool calls as a separate OS user on this host.

Heavy modules are imported inside the hooks so ``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_runtimes(register):
    from llamaherd_host_user.runtime import HostUserRuntime

    register(HostUserRuntime())


@hookimpl
def register_commands(cli):
    from llamaherd_host_user.setup import setup_host_user

    setup = cli.commands.get("setup")
    if setup is not None:
        setup.add_command(setup_host_user)


@hookimpl
def register_doctor_checks(register):
    from llamaherd_host_user.doctor import HostUserCheck

    register(HostUserCheck())
