"""Config options declared once: a dataclass field's allowed range lives in its metadata
(:func:`option`), its choices in its ``Literal`` type, and one function,
:func:`check_options`, checks both for every trainer, adapter and loss config.

    @dataclass
    class MyConfig:
        lr: float = option(1e-4, gt=0)
        top_p: float = option(1.0, gt=0, le=1)
        mode: Literal["a", "b"] = "a"

    check_options(MyConfig(lr=0), "MyConfig.")   # ConfigError: MyConfig.lr = 0 must be > 0

Every learning rate is declared with :func:`learning_rate` (one rule: ``> 0``). Rules
that relate two fields stay in the config's own check. This module imports only the
standard library and :mod:`deciplane.errors` (every layer, objectives included, uses it).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union

from deciplane.errors import ConfigError


@dataclass(frozen=True)
class Range:
    """Bounds of a number: ``ge``/``gt`` below, ``le``/``lt`` above (each optional)."""

    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None

    def holds(self, v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
            return False
        return not ((self.ge is not None and v < self.ge) or (self.gt is not None and v <= self.gt)
                    or (self.le is not None and v > self.le) or (self.lt is not None and v >= self.lt))

    def text(self) -> str:
        """``>= 1``, ``> 0``, ``in (0, 1]`` ..."""
        low = ("[", self.ge) if self.ge is not None else ("(", self.gt) if self.gt is not None else None
        high = ("]", self.le) if self.le is not None else (")", self.lt) if self.lt is not None else None
        if low and high:
            return f"in {low[0]}{_num(low[1])}, {_num(high[1])}{high[0]}"
        if low:
            return (">= " if low[0] == "[" else "> ") + _num(low[1])
        if high:
            return ("<= " if high[0] == "]" else "< ") + _num(high[1])
        return "a number"


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def option(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
           ge: float | None = None, gt: float | None = None, le: float | None = None,
           lt: float | None = None) -> Any:
    """A dataclass field with its allowed range (checked by :func:`check_options`)."""
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"range": Range(ge, gt, le, lt)})


def learning_rate(default: float | None) -> Any:
    """A learning-rate field; the one rule of every method: ``> 0``, checked when the
    config is built, before any model loads (AdamW at 0 would cost every forward and
    backward of a run and move no weight; a part that must not train is frozen, not given
    lr 0). ``None`` (where the type allows it) means "the run's main lr"."""
    return option(default, gt=0)


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _choices(tp: Any) -> tuple[Any, ...] | None:
    """The values a ``Literal`` (or ``Literal | None``) type allows, else ``None``."""
    if typing.get_origin(tp) is Literal:
        return typing.get_args(tp)
    if typing.get_origin(tp) in (Union, types.UnionType):
        inner = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(inner) == 1 and typing.get_origin(inner[0]) is Literal:
            return typing.get_args(inner[0]) + (None,)
    return None


def _nullable(tp: Any) -> bool:
    return typing.get_origin(tp) in (Union, types.UnionType) and type(None) in typing.get_args(tp)


def check_options(obj: Any, label: str = "") -> None:
    """Raise :class:`ConfigError` naming ``label + field`` when a field's value is not one
    of its ``Literal`` choices or outside its declared range (``None`` passes where the
    type allows it)."""
    hints = _hints(type(obj))
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        tp = hints.get(f.name)
        choices = _choices(tp)
        if choices is not None and v not in choices:
            allowed = ", ".join(repr(c) for c in choices)
            raise ConfigError(f"{label}{f.name} = {v!r} is not allowed; choose one of {allowed}")
        rng = f.metadata.get("range")
        if rng is not None and v is not None and not rng.holds(v):
            null = " or null" if _nullable(tp) else ""
            raise ConfigError(f"{label}{f.name} = {v} must be {rng.text()}{null}")


__all__ = ["Range", "check_options", "learning_rate", "option"]
