"""Reuse per row: a bounded cache of token blocks computed before.

A prompt is computed in fixed blocks of ``block_tokens`` tokens counted from its first
token, one forward per block over the keys/values of the blocks before it. A block's
result (its keys/values at every layer the forward runs, and the hidden states the agent
reads) therefore depends only on the tokens up to its end: a block met again — the next
step of the same episode shares the task and the room, another episode of the group starts
from the same state, another agent's evaluation of the same game replays it — is read
instead of computed. Because the block boundaries never depend on what the cache holds,
and a row computed in one forward with other rows (same block index: equal pasts, equal
lengths, no padding) gets the bits it gets alone, the results are **bitwise the same**
whatever the cache held: a cached run, an uncached run and a resumed run agree exactly.
The agent's side is :meth:`deciplane.agents.menu.MenuAgent._block_rows`.

What a block is keyed by: the digest of its tokens chained to the digest of the block
before it (so a key names the whole prefix), and a context naming everything else the
result depends on (the module, the version counter of every parameter the forward reads —
an optimizer step or a weight copy changes it —, how deep the forward runs, which states
are kept, the torch thread count, the dtype).

Memory: each entry holds its block's keys/values (``2 x layers x kv_heads x head_dim``
numbers per token) and the kept states (``hidden`` numbers per token and kept layer); the
cache evicts least-recently-used blocks once the total passes ``max_bytes`` (default
2 GiB). An evicted block in the middle of a chain is recomputed when next needed (bitwise
the same), and the blocks after it are read again.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from deciplane.errors import ConfigError

DEFAULT_BLOCK_TOKENS = 32
"""Tokens per block: small enough that a changed line re-computes little, large enough
that a forward of one block keeps the matrix units busy (measured in
``benchmarks/decision_cost.py``)."""
DEFAULT_MAX_BYTES = 2 * 2 ** 30


@dataclass
class Block:
    """One computed block: per-layer ``(keys, values)`` of its tokens ``(1, kv_heads, b,
    head_dim)`` and the kept states ``(b, H)`` by name (``readout``, ``boundary``, and
    ``last`` — the final normed state at the block's last token, ``(1, H)``, for a
    next-token readout)."""

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    states: dict[str, torch.Tensor]
    nbytes: int = 0

    def __post_init__(self) -> None:
        self.nbytes = (sum(k.nbytes + v.nbytes for k, v in self.kv)
                       + sum(s.nbytes for s in self.states.values()))


@dataclass
class CacheStats:
    """Counters since the cache was made (never reset by eviction)."""

    rows: int = 0
    tokens_reused: int = 0
    tokens_computed: int = 0
    blocks_reused: int = 0
    blocks_computed: int = 0
    evictions: int = 0
    forwards: int = 0

    def reuse_share(self) -> float:
        total = self.tokens_reused + self.tokens_computed
        return self.tokens_reused / total if total else 0.0

    def to_dict(self) -> dict[str, float]:
        return {"rows": self.rows, "tokens_reused": self.tokens_reused, "tokens_computed": self.tokens_computed,
                "blocks_reused": self.blocks_reused, "blocks_computed": self.blocks_computed,
                "evictions": self.evictions, "forwards": self.forwards,
                "reuse_share": round(self.reuse_share(), 4)}


def block_bounds(n_tokens: int, block_tokens: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of each block of a prompt of ``n_tokens`` tokens, counted from its
    first token (the last block may be shorter). Example: 70 tokens, 32 -> ``[(0, 32),
    (32, 64), (64, 70)]``."""
    if block_tokens < 1:
        raise ConfigError(f"block_tokens must be >= 1, got {block_tokens}")
    return [(s, min(s + block_tokens, n_tokens)) for s in range(0, n_tokens, block_tokens)]


def chain_keys(ids: Sequence[int] | torch.Tensor, block_tokens: int, context: bytes = b""
               ) -> list[bytes]:
    """One key per block: the digest of the block's tokens chained to the previous block's
    key (the first chained to ``context``), so that equal keys mean equal prefixes."""
    arr = np.asarray(ids.tolist() if torch.is_tensor(ids) else list(ids), dtype=np.int64)
    keys, parent = [], hashlib.blake2b(context, digest_size=16).digest()
    for s, e in block_bounds(len(arr), block_tokens):
        parent = hashlib.blake2b(parent + arr[s:e].tobytes(), digest_size=16).digest()
        keys.append(parent)
    return keys


class BlockCache:
    """Least-recently-used store of :class:`Block` by key, bounded by ``max_bytes``
    (``0``: stores nothing, every block is computed: the uncached path)."""

    def __init__(self, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                 max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if block_tokens < 1:
            raise ConfigError(f"block_tokens must be >= 1, got {block_tokens}")
        if max_bytes < 0:
            raise ConfigError(f"max_bytes must be >= 0, got {max_bytes}")
        self.block_tokens = int(block_tokens)
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self.stats = CacheStats()
        self._blocks: OrderedDict[bytes, Block] = OrderedDict()

    def __len__(self) -> int:
        return len(self._blocks)

    def get(self, key: bytes) -> Block | None:
        block = self._blocks.get(key)
        if block is not None:
            self._blocks.move_to_end(key)
        return block

    def put(self, key: bytes, block: Block) -> None:
        if block.nbytes > self.max_bytes:
            return
        old = self._blocks.pop(key, None)
        if old is not None:
            self.nbytes -= old.nbytes
        self._blocks[key] = block
        self.nbytes += block.nbytes
        while self.nbytes > self.max_bytes:
            _, gone = self._blocks.popitem(last=False)
            self.nbytes -= gone.nbytes
            self.stats.evictions += 1

    def clear(self) -> None:
        self._blocks.clear()
        self.nbytes = 0

    def describe(self) -> dict[str, float]:
        return {"block_tokens": self.block_tokens, "max_bytes": self.max_bytes,
                "bytes": self.nbytes, "blocks": len(self), **self.stats.to_dict()}


__all__ = ["Block", "BlockCache", "CacheStats", "DEFAULT_BLOCK_TOKENS", "DEFAULT_MAX_BYTES",
           "block_bounds", "chain_keys"]
