"""llamaherd-ssh: run an agent's tool calls on other machines over OpenSSH (one host, or a pool).

Heavy modules are imported inside the hooks so ``al --help`` stays fast.
"""

from llamaherd import hookimpl


@hookimpl
def register_runtimes(register):
    from llamaherd_ssh.runtime import SshRuntime

    register(SshRuntime())


@hookimpl
def register_tables(register):
    from llamaherd_ssh.pool import TABLES

    register(TABLES)


@hookimpl
def register_doctor_checks(register):
    from llamaherd_ssh.doctor import SshCheck

    register(SshCheck())


@hookimpl
def register_admission_checks(register):
    from llamaherd_ssh.pool import PoolAdmission

    register(PoolAdmission())
