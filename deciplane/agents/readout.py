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

``kind="mlp"`` (``readout_head: mlp`` in training configs) gives the readout more capacity
while the trunk stays frozen: a residual MLP on each normed state before the same score,
one for the decision state and one for the entries::

    z_k = <Q f(rms(h_dec)), K g(rms(mean h_t))> / sqrt(r),   f(x) = x + W2 gelu(W1 x + b1) + b2

``W2, b2`` start at zero (``f`` is the identity), so an untrained MLP head is the bilinear
head, uniform while ``K`` is zero. It reads the same kept states: the prompt cache and the
head-only update stay as they are.

Pure pieces: :func:`entry_char_spans` (where each action sits in the prompt text),
:func:`token_spans` (characters -> token ranges), :func:`pool_spans`.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from deciplane.errors import ConfigError

READOUTS = ("labels", "items")
HEAD_KINDS = ("bilinear", "mlp")
DEFAULT_ITEM_RANK = 16
DEFAULT_MLP_HIDDEN = 256
ITEM_HEAD_NAME = "deciplane_item_head"
"""Attribute of the policy's model holding the head, so its parameters are the model's
(optimizer, checkpoints and ``deciplane evaluate`` need nothing extra)."""


class ResidualMLP(nn.Module):
    """``x + W2 gelu(W1 x + b1) + b2`` on states ``(..., H)``; ``W2, b2`` start at zero, so
    an untrained one is the identity."""

    def __init__(self, hidden_size: int, width: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden_size, width)
        self.down = nn.Linear(width, hidden_size)
        nn.init.zeros_(self.down.weight)
        nn.init.zeros_(self.down.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.nn.functional.gelu(self.up(x)))        # (..., H)


class ItemHead(nn.Module):
    """Rank-``rank`` bilinear pointer score between a decision state and entry states.

    ``layer``: which hidden states it reads: the input of decoder layer ``layer``
    (``0 < layer < L``), or ``L`` (the number of layers) for the final, normed output.
    ``kind``: ``"bilinear"`` (the score alone) or ``"mlp"`` (a :class:`ResidualMLP` of
    width ``mlp_hidden`` on the normed decision state and one on the normed entry states
    before the score; module doc).
    """

    def __init__(self, hidden_size: int, layer: int, rank: int = DEFAULT_ITEM_RANK,
                 kind: str = "bilinear", mlp_hidden: int | None = None) -> None:
        super().__init__()
        if rank < 1:
            raise ConfigError(f"item readout rank must be >= 1, got {rank}")
        if kind not in HEAD_KINDS:
            raise ConfigError(f"item head kind must be one of {', '.join(HEAD_KINDS)}, "
                              f"got {kind!r}")
        width = DEFAULT_MLP_HIDDEN if mlp_hidden is None else int(mlp_hidden)
        if kind == "mlp" and width < 1:
            raise ConfigError(f"item head MLP width must be >= 1, got {width}")
        self.layer = int(layer)
        self.rank = int(rank)
        self.hidden_size = int(hidden_size)
        self.kind = kind
        self.mlp_hidden = width if kind == "mlp" else None
        self.query = nn.Linear(hidden_size, rank, bias=False)
        self.key = nn.Linear(hidden_size, rank, bias=False)
        nn.init.zeros_(self.key.weight)   # untrained: every entry scores 0 -> uniform policy
        if kind == "mlp":
            # drawn from the global RNG, which is then restored: the rest of a run (the
            # warm start's shuffles, ...) sees the stream a bilinear head would leave
            with torch.random.fork_rng(devices=[]):
                self.decision_mlp = ResidualMLP(hidden_size, width)
                self.entry_mlp = ResidualMLP(hidden_size, width)

    def forward(self, decision_state: torch.Tensor, entry_states: torch.Tensor) -> torch.Tensor:
        """``decision_state`` ``(H,)``, ``entry_states`` ``(K, H)`` -> logits ``(K,)``."""
        w = self.query.weight
        d = _rms(decision_state.to(w.dtype))                                # (H,)
        e = _rms(entry_states.to(w.dtype))                                  # (K, H)
        if self.kind == "mlp":
            d, e = self.decision_mlp(d), self.entry_mlp(e)                  # (H,), (K, H)
        q = self.query(d)                                                   # (r,)
        k = self.key(e)                                                     # (K, r)
        return (k @ q) / math.sqrt(self.rank)                              # (K,)

    def mlp_parameters(self) -> list[nn.Parameter]:
        """The MLPs' parameters (empty for the bilinear head)."""
        if self.kind != "mlp":
            return []
        return [*self.decision_mlp.parameters(), *self.entry_mlp.parameters()]

    def is_constant(self) -> bool:
        """Every logit is 0 whatever the states (``K`` is all zeros, as initialised; the
        MLPs feed ``K``, so they do not change that): the policy is uniform over the menu
        and needs no forward pass."""
        return not bool(self.key.weight.detach().any())

    def describe(self) -> dict[str, Any]:
        """What rebuilds it (saved beside a policy's weights, :meth:`Policy.save`)."""
        out: dict[str, Any] = {"hidden_size": self.hidden_size, "layer": self.layer,
                               "rank": self.rank, "kind": self.kind}
        if self.kind == "mlp":
            out["mlp_hidden"] = self.mlp_hidden
        return out


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


__all__ = ["DEFAULT_ITEM_RANK", "DEFAULT_MLP_HIDDEN", "HEAD_KINDS", "ITEM_HEAD_NAME", "ItemHead",
           "READOUTS", "ResidualMLP", "check_readout",
           "entry_char_spans", "item_logits", "pool_spans", "token_spans"]
