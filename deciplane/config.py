"""Typed-config coercion shared by trainers and adapters.

A config is a dataclass whose fields carry types (``Literal`` for fixed sets of values)
and a docstring right below each field. :func:`from_dict` builds one from a mapping
(YAML or ``--set key=value`` overrides), coercing every value to its field's type and
raising :class:`~deciplane.errors.ConfigError` with the allowed values; :func:`field_docs`
and :func:`describe_config` read the field docstrings for ``--help-config`` and
``deciplane adapt options``.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap
import types
import typing
import warnings
from dataclasses import MISSING, asdict, fields, is_dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import yaml

from deciplane.errors import ConfigError
from deciplane.options import check_options


def read_yaml_mapping(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a YAML config file; ConfigError naming the fix otherwise."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"config file {str(p)!r} not found; pass a YAML file such as "
                          "configs/quickstart.yaml")
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML ({e}); fix the file") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: the top level must be a mapping of options")
    return raw


def parse_override(item: str) -> tuple[str, Any]:
    """``"optim.lr=1e-4"`` -> ``("optim.lr", 1e-4)`` (value parsed as YAML)."""
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key=value (e.g. optim.lr=1e-4)")
    key, text = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(f"override {item!r} has an empty key")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError:
        value = text
    if isinstance(value, str):  # YAML 1.1 reads "1e-3" as a string
        try:
            value = float(value)
        except ValueError:
            pass
    return key, value


def set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        nxt = d.setdefault(p, {})
        if not isinstance(nxt, dict):
            raise ConfigError(f"cannot set {key!r}: {p!r} is not a section")
        d = nxt
    d[parts[-1]] = value


def deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def from_dict(cls: type, raw: dict[str, Any], prefix: str = "") -> Any:
    """Instantiate dataclass ``cls`` from a mapping, coercing and validating every field:
    types, then :func:`deciplane.options.check_options` (each field's declared range and
    choices), then the dataclass's own ``check(prefix)`` method if it has one (cross-field
    rules such as ``s_min <= s_max``). Old option names are read first
    (:func:`read_old_names`)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix.rstrip('.') or 'config'} must be a mapping, got {raw!r}")
    raw = read_old_names(cls, raw, prefix)
    hints = typing.get_type_hints(cls)
    names = [f.name for f in fields(cls)]
    unknown = sorted(set(raw) - set(names))
    if unknown:
        raise ConfigError(f"unknown option(s) {', '.join(prefix + u for u in unknown)}; "
                          f"allowed in {prefix.rstrip('.') or 'this section'}: {', '.join(names)}")
    kwargs = {}
    for f in fields(cls):
        if f.name in raw:
            value = _onto_own_default(f, hints[f.name], raw[f.name])
            kwargs[f.name] = coerce(hints[f.name], value, prefix + f.name)
    obj = cls(**kwargs)
    check_options(obj, prefix)
    check = getattr(obj, "check", None)
    if callable(check):  # the section's own cross-field rules
        check(prefix)
    return obj


def _onto_own_default(f: Any, tp: Any, value: Any) -> Any:
    """A section given in part starts from the field's own default where that differs from
    the section class's (``loss: PolicyLossConfig(kl_beta=0.001)`` in TTRL: ``loss.eps_low``
    alone keeps kl_beta 0.001)."""
    factory = f.default_factory
    if not (is_dataclass(tp) and isinstance(value, dict) and factory is not MISSING):
        return value
    default = factory()
    if default == tp():
        return value
    return deep_merge(asdict(default), value)


