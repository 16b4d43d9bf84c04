"""Plain data across a pipe: the codec between a sandboxed candidate and its checker.

Values that cross are *plain data* only: ``None``, ``bool``, ``int``, ``float``, ``str``,
``bytes``, ``list``, ``tuple``, ``dict``, ``set`` and ``frozenset``, nested. They travel as
JSON with tags for what JSON lacks (``{"t": [...]}`` a tuple, ``{"s": [...]}`` a set,
``{"S": [...]}`` a frozenset, ``{"b": "<hex>"}`` bytes, ``{"d": [[k, v], ...]}`` a dict,
any keys). :func:`decode` builds nothing else — never an object of a class the sender
chose, never ``pickle`` — keeps ``bool`` distinct from ``int`` and ``int`` from ``float``,
and is bounded: at most ``max_bytes`` of input, ``max_depth`` levels, ``max_nodes``
values, integers of at most ``MAX_INT_DIGITS`` digits. :func:`encode` takes a subclass
of a plain type (a ``namedtuple``, a ``Counter``) as its base type, through the base
type's own methods (a subclass's ``__eq__`` or ``__iter__`` never runs).

Frames on a file descriptor: 4 bytes big-endian length, then the payload
(:func:`write_frame`, :func:`read_frame`).

This module uses the standard library only and no syntax newer than Python 3.8: its
source is also sent, as text, into the sandbox (the candidate's side) and into the
checker's helper process.
"""

import json
import os
import select
import time

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NODES = 100_000
MAX_INT_DIGITS = 4000


class WireError(ValueError):
    """A value that is not plain data, or input that is not a well-formed bounded frame."""


def _parse_int(s):
    if len(s.lstrip("-")) > MAX_INT_DIGITS:
        raise WireError("integer over %d digits" % MAX_INT_DIGITS)
    return int(s)


def _count_value(depth, budget):
    """One more value at nesting ``depth``: refuse past the depth or value-count bound."""
    if depth > MAX_DEPTH:
        raise WireError("nested deeper than %d" % MAX_DEPTH)
    budget[0] -= 1
    if budget[0] < 0:
        raise WireError("more than %d values" % MAX_NODES)


