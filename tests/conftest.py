"""Shared test set-up: one thread for torch, a reusable cache home for generated data."""

from __future__ import annotations

import os
from pathlib import Path

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
