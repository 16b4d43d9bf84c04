"""The plain-data codec between a sandboxed candidate and its checker: round trips keep
types exactly (bool is not int, tuple is not list), subclasses cross as their base value,
and the decoder builds nothing but plain data, within its bounds."""

from __future__ import annotations

import math
import os
from collections import Counter, OrderedDict, namedtuple

import pytest

from deciplane.envs.code import wire
from deciplane.envs.code.wire import WireError, decode, encode


@pytest.mark.parametrize("value", [
    None, True, False, 0, -1, 2 ** 200, 1.5, -0.0, 1e308, "", "héllo\n\t\"\\", "\udc80",
    b"", b"\x00\xff", [], [1, [2, [3]]], (), (1,), (1, "a", None), {}, {1: "a", "b": [2]},
    {(1, 2): {3}, None: (), True: 1.0}, set(), {1, "x", (2, 3)}, frozenset({1, 2}),
    [True, 1, 1.0], {"nested": [{"t": [1]}]},     # a dict that looks like a tag stays a dict
])
def test_round_trip_keeps_value_and_types(value):
    got = decode(encode(value))
    assert got == value and repr(got) == repr(value)

    def types(v):
        if isinstance(v, (list, tuple, set, frozenset)):
            return (type(v).__name__, sorted(map(repr, map(types, v))))
        if isinstance(v, dict):
            return ("dict", sorted(repr((types(k), types(x))) for k, x in v.items()))
        return type(v).__name__
    assert types(got) == types(value)


def test_bool_stays_distinct_from_int_and_int_from_float():
    assert decode(encode(True)) is True
    assert type(decode(encode(1))) is int and type(decode(encode(1.0))) is float
    assert [type(x) for x in decode(encode([True, 1, 1.0]))] == [bool, int, float]


def test_special_floats():
    assert math.isnan(decode(encode(float("nan"))))
    assert decode(encode([float("inf"), -float("inf")])) == [math.inf, -math.inf]


def test_subclasses_cross_as_their_base_value_without_running_their_methods():
    class Liar(int):
        def __eq__(self, other):
            return True
        __hash__ = int.__hash__

        def __int__(self):
            return 999

    class BadList(list):
        def __iter__(self):
            raise RuntimeError("never called")

    Point = namedtuple("Point", "x y")
    got = decode(encode([Liar(3), BadList([1, 2]), Point(1, 2), Counter("aab"),
                         OrderedDict(a=1), bytearray(b"hi")]))
    assert got == [3, [1, 2], (1, 2), {"a": 2, "b": 1}, {"a": 1}, b"hi"]
    assert [type(x) for x in got] == [int, list, tuple, dict, dict, bytes]
    assert got[0] != 4          # a plain int now: its __eq__ is int's


@pytest.mark.parametrize("value", [object(), len, iter([1]), (x for x in ()), 1j, [1, object()],
                                   {"k": type}])
def test_encode_refuses_what_is_not_plain_data(value):
    with pytest.raises(WireError, match="not plain data"):
        encode(value)


def test_encode_bounds_depth_and_size():
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(WireError):
        encode(deep)
    with pytest.raises(WireError):
        encode("x" * (wire.MAX_BYTES + 1))
    with pytest.raises(WireError):
        encode(10 ** (wire.MAX_INT_DIGITS + 10))


@pytest.mark.parametrize("raw", [
    b"", b"{", b"[1,", b'{"x": 1}', b'{"t": 1}', b'{"t": [1], "s": [2]}', b'{"b": "zz"}',
    b'{"s": [[1]]}', b'{"d": [[[1], 2]]}', b'{"d": [[1]]}', b"\xff", b'"\\ud800"x',
    b"[" * 1000 + b"]" * 1000, b"1" * (wire.MAX_INT_DIGITS + 1),
    b'{"__class__": "os.system"}', b"nul", b"'a'",
])
def test_decode_rejects_malformed_unknown_or_unbounded_input(raw):
    with pytest.raises(WireError):
        decode(raw)


def test_decode_refuses_oversized_input_unread():
    with pytest.raises(WireError, match="over"):
        decode(b" " * (wire.MAX_BYTES + 1))


def test_decode_bounds_the_number_of_values():
    with pytest.raises(WireError, match="values"):
        decode(b"[" + b",".join([b"0"] * (wire.MAX_NODES + 1)) + b"]")


def test_frames_round_trip_and_fail_cleanly():
    r, w = os.pipe()
    try:
        wire.write_frame(w, encode(("call", 1, (2,), {})))
        assert decode(wire.read_frame(r)) == ("call", 1, (2,), {})
        with pytest.raises(TimeoutError):
            wire.read_frame(r, deadline=0.0)
        os.write(w, (wire.MAX_BYTES + 1).to_bytes(4, "big"))
        with pytest.raises(WireError, match="over"):
            wire.read_frame(r)
        os.write(w, (10).to_bytes(4, "big") + b"abc")
        os.close(w)
        w = -1
        with pytest.raises(EOFError):
            wire.read_frame(r)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
