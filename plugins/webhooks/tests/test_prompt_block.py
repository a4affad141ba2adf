"""The ``<webhook-trigger>`` block a webhook run's prompt ends with."""

from __future__ import annotations

from llamaherd.prompts import build_prompts

DELIVERY = {
    "kind": "webhook",
    "source": "github",
    "payload": {
        "event": "issues",
        "action": "opened",
        "repo": "acme/app",
        "number": 7,
        "sender": "ann",
        "payload": {"issue": {"title": "Crash"}},
    },
}


def user_prompt(tmp_project, trigger):
    from llamaherd.plugins import registry

    tmp_project.add_agent("bot", "", body="Triage new issues.")
    agent = tmp_project.load().agent("bot")
    return build_prompts(agent, registry(), trigger)[1]


def test_the_block_names_each_field_and_quotes_the_payload(tmp_project):
    hook = user_prompt(tmp_project, DELIVERY)
    block = hook.split("<webhook-trigger>")[1].split("</webhook-trigger>")[0]
    for line in (
        "source: github",
        "event: issues",
        "action: opened",
        "repo: acme/app",
        "number: 7",
        "sender: ann",
    ):
        assert line in block
    assert '"title": "Crash"' in block


def test_a_given_prompt_is_the_only_block(tmp_project):
    given = user_prompt(
        tmp_project, {"kind": "webhook", "prompt": "<webhook-trigger>\nmine\n</webhook-trigger>"}
    )
    assert given.count("<webhook-trigger>") == 1 and "mine" in given
