"""objectives.registry: each aggregation's parameters are declared once, beside it, and both the
loss math and config validation read that one declaration."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest
import torch

from dashrepro import objectives
from dashrepro.objectives.aggregations import AGGREGATIONS
from dashrepro.objectives.registry import AGGREGATION_SPECS, OBJECTIVES, check_params


def test_every_declared_parameter_is_its_functions_argument_without_a_second_default():
    assert set(AGGREGATION_SPECS) == set(AGGREGATIONS)
    for name, declared in AGGREGATION_SPECS.items():
        keywords = {
            key: p
            for key, p in inspect.signature(AGGREGATIONS[name]).parameters.items()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and key != "teacher_entropy"
        }
        assert set(keywords) == set(declared.params), name
        # The default lives in the declaration only: a function default would be a second one.
        assert all(p.default is inspect.Parameter.empty for p in keywords.values()), name
        assert objectives.aggregation_param_names(name) == set(declared.params)


def test_no_helper_of_the_aggregations_gives_a_declared_parameter_a_default():
    from dashrepro.objectives import aggregations

    declared = {key for spec in AGGREGATION_SPECS.values() for key in spec.params}
    helpers = [f for f in vars(aggregations).values() if inspect.isfunction(f)]
    assert aggregations.position_weights in helpers
    for function in helpers:
        for key, p in inspect.signature(function).parameters.items():
            if key in declared:
                assert p.default is inspect.Parameter.empty, f"{function.__name__}({key}=...)"


def test_a_left_out_parameter_takes_its_declared_default():
    r, mask = torch.rand(2, 6, generator=torch.Generator().manual_seed(0)), torch.ones(2, 6)
    assert AGGREGATION_SPECS["dash"].params["kappa"].default == 5.0  # the paper's kappa
    left_out = objectives.aggregate("dash", r, mask)
    given = objectives.aggregate("dash", r, mask, kappa=5.0)
    other = objectives.aggregate("dash", r, mask, kappa=1.0)
    assert torch.equal(left_out.coefficients, given.coefficients)
    assert not torch.equal(left_out.coefficients, other.coefficients)
    pw = AGGREGATION_SPECS["pw_opsd"].params
    expected = objectives.position_weights(mask, *(pw[k].default for k in pw))
    assert torch.equal(objectives.aggregate("pw_opsd", r, mask).coefficients, expected)


@pytest.mark.parametrize(
    "method, params, message",
    [
        ("dash", {"kappa": -5.0}, r"kappa -5.0 is out of range \(kappa >= 0, a finite number\)"),
        ("dash", {"kappa": float("nan")}, r"kappa nan is not finite"),
        ("fixed_lambda", {"lam": 1.5}, r"lam 1.5 is out of range \(0 <= lam <= 1"),
        ("pw_opsd", {"position_s": 0.0}, r"position_s 0.0 is out of range \(position_s > 0"),
    ],
)
def test_the_loss_and_the_config_reject_a_value_by_the_same_range(method, params, message):
    with pytest.raises(ValueError, match=message) as raised:
        objectives.aggregate(method, torch.zeros(1, 3), torch.ones(1, 3), **params)
    (problem,) = check_params(AGGREGATION_SPECS[method].params, params, where="methods.m.params")
    key = next(iter(params))
    why = str(raised.value).split(f": {key} ", 1)[1]  # the value, what is wrong, the range
    assert problem == f"methods.m.params.{key}: {why}"


def test_each_entry_says_whether_its_function_reads_the_teacher_entropy():
    """The trainer passes the teacher's entropy exactly to the aggregations whose entry needs it
    (MethodSpec.needs_teacher_entropy)."""
    required = {"fixed_lambda": {"lam": 0.5}}
    for name, declared in AGGREGATION_SPECS.items():
        args, kwargs = (name, torch.rand(2, 4), torch.ones(2, 4)), required.get(name, {})
        if declared.needs_teacher_entropy:
            with pytest.raises(ValueError, match="needs teacher_entropy"):
                objectives.aggregate(*args, **kwargs)
        else:
            objectives.aggregate(*args, **kwargs)
    assert set(OBJECTIVES) == {"distill", "eopd", "avsd"}


def test_each_entry_says_whether_its_function_returns_gates():
    """The premise probe measures the gates of a method whose entry is `gated`."""
    required = {"fixed_lambda": {"lam": 0.5}}
    for name, declared in AGGREGATION_SPECS.items():
        entropy = torch.rand(2, 4) if declared.needs_teacher_entropy else None
        result = objectives.aggregate(
            name, torch.rand(2, 4), torch.ones(2, 4), teacher_entropy=entropy,
            **required.get(name, {}),
        )  # fmt: skip
        assert (result.gates is not None) == declared.gated, name


def test_the_declarations_load_without_torch():
    """Config validation reads them at Snakemake's parse, which must not import torch."""
    code = (
        "import sys; import dashrepro.objectives.registry, dashrepro.objectives; "
        "import dashrepro.experiment.config; print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
