"""Shared fixtures of the adapter tests: small tiny-model configs."""

from __future__ import annotations

import pytest

TINY_SETTINGS = dict(votes=4, train_samples=3, max_new_tokens=6, prompts_per_step=2,
                     max_steps=2, lr=1e-2, temperature=1.5, lora_rank=4, lora_alpha=8,
                     answer_batch=8, checkpoints=1)


@pytest.fixture()
def tiny_settings():
    return dict(TINY_SETTINGS)
