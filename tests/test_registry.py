"""The one registry every named kind of code uses (evolora.registry): names, duplicates, and a
user's ``package.module:attr`` loaded with errors that name the module or the attribute."""

from __future__ import annotations

import sys

import pytest

from evolora.registry import Registry, load_target, summary, target_of

MODULE = "registry_user_code_for_tests"
SOURCE = '''
class Scorer:
    """Scores by length."""

    def __call__(self, text):
        return len(text)


def shout(text):
    """Upper case."""
    return text.upper()


LIMIT = 3
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A module of the user's on the import path: a class, a function and a constant."""
    (tmp_path / f"{MODULE}.py").write_text(SOURCE)
    (tmp_path / "registry_broken_for_tests.py").write_text("LIMIT = 1 / 0\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in (MODULE, "registry_broken_for_tests"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return tmp_path


def _loading(kind: str = "scorer") -> Registry:
    return Registry(kind, form="Class", build=lambda target: load_target(target, f"{kind} {target!r}", "Class"))


def test_a_name_is_taken_once_and_the_message_names_the_first():
    names = Registry("scorer")
    assert names.register("length", len) is len
    with pytest.raises(ValueError, match=r"scorer 'length' is already registered \(builtins:len\); pick another"):
        names.register("length", str)
    assert names.get("length") is len and names.names() == ["length"]


@pytest.mark.parametrize("name", ["", "auto", "pkg:thing"])
def test_empty_reserved_and_module_path_names_are_refused(name):
    names = Registry("generation.engine", reserved=("auto",))
    with pytest.raises(ValueError, match=f"non-empty, not 'auto' and hold no ':', got {name!r}"):
        names.register(name, object)
    assert names.names() == []


def test_an_unknown_name_lists_the_registered_ones_sorted():
    names = Registry("play", build=lambda target: target)
    names.register("selfplay", "1")
    names.register("review", "2")
    with pytest.raises(ValueError) as caught:
        names.get("judge")
    assert str(caught.value) == (
        "unknown play 'judge'; registered: review, selfplay (or 'package.module:function' for your own)"
    )
    closed = Registry("PFSP weighting", entries={"variance": 1, "hard": 2})  # nothing of a user's is loaded
    with pytest.raises(ValueError) as caught:
        closed.get("soft")
    assert str(caught.value) == "unknown PFSP weighting 'soft'; registered: hard, variance"
    reserved = Registry("generation.engine", form="Class", reserved=("auto",), build=lambda target: target)
    reserved.register("eager", 1)
    with pytest.raises(ValueError, match=r"'vllm'; use auto, one of eager \(or 'package.module:Class'"):
        reserved.get("vllm")


def test_a_module_path_is_unknown_where_nothing_loads_it(user_module):
    with pytest.raises(ValueError, match=f"unknown scorer '{MODULE}:Scorer'"):
        Registry("scorer").get(f"{MODULE}:Scorer")
    assert MODULE not in sys.modules


def test_a_users_class_loads_from_its_module_path_once(user_module):
    names = _loading()
    names.register("length", len)
    target = f"{MODULE}:Scorer"
    found = names.get(target)
    assert found.__name__ == "Scorer" and found()("abcd") == 4
    assert names.get(target) is found  # kept under its string, imported once
    assert names.names() == sorted(["length", target]) and names.names(loaded=False) == ["length"]
    assert target_of(found) == target and summary(found) == "Scores by length."
    assert load_target(f"{MODULE}:Scorer.__call__", "scorer")(found(), "ab") == 2  # a dotted attribute


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "no_such_module_for_tests:Scorer",
            "scorer 'no_such_module_for_tests:Scorer': cannot import module 'no_such_module_for_tests' "
            "(raised ModuleNotFoundError: No module named 'no_such_module_for_tests'); put the folder",
        ),
        (
            "registry_broken_for_tests:Scorer",
            "scorer 'registry_broken_for_tests:Scorer': cannot import module 'registry_broken_for_tests' "
            "(raised ZeroDivisionError: division by zero); put the folder",
        ),
        (f"{MODULE}:Missing", f"scorer '{MODULE}:Missing': module '{MODULE}' has no attribute 'Missing'"),
        (f"{MODULE}:Scorer.missing", f"module '{MODULE}' has no attribute 'Scorer.missing'"),
        (f"{MODULE}:LIMIT", f"scorer '{MODULE}:LIMIT': 'LIMIT' of module '{MODULE}' is not callable; name a Class"),
        (f"{MODULE}:", f"scorer '{MODULE}:': '{MODULE}:' is not of the form 'package.module:Class'"),
        (":Scorer", "is not of the form 'package.module:Class'"),
    ],
)
def test_a_module_path_that_does_not_load_names_the_module_or_the_attribute(user_module, target, message):
    names = _loading()
    with pytest.raises(ValueError) as caught:
        names.get(target)
    assert message in str(caught.value), str(caught.value)
    assert target not in names and names.names() == []


def test_register_target_registers_now_or_as_a_decorator():
    names = Registry("play", origin=lambda entry: entry[0])
    make = lambda target, doc: (target, doc)  # noqa: E731
    keep = names.register_target("lazy", "pkg.plays:lazy", "imported on first use", make)
    assert keep(len) is len and names.get("lazy") == ("pkg.plays:lazy", "imported on first use")

    @names.register_target("shout", None, "", make)
    def shout(text):
        """Upper case."""
        return text.upper()

    assert shout("a") == "A" and names.get("shout") == (f"{__name__}:{shout.__qualname__}", "Upper case.")
    with pytest.raises(ValueError, match=r"'lazy' is already registered \(pkg.plays:lazy\)"):
        names.register_target("lazy", None, "", make)  # refused before anything is decorated
