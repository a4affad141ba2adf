"""What every way in makes of a JSON value from outside (``llamaherd.inbound``): lone
surrogates made U+FFFD, numbers that are not finite made null, and the shape limits."""

from __future__ import annotations

import json

import pytest

from llamaherd.inbound import MAX_DEPTH, MAX_INT_DIGITS, OverLimit, admit, clean, loads, parse


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_numbers_that_are_not_finite_become_null_and_the_rest_stays_the_same_object():
    value = {"a": [1.5, float("nan")], "b": {"c": float("-inf")}, "d": "x\ud800"}
    assert clean(value) == {"a": [1.5, None], "b": {"c": None}, "d": "x\ufffd"}
    fine = {"a": [1, 2.5, "text", None, True], "b": {"c": 10**300}}
    assert clean(fine) is fine and admit(fine) is fine


def test_the_shape_limits_are_refused_naming_them():
    assert admit(nested(MAX_DEPTH)) == nested(MAX_DEPTH)
    with pytest.raises(OverLimit, match=f"nested deeper than {MAX_DEPTH} levels"):
        admit(nested(MAX_DEPTH + 1))
    with pytest.raises(OverLimit, match=f"nested deeper than {MAX_DEPTH} levels"):
        admit({"a": {"b": nested(MAX_DEPTH)}})
    assert admit([10**MAX_INT_DIGITS - 1, -(10**MAX_INT_DIGITS) + 1])
    for big in (10**MAX_INT_DIGITS, -(10**MAX_INT_DIGITS)):
        with pytest.raises(OverLimit, match=f"more than {MAX_INT_DIGITS} digits"):
            admit({"n": big})
    deep = nested(MAX_DEPTH + 5)
    assert clean(deep) is deep, "what the store holds from before is shown as it is"


def test_parse_refuses_what_the_parser_gives_up_on_as_too_deep():
    with pytest.raises(OverLimit, match="nested deeper"):
        parse("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError):
        parse("{not json")
    assert parse(b'{"n": NaN, "i": 1e999, "s": "\\ud800"}') == {"n": None, "i": None, "s": "\ufffd"}


def test_stored_nan_and_infinity_are_read_as_null():
    text = json.dumps({"n": float("nan"), "i": [float("inf"), float("-inf")], "k": 1.0})
    assert "NaN" in text and "Infinity" in text  # as Python's encoder writes them
    assert loads(text) == {"n": None, "i": [None, None], "k": 1.0}
