"""Shared test set-up: one thread for torch (at the start of every test), a reusable cache home for generated data, and
the small tiny-model settings of the adapter tests (tests/adapt/ and tests/methods/)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Generated games and converted models are cached across test runs (and shared by all
# tests of a run); CI points DECIPLANE_HOME at a fresh folder.
os.environ.setdefault("DECIPLANE_HOME", str(Path(__file__).resolve().parent.parent
                                            / ".pytest_cache" / "deciplane_home"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

try:
    import torch

    torch.set_num_threads(1)
except ImportError:  # pragma: no cover
    pass

TINY_ADAPT_SETTINGS = dict(votes=4, train_samples=3, max_new_tokens=6, prompts_per_step=2,
                           max_steps=2, lr=1e-2, temperature=1.5, lora_rank=4, lora_alpha=8,
                           answer_batch=8, checkpoints=1)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts on one torch thread: a run earlier in this process may have left
    its ``model.threads`` (default 2) set, and float sums depend on the thread count (the
    order of the test folders must not change a result)."""
    if "torch" in globals():
        torch.set_num_threads(1)


@pytest.fixture()
def tiny_settings():
    """Settings of a tiny-model adapter run (an AdaptConfig's keyword arguments)."""
    return dict(TINY_ADAPT_SETTINGS)
