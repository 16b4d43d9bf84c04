"""The method registry (deciplane.methods): the built-ins, plug-ins through the
``deciplane.methods`` entry points (and what happens to a broken one), the 0.2 tables as
views of it, and the one rule for ``lr``, checked before any model loads."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from deciplane import methods
from deciplane.adapt.base import BaseAdapter
from deciplane.errors import ConfigError
from deciplane.methods import MethodSpec, get, load_config_class, load_greedy, load_target, names
from deciplane.options import Range
from deciplane.trainers.algorithm import Algorithm
from deciplane.trainers.config import TrainConfig

TRAIN = ["rlid_ppo", "text_ppo", "math_grpo"]
ADAPT = ["ttrl", "ttpo", "tasco", "probe-erpo"]


def test_builtin_methods_load_their_classes():
    assert names("train") == TRAIN and names("adapt") == ADAPT
    for name in TRAIN:
        spec = get(name, "train")
        config = load_config_class(spec)
        assert issubclass(load_target(spec), Algorithm) and issubclass(config, TrainConfig)
        assert config().algorithm == name          # `algorithm: NAME` selects this class
        assert spec.evaluates_on in ("env", "benchmark") and callable(load_greedy(spec))
    for name in ADAPT:
        spec = get(name, "adapt")
        assert issubclass(load_target(spec), BaseAdapter)
        assert load_target(spec).Config is load_config_class(spec)
    assert all(not s.plugin and s.summary and s.ours for s in methods.available().values())


def test_unknown_or_wrong_kind_lists_the_choices():
    with pytest.raises(ConfigError, match="choose one of rlid_ppo, text_ppo, math_grpo, ttrl"):
        get("ppo")
    with pytest.raises(ConfigError, match=r"training method.*choose one of rlid_ppo, "
                                          r"text_ppo, math_grpo \("):
        get("ttrl", "train")


def test_old_tables_are_read_only_views_of_the_registry():
    from deciplane.adapt.runner import ADAPTERS
    from deciplane.methods.ttrl import TTRL
    from deciplane.trainers import ALGORITHMS as LAZY_ALGORITHMS
    from deciplane.trainers.config import CONFIGS
    from deciplane.methods.rlid_ppo import RLiDPPO, RLiDPPOConfig
    from deciplane.trainers.run import ALGORITHMS

    assert list(ALGORITHMS) == list(CONFIGS) == TRAIN and list(ADAPTERS) == ADAPT
    assert ALGORITHMS["rlid_ppo"] is RLiDPPO and LAZY_ALGORITHMS["rlid_ppo"] is RLiDPPO
    assert CONFIGS["rlid_ppo"] is RLiDPPOConfig and ADAPTERS["ttrl"] is TTRL
    assert "ttrl" not in ALGORITHMS and len(ADAPTERS) == 4
    with pytest.raises(TypeError):
        ALGORITHMS["mine"] = RLiDPPO     # type: ignore[index]


def test_a_spec_is_checked_when_written():
    with pytest.raises(ConfigError, match="target = 'pkg.Class' must be 'module:attr'"):
        MethodSpec(name="m", kind="train", target="pkg.Class", config="pkg:C", summary="s")
    with pytest.raises(ConfigError, match="kind = 'tune'"):
        MethodSpec(name="m", kind="tune", target="pkg:A", config="pkg:C", summary="s")
    with pytest.raises(ConfigError, match="leave evaluates_on None"):
        MethodSpec(name="m", kind="adapt", target="pkg:A", config="pkg:C", summary="s",
                   evaluates_on="env", greedy="pkg:g")


def test_methods_command_lists_every_method():
    from deciplane.cli import app

    res = CliRunner().invoke(app, ["methods"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    for name in TRAIN + ADAPT:
        kind = "train" if name in TRAIN else "adapt"
        assert any(line.startswith(f"{name}  ({kind})  ") for line in lines), name
    assert "    paper: TTRL: Test-Time Reinforcement Learning" in lines
    assert sum(line.startswith("    ours: ") for line in lines) == 7


# ---- plug-ins, read in this process from a private site folder ------------------------

PLUGINS = {
    # distribution -> (entry point name, module source)
    "my-tta": ("my-ttrl", 'SPEC = MethodSpec(name="my-ttrl", kind="adapt", '
                          'target="deciplane.methods.ttrl:TTRL", '
                          'config="deciplane.methods.ttrl:TTRLConfig", '
                          'summary="TTRL under a name of its own")'),
    "lazy-method": ("lazy_pg", 'SPEC = MethodSpec(name="lazy_pg", kind="train", '
                               'target="not_installed_impl:PG", '
                               'config="not_installed_impl:PGConfig", summary="lazy")'),
    "broken-method": ("broken", "import no_such_package_anywhere\nSPEC = None"),
    "clashing-method": ("ttrl", 'SPEC = MethodSpec(name="ttrl", kind="adapt", '
                                'target="deciplane.methods.ttpo:TTPO", '
                                'config="deciplane.methods.ttpo:TTPOConfig", summary="x")'),
    "not-a-spec": ("notspec", 'SPEC = "notspec"'),
}


@pytest.fixture
def plugin_site(tmp_path, monkeypatch) -> Path:
    """The plug-ins above laid out as pip installs them (a module and a .dist-info with
    entry_points.txt each), on sys.path; the registry is re-read before and after."""
    for dist, (ep_name, source) in PLUGINS.items():
        module = dist.replace("-", "_")
        (tmp_path / f"{module}.py").write_text(
            "from deciplane.methods import MethodSpec\n" + source + "\n")
        info = tmp_path / f"{module}-0.1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
        (info / "entry_points.txt").write_text(f"[deciplane.methods]\n{ep_name} = {module}:SPEC\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    methods.available.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    methods.available.cache_clear()


def test_plugins_join_the_registry_and_bad_ones_are_left_out_with_a_warning(plugin_site):
    with pytest.warns(RuntimeWarning) as caught:
        found = methods.available()
    messages = "\n".join(str(w.message) for w in caught)
    assert "'broken' of broken-method failed to load" in messages
    assert "No module named 'no_such_package_anywhere'" in messages
    assert "'ttrl' of clashing-method is left out: the name is taken by deciplane's" in messages
    assert "'notspec' of not-a-spec is left out" in messages and "not a deciplane" in messages
    assert found["my-ttrl"].distribution == "my-tta" and found["my-ttrl"].plugin
    assert found["ttrl"].target == "deciplane.methods.ttrl:TTRL"        # the built-in stays
    assert names("adapt") == ADAPT + ["my-ttrl"] and names("train") == TRAIN + ["lazy_pg"]


def test_a_plugin_loads_its_classes_only_when_used(plugin_site):
    from deciplane.cli.train import train_help

    with pytest.warns(RuntimeWarning):
        assert "rlid_ppo, text_ppo, math_grpo, lazy_pg;" in train_help()
    with pytest.raises(ConfigError, match="method 'lazy_pg' \\(from lazy-method\\): its config "
                                          "class 'not_installed_impl:PGConfig' cannot be loaded"):
        load_config_class(get("lazy_pg"))


def test_a_plugin_adapter_shows_in_the_adapt_commands(plugin_site):
    from deciplane.cli.adapt import register

    app = typer.Typer()
    app.command("noop")(lambda: None)        # a group, so that `adapt` is a sub-command
    with pytest.warns(RuntimeWarning):
        register(app)
    runner = CliRunner()
    res = runner.invoke(app, ["adapt", "--help"])
    assert res.exit_code == 0 and "my-ttrl" in res.output
    assert "TTRL under a name of its own (plug-in from my-tta)" in res.output
    res = runner.invoke(app, ["adapt", "options", "my-ttrl"])
    assert res.exit_code == 0 and "votes = 8" in res.output, res.output
    res = runner.invoke(app, ["adapt", "options", "nope"])
    assert res.exit_code == 2 and "probe-erpo, my-ttrl" in res.output


# ---- one rule for lr ---------------------------------------------------------------------


def _lr_fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field]]:
    """Every learning-rate field of a config class, nested sections included."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            out += _lr_fields(hints[f.name], f"{prefix}{f.name}.")
        elif f.name == "lr" or f.name.endswith("_lr"):
            out.append((prefix + f.name, f))
    return out


