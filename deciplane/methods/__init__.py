"""Every method deciplane runs, in one registry open to plug-ins.

A method is one module (its algorithm or adapter class and its config class) plus one
:class:`MethodSpec` naming them as ``"module:attr"`` strings, so that reading the registry
imports nothing heavy: the classes load when a run needs them (:func:`load_target`,
:func:`load_config_class`). ``kind`` says how it runs:

* ``train`` — trained on an environment suite or a dataset by ``deciplane train CONFIG``
  (``algorithm: NAME`` in the YAML file); the target is a
  :class:`~deciplane.trainers.algorithm.Algorithm`, the config a
  :class:`~deciplane.trainers.config.TrainConfig`;
* ``adapt`` — test-time adaptation on unlabeled tasks, scored afterwards by the held-out
  scorer, by ``deciplane adapt NAME``; the target is a
  :class:`~deciplane.adapt.base.BaseAdapter`, the config an
  :class:`~deciplane.adapt.base.AdaptConfig`.

The built-in methods are the modules of this package, one per method:
:mod:`~deciplane.methods.rlid_ppo`, :mod:`~deciplane.methods.text_ppo`,
:mod:`~deciplane.methods.math_grpo` (train), :mod:`~deciplane.methods.ttrl`,
:mod:`~deciplane.methods.ttpo`, :mod:`~deciplane.methods.tasco`,
:mod:`~deciplane.methods.probe_erpo` (adapt); :data:`BUILTIN` lists them. Adding one is its
module here plus one entry there. Another package adds one through the entry-point group ``deciplane.methods``
(name = the method's name, object = its :class:`MethodSpec`)::

    [project.entry-points."deciplane.methods"]
    toy_reinforce = "toy_method:SPEC"

``deciplane methods`` lists them all; ``deciplane train --help-config`` and ``deciplane
adapt --help`` / ``deciplane adapt options NAME`` read their options from here.

The tables of 0.2 (``deciplane.trainers.run.ALGORITHMS``,
``deciplane.trainers.config.CONFIGS``, ``deciplane.adapt.runner.ADAPTERS``) stay
importable as read-only views of this registry (:class:`MethodTable`); new code calls
:func:`get` and :func:`load_target`.

This module (the registry) imports only the standard library and :mod:`deciplane.errors`:
``trainers/`` and ``adapt/``, below the methods, import it and never a method's module
(``tests/test_layering.py``).
"""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from importlib import metadata
from typing import Any, Literal

from deciplane.errors import ConfigError

ENTRY_POINT_GROUP = "deciplane.methods"
BUILTIN_DISTRIBUTION = "deciplane"
KINDS = ("train", "adapt")


@dataclass(frozen=True)
class MethodSpec:
    """One method: what it is, where its classes are, and what evaluation needs."""

    name: str
    """What users type: ``algorithm: NAME`` (train) or ``deciplane adapt NAME`` (adapt)."""
    kind: Literal["train", "adapt"]
    """``train``: ``deciplane train``; ``adapt``: ``deciplane adapt``."""
    target: str
    """``"package.module:Class"`` of the Algorithm (train) or adapter (adapt)."""
    config: str
    """``"package.module:ConfigClass"``: a TrainConfig (train) or AdaptConfig (adapt) dataclass."""
    summary: str
    """One line: what the method does (the help text of its command)."""
    paper: str = ""
    """The paper(s) it implements; empty for a method of ours."""
    ours: str = ""
    """One line: what in it is ours rather than the paper's."""
    evaluates_on: Literal["env", "benchmark"] | None = None
    """Train methods: what ``deciplane evaluate RUN_DIR`` scores a checkpoint on: ``env``
    (held-out episodes of the run's environment; the config has ``env``) or
    ``benchmark`` (greedy answers to a benchmark split; the config has ``benchmark`` and
    ``eval_max_new_tokens``); None: not scored after training."""
    greedy: str = ""
    """With ``evaluates_on``: ``"module:function"`` of the held-out evaluation's agent:
    ``env``: ``f(config, policy)`` returning the greedy MenuAgent or TextAgent;
    ``benchmark``: ``f(policy, problems, max_new_tokens)`` returning the answers."""
    distribution: str = BUILTIN_DISTRIBUTION
    """The installed distribution that provides it (set by :func:`available`)."""

    def __post_init__(self) -> None:
        where = f"method {self.name!r}"
        if self.kind not in KINDS:
            raise ConfigError(f"{where}: kind = {self.kind!r}; choose one of {', '.join(KINDS)}")
        for field_name in ("target", "config") + (("greedy",) if self.evaluates_on else ()):
            value = getattr(self, field_name)
            if value.count(":") != 1 or not all(value.split(":")):
                raise ConfigError(f"{where}: {field_name} = {value!r} must be 'module:attr'")
        if self.evaluates_on not in (None, "env", "benchmark"):
            raise ConfigError(f"{where}: evaluates_on = {self.evaluates_on!r}; choose env, "
                              "benchmark or None")
        if self.kind == "adapt" and self.name == "options":
            raise ConfigError(f"{where}: `deciplane adapt options` lists options; choose "
                              "another name")
        if self.kind == "adapt" and self.evaluates_on is not None:
            raise ConfigError(f"{where}: an adapt method is scored by its own run; leave "
                              "evaluates_on None")

    @property
    def plugin(self) -> bool:
        return self.distribution != BUILTIN_DISTRIBUTION


