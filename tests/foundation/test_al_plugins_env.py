"""``AL_PLUGINS`` names modules ``al`` registers as plugins, entry points on or off (how tests
hand ``al`` subprocesses core's stand-ins)."""

from __future__ import annotations

import json


def test_named_modules_load_even_with_entry_points_off(al):
    env = {"AL_PLUGINS": "llamaherd.testing_fakes", "AL_NO_ENTRYPOINTS": "1"}
    result = al("plugins", "--json", env=env)
    assert result.returncode == 0, result.stderr
    (fakes,) = json.loads(result.stdout)
    assert fakes["name"] == "llamaherd.testing_fakes"
    assert set(fakes["registers"]) == {
        "provider:fake",
        "runtime:local",
        "credential-type:fake_token",
    }


def test_a_module_that_fails_to_import_is_one_warning(al):
    result = al("plugins", "--json", env={"AL_PLUGINS": "no_such_module_here"})
    assert result.returncode == 0 and "Traceback" not in result.stderr
    assert "plugin 'no_such_module_here' failed to load: ModuleNotFoundError" in result.stderr