def read_old_names(cls: type, raw: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``raw`` with every old option name of ``cls`` read as today's: the class's
    ``legacy_options(raw, prefix)`` where a rename needs more than a new key, then
    :func:`apply_aliases`."""
    legacy = getattr(cls, "legacy_options", None)
    if callable(legacy):
        raw = legacy(raw, prefix)
    return apply_aliases(cls, raw, prefix)


def apply_aliases(cls: type, raw: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Renamed options keep working for one release, with a ``DeprecationWarning``.

    A dataclass lists ``CONFIG_ALIASES = {old key: new key}`` (the new key may be dotted,
    ``"rlid.eps_low"``, when the option moved into an embedded section) and ``VALUE_ALIASES = {key: {old value: new value}}``. Giving both the old and the new
    key is an error (which one would win is not obvious)."""
    keys: dict[str, str] = getattr(cls, "CONFIG_ALIASES", {}) or {}
    values: dict[str, dict[Any, Any]] = getattr(cls, "VALUE_ALIASES", {}) or {}
    if not any(k in raw for k in keys) and not any(k in raw for k in values):
        return raw
    out = dict(raw)
    for key, mapping in values.items():
        v = out.get(key)
        if isinstance(v, str) and v in mapping:
            warnings.warn(f"config value {prefix}{key}={v} is now {prefix}{key}={mapping[v]} "
                          "(the old value goes away in the next release)",
                          DeprecationWarning, stacklevel=3)
            out[key] = mapping[v]
    for old, new in keys.items():
        if old not in out:
            continue
        section, _, leaf = new.rpartition(".")   # "rlid.eps_low": into a nested section
        target = out
        if section:
            inner = out.get(section)
            target = dict(inner) if isinstance(inner, dict) else {}
            out[section] = target
        if leaf in target:
            raise ConfigError(f"{prefix}{old} is the old name of {prefix}{new}; give only "
                              f"{prefix}{new}")
        warnings.warn(f"config option {prefix}{old} is now {prefix}{new} "
                      "(the old name goes away in the next release)", DeprecationWarning,
                      stacklevel=3)
        target[leaf] = out.pop(old)
    return out


def coerce(tp: Any, value: Any, key: str) -> Any:
    """Coerce ``value`` to type ``tp`` (dataclass, Literal, Optional, list, dict, scalars)."""
    origin = get_origin(tp)
    if is_dataclass(tp):
        return from_dict(tp, value if value is not None else {}, key + ".")
    if origin is Literal:
        allowed = get_args(tp)
        if value not in allowed:
            raise ConfigError(f"{key} = {value!r} is not allowed; allowed values: "
                              f"{', '.join(repr(a) for a in allowed)}")
        return value
    if origin in (Union, types.UnionType):
        args = get_args(tp)
        if value is None:
            if type(None) in args:
                return None
            raise ConfigError(f"{key} must not be null")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return coerce(a, value, key)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError("; ".join(errors))
    if origin is list:
        (inner,) = get_args(tp) or (Any,)
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key} must be a list, got {value!r}")
        return [coerce(inner, v, f"{key}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{key} must be a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "1", "0"):
            return value.lower() in ("true", "yes", "1")
        raise ConfigError(f"{key} must be true or false, got {value!r}")
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        try:
            f = float(value)
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {value!r}") from None
        if f != int(f):
            raise ConfigError(f"{key} must be an integer, got {value!r}")
        return int(f)
    if tp is float:
        if isinstance(value, bool):
            raise ConfigError(f"{key} must be a number, got {value!r}")
        try:
            return float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key} must be a number, got {value!r}") from None
    if tp is str:
        if isinstance(value, (dict, list)) or value is None:
            raise ConfigError(f"{key} must be a string, got {value!r}")
        return str(value)
    return value


def to_dict(cfg: Any) -> dict[str, Any]:
    """A plain, YAML/JSON-ready dict of a config."""
    return asdict(cfg)


def dump_yaml(cfg: Any) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)


def field_docs(cls: type) -> dict[str, str]:
    """Field docstrings (the string literal right below each field) of a dataclass and its bases."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if not dataclasses.is_dataclass(klass):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError):  # pragma: no cover - no source (frozen app)
            continue
        body = tree.body[0].body  # type: ignore[attr-defined]
        for node, nxt in zip(body, body[1:]):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and isinstance(nxt, ast.Expr) and isinstance(getattr(nxt, "value", None), ast.Constant) \
                    and isinstance(nxt.value.value, str):
                docs[node.target.id] = nxt.value.value.strip()
    return docs


def describe_config(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """Rows (dotted key, type, default, doc) for every option of ``cls``, nested sections expanded."""
    rows = []
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    defaults = cls()
    for f in fields(cls):
        tp = hints[f.name]
        val = getattr(defaults, f.name)
        if is_dataclass(tp):
            rows.extend(describe_config(tp, prefix + f.name + "."))
            continue
        tname = _type_name(tp)
        rows.append((prefix + f.name, tname, repr(val), docs.get(f.name, "")))
    return rows


def _type_name(tp: Any) -> str:
    origin = get_origin(tp)
    if origin is Literal:
        return "|".join(str(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))
