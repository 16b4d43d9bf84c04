"""Single-token menu labels (docs/methods.md §1, "menu compilation").

A label is read as the *next token* after the answer cue, so it must be exactly one
token of the tokenizer **in that position** (``" A"`` after ``"Answer:"`` is one token
for most BPE tokenizers, ``"A"`` may not be, and vice versa). The alphabet is checked
once per (tokenizer, cue) and cached on the agent.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import Sequence

import torch

from deciplane.errors import ConfigError, MenuTooLarge

DEFAULT_LABELS = tuple(string.ascii_uppercase) + tuple(string.ascii_lowercase)
"""Candidate label characters, in order: A..Z then a..z."""


@dataclass(frozen=True)
class LabelAlphabet:
    """Labels usable after ``cue``: ``shown[k]`` is written in the menu listing, ``read[k]``
    is the exact string whose single token ``token_ids[k]`` is scored after the cue."""

    cue: str
    shown: tuple[str, ...]
    read: tuple[str, ...]
    token_ids: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.shown)

    def for_menu(self, size: int, limit: int | None = None) -> tuple[tuple[str, ...], torch.Tensor]:
        """The first ``size`` read-labels and their ``(K,)`` token ids; raises ``MenuTooLarge``."""
        cap = len(self) if limit is None else min(limit, len(self))
        if size > cap:
            why = (f"max_menu={limit}" if limit is not None and limit < len(self)
                   else f"the label alphabet has {len(self)} single-token labels for this tokenizer")
            raise MenuTooLarge(
                f"menu has {size} actions but the agent accepts at most {cap} ({why}); pass "
                f"MenuAgent(..., max_menu=...) up to {len(self)}, give more single-token labels with "
                f"MenuAgent(..., labels=[...]), or cap the environment's menu (gym.make(..., max_menu=...))")
        return self.read[:size], torch.tensor(self.token_ids[:size], dtype=torch.long)


def single_token_id(tokenizer, context: str, label: str) -> int | None:
    """The id of ``label`` if it is exactly one token right after ``context``, else None.

    Checked on the joint string: ``tok(context + label) == tok(context) + [id]``.
    """
    base = tokenizer(context, add_special_tokens=False)["input_ids"]
    full = tokenizer(context + label, add_special_tokens=False)["input_ids"]
    if len(full) != len(base) + 1 or full[: len(base)] != base:
        return None
    return int(full[-1])


def compile_alphabet(tokenizer, cue: str, candidates: Sequence[str] = DEFAULT_LABELS) -> LabelAlphabet:
    """Keep the candidates that are one distinct token after ``cue``.

    Each candidate ``c`` is tried as ``" " + c`` first (what follows ``"Answer:"`` in
    text), then bare ``c``; the first form that is a single token is used.
    """
    shown, read, ids = [], [], []
    seen: set[int] = set()
    for c in candidates:
        c = str(c).strip()
        if not c:
            raise ConfigError("labels must be non-empty strings, e.g. ['A', 'B', 'C']")
        for form in (f" {c}", c):
            tid = single_token_id(tokenizer, cue, form)
            if tid is not None and tid not in seen:
                seen.add(tid)
                shown.append(c)
                read.append(form)
                ids.append(tid)
                break
    if not ids:
        raise ConfigError(f"none of the labels {list(candidates)[:8]}... is a single token after {cue!r}; "
                          "pass labels=[...] that the tokenizer encodes as one token each")
    return LabelAlphabet(cue=cue, shown=tuple(shown), read=tuple(read), token_ids=tuple(ids))
