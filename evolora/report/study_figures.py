"""The figures of a study: accuracy per arm and seed, and the sampled pass@k curves; and the
writer of a study's report directory (tables and figures).

    tables = study_tables(runs)
    write_study_report(tables, runs, "report/")  # tables.md, arms.png, pass_at_k.png
    study_figure(tables, "arms.png")          # accuracy per arm, one point per seed, seeds joined
    pass_at_k_figure(runs, "pass_at_k.png")   # pass@k against k: base and best member per arm

Source: PopuLoRA (arXiv 2605.16727) §4; pass@k as in :mod:`evolora.evaluation.sampled`.
"""

from __future__ import annotations

from pathlib import Path

from evolora.io import write_text_atomic
from evolora.report.data import RunData
from evolora.report.study_tables import StudyTables


def write_study_report(tables: StudyTables, runs: list[RunData], out: str | Path) -> Path:
    """Write ``tables.md``, ``arms.png`` and (once a run has a sampled evaluation) ``pass_at_k.png``
    into ``out`` (created); what ``evolora study`` and ``benchmarks/study_report.py`` write."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "tables.md", tables.markdown + "\n")
    study_figure(tables, out / "arms.png")
    pass_at_k_figure(runs, out / "pass_at_k.png")
    return out


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def study_figure(tables: StudyTables, path: str | Path) -> Path:
    """Member-mean held-out accuracy per arm, one point per seed, the same seed joined across arms."""
    plt = _pyplot()
    arms = list(tables.by_arm)
    fig, ax = plt.subplots(figsize=(1.6 + 1.4 * len(arms), 3.6))
    for seed in sorted({s for a in tables.by_arm.values() for s in a}):
        xs = [i for i, a in enumerate(arms) if seed in tables.by_arm[a]]
        ys = [100 * tables.by_arm[arms[i]][seed]["mean"] for i in xs]
        ax.plot(xs, ys, "-o", color="0.6", alpha=0.6, markersize=4)
    for i, arm in enumerate(arms):
        values = [100 * n["mean"] for n in tables.by_arm[arm].values()]
        ax.plot([i - 0.2, i + 0.2], [sum(values) / len(values)] * 2, color="C3", linewidth=2.5)
    ax.set_xticks(range(len(arms)), arms)
    ax.set_ylabel("member-mean held-out accuracy, %")
    ax.set_title("arms by seed (grey: one seed; red: mean)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)


def pass_at_k_curves(runs: list[RunData]) -> dict[str, dict[str, list[float]]]:
    """Per arm, the seed-averaged pass@k of the base and of the best member (highest pass@1 in its
    run), from runs evaluated with ``evolora evaluate --samples``.

    Returns:
        ``{arm: {"k": [1, 2, ...], "base": [...], "best member": [...]}}``, fractions in [0, 1];
        only the k every evaluated run of the arm has; arms without an evaluated run are left out.
    """
    records: dict[str, list[dict]] = {}
    for run in runs:
        record = (run.summary or {}).get("pass_at_k")
        if record:
            records.setdefault(run.mode, []).append(record["members"])
    curves = {}
    for arm, members in records.items():
        keys = set.intersection(*({k for k in m["base"] if k.startswith("pass@")} for m in members))
        ks = sorted(int(key[5:]) for key in keys)
        best = [max((v for name, v in m.items() if name != "base"), key=lambda v: v["pass@1"]) for m in members]
        curves[arm] = {
            "k": ks,
            "base": [sum(m["base"][f"pass@{k}"] for m in members) / len(members) for k in ks],
            "best member": [sum(b[f"pass@{k}"] for b in best) / len(best) for k in ks],
        }
    return curves


def pass_at_k_figure(runs: list[RunData], path: str | Path) -> Path | None:
    """pass@k against k (log scale) for each arm's base (dashed) and best member (solid); ``None``
    (and nothing written) when no run has a sampled evaluation."""
    curves = pass_at_k_curves(runs)
    if not curves:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    for i, (arm, curve) in enumerate(curves.items()):
        ax.plot(curve["k"], [100 * v for v in curve["best member"]], "-o", color=f"C{i}", label=f"{arm}: best member")
        ax.plot(curve["k"], [100 * v for v in curve["base"]], "--", color=f"C{i}", alpha=0.7, label=f"{arm}: base")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("k (samples per problem)")
    ax.set_ylabel("held-out pass@k, %")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return Path(path)