def _to_tree(v, depth, budget):
    _count_value(depth, budget)
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        if v.bit_length() > MAX_INT_DIGITS * 3.33:
            raise WireError("integer over %d digits" % MAX_INT_DIGITS)
        return v
    if t is float:
        return v
    if t is list:
        return [_to_tree(x, depth + 1, budget) for x in v]
    if t is tuple:
        return {"t": [_to_tree(x, depth + 1, budget) for x in v]}
    if t is dict:
        return {"d": [[_to_tree(k, depth + 1, budget), _to_tree(x, depth + 1, budget)]
                      for k, x in v.items()]}
    if t is set:
        return {"s": [_to_tree(x, depth + 1, budget) for x in v]}
    if t is frozenset:
        return {"S": [_to_tree(x, depth + 1, budget) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    # subclasses of plain types: their base value, through the base type's own methods
    if isinstance(v, bool):
        return bool.__bool__(v)
    if isinstance(v, int):
        return _to_tree(int.__int__(v), depth, budget)
    if isinstance(v, float):
        return float.__float__(v)
    if isinstance(v, str):
        return str.__str__(v)
    if isinstance(v, bytes):
        return {"b": bytes.hex(v)}
    if isinstance(v, (bytearray, memoryview)):
        return {"b": bytes(v).hex()}
    if isinstance(v, list):
        return _to_tree(list.copy(v), depth, budget)
    if isinstance(v, tuple):
        return _to_tree(tuple(tuple.__iter__(v)), depth, budget)
    if isinstance(v, dict):
        return _to_tree(dict(dict.items(v)), depth, budget)
    if isinstance(v, frozenset):
        return _to_tree(frozenset(frozenset.__iter__(v)), depth, budget)
    if isinstance(v, set):
        return _to_tree(set(set.__iter__(v)), depth, budget)
    raise WireError("not plain data: %s" % t.__name__)


def encode(value):
    """``value`` as bytes (raises :class:`WireError` if it is not plain data or too big)."""
    try:
        data = json.dumps(_to_tree(value, 0, [MAX_NODES]), ensure_ascii=True,
                          allow_nan=True, separators=(",", ":")).encode("ascii")
    except RecursionError:
        raise WireError("nested too deep") from None
    if len(data) > MAX_BYTES:
        raise WireError("over %d bytes" % MAX_BYTES)
    return data


def _from_tree(x, depth, budget):
    _count_value(depth, budget)
    t = type(x)
    if x is None or t is bool or t is int or t is float or t is str:
        return x
    if t is list:
        return [_from_tree(y, depth + 1, budget) for y in x]
    if t is dict and len(x) == 1:
        (tag, body), = x.items()
        if tag == "b" and type(body) is str:
            try:
                return bytes.fromhex(body)
            except ValueError:
                raise WireError("bad bytes") from None
        if type(body) is not list:
            raise WireError("bad tagged value")
        items = [_from_tree(y, depth + 1, budget) for y in body] if tag != "d" else None
        try:
            if tag == "t":
                return tuple(items)
            if tag == "s":
                return set(items)
            if tag == "S":
                return frozenset(items)
            if tag == "d":
                out = {}
                for kv in body:
                    if type(kv) is not list or len(kv) != 2:
                        raise WireError("bad dict item")
                    out[_from_tree(kv[0], depth + 1, budget)] = _from_tree(kv[1], depth + 1,
                                                                          budget)
                return out
        except TypeError:
            raise WireError("unhashable key or member") from None
    raise WireError("not a plain-data tree")


def decode(data):
    """The plain value ``data`` (from :func:`encode`) stands for; raises :class:`WireError`
    on anything else, on input over the bounds, and on malformed input."""
    if not isinstance(data, (bytes, bytearray)) or len(data) > MAX_BYTES:
        raise WireError("frame over %d bytes" % MAX_BYTES)
    # depth of brackets is bounded before json's recursive parser sees it
    depth = peak = 0
    in_str = esc = False
    for ch in data:
        if in_str:
            if esc:
                esc = False
            elif ch == 92:
                esc = True
            elif ch == 34:
                in_str = False
        elif ch == 34:
            in_str = True
        elif ch in (91, 123):
            depth += 1
            if depth > 2 * MAX_DEPTH + 2:
                raise WireError("nested deeper than %d" % MAX_DEPTH)
        elif ch in (93, 125):
            depth -= 1
    try:
        tree = json.loads(bytes(data).decode("ascii"), parse_int=_parse_int)
    except (ValueError, RecursionError) as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError("malformed frame") from None
    return _from_tree(tree, 0, [MAX_NODES])


def write_frame(fd, payload):
    """Write one frame (blocking) to ``fd``."""
    data = len(payload).to_bytes(4, "big") + payload
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd, n, deadline):
    buf = bytearray()
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no frame in time")
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                raise TimeoutError("no frame in time")
        chunk = os.read(fd, min(n - len(buf), 1 << 16))
        if not chunk:
            raise EOFError("the other side closed the channel")
        buf += chunk
    return bytes(buf)


def read_frame(fd, deadline=None, max_bytes=MAX_BYTES):
    """One frame's payload from ``fd``; ``deadline`` (``time.monotonic()`` seconds) or
    wait forever. Raises ``EOFError`` (peer closed), ``TimeoutError``, or
    :class:`WireError` (a length over ``max_bytes``)."""
    n = int.from_bytes(_read_exact(fd, 4, deadline), "big")
    if n > max_bytes:
        raise WireError("frame of %d bytes over %d" % (n, max_bytes))
    return _read_exact(fd, n, deadline)


__all__ = ["WireError", "encode", "decode", "write_frame", "read_frame", "MAX_BYTES",
           "MAX_DEPTH", "MAX_NODES", "MAX_INT_DIGITS"]
