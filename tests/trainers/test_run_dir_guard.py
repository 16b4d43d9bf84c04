"""A fresh run never appends to an existing run's folder (its curves would mix)."""

import pytest

from deciplane.errors import CheckpointError
from deciplane.trainers import load_config, run_training


def test_fresh_run_refuses_a_used_run_dir(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"iteration": 1}\n')
    cfg = load_config("configs/quickstart.yaml", ["model.name=deciplane/tiny",
                                                  "model.finetune=full", "iterations=1"])
    with pytest.raises(CheckpointError, match="--resume"):
        run_training(cfg, run_dir=tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"iteration": 1}\n'
