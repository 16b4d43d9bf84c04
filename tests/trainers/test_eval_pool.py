"""Evaluation shared with helper processes (``eval.workers``): the batches' scheduling, and
a pooled evaluation equal to the in-process one on real TextWorld-Express games."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
import torch

from deciplane.trainers.eval_pool import (batch_starts, load_trainable_state, pooled_batch,
                                          share_batches, trainable_state)

REPO = Path(__file__).resolve().parents[2]
needs_java = pytest.mark.skipif(shutil.which("java") is None,
                                reason="TextWorld-Express needs java (deciplane doctor)")


def test_batch_starts():
    assert batch_starts(20, 8) == [0, 8, 16]
    assert batch_starts(16, 8) == [0, 8]
    assert batch_starts(0, 8) == []
    assert (pooled_batch(8, 2), pooled_batch(8, 1), pooled_batch(2, 4)) == (2, 4, 1)
    with pytest.raises(Exception, match="batch"):
        batch_starts(5, 0)


def test_share_batches_plays_every_batch_once_on_both_runners():
    who: dict[int, str] = {}

    def runner(name, delay):
        def run(start, stop):
            time.sleep(delay)
            who[start] = name
            return list(range(start, stop))
        return run

    done = []
    out = share_batches(batch_starts(20, 4), 4, lambda: 20,
                        [runner("here", 0.01), runner("helper", 0.01)],
                        on_done=lambda s, r: done.append(s))
    assert sorted(out) == [0, 4, 8, 12, 16]
    assert [x for s in sorted(out) for x in out[s]] == list(range(20))
    assert sorted(done) == sorted(out)
    assert set(who.values()) == {"here", "helper"}     # both took batches


def test_share_batches_cuts_at_a_limit_set_while_batches_run():
    limit = {"n": 20}

    def run(start, stop):
        if start == 0:
            limit["n"] = 6      # the time plan, after the first batch was timed
        return (start, stop)

    out = share_batches(batch_starts(20, 4), 4, lambda: limit["n"], [run])
    assert out == {0: (0, 4), 4: (4, 6)}               # cut when taken; 8.. dropped


def test_share_batches_raises_a_helper_error_in_the_caller():
    def bad(start, stop):
        raise RuntimeError(f"helper failed on {start}")

    def slow(start, stop):
        time.sleep(0.01)
        return start

    with pytest.raises(RuntimeError, match="helper failed"):
        share_batches(batch_starts(40, 4), 4, lambda: 40, [slow, bad])


def test_trainable_state_round_trip():
    a, b = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    a.bias.requires_grad_(False)
    state = trainable_state(a)
    assert set(state) == {"weight"}
    load_trainable_state(b, state)
    assert torch.equal(b.weight, a.weight) and not torch.equal(b.bias, a.bias)
    with pytest.raises(Exception, match="no parameter"):
        load_trainable_state(torch.nn.Linear(3, 2, bias=False), {"bias": a.bias})


@needs_java
def test_pooled_evaluation_equals_the_in_process_one():
    """The demo's config on deciplane/tiny: the same episodes, wins and lengths with one
    helper process as in this process alone, after the weights changed too (the helper
    plays the weights of the moment)."""
    from deciplane.trainers.config import load_config
    from deciplane.trainers.run import build_algorithm, build_policy

    torch.set_num_threads(1)
    overrides = ["model.name=deciplane/tiny", "model.threads=1", "readout_layer=null",
                 "eval.episodes=12", "env.max_episode_steps=4", "eval.workers=1"]
    local = build_algorithm(cfg := load_config(REPO / "configs" / "quickstart_twx.yaml",
                                               overrides), build_policy(cfg))
    pooled_cfg = load_config(REPO / "configs" / "quickstart_twx.yaml",
                             overrides + ["eval.workers=2"])
    pooled = build_algorithm(pooled_cfg, build_policy(pooled_cfg))
    try:
        assert pooled.suite.pool is not None and local.suite.pool is None
        for round_ in range(2):
            for algo in (local, pooled):      # the same non-trivial head in both
                gen = torch.Generator().manual_seed(round_)
                with torch.no_grad():
                    for p in algo.policy.item_head.parameters():
                        p.copy_(torch.randn(p.shape, generator=gen))
            a, b = local.evaluate("test"), pooled.evaluate("test")
            for k in ("episode_seeds", "episode_wins", "episode_steps", "won", "env_steps",
                      "split_fingerprint"):
                assert a[k] == b[k], (round_, k)
            assert a["mean_return"] == pytest.approx(b["mean_return"])
            assert a["episodes"] == 12
        assert pooled.suite.pool.batches_played >= 2     # the helper took batches
        assert torch.get_num_threads() == 1
    finally:
        local.close()
        pooled.close()
