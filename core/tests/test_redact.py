"""Redactor: text, nested data, log records."""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import secrets
import time
import tracemalloc
from urllib.parse import quote

import pytest

from llamaherd.redact import MASK, RedactingFilter, Redactor


def test_replaces_every_secret_and_ignores_short_values():
    redactor = Redactor(["ghp_token123", "hunter22", "a", "no"])
    text = "token=ghp_token123 pw=hunter22 a no ghp_token123"
    assert redactor.redact(text) == "token=*** pw=*** a no ***"


def test_longest_secret_wins_when_one_starts_with_another():
    redactor = Redactor(["abcd", "abcdef", "ab12"])
    assert redactor.redact("xabcdefy abcdz ab12") == "x***y ***z ***"


def test_regex_characters_are_literal():
    redactor = Redactor(["a.c*(x)", "[s3cret]"])
    assert redactor.redact("abc* a.c*(x) [s3cret] s3cret") == "abc* *** *** s3cret"


def test_empty_redactor_is_identity():
    redactor = Redactor([])
    assert not redactor
    assert redactor.redact("anything") == "anything"
    assert redactor.redact_obj({"a": [1]}) == {"a": [1]}


def test_multiline_key_is_masked_whole_line_by_line_and_json_escaped():
    body = [secrets.token_hex(30) for _ in range(3)]
    key = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        + "\n".join(body)
        + "\n-----END OPENSSH PRIVATE KEY-----\n"
    )
    redactor = Redactor([key])
    assert redactor.redact(f"cat: {key}done") == f"cat: {MASK}done"
    # `head -2` through a terminal: CRLF line ends, one line of the key body.
    assert body[0] not in redactor.redact(key.replace("\n", "\r\n")[:120])
    # The key embedded in a JSON document (newlines escaped as \n).
    assert redactor.redact(json.dumps({"out": key})) == json.dumps({"out": MASK})


def test_nested_objects_keys_lists_and_tuples():
    redactor = Redactor(["s3cr3t-value"])
    data = {
        "status": "using s3cr3t-value now",
        "s3cr3t-value": 1,
        "items": [{"deep": ("x", "s3cr3t-value")}, 42, None, True, 1.5],
    }
    assert redactor.redact_obj(data) == {
        "status": "using *** now",
        "***": 1,
        "items": [{"deep": ("x", "***")}, 42, None, True, 1.5],
    }
    assert data["status"] == "using s3cr3t-value now"  # a copy: the input is untouched


def _fastest_of_five(*works) -> list[float]:
    """Each of ``works``' best time of five, the works taken in turn (a loaded machine slows
    them alike)."""
    times: list[list[float]] = [[] for _ in works]
    for _ in range(5):
        for work, taken in zip(works, times, strict=True):
            started = time.perf_counter()
            work()
            taken.append(time.perf_counter() - started)
    return [min(taken) for taken in times]


def test_many_secrets_stay_fast(monkeypatch):
    many = [secrets.token_hex(16) for _ in range(1000)]
    redactor = Redactor(many)
    text = "lorem ipsum dolor sit amet " * 8_000 + many[500]  # about 200 KB
    # The scan stops only where a secret's first characters are: not at every position.
    stops = []
    form_at = redactor._form_at
    monkeypatch.setattr(redactor, "_form_at", lambda t, i: stops.append(i) or form_at(t, i))
    assert redactor.redact(text).endswith(f"amet {MASK}")
    assert len(stops) < 100, len(stops)
    monkeypatch.undo()
    # Against what it replaces: a plain 1000-way alternation tries every secret at every
    # position (5-20 times slower here; CI under load saw 3.7 times).
    alternation = re.compile("|".join(map(re.escape, many)))
    ours, plain = _fastest_of_five(
        lambda: redactor.redact(text), lambda: alternation.sub(MASK, text)
    )
    assert ours < plain / 2, (ours, plain)


def _peak_bytes(build):
    tracemalloc.start()
    try:
        result = build()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_secret_costs_memory_linear_in_its_length_and_adding_one_reuses_the_rest():
    # A run sets values at runtime (setenv): a character-level tree took gigabytes for a few MB.
    big = secrets.token_urlsafe(750_000)  # 1 MB
    redactor, peak = _peak_bytes(lambda: Redactor([big]))
    # Its twenty-odd forms, each one to six times its length (hex forms kept in one case).
    assert peak < 45 * len(big), peak
    more, peak = _peak_bytes(lambda: redactor.plus(["another-secret-value"]))
    assert peak < 100_000, peak  # nothing of the first secret is built again
    assert more.redact(f"a {big} b another-secret-value") == f"a {MASK} b {MASK}"
    assert redactor.redact("another-secret-value") == "another-secret-value"  # unchanged


