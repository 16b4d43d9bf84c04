"""The one base of every method (deciplane.engine.method.Method): every method the
registry names is one, of the kind its entry says, taking the config class it names."""

from __future__ import annotations

from deciplane import methods
from deciplane.engine.method import Method
from deciplane.methods import load_config_class, load_target


def test_every_registered_method_is_a_method_of_its_kind():
    specs = methods.available().values()
    assert {s.kind for s in specs} == {"train", "adapt"}
    for spec in specs:
        cls = load_target(spec)
        assert issubclass(cls, Method) and cls.kind == spec.kind, spec.name
        assert load_config_class(spec) is cls.Config, spec.name   # the class it takes
