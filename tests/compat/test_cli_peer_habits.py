"""Action Llama's CLI habits (issue 33, item 11), through the real ``al``: ``al new`` without
prompts (--no-interactive --provider --model) and with them in a terminal (a pty), asking what
Action Llama asks."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

from llamaherd.credentials import CredentialStore
from llamaherd.project import read_toml

AL = Path(sys.executable).with_name("al")


class Terminal:
    """``al`` on a pseudo-terminal: what it prints, and answers typed as a user types them."""

    def __init__(self, args: list[str], cwd: Path, env: dict[str, str]):
        self.fd, child = pty.openpty()
        self.proc = subprocess.Popen(
            [str(AL), *args], cwd=cwd, env=env, stdin=child, stdout=child, stderr=child
        )
        os.close(child)
        self.seen = ""

    def expect(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{text!r} never came; the terminal shows:\n{self.seen}"
            if select.select([self.fd], [], [], left)[0]:
                try:
                    self.seen += os.read(self.fd, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    break
        assert text in self.seen, self.seen

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def finish(self, timeout: float = 30) -> int:
        code = self.proc.wait(timeout)
        try:
            while select.select([self.fd], [], [], 0.1)[0]:
                self.seen += os.read(self.fd, 4096).decode(errors="replace")
        except OSError:
            pass
        os.close(self.fd)
        return code


def test_new_refuses_a_provider_it_cannot_write(al, tmp_path):
    """Issue 42 item 12: ``--provider bogus`` is a usage error naming the choices (nothing is
    written), not a project that fails ``al validate``."""
    from llamaherd.plugins import registry

    result = al("new", "proj", "--no-interactive", "--provider", "antropic", cwd=tmp_path)
    assert result.returncode == 2
    choices = ", ".join(f'"{name}"' for name in sorted(registry().providers))
    assert result.stderr == (
        f"error: --provider: expected one of {choices}, got 'antropic' "
        '(did you mean "anthropic"?)\n'
    )
    assert not (tmp_path / "proj").exists()


def test_new_without_prompts_takes_provider_and_model(al, tmp_path):
    result = al("new", "proj", "--no-interactive", "--provider", "anthropic", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    config = read_toml(tmp_path / "proj" / "config.toml")
    assert config["models"]["sonnet"] == {
        "provider": "anthropic",
        "model": "claude-sonnet-4-20250514",
        "thinkingLevel": "medium",
        "authType": "api_key",
    }
    assert "scripted" in config["models"]  # the example agent still runs offline
    assert "Provider:    anthropic" in result.stdout
    other = al(
        "new",
        "p2",
        "--no-interactive",
        "--provider",
        "openai",
        "--model",
        "o1-preview",
        cwd=tmp_path,
    )
    assert other.returncode == 0, other.stderr
    models = read_toml(tmp_path / "p2" / "config.toml")["models"]
    assert models["o1-preview"] == {
        "provider": "openai",
        "model": "o1-preview",
        "authType": "api_key",
    }
    assert al("validate", cwd=tmp_path / "p2").returncode == 0


def test_new_in_a_terminal_asks_what_action_llama_asks(tmp_path):
    creds = tmp_path / "creds"
    env = {**os.environ, "AL_CREDENTIALS_DIR": str(creds), "TERM": "dumb"}
    terminal = Terminal(["new", "proj"], tmp_path, env)
    terminal.expect("Select model provider:")
    terminal.expect("Anthropic Claude (recommended)")
    terminal.expect("Choice [1]:")
    terminal.type("")  # the default, as in Action Llama
    terminal.expect("Select Claude model:")
    terminal.expect("claude-opus-4-20250514")
    terminal.type("2")
    terminal.expect("Anthropic API key")
    terminal.type("sk-ant-typed-secret")
    assert terminal.finish() == 0, terminal.seen
    assert "sk-ant-typed-secret" not in terminal.seen  # typed hidden
    models = read_toml(tmp_path / "proj" / "config.toml")["models"]
    assert models["opus"]["model"] == "claude-opus-4-20250514"
    assert CredentialStore(creds).read("anthropic_key") == {"token": "sk-ant-typed-secret"}


def test_config_sets_keys_for_scripts_and_refuses_a_broken_result(al, tmp_path):
    assert al("new", "proj", cwd=tmp_path).returncode == 0
    root = tmp_path / "proj"
    config = root / "agents" / "hello" / "config.toml"
    done = al(
        "config", "hello", "--set", "schedule=*/5 * * * *", "--set", "scale=2",
        "--set", 'params.repos=["acme/app"]', cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "saved agents/hello/config.toml" in done.stdout
    saved = read_toml(config)
    assert (saved["schedule"], saved["scale"], saved["params"]) == (
        "*/5 * * * *", 2, {"repos": ["acme/app"]},
    )  # fmt: skip
    assert "# Agent settings." in config.read_text()  # comments kept
    before = config.read_text()
    refused = al("agent", "config", "hello", "--set", "schedule=0 25 * * *", cwd=root)
    assert refused.returncode == 2
    assert "schedule: hour 25 is out of range 0-23" in refused.stderr
    assert config.read_text() == before
    assert al("config", "hello", "--unset", "scale", cwd=root).returncode == 0
    assert "scale" not in read_toml(config)
    assert al("config", "hello", cwd=root).returncode == 2  # no --set, no terminal


def test_config_in_a_terminal_edits_section_by_section(tmp_path):
    env = {**os.environ, "AL_CREDENTIALS_DIR": str(tmp_path / "creds"), "TERM": "dumb"}
    assert subprocess.run([str(AL), "new", "proj"], cwd=tmp_path, env=env).returncode == 0
    root = tmp_path / "proj"
    terminal = Terminal(["config", "hello"], root, env)
    terminal.expect("Configure hello:")
    terminal.expect("schedule     (none)")
    terminal.type("3")  # schedule
    terminal.expect("Cron schedule (empty to remove)")
    terminal.type("0 25 * * *")
    terminal.type("6")  # done: refused, the menu again
    terminal.expect("hour 25 is out of range 0-23")
    terminal.type("3")
    terminal.expect("Cron schedule")
    terminal.type("0 9 * * MON-FRI")
    terminal.type("5")  # params
    terminal.expect("Param KEY=VALUE")
    terminal.type("greeting=hi")
    terminal.type("")
    terminal.type("6")
    assert terminal.finish() == 0, terminal.seen
    saved = read_toml(root / "agents" / "hello" / "config.toml")
    assert saved["schedule"] == "0 9 * * MON-FRI" and saved["params"] == {"greeting": "hi"}


def test_logs_all_date_and_instance(tmp_path):
    from datetime import date

    from llamaherd.testing import OfflineProject

    project = OfflineProject(tmp_path / "proj", timeout=60)
    script = '[[turns]]\ntool_calls = [{ name = "set_status", arguments = { text = "working on #{{ turn }}" } }]\n'
    project.add_scripted_agent("dev", "", script + '[[turns]]\ntext = "done"\n')
    for _ in range(2):
        assert project.al("run", "dev").returncode == 0
    first, second = sorted(project.store().runs(agent="dev"), key=lambda r: r.created_at)

    one = project.al("logs", "dev", "-i", first.id[:10], "--json")
    assert one.returncode == 0, one.stderr
    assert one.stdout == project.al("logs", first.id, "--json").stdout
    assert one.stdout != project.al("logs", second.id, "--json").stdout  # event ids differ
    wrong = project.al("logs", "dev", "-i", "nope")
    assert wrong.returncode != 0 and "no run 'nope' of agent 'dev'" in wrong.stderr

    today = project.al("logs", "dev", "-d", date.today().isoformat())
    assert today.returncode == 0, today.stderr
    assert today.stdout.index(f"--- run {first.id}") < today.stdout.index(f"--- run {second.id}")
    # A day without runs is an answer (issue 42 item 11): exit 0, said on stdout (on stderr
    # with --json, which then prints nothing).
    empty = project.al("logs", "dev", "--date", "2000-01-01")
    assert (empty.returncode, empty.stdout) == (0, "agent dev has no runs on 2000-01-01\n")
    quiet = project.al("logs", "dev", "--date", "2000-01-01", "--json")
    assert (quiet.returncode, quiet.stdout) == (0, "")
    assert quiet.stderr == "agent dev has no runs on 2000-01-01\n"

    shown = project.al("logs", first.id).stdout
    everything = project.al("logs", first.id, "-a").stdout
    assert "set_status" not in shown  # the view shows it once, as its status line
    assert "set_status" in everything and len(everything) > len(shown)


def test_doctor_strict_makes_config_warnings_errors(tmp_path):
    from llamaherd.testing import OfflineProject

    project = OfflineProject(
        tmp_path / "proj", 'projectName = "x"\n[cloud]\nprovider = "vps"\n', timeout=60
    )
    project.add_scripted_agent("dev")
    plain = project.al("doctor", "--json")
    strict = project.al("doctor", "--strict", "--json")
    findings = {
        mode: [f for f in json.loads(result.stdout)["findings"] if f["check"] == "config"]
        for mode, result in (("plain", plain), ("strict", strict))
    }
    cloud = [f for f in findings["plain"] if f["subject"].startswith("config.toml: cloud")]
    assert cloud and cloud[0]["status"] == "warning"
    strict_cloud = [f for f in findings["strict"] if f["subject"].startswith("config.toml: cloud")]
    assert strict_cloud[0]["status"] == "error"
    assert strict.returncode == 1 and json.loads(strict.stdout)["ok"] is False


def test_creds_ls_says_which_webhook_sources_and_models_use_a_credential(tmp_path):
    """Issue 42 item 18: USED BY names the webhook sources a secret signs (under either
    spelling of its instance) and the models a key is for, beside the agents."""
    from llamaherd.testing import OfflineProject

    project = OfflineProject(tmp_path / "proj", creds=tmp_path / "creds", timeout=60)
    with (project.root / "config.toml").open("a") as fh:
        fh.write(
            '\n[webhooks.gh]\ntype = "github"\ncredential = "ci"\n'
            '[webhooks.x]\ntype = "twitter"\nx_twitter_api = "bot"\n'
            '[webhooks.open]\ntype = "github"\nallowUnsigned = true\n'
            '[models.sonnet]\nprovider = "anthropic"\nmodel = "claude-sonnet-4-5"\n'
        )
    project.add_scripted_agent("dev", 'models = ["sonnet"]\ncredentials = ["github_token"]\n')
    CredentialStore(tmp_path / "creds").write("github_webhook_secret", "ci", {"secret": "s"})
    rows = json.loads(project.al("creds", "ls", "--json", check=True).stdout)
    assert {(r["type"], r["instance"]): (r["used_by"], r["stored"]) for r in rows} == {
        ("anthropic_key", "default"): (["models.sonnet"], False),
        ("github_token", "default"): (["dev"], False),
        ("github_webhook_secret", "ci"): (["webhooks.gh"], True),
        ("x_twitter_api", "bot"): (["webhooks.x"], False),
    }
    table = project.al("creds", "ls", check=True).stdout
    assert [line.split()[-1] for line in table.splitlines() if "github_webhook_secret" in line] == [
        "webhooks.gh"
    ]