@pytest.mark.parametrize("offset", [0, 1, 2])
def test_encoded_forms_are_masked_wherever_they_fall(offset: int):
    secret = "pa$$w0rd/with+odd chars"
    redactor = Redactor([secret])
    around = b"x" * offset + secret.encode() + b"-and what follows"
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        blob = encode(around).decode()
        masked = redactor.redact(blob)
        # All but the two characters at each edge, which carry the neighbours' bits too.
        assert MASK in masked and len(blob) - len(masked) >= len(secret) * 4 // 3 - 4 - len(MASK)
    assert redactor.redact(f"url?p={quote(secret, safe='')}&x=1") == f"url?p={MASK}&x=1"
    assert redactor.redact(f"hex {secret.encode().hex().upper()}.") == f"hex {MASK}."


def test_byte_by_byte_forms_are_masked_in_any_case_inside_longer_dumps():
    secret = "pa$$w0rd/with+odd chars"
    data = secret.encode()
    redactor = Redactor([secret])
    forms = {
        "every byte %XX": "".join(f"%{b:02X}" for b in data),
        "every byte %xx": "".join(f"%{b:02x}" for b in data),
        "hex with colons": data.hex(":").upper(),
        "hex with spaces": data.hex(" "),
        "hex with dashes": data.hex("-"),
        "\\x escapes": "".join(f"\\x{b:02x}" for b in data),
        "mixed case hex": "".join(c.upper() if i % 3 else c for i, c in enumerate(data.hex())),
        "JSON \\u escapes": "".join(f"\\u{ord(c):04x}" for c in secret),
        "JSON \\u escapes, upper": "".join(f"\\u{ord(c):04X}" for c in secret),
    }
    for what, form in forms.items():
        around = f"before 00:{form}:ff after" if ":" in form else f"before {form} after"
        masked = redactor.redact(around)
        assert masked.replace(MASK, "") in ("before  after", "before 00::ff after"), what
    # A JSON document that escapes every character is masked whole, through json.loads too.
    document = '{"k": "' + forms["JSON \\u escapes"] + '"}'
    assert redactor.redact(document) == '{"k": "***"}'
    assert json.loads(document)["k"] == secret


def test_json_escapes_beyond_the_basic_plane_are_surrogate_pairs():
    secret = "key-\U0001f511-\u00e9t\u00e9-0123"
    redactor = Redactor([secret])
    assert redactor.redact(json.dumps({"k": secret})) == json.dumps({"k": MASK})
    assert redactor.redact(json.dumps(secret, ensure_ascii=False)) == f'"{MASK}"'
    every = "".join(f"\\u{unit}" for unit in re.findall("....", secret.encode("utf-16-be").hex()))
    assert "\\ud83d\\udd11" in every
    assert redactor.redact(every) == MASK


def test_short_values_have_no_encoded_forms():
    # Four hex digits of "abcd" (61626364) turn up in any digest: only the value itself counts.
    redactor = Redactor(["abcd"])
    assert redactor.redact("sha 61626364ff") == "sha 61626364ff"
    assert redactor.redact("abcd") == MASK


def _logger(redactor: Redactor) -> tuple[logging.Logger, io.StringIO]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    handler.addFilter(RedactingFilter(redactor))
    logger = logging.getLogger(f"test-redact-{secrets.token_hex(4)}")
    logger.propagate = False
    logger.addHandler(handler)
    return logger, stream


def test_log_records_message_args_and_traceback():
    logger, stream = _logger(Redactor(["ghp_leaky_token"]))
    logger.warning("calling with %s and %r", "ghp_leaky_token", {"t": "ghp_leaky_token"})
    try:
        raise RuntimeError("bad token ghp_leaky_token")
    except RuntimeError:
        logger.exception("failed")
    logger.warning("stack", stack_info=True)
    output = stream.getvalue()
    assert "ghp_leaky_token" not in output
    assert "calling with *** and {'t': '***'}" in output
    assert "RuntimeError: bad token ***" in output


def test_filter_redactor_can_be_swapped():
    logger, stream = _logger(Redactor([]))
    flt = logger.handlers[0].filters[0]
    logger.warning("first secret-one")
    flt.redactor = Redactor(["secret-one"])
    logger.warning("second secret-one")
    assert stream.getvalue().splitlines() == ["WARNING first secret-one", "WARNING second ***"]


def test_redactors_of_the_same_secrets_share_their_start_not_what_each_adds() -> None:
    """Each run masks its project's secrets and its own token: the first part is made once
    and shared, what one run adds never reaches another's."""
    from llamaherd.redact import MAX_FINDERS, Redactor

    first = Redactor(["project-secret-1"]).plus(["run-token-aaaa"])
    second = Redactor(["project-secret-1"]).plus(["run-token-bbbb"])
    text = "project-secret-1 run-token-aaaa run-token-bbbb"
    assert first.redact(text) == "*** *** run-token-bbbb"
    assert second.redact(text) == "*** run-token-aaaa ***"
    assert Redactor(["project-secret-1"]).redact(text) == "*** run-token-aaaa run-token-bbbb"
    grown = Redactor(["project-secret-1"])
    added = [f"value-{n}-{'xyz' * n}" for n in range(3 * MAX_FINDERS)]
    for value in added:  # setenv's values, one at a time
        grown = grown.plus([value])
    assert len(grown._finders) <= MAX_FINDERS
    assert grown.redact(" ".join(added)) == " ".join(["***"] * len(added))
