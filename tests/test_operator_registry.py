"""The operator registry: names, parameter validation, user callables, listing."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from evolora.operators import KINDS, REGISTRY, Param, Registry

pytestmark = pytest.mark.usefixtures("single_thread")


@pytest.fixture
def clean_user_registry():
    """Leave the package-wide registry as it was (a test's registrations are global names)."""
    saved = {kind: dict(specs) for kind, specs in REGISTRY._specs.items()}
    yield
    for kind, specs in saved.items():
        REGISTRY._specs[kind] = specs


def test_every_kind_has_the_required_operators():
    required = {
        "crossover": {
            "svd_merge",
            "layer_swap",
            "svd_splice",
            "dare",
            "ties",
            "extrapolate",
            "slerp",
            "clone",
            "midpoint",
        },
        "mutation": {"lowrank_gaussian", "spectral", "layer_gaussian", "component_mask", "gaussian"},
        "selection": {"tournament", "truncation", "fitness_proportional", "rank"},
        "replacement": {"pbt_truncation"},
    }
    for kind, names in required.items():
        assert names <= set(REGISTRY.names(kind))


@pytest.mark.parametrize("kind", KINDS)
def test_defaults_validate_for_every_operator(kind):
    for name in REGISTRY.names(kind):
        spec = REGISTRY.get(kind, name)
        assert REGISTRY.validate(kind, name, {}) == {p: v.default for p, v in spec.params.items()}
        assert spec.doc, f"{kind} {name!r} has no docstring"
        assert "References:" in spec.fn.__doc__ and "Args:" in spec.fn.__doc__ or not spec.params


def test_duplicate_name_raises():
    registry = Registry()
    registry.register("mutation", "noop", lambda parent, *, generator: parent)
    with pytest.raises(ValueError, match="already registered"):
        registry.register("mutation", "noop", lambda parent, *, generator: parent)
    with pytest.raises(ValueError, match="already registered"):
        REGISTRY.register("crossover", "svd_merge", lambda parents, fitness, *, generator: parents[0])


def test_decorator_and_declared_params_must_match_signature():
    registry = Registry()

    @registry.decorator("mutation", scale=Param(1.0, low=0.0, high=2.0))
    def scaled(parent, *, generator, scale=1.0):
        """Scale B."""
        return parent

    assert registry.names("mutation") == ["scaled"]
    assert registry.get("mutation", "scaled").doc == "Scale B."
    with pytest.raises(ValueError, match="differ"):
        registry.register("mutation", "bad", scaled, {"sigma": Param(0.1)})


def test_unknown_kind_name_and_parameter_messages():
    with pytest.raises(ValueError, match="allowed: selection, replacement, crossover, mutation"):
        REGISTRY.names("mutations")
    with pytest.raises(
        ValueError,
        match=r"unknown mutation 'lowrank'; did you mean 'lowrank_gaussian'\? registered: .*lowrank_gaussian",
    ):
        REGISTRY.get("mutation", "lowrank")
    with pytest.raises(ValueError) as err:
        REGISTRY.validate("mutation", "lowrank_gaussian", {"sigam": 0.1})
    assert str(err.value) == (
        "mutation 'lowrank_gaussian': unknown parameter 'sigam'; did you mean 'sigma'? allowed: sigma, noise_rank"
    )


@pytest.mark.parametrize(
    "kind,name,params,match",
    [
        ("mutation", "lowrank_gaussian", {"sigma": -0.1}, r"'sigma': -0.1 is out of range; float in \[0, 10\]"),
        ("mutation", "lowrank_gaussian", {"sigma": "big"}, "'sigma': 'big' is not a number"),
        ("mutation", "lowrank_gaussian", {"noise_rank": 2.5}, "not an integer"),
        ("crossover", "svd_merge", {"weights": "softmax"}, "one of 'equal', 'fitness'"),
        ("selection", "rank", {"pressure": 2.5}, r"float in \[1, 2\]"),
        ("selection", "tournament", {"k": True}, "not a number"),
        ("replacement", "pbt_truncation", {"gamma": float("nan")}, "out of range"),
    ],
)
def test_bad_values_name_the_allowed_range(kind, name, params, match):
    with pytest.raises(ValueError, match=match):
        REGISTRY.validate(kind, name, params)


def test_validate_coerces_and_fills_defaults():
    assert REGISTRY.validate("mutation", "lowrank_gaussian", {"sigma": 1}) == {"sigma": 1.0, "noise_rank": None}
    assert REGISTRY.validate("crossover", "svd_splice", {"k": 2.0}) == {"k": 2}


def test_user_callable_by_module_path():
    module = types.ModuleType("user_ops_for_test")

    def double_b(parent, *, generator, factor: float = 2.0):
        """Multiply every B by ``factor``."""
        return {n: (a.clone(), factor * b) for n, (a, b) in parent.items()}

    module.double_b = double_b
    sys.modules["user_ops_for_test"] = module
    try:
        spec = REGISTRY.resolve_callable("mutation", "user_ops_for_test:double_b")
        assert REGISTRY.resolve_callable("mutation", "user_ops_for_test:double_b") is spec  # idempotent
        assert "user_ops_for_test:double_b" in REGISTRY.names("mutation")
        assert REGISTRY.validate("mutation", "user_ops_for_test:double_b", {"factor": 3}) == {"factor": 3.0}
        with pytest.raises(ValueError, match="unknown parameter 'scale'; allowed: factor"):
            REGISTRY.validate("mutation", "user_ops_for_test:double_b", {"scale": 3})
        parent = {"m": (torch.ones(2, 3), torch.ones(4, 2))}
        assert spec.fn(parent, generator=torch.Generator(), factor=3.0)["m"][1].max() == 3.0
    finally:
        del sys.modules["user_ops_for_test"]
    with pytest.raises(ValueError, match="cannot import .*PYTHONPATH=."):
        REGISTRY.resolve_callable("mutation", "no_such_module_xyz:fn")
    with pytest.raises(ValueError, match="has no attribute"):
        REGISTRY.resolve_callable("mutation", "math:no_such_fn")
    with pytest.raises(ValueError, match="package.module:function"):
        REGISTRY.resolve_callable("mutation", "math:")


def test_a_user_module_that_registers_its_function_keeps_the_declared_bounds(clean_user_registry):
    module = types.ModuleType("user_ops_declared")
    exec(
        "from evolora.operators import Param, register\n"
        "@register('mutation', 'declared_scale', factor=Param(2.0, low=0, high=4, doc='B scale'))\n"
        "def scale(parent, *, generator, factor=2.0):\n"
        "    return {k: (a, factor * b) for k, (a, b) in parent.items()}\n",
        module.__dict__,
    )
    sys.modules["user_ops_declared"] = module
    try:
        spec = REGISTRY.resolve_callable("mutation", "user_ops_declared:scale")
        assert spec.params["factor"].high == 4 and spec.params["factor"].doc == "B scale"
        assert REGISTRY.validate("mutation", "user_ops_declared:scale", {"factor": 3}) == {"factor": 3.0}
        with pytest.raises(ValueError, match="parameter 'factor'"):
            REGISTRY.validate("mutation", "user_ops_declared:scale", {"factor": 5})
    finally:
        del sys.modules["user_ops_declared"]


def test_describe_rows():
    rows = REGISTRY.describe()
    assert {(r.kind, r.name) for r in rows} >= {("crossover", "svd_merge"), ("replacement", "pbt_truncation")}
    row = next(r for r in rows if r.name == "lowrank_gaussian")
    assert "sigma=0.1 (float in [0, 10])" in row.params and row.doc
    assert all(r.kind == "mutation" for r in REGISTRY.describe("mutation"))
