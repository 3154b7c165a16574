"""``evolve`` is ``dataclasses.replace`` for every class of the model: each field changed in turn."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest

import verltop.model
from verltop.model.evolve import evolve


def _classes() -> list[type]:
    out = []
    for m in pkgutil.iter_modules(verltop.model.__path__):
        mod = importlib.import_module(f"verltop.model.{m.name}")
        out += [c for c in vars(mod).values()
                if isinstance(c, type) and dataclasses.is_dataclass(c) and c.__module__ == mod.__name__]
    return out


CLASSES = _classes()


def test_the_model_is_walked() -> None:
    names = {c.__name__ for c in CLASSES}
    assert {"ActorRow", "RawTask", "RawActor", "Stall", "Snapshot"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_evolve_is_replace(cls: type) -> None:
    fs = [f for f in dataclasses.fields(cls) if f.init]
    obj = cls(**{f.name: ("v", i) for i, f in enumerate(fs)})  # values of no one's type: only identity counts
    for f in fs:
        new = ("new", f.name)
        got, want = evolve(obj, **{f.name: new}), dataclasses.replace(obj, **{f.name: new})
        assert type(got) is cls and got == want
        assert all(getattr(got, g.name) is getattr(want, g.name) for g in dataclasses.fields(cls))
    assert evolve(obj) == obj and evolve(obj) is not obj


def test_a_class_with_a_field_outside_init_goes_through_replace() -> None:
    @dataclasses.dataclass(frozen=True)
    class Odd:
        a: int
        b: int = dataclasses.field(default=0, init=False)

    assert evolve(Odd(1), a=2) == Odd(2)
