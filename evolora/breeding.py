"""The breeder's equation at every evolution event, recorded: did selection act, and did it pay?

    at event t (before selection):  signals of every member (fitness, rating, exam accuracy, ...)
    selection  = per role: S per signal = parents' mean deviation from the role mean (each draw counts)
    at event t + k:                 response per role = the children's mean deviation (same signals),
                                    h² = R / S, gain = R − the replaced members' deviation at t

Deviations are from the role's mean on the same measurement, so difficulty and the RL trend
between events cancel. The records go into the step record's ``evolution`` section and
``evolora report`` draws them (:func:`evolora.report.plots.plot_breeding`).

Source: Falconer & Mackay (1996) ch. 11 (R = h² S), via :mod:`evolora.operators.breeding`.
"""

from __future__ import annotations

import math

import torch

from evolora.operators.breeding import deviation, heritability, selection_differential

SIGNALS = ("fitness", "rating", "accuracy", "logprob", "validation", "separation", "held_out")
"""The member signals a breeder's record reads, where measured (:mod:`evolora.exam`, :mod:`evolora.fitness`)."""


def _values(members: dict, ids: list[str], signal: str) -> torch.Tensor | None:
    """(P,) float64 values of ``signal`` for ``ids``; None when a member lacks it."""
    values = [members[i].get(signal) for i in ids]
    if any(v is None or not math.isfinite(float(v)) for v in values):
        return None
    return torch.tensor([float(v) for v in values], dtype=torch.float64, device="cpu")


def _by_signal(members: dict, ids: list[str], chosen: list[str], measure) -> dict[str, float]:
    """{signal: measure(values, indices of chosen)} for every signal all of ``ids`` have."""
    index = torch.tensor([ids.index(c) for c in chosen], dtype=torch.int64, device="cpu")
    result = {}
    for signal in SIGNALS:
        values = _values(members, ids, signal)
        if values is not None and len(ids) > 1:
            result[signal] = measure(values, index)
    return result


def selection_record(members: dict, births) -> dict:
    """Per role with births: who was chosen and replaced, S and the replaced members' deviation per signal.

    Args:
        members: {id: {"role", signal: value, ...}} of every member before selection (a fitness record's
            ``members``, with ``held_out`` when audited).
        births: the event's :class:`evolora.evolution.Birth` list.

    Returns:
        {role: {"members", "parents" (one per draw), "replaced", "children", "differential": {signal: S},
        "replaced_deviation": {signal: value}}}.
    """
    record = {}
    for role in dict.fromkeys(b.role for b in births):
        ids = [m for m, e in members.items() if e["role"] == role]
        mine = [b for b in births if b.role == role]
        parents = [p for b in mine for p in b.parents]
        replaced = [b.replaced for b in mine]
        record[role] = {
            "members": ids,
            "parents": parents,
            "replaced": replaced,
            "children": [b.child for b in mine],
            "differential": _by_signal(members, ids, parents, selection_differential),
            "replaced_deviation": _by_signal(members, ids, replaced, deviation),
        }
    return record


def response_record(previous: dict, step: int, members: dict) -> dict:
    """The response to the previous event's selection, measured now (before this event's selection).

    Args:
        previous: {"step": t, "selection": :func:`selection_record`} of the last event.
        step: this event's step.
        members: every member's signals now (as in :func:`selection_record`).

    Returns:
        {"of_step": t, role: {"children" (still members), "response": {signal: R}, "heritability":
        {signal: R / S}, "gain": {signal: R − replaced deviation}}}; a role none of whose children
        survive is left out.
    """
    record: dict = {"of_step": previous["step"], "step": step}
    for role, selection in previous["selection"].items():
        ids = [m for m, e in members.items() if e["role"] == role]
        alive = [c for c in selection["children"] if c in ids]
        if not alive:
            continue
        response = _by_signal(members, ids, alive, deviation)
        record[role] = {
            "children": alive,
            "response": response,
            "heritability": {
                s: heritability(r, selection["differential"].get(s, math.nan)) for s, r in response.items()
            },
            "gain": {
                s: r - selection["replaced_deviation"][s]
                for s, r in response.items()
                if s in selection["replaced_deviation"]
            },
        }
    return record
