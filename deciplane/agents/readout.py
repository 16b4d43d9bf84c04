"""The ``items`` readout of the menu agent: each menu entry's logit from its own tokens.

RLiD's ``labels`` readout scores an entry by the next-token logit of the letter printed
beside it. Small models cannot learn which letter sits beside the right action
(multiple-choice symbol binding: a letter head on frozen SmolLM2-135M features stayed near
chance on held-out menus, a pointer head on the entries' own token states reached 50-87%,
docs/methods.md §1 "Readouts"). The ``items`` readout (ours) keeps one forward pass per
decision and a softmax over the legal menu only; an entry's logit is a learned low-rank
bilinear score between the hidden state at the decision position (the prompt's last
token) and the mean hidden state of the entry's own tokens, both read at one layer of the
same forward pass::

    z_k = <Q rms(h_dec), K rms(mean_{t in entry k} h_t)> / sqrt(r)

``rms`` is a parameter-free RMS normalisation (the residual stream's scale differs by
layer). ``K`` starts at zero, so an untrained head gives the uniform policy over the menu.

Pure pieces: :func:`entry_char_spans` (where each action sits in the prompt text),
:func:`token_spans` (characters -> token ranges), :func:`pool_spans`.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from deciplane.errors import ConfigError

READOUTS = ("labels", "items")
DEFAULT_ITEM_RANK = 16
ITEM_HEAD_NAME = "deciplane_item_head"
"""Attribute of the policy's model holding the head, so its parameters are the model's
(optimizer, checkpoints and ``deciplane evaluate`` need nothing extra)."""


class ItemHead(nn.Module):
    """Rank-``rank`` bilinear pointer score between a decision state and entry states.

    ``layer``: which hidden states it reads: the input of decoder layer ``layer``
    (``0 < layer < L``), or ``L`` (the number of layers) for the final, normed output.
    """

    def __init__(self, hidden_size: int, layer: int, rank: int = DEFAULT_ITEM_RANK) -> None:
        super().__init__()
        if rank < 1:
            raise ConfigError(f"item readout rank must be >= 1, got {rank}")
        self.layer = int(layer)
        self.rank = int(rank)
        self.hidden_size = int(hidden_size)
        self.query = nn.Linear(hidden_size, rank, bias=False)
        self.key = nn.Linear(hidden_size, rank, bias=False)
        nn.init.zeros_(self.key.weight)   # untrained: every entry scores 0 -> uniform policy

    def forward(self, decision_state: torch.Tensor, entry_states: torch.Tensor) -> torch.Tensor:
        """``decision_state`` ``(H,)``, ``entry_states`` ``(K, H)`` -> logits ``(K,)``."""
        w = self.query.weight
        q = self.query(_rms(decision_state.to(w.dtype)))                   # (r,)
        k = self.key(_rms(entry_states.to(w.dtype)))                       # (K, r)
        return (k @ q) / math.sqrt(self.rank)                              # (K,)

    def is_constant(self) -> bool:
        """Every logit is 0 whatever the states (``K`` is all zeros, as initialised): the
        policy is uniform over the menu and needs no forward pass."""
        return not bool(self.key.weight.detach().any())

    def describe(self) -> dict[str, int]:
        return {"hidden_size": self.hidden_size, "layer": self.layer, "rank": self.rank}


def _rms(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def entry_char_spans(text: str, menu_start: int, lines: Sequence[str],
                     actions: Sequence[str]) -> list[tuple[int, int]]:
    """Character range of each action inside ``text``: the menu block starts at
    ``menu_start`` and consists of ``lines`` joined by newlines, line ``k`` ending with
    action ``k`` (``"A) go north"``). Example: text ``"x\\nA) go\\nB) eat"``,
    ``menu_start=2``, lines ``["A) go", "B) eat"]`` -> ``[(5, 7), (11, 14)]``."""
    spans, pos = [], menu_start
    for line, action in zip(lines, actions):
        if text[pos:pos + len(line)] != line or not line.endswith(action):
            raise ConfigError(f"menu line {line!r} not found where expected in the prompt; "
                              "the prompt template and the readout disagree")
        end = pos + len(line)
        spans.append((end - len(action), end))
        pos = end + 1
    return spans


def token_spans(offsets: Sequence[tuple[int, int]], char_spans: Sequence[tuple[int, int]]
                ) -> list[tuple[int, int]]:
    """Token index range ``[first, last + 1)`` of each character span: the tokens whose
    character offsets overlap it (a token straddling the span's edge counts). Example:
    offsets ``[(0,2),(2,5),(5,8)]``, span ``(3, 6)`` -> ``(1, 3)``."""
    out = []
    for a, b in char_spans:
        hit = [i for i, (s, e) in enumerate(offsets) if e > a and s < b and e > s]
        if not hit:
            raise ConfigError(f"no token covers characters {a}..{b} of the prompt")
        out.append((hit[0], hit[-1] + 1))
    return out


def pool_spans(states: torch.Tensor, spans: Sequence[tuple[int, int]]) -> torch.Tensor:
    """Mean of ``states`` ``(T, H)`` over each token range -> ``(K, H)``."""
    return torch.stack([states[s:e].mean(0) for s, e in spans])


def item_logits(head: ItemHead, states: torch.Tensor, spans: Sequence[tuple[int, int]]
                ) -> torch.Tensor:
    """Logits ``(K,)`` of one prompt's menu entries from its readout states ``(T, H)``
    (the decision position is the prompt's last token)."""
    return head(states[-1], pool_spans(states, spans))


def check_readout(readout: str) -> str:
    if readout not in READOUTS:
        raise ConfigError(f"readout must be one of {', '.join(READOUTS)}, got {readout!r}")
    return readout


__all__ = ["DEFAULT_ITEM_RANK", "ITEM_HEAD_NAME", "ItemHead", "READOUTS", "check_readout",
           "entry_char_spans", "item_logits", "pool_spans", "token_spans"]
