"""check_text_action: the gate every text action passes (hand-checked values)."""

from __future__ import annotations

import pytest

from deciplane.envs.spaces import check_text_action
from deciplane.errors import InvalidAction


@pytest.mark.parametrize("text,program,problem", [
    ("go east", False, None),
    ("a\tb\nc\r\n", False, None),                      # tabs and newlines stay legal
    ("caf\u00e9 \U0001F600", False, None),             # non-ASCII text is fine
    ("look\x00go east", False, "control character U+0000 at position 4"),
    ("\x00", False, "control character U+0000 at position 0"),
    ("\x1b[31m", False, "control character U+001B at position 0"),
    ("x\x7f", False, "control character U+007F at position 1"),
    ("x\x85", False, "control character U+0085 at position 1"),   # C1 (NEL)
    ("ab\udcff", False, "lone surrogate U+DCFF at position 2"),
    ("\ud800", False, "lone surrogate U+D800 at position 0"),
    ("a\x0cb", False, "control character U+000C at position 1"),
    ("a\x0cb\x0bc", True, None),                       # legal whitespace in programs
    ("a\x00b", True, "control character U+0000 at position 1"),
])
def test_check_text_action(text, program, problem):
    got = check_text_action(text, 100, program=program)
    assert got.problem == problem and got.text == text and got.ok is (problem is None)


def test_length_cap():
    assert check_text_action("x" * 10, 10).ok
    assert check_text_action("x" * 11, 10).problem == "11 characters; the limit is 10"


def test_bytes_and_byte_limit():
    assert check_text_action(b"go east", 100).text == "go east"
    assert check_text_action("\u00e9\u00e9", 100, max_bytes=3).problem == (
        "4 UTF-8 bytes; the limit is 3")
    with pytest.raises(InvalidAction, match="not valid UTF-8"):
        check_text_action(b"\xff", 100)
    for bad in (7, None, 1.5, ["look"]):
        with pytest.raises(InvalidAction, match="must be text"):
            check_text_action(bad, 100)


def test_length_is_checked_before_the_scan():
    huge = "\x00" * 5_000_000
    assert check_text_action(huge, 100).problem == "5000000 characters; the limit is 100"