_HERE = "deciplane.methods"

BUILTIN: tuple[MethodSpec, ...] = (
    MethodSpec(
        name="rlid_ppo", kind="train",
        target=f"{_HERE}.rlid_ppo:RLiDPPO", config=f"{_HERE}.rlid_ppo:RLiDPPOConfig",
        summary="PPO on the menu agent's decisions (RLiD), optionally + distillation "
                "combined by CORD and a behaviour-cloning warm start (docs/methods.md §1, §3)",
        paper="Reinforcement Learning in the Decision Plane for Language Agents and LLMs "
              "(RLiD); CORD: Conflict-Aware Optimization for Joint RL and Distillation in "
              "Agents",
        ours="the item-head readout (readout: items), the observation views, the prompt "
             "cache and frozen-trunk updates; the losses are the papers' (exact)",
        evaluates_on="env", greedy=f"{_HERE}.rlid_ppo:greedy_agent"),
    MethodSpec(
        name="text_ppo", kind="train",
        target=f"{_HERE}.text_ppo:TextPPO", config=f"{_HERE}.text_ppo:TextPPOConfig",
        summary="token-level PPO for the free-text agent, optionally with TLM-DRE turn "
                "weights (tlm_dre.enabled; docs/methods.md §2, §4)",
        paper="PPO / GRPO-family advantages; TLM-DRE: Turn-level Multiscale Density Ratio "
              "Estimation for LLM Agents",
        ours="TLM-DRE is paper-inspired: its exact form is not public, its formulas' "
             "details and every parameter are ours",
        evaluates_on="env", greedy=f"{_HERE}.text_ppo:greedy_agent"),
    MethodSpec(
        name="math_grpo", kind="train",
        target=f"{_HERE}.math_grpo:MathGRPO", config=f"{_HERE}.math_grpo:MathGRPOConfig",
        summary="GRPO-family training on single-turn verifiable tasks (deciplane/Math-v0; "
                "docs/methods.md §4)",
        paper="GRPO (DeepSeekMath), with the DAPO clip-higher and token mean, Dr. GRPO and "
              "GSPO variants",
        ours="nothing in the method (exact); the held-out scorer keeps the gold out of the "
             "run",
        evaluates_on="benchmark", greedy=f"{_HERE}.math_grpo:greedy_answers"),
    MethodSpec(
        name="ttrl", kind="adapt",
        target=f"{_HERE}.ttrl:TTRL", config=f"{_HERE}.ttrl:TTRLConfig",
        summary="test-time RL with majority-vote rewards, then held-out scoring "
                "(docs/methods.md §5.1)",
        paper="TTRL: Test-Time Reinforcement Learning",
        ours="nothing in the method (exact, paper and its code); its reward path never "
             "sees gold, not even for logging"),
    MethodSpec(
        name="ttpo", kind="adapt",
        target=f"{_HERE}.ttpo:TTPO", config=f"{_HERE}.ttpo:TTPOConfig",
        summary="agree-branch self-distillation + disagree-branch RL, then held-out "
                "scoring (docs/methods.md §5.2)",
        paper="TTPO: test-time policy optimisation (agree-branch on-policy "
              "self-distillation, disagree-branch RL on confident errors)",
        ours="the percentile and normalisation scope, and the defaults lam 10 and "
             "support_top_p 0.9 (preset=paper gives the paper's)"),
    MethodSpec(
        name="tasco", kind="adapt",
        target=f"{_HERE}.tasco:TASCO", config=f"{_HERE}.tasco:TASCOConfig",
        summary="prefix-only adaptation of a frozen model (entropy + mu * instability), "
                "then held-out scoring (docs/tasco.md)",
        paper="TASCO (test-time prefix adaptation by confidence and stability; the paper's "
              "abstract)",
        ours="paper-inspired: every default value, the prefix initialisation and the SAM "
             "direction are ours"),
    MethodSpec(
        name="probe-erpo", kind="adapt",
        target=f"{_HERE}.probe_erpo:ProbeERPO", config=f"{_HERE}.probe_erpo:ProbeERPOConfig",
        summary="test-time RL for code (easy-funcs, humaneval): negative updates for low "
                "probe-consensus programs, then hidden-test scoring (docs/code.md)",
        paper="Entropy-Regularized Rank-Masked Policy Optimization for TTRL in code "
              "generation",
        ours="paper-inspired: the parameter values, invalid candidates at consensus 0, "
             "probes made once per task, the per-micro-batch entropy ceiling"),
)
"""The built-in methods, in the order ``deciplane methods`` lists them."""


