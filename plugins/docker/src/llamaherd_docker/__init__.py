"""llamaherd-docker: the "container" runtime (one locked-down Docker container per run).

Heavy modules (the ``docker`` SDK) are imported inside functions so ``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_runtimes(register):
    from llamaherd_docker.runtime import ContainerRuntime

    register(ContainerRuntime())


@hookimpl
def register_commands(cli):
    from llamaherd_docker.cli import setup_docker

    cli.commands["setup"].add_command(setup_docker)


@hookimpl
def register_doctor_checks(register):
    from llamaherd_docker.doctor import DockerCheck

    register(DockerCheck())
