"""``ObservationText``: a ``spaces.Text`` observation space that works through
``gymnasium.vector.AsyncVectorEnv``'s shared memory (used by every text environment)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory


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


__all__ = ["ObservationText", "SharedTexts"]
