"""Did selection act? The fitness-validity, birth-step and event tables, on the committed
calibration records of the outer-loop study (docs/results/evolution.md quotes these numbers)."""

from __future__ import annotations

from pathlib import Path

from evolora.report.data import RunData, load_run
from evolora.report.selection_tables import (
    birth_table,
    event_counts,
    events_table,
    fitness_table,
    per_event_table,
)

CALIBRATION = Path(__file__).resolve().parents[1] / "docs" / "results" / "data" / "study-evolution" / "calibration"


def _calibration() -> list[RunData]:
    return [load_run(CALIBRATION / name) for name in ("population-s100", "population-s101")]


def _row(lines: list[str], *cells: str) -> str:
    return next(line for line in lines if all(f"| {c} |" in line for c in cells))


def test_fitness_validity_reads_the_exam_signals_beside_the_rating():
    lines = fitness_table(_calibration())
    assert _row(lines, "fitness (selected on)").endswith("| 2 | 8 | +0.42 | 8 / 2 / 2 |")
    assert _row(lines, "exam log-probability").endswith("| +0.34 | 8 / 3 / 1 |")
    assert _row(lines, "μ − 3σ").endswith("| -0.37 | 4 / 7 / 1 |")


def test_birth_step_correlation_per_role():
    lines = birth_table(_calibration())
    assert _row(lines, "student").endswith("| 2 | 8 | +0.71 | 7 / 2 / 3 |")
    assert _row(lines, "teacher").endswith("| -0.64 | 2 / 7 / 3 |")


def test_events_table_counts_events_replacement_and_the_breeders_signals():
    runs = _calibration()
    assert [event_counts(run) for run in runs] == [(4, 0.5), (4, 0.5)]
    lines = events_table(runs)
    assert _row(lines, "fitness (selected on)").endswith(
        "| 2 | 4–4 | 0.50 | fitness (selected on) | 7 of 8 (88 %) | +0.66 | -0.17 | -0.22 |"
    )
    assert "| 4 of 8 (50 %) | +0.05 | -0.40 |" in _row(lines, "audited held-out accuracy")
    per_event = per_event_table(runs)
    assert per_event[2].startswith("| population | 5 | 2 | 2 of 2, +0.64, -0.13, -0.20 | 0 of 2, -0.64, ")
    assert per_event[4].endswith("| 2 of 2, +0.49, -0.74, -1.50 |")  # h² = ΣR / ΣS of the event
    assert "| 2 of 2, +0.87, +0.00, +0.00 |" in per_event[3]  # a response just below zero prints no negative zero
    assert per_event[-1].endswith("| 20 | 2 | 1 of 2, +0.37, –, – | 0 of 2, -0.21, –, – |")  # no response yet


def test_runs_without_events_or_an_exam_give_no_rows(tmp_path):
    run = RunData(tmp_path, {}, "no_evolution", "arith", 0, [{"step": 1}], [], None)
    assert event_counts(run) == (0, None)
    assert events_table([run]) == [] and birth_table([run]) == [] and fitness_table([run]) == []
    assert per_event_table([run]) == []