@pytest.mark.parametrize("name", TRAIN + ADAPT)
def test_every_learning_rate_is_declared_with_the_one_rule(name):
    fields = _lr_fields(load_config_class(get(name)))
    assert fields, f"{name} has no learning rate"
    for key, f in fields:
        assert f.metadata.get("range") == Range(gt=0), f"{name}: {key} is not learning_rate()"


TRAIN_LR = [("rlid_ppo", "optim", "lr"), ("text_ppo", "optim", "lr"),
            ("math_grpo", "optim", "lr"), ("rlid_ppo", "bc", "lr"), ("text_ppo", "bc", "lr"),
            ("rlid_ppo", None, "value_lr")]


@pytest.mark.parametrize("value", [0, -1e-4])
@pytest.mark.parametrize("name,section,key", TRAIN_LR)
def test_train_lr_not_above_zero_fails_before_a_model_loads(tmp_path, name, section, key,
                                                            value):
    """A model that does not exist: the lr error comes first, so no model was loaded."""
    import yaml

    from deciplane.trainers.run import run_training

    raw = {"algorithm": name, "model": {"name": "no-such/model"}}
    raw.update({section: {key: value}} if section else {key: value})
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw))
    dotted = f"{section}.{key}" if section else key
    with pytest.raises(ConfigError, match=rf"^{dotted} = {float(value)} must be > 0"):
        run_training(config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", [0, -1e-4])
@pytest.mark.parametrize("name", ADAPT)
def test_adapt_lr_not_above_zero_fails_before_a_model_loads(tmp_path, name, value):
    from deciplane.adapt.runner import run_adaptation

    with pytest.raises(ConfigError, match=rf"^\w+Config\.lr = {float(value)} must be > 0$"):
        run_adaptation(name, model="no-such/model", overrides=[f"lr={value}"],
                       run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_grpo_update_takes_its_callers_lr():
    from deciplane.engine.grpo import GRPOConfig, GRPOUpdate

    with pytest.raises(ConfigError, match="lr=config.lr"):
        GRPOUpdate(None, GRPOConfig())
