"""The pre-stated reading of a study (`evolora.report.study_reading`): verdicts from the t interval
and the exact sign-flip p together, thresholds on unrounded values, the preconditions' sentence."""

from __future__ import annotations

import pytest

from evolora.report.stats import paired_difference
from evolora.report.study_reading import read_comparison, render_reading, selection_targets, study_reading

COMPARISON = "population − no_evolution"


def _rho(value):
    return {"rho": value, "members": 32, "concordant": 0, "discordant": 0, "tied": 0, "runs": 8}


def _stats(
    diffs, *, validity=0.6, share=52 / 72, per_run=9, least=0.5, birth=(0.1, -0.15), bootstrap=None, unfinished=()
):
    """A stats.json of 8 paired seeds whose differences are ``diffs`` (fractions)."""
    row = {"comparison": COMPARISON, "seeds": list(range(len(diffs)))}
    row["mean"] = paired_difference(list(diffs), [0.0] * len(diffs))
    row["bootstrap"] = bootstrap
    return {
        "runs": {
            "population": {"finished": list(range(len(diffs))), "unfinished": list(unfinished)},
            "no_evolution": {"finished": list(range(len(diffs))), "unfinished": []},
        },
        "comparisons": [row],
        "fitness_rho": {"population": {"fitness": _rho(validity), "accuracy": _rho(validity)}},
        "birth_rho": {"population/student": _rho(birth[0]), "population/teacher": _rho(birth[1])},
        "events": {
            "population": {
                "per_run": {str(s): per_run for s in range(8)},
                "least_share": least,
                "breeding": {"held_out": {"events": 72, "positive": share, "S": 0.01, "R": 0.0, "h2": 0.0}},
            }
        },
    }


UP = [0.01, 0.02, 0.015, 0.01, 0.03, 0.012, 0.02, 0.018]  # every seed higher: p = 2/256
NULL = [0.01, -0.02, 0.015, -0.01, 0.03, -0.012, 0.02, -0.018]


def test_every_seed_higher_is_a_difference_and_its_mirror_is_lower():
    assert read_comparison(_stats(UP)["comparisons"][0])["verdict"] == "higher"
    down = read_comparison(_stats([-d for d in UP])["comparisons"][0])
    assert down["verdict"] == "lower" and down["p"] == pytest.approx(2 / 256)


def test_an_interval_that_excludes_zero_with_p_above_alpha_is_no_difference():
    # the t interval excludes 0, but 20 of 256 sign patterns are as extreme (p = 0.078)
    diffs = [0.013, -0.007, 0.005, 0.006, 0.014, 0.006, 0.013, 0.0]
    row = _stats(diffs)["comparisons"][0]
    assert row["mean"]["low"] > 0 and row["mean"]["p"] >= 0.05
    assert read_comparison(row)["verdict"] == "none"


def test_a_null_with_unmet_preconditions_says_so_and_with_met_ones_rules_out_the_interval():
    unmet = study_reading(_stats(NULL, validity=0.49), COMPARISON, arm="population")
    assert "did not reach its preconditions (unmet: fitness validity)" in unmet["sentence"]
    met = study_reading(_stats(NULL), COMPARISON, arm="population")
    assert "size of effect ruled out" in met["sentence"] and "preconditions (unmet" not in met["sentence"]
    helps = study_reading(_stats(UP, validity=0.1), COMPARISON, arm="population")
    assert "`population` scores higher than `no_evolution`" in helps["sentence"]


@pytest.mark.parametrize(
    "field, value, target, met",
    [
        ("validity", 0.5 - 1e-12, "fitness validity", False),
        ("validity", 0.5, "fitness validity", True),
        ("share", 50 / 72, "S > 0 share", False),
        ("share", 51 / 72, "S > 0 share", True),
        ("per_run", 8, "events per run", False),
        ("least", 0.25, "least share replaced", False),
        ("birth", (-0.2, 0.0), "|ρ(fitness, birth step)|, students", True),
        ("birth", (-0.2 - 1e-12, 0.0), "|ρ(fitness, birth step)|, students", False),
        ("validity", None, "fitness validity", False),
    ],
)
def test_each_target_on_its_unrounded_value(field, value, target, met):
    rows = {t["target"]: t for t in selection_targets(_stats(NULL, **{field: value}), "population")}
    assert rows[target]["met"] is met
    assert len(rows) == 6


def test_bootstrap_disagreement_and_unfinished_runs_are_named():
    boot = {"mean": 0.01, "low": -0.001, "high": 0.02, "seeds": 8, "items": 272}
    reading = study_reading(_stats(UP, bootstrap=boot, unfinished=[7]), COMPARISON, arm="population")
    assert reading["comparison"]["bootstrap_agrees"] is False
    assert "sensitive to the sampling of items" in reading["sentence"]
    assert "population: seeds 7" in reading["sentence"]
    agreeing = {"mean": 0.01, "low": 0.001, "high": 0.02, "seeds": 8, "items": 272}
    assert study_reading(_stats(UP, bootstrap=agreeing), COMPARISON, arm="population")["comparison"]["bootstrap_agrees"]


def test_unknown_comparison_lists_those_present_and_render_escapes_pipes():
    with pytest.raises(KeyError, match="population − no_evolution"):
        study_reading(_stats(NULL), "population − single_agent_total", arm="population")
    table = render_reading(study_reading(_stats(NULL), COMPARISON, arm="population"))
    rho_row = next(line for line in table.splitlines() if "birth step" in line)
    assert rho_row.count("|") - rho_row.count("\\|") == 5  # four cells, the ρ's bars escaped
    assert "| fitness validity | 0.6 | ≥ 0.5 | yes |" in table
