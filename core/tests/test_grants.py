"""What an agent's config grants: every key not on the positive list of harmless keys."""

from __future__ import annotations

from llamaherd.grants import HARMLESS, RUNS_A_COMMAND, UNKNOWN, grants, new_grants


def keys(config: dict) -> list[str]:
    return [grant.key for grant in grants(config)]


def test_a_key_nobody_listed_is_a_grant_wherever_it_is():
    assert keys({"futureKey": 1}) == ["futureKey"]
    assert keys({"runtime": {"type": "container", "futureKey": "x"}}) == ["runtime.futureKey"]
    assert keys({"schedule": "@hourly", "webhooks": [{"source": "gh", "future": 1}]}) == []
    [grant] = grants({"futureKey": 1})
    assert grant.why == UNKNOWN and str(grant) == f"futureKey = 1 ({UNKNOWN})"


def test_harmless_values_are_those_listed():
    assert keys({"runtime": {"type": "container", "memory": "1g", "pids": 64}}) == []
    assert keys({"runtime": {"type": "host-user"}}) == ["runtime.type"]
    assert keys({"runtime": {"type": "ssh", "host": "h", "port": 22, "cwd": "/srv"}}) == [
        "runtime.type",
        "runtime.host",
    ]
    assert HARMLESS["runtime.type"] == frozenset({"container"})


def test_ssh_options_and_pool_hosts_are_named_leaf_by_leaf():
    config = {
        "runtime": {
            "type": "ssh",
            "hosts": [{"host": "a", "capacity": 2, "ssh_options": {"ProxyCommand": "nc %h %p"}}],
        }
    }
    found = {grant.key: grant for grant in grants(config)}
    assert list(found) == [
        "runtime.type",
        "runtime.hosts[0].host",
        "runtime.hosts[0].ssh_options.ProxyCommand",
    ]
    assert found["runtime.hosts[0].ssh_options.ProxyCommand"].why == RUNS_A_COMMAND
    [timeout] = grants({"runtime": {"ssh_options": {"ConnectTimeout": 5}}})
    assert timeout.why.startswith("an ssh client option")  # asked about all the same


def test_empty_values_grant_nothing_and_long_ones_are_cut_when_shown():
    assert keys({"credentials": [], "hooks": {"pre": []}, "runtime": {"groups": []}}) == []
    [grant] = grants({"hooks": {"pre": ["x" * 1000]}})
    assert len(str(grant)) < 400 and str(grant).startswith("hooks.pre = ['xxx")


def test_new_grants_are_what_the_new_config_adds():
    before = {"credentials": ["github_token"], "hooks": {"pre": ["make"]}}
    after = {"credentials": ["github_token"], "hooks": {"pre": ["make", "curl x | sh"]}}
    assert [g.key for g in new_grants(before, after)] == ["hooks.pre"]
    # A changed value is a grant to look at again, whichever way it changed.
    assert [g.key for g in new_grants(after, before)] == ["hooks.pre"]
    assert new_grants(before, before) == []
