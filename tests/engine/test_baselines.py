"""The one baseline store: JSON files named by their key, read back as written; a file it
cannot read is no entry (the baseline is computed again). The files of runs written before
it are read by ``tests/test_pre_move_runs.py``."""

from __future__ import annotations

from deciplane.engine.baselines import BaselineStore


def test_store_and_load(tmp_path):
    store = BaselineStore(tmp_path / "new" / "baselines")
    assert store.load("k") is None
    store.store("k", {"answers": {"t1": "4"}, "budget": {"samples": 1}})
    assert (tmp_path / "new" / "baselines" / "k.json").is_file()
    assert store.load("k") == {"answers": {"t1": "4"}, "budget": {"samples": 1}}


def test_a_torn_or_foreign_file_is_no_entry(tmp_path):
    (tmp_path / "torn.json").write_text('{"answers": {')
    (tmp_path / "list.json").write_text("[1, 2]")
    store = BaselineStore(tmp_path)
    assert store.load("torn") is None and store.load("list") is None

