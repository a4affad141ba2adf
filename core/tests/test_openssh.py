"""llamaherd.openssh: what reaches the ssh command line is validated, options end with ``--``,
host keys are checked strictly, and ssh's own failure messages become one line with a kind."""

from __future__ import annotations

import pytest

from llamaherd.openssh import SshError, SshTarget, failure


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"host": "-oProxyCommand=touch /tmp/x"}, "ssh.host: '-oProxyCommand=touch /tmp/x' is not"),
        ({"host": "a host"}, "ssh.host: 'a host' is not a host name"),
        ({"host": ""}, "ssh.host: '' is not a host name"),
        ({"host": "h", "user": "-lroot"}, "ssh.user: '-lroot' is not a login name"),
        ({"host": "h", "port": 0}, "ssh.port: expected an integer 1-65535, got 0"),
        ({"host": "h", "ssh_options": {"Proxy Command": "x"}}, "ssh.ssh_options.Proxy Command:"),
        ({"host": "h", "ssh_options": {"ControlPath": "/x"}}, "set by llamaherd itself"),
        ({"host": "h", "ssh_options": {"batchmode": "no"}}, "set by llamaherd itself"),
        ({"host": "h", "ssh_options": {"User": "a\nHost *"}}, "expected a one-line value"),
        ({"host": "h", "ssh_options": ["User=x"]}, "expected a table of option = value"),
    ],
)
def test_bad_targets_are_refused_naming_the_key(table: dict, message: str) -> None:
    with pytest.raises(SshError) as caught:
        SshTarget.of(table, "ssh")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_the_command_line_puts_the_users_options_first_and_ends_them_with_dashes() -> None:
    target = SshTarget.of(
        {
            "host": "build-1.example",
            "user": "agent",
            "port": 2222,
            "key_path": "~/.ssh/k",
            "ssh_options": {"UserKnownHostsFile": "/etc/kh", "Compression": True},
        },
        "runtime",
    )
    argv = target.argv("/tmp/ctl", "-N")
    assert argv[:5] == ["ssh", "-o", "UserKnownHostsFile=/etc/kh", "-o", "Compression=yes"]
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv
    assert "ControlPath=/tmp/ctl" in argv and "ConnectTimeout=10" in argv
    assert argv[argv.index("-p") + 1] == "2222" and argv[argv.index("-l") + 1] == "agent"
    assert argv[-3:] == ["-N", "--", "build-1.example"]
    assert target.label == "agent@build-1.example:2222"
    assert SshTarget.from_dict(target.to_dict()) == target


def test_turning_host_key_checks_off_is_noticed() -> None:
    target = SshTarget.of({"host": "h", "ssh_options": {"StrictHostKeyChecking": "no"}}, "r")
    assert target.insecure_options() == ["StrictHostKeyChecking=no"]
    strict = SshTarget.of({"host": "h", "ssh_options": {"StrictHostKeyChecking": "yes"}}, "r")
    assert strict.insecure_options() == []


@pytest.mark.parametrize(
    ("stderr", "kind", "says"),
    [
        (
            "@@@\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\n"
            "Host key for [h]:2222 has changed and you have requested strict checking.\n"
            "Host key verification failed.",
            "host-key",
            "does not match the one in the user's ~/.ssh/known_hosts",
        ),
        (
            "No ED25519 host key is known for [h]:2222 and you have requested strict checking.\n"
            "Host key verification failed.",
            "unknown-host",
            "ssh-keyscan -p 2222 h >> ~/.ssh/known_hosts",
        ),
        ("agent@h: Permission denied (publickey).", "refused", "the key was refused"),
        (
            "ssh: connect to host h port 2222: Connection refused",
            "unreachable",
            "unreachable: connect to host h port 2222: Connection refused",
        ),
    ],
)
def test_failures_are_one_line_with_a_kind(stderr: str, kind: str, says: str) -> None:
    error = failure(SshTarget("h", "agent", 2222), stderr)
    assert error.kind == kind
    assert says in str(error) and str(error).startswith("ssh agent@h:2222: ")
    assert "\n" not in str(error)


def test_a_host_key_fix_names_the_known_hosts_file_the_target_reads() -> None:
    """Issue 42 item 17: with ``ssh_options.UserKnownHostsFile`` (its first file, as ssh reads
    and ``ssh-keygen -f`` edits it), the message and both fixes name that file; ``~/`` is left
    for the shell to expand."""
    target = SshTarget.of(
        {"host": "h", "port": 2222, "ssh_options": {"UserKnownHostsFile": "~/.ssh/agents hosts2"}},
        "runtime",
    )
    changed = str(failure(target, "Host key for [h]:2222 has changed and you have requested"))
    assert "does not match the one in ~/.ssh/agents (ssh_options.UserKnownHostsFile)" in changed
    assert changed.endswith("(ssh-keygen -f ~/.ssh/agents -R '[h]:2222')")
    unknown = str(failure(target, "Host key verification failed."))
    assert unknown.endswith("(ssh-keyscan -p 2222 h >> ~/.ssh/agents)")
    odd = SshTarget.of({"host": "h", "ssh_options": {"UserKnownHostsFile": "/k/it's"}}, "r")
    assert str(failure(odd, "Host key verification failed.")).endswith(">> '/k/it'\"'\"'s')")
