"""Text spaces shared by every text environment.

* :class:`ObservationText`: a ``spaces.Text`` observation space that works through
  ``gymnasium.vector.AsyncVectorEnv``'s shared memory.
* :func:`check_text_action`: the one gate every text action passes before it reaches an
  engine (a game interpreter, math-verify, a sandbox). A value of the wrong type raises
  :class:`~deciplane.errors.InvalidAction`; a string whose *content* is bad (control
  characters, lone surrogates, over the length cap) is reported, never sent on, so that the
  environment can answer it as an invalid move — a training run must not die of a bad token.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory

from deciplane.errors import InvalidAction

#: Characters a text action may never contain: C0 controls except tab, newline and
#: carriage return, DEL, C1 controls, and lone UTF-16 surrogates (not encodable as UTF-8).
_BAD_CHARS = re.compile("[\x00-\x08\x0b-\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
#: Programs may also hold vertical tabs and form feeds (``string.printable``'s whitespace).
_BAD_CHARS_PROGRAM = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


class TextCheck(NamedTuple):
    """What :func:`check_text_action` found: ``text`` (the action as ``str``) and
    ``problem`` (``None`` when it may be sent on, else one line saying what is wrong)."""

    text: str
    problem: str | None

    @property
    def ok(self) -> bool:
        return self.problem is None


def check_text_action(action: Any, max_chars: int, *, what: str = "text action",
                      program: bool = False, max_bytes: int | None = None,
                      type_error: str | None = None) -> TextCheck:
    """Check a text action before it reaches an engine.

    * ``action`` must be ``str`` (``bytes`` are decoded as UTF-8; bytes that are not
      UTF-8, or any other type, raise :class:`~deciplane.errors.InvalidAction`).
    * Its content is refused (``problem`` set, text not to be sent) when it holds a NUL
      or another control character (C0 except tab, newline and carriage return -- with
      ``program=True`` also vertical tab and form feed; DEL; C1), a lone surrogate
      (``\\udc80`` from ``errors="surrogateescape"``), more than ``max_chars``
      characters, or more than ``max_bytes`` UTF-8 bytes.

    Pure and cheap: one regular-expression scan of the string (the length is checked
    first, so a huge string costs nothing).
    """
    if isinstance(action, (bytes, bytearray, memoryview)):
        try:
            action = bytes(action).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidAction(f"the {what} is bytes that are not valid UTF-8 ({exc.reason} "
                                f"at byte {exc.start}); send text (str)") from None
    if not isinstance(action, str):
        raise InvalidAction(type_error.format(type=type(action).__name__) if type_error else
                            f"the {what} must be text (str), got {type(action).__name__}")
    if len(action) > max_chars:
        return TextCheck(action, f"{len(action)} characters; the limit is {max_chars}")
    bad = (_BAD_CHARS_PROGRAM if program else _BAD_CHARS).search(action)
    if bad is not None:
        c = bad.group()
        kind = "lone surrogate" if "\ud800" <= c <= "\udfff" else "control character"
        return TextCheck(action, f"{kind} U+{ord(c):04X} at position {bad.start()}")
    if max_bytes is not None and len(action.encode("utf-8")) > max_bytes:
        return TextCheck(action, f"{len(action.encode('utf-8'))} UTF-8 bytes; the limit "
                                 f"is {max_bytes}")
    return TextCheck(action, None)


class ObservationText(spaces.Text):
    """``spaces.Text`` that also works through ``AsyncVectorEnv``'s shared memory.

    Gymnasium 1.4 decodes a ``Text`` shared-memory buffer once, when the vector env is
    built, so every later observation would read as that initial blank text. For this
    space the vector env gets a live view instead (:class:`SharedTexts`), decoded when
    read; ``deepcopy`` of it (what ``AsyncVectorEnv`` returns by default) is a tuple of
    ``str``.
    """


class SharedTexts(Sequence):
    """The texts currently in a shared-memory buffer of an :class:`ObservationText`."""

    def __init__(self, space: spaces.Text, shared_memory: Any, n: int) -> None:
        self._chars = space.character_list
        self._pad = len(self._chars)
        self._buf = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape(
            n, space.max_length)  # (n, max_length) character indices, padded

    def __len__(self) -> int:
        return self._buf.shape[0]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self[k] for k in range(*i.indices(len(self))))
        row = self._buf[i]
        end = int(np.argmax(row == self._pad)) if row[-1] == self._pad else len(row)
        chars = self._chars
        return "".join([chars[v] for v in row[:end].tolist()])

    def __deepcopy__(self, memo: dict) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (tuple, list, SharedTexts))
                               else other)

    def __repr__(self) -> str:
        return f"SharedTexts({tuple(self)!r})"


@read_from_shared_memory.register(ObservationText)
def _read_live_texts(space: ObservationText, shared_memory: Any, n: int = 1) -> SharedTexts:
    return SharedTexts(space, shared_memory, n)


__all__ = ["ObservationText", "SharedTexts", "TextCheck", "check_text_action"]