@functools.lru_cache(maxsize=None)
def available() -> dict[str, MethodSpec]:
    """Every method by name: the built-ins, then the plug-ins of the ``deciplane.methods``
    entry-point group. A plug-in that fails to load, is not a :class:`MethodSpec`, is
    registered under another name than its own, or takes a name already used is left out
    with a warning naming its distribution (a broken plug-in must not stop the others)."""
    methods = {spec.name: spec for spec in BUILTIN}
    for ep in _entry_points():
        dist = _distribution(ep)
        spec = _plugin_spec(ep, dist)
        if spec is None:
            continue
        if spec.name in methods:
            _warn(f"method {spec.name!r} of {dist} is left out: the name is taken by "
                  f"{methods[spec.name].distribution}'s; rename it")
            continue
        methods[spec.name] = spec
    return methods


def _entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda ep: ep.name)


def _distribution(ep: metadata.EntryPoint) -> str:
    """The name of the entry point's distribution (``an unknown distribution`` when its
    metadata does not say)."""
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "an unknown distribution"


def _plugin_spec(ep: metadata.EntryPoint, dist: str) -> MethodSpec | None:
    """The entry point's MethodSpec stamped with its distribution, or None (warned)."""
    try:
        spec = ep.load()
    except Exception as e:  # noqa: BLE001 - any import error of a third-party package
        _warn(f"method plug-in {ep.name!r} of {dist} failed to load ({ep.value}: "
              f"{type(e).__name__}: {e}); it is left out")
        return None
    if not isinstance(spec, MethodSpec):
        _warn(f"method plug-in {ep.name!r} of {dist} is left out: {ep.value} is a "
              f"{type(spec).__name__}, not a deciplane.methods.MethodSpec")
        return None
    if spec.name != ep.name:
        _warn(f"method plug-in {ep.name!r} of {dist} is left out: its MethodSpec is named "
              f"{spec.name!r}; the entry point's name must be the method's")
        return None
    return replace(spec, distribution=dist)


def _warn(message: str) -> None:
    warnings.warn(message, RuntimeWarning, stacklevel=3)


def names(kind: str | None = None) -> list[str]:
    """The names of the methods of ``kind`` (all with None), in registry order."""
    return [n for n, s in available().items() if kind in (None, s.kind)]


_KIND_WORDS = {"train": "training method (`algorithm:` of a `deciplane train` config)",
               "adapt": "test-time adaptation method", None: "method"}


def get(name: str, kind: str | None = None) -> MethodSpec:
    """The method ``name`` (of ``kind``, if given); a ConfigError listing the choices
    otherwise."""
    spec = available().get(name)
    if spec is None or kind not in (None, spec.kind):
        raise ConfigError(f"{name!r} is not a known {_KIND_WORDS[kind]}; choose one of "
                          f"{', '.join(names(kind))} (`deciplane methods` lists them)")
    return spec


def _load(spec: MethodSpec, ref: str, what: str) -> Any:
    module, _, attr = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"method {spec.name!r} (from {spec.distribution}): its {what} "
                          f"{ref!r} cannot be loaded ({type(e).__name__}: {e})") from e


def load_target(spec: MethodSpec) -> Any:
    """The method's Algorithm (train) or adapter (adapt) class."""
    return _load(spec, spec.target, "target")


def load_config_class(spec: MethodSpec) -> type:
    """The method's config dataclass."""
    return _load(spec, spec.config, "config class")


def load_greedy(spec: MethodSpec) -> Callable[..., Any]:
    """The function that builds a train method's held-out evaluation (:attr:`MethodSpec.greedy`)."""
    if not spec.greedy:
        raise ConfigError(f"method {spec.name!r} (from {spec.distribution}) names no "
                          "evaluation (evaluates_on), so `deciplane evaluate RUN_DIR` cannot "
                          "score its runs")
    return _load(spec, spec.greedy, "evaluation function")


class MethodTable(Mapping):
    """A read-only ``name -> class`` view of the registry's methods of one kind (what the
    0.2 tables ``ALGORITHMS``, ``CONFIGS`` and ``ADAPTERS`` were); classes load on access."""

    def __init__(self, kind: str, load: Callable[[MethodSpec], Any]) -> None:
        self.kind, self.load = kind, load

    def __getitem__(self, name: str) -> Any:
        spec = available().get(name)
        if spec is None or spec.kind != self.kind:
            raise KeyError(name)
        return self.load(spec)

    def __iter__(self) -> Iterator[str]:
        return iter(names(self.kind))

    def __len__(self) -> int:
        return len(names(self.kind))

    def __repr__(self) -> str:
        return f"MethodTable({self.kind!r}: {', '.join(self)})"


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "MethodSpec", "MethodTable", "available", "get",
           "load_config_class", "load_greedy", "load_target", "names"]
