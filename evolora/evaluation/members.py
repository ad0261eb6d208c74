"""``eval.members``: which members a held-out evaluation covers, every student or only the fittest.

    best = fittest(record, ["s0", "s1", "s2"])   # the id with the highest fitness; ties: the first

``record`` is a fitness record (:func:`evolora.fitness.fitness_record`: ``{"members": {id:
{"fitness": value, ...}}}``), so the fittest is chosen without the held-out items, both at a
run's end (:class:`evolora.run.Run`) and when a finished run is evaluated again
(:func:`evolora.evaluation.rerun.evaluate_run`).
"""

from __future__ import annotations


def fittest(record: dict, ids: list[str]) -> str:
    """Of ``ids`` (members of one role), the id with the highest fitness in ``record`` (a
    :func:`evolora.fitness.fitness_record`); ties go to the first in ``ids``.

    Raises:
        ValueError: ``ids`` is empty.
        KeyError: an id is not in the record.
    """
    if not ids:
        raise ValueError("no members to choose the fittest from")
    fitness = record["members"]
    return max(ids, key=lambda i: fitness[i]["fitness"])
