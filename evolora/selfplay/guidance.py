"""Off-policy guidance: a verified reference answer joins a student's GRPO group.

Self-play RL only sharpens what a student can already sample: a problem none of its n attempts
solves gives every attempt the same reward and, under GRPO, no gradient. The verifier knows
the answer of every valid problem, so the task can write it as a student would
(:meth:`evolora.tasks.base.Task.reference_solution`) and that text can join the group as one
more sample with the ``correct`` reward. LUFFY (arXiv 2504.14945 §3) mixes such off-policy
demonstrations into GRPO groups the same way; here they come from the programmatic verifier,
not from a stronger model.

Guidance changes only the student's training samples. The solve rate ŝ, the teacher's reward,
the ratings, ``matches.jsonl``'s attempts and the critics see the sampled attempts alone; a
game that was guided has ``guided: true``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from evolora.learner import Sample

if TYPE_CHECKING:
    from evolora.hf_types import Tokenizer

Guidance = Literal["none", "unsolved", "all"]


def wants_guidance(mode: Guidance, solve_rate: float | None) -> bool:
    """Whether a game with this solve rate gets a reference sample.

    Args:
        mode: ``none`` (never), ``unsolved`` (only when no attempt was right, ŝ = 0: the groups
            GRPO cannot learn from) or ``all`` (every valid problem).
        solve_rate: ŝ ∈ [0, 1] of the sampled attempts; None for an invalid problem (never guided).

    Raises:
        ValueError: an unknown mode.

    >>> wants_guidance("unsolved", 0.0), wants_guidance("unsolved", 0.25), wants_guidance("all", 1.0)
    (True, False, True)
    """
    if mode not in ("none", "unsolved", "all"):
        raise ValueError(f"unknown guidance {mode!r}; use 'none', 'unsolved' or 'all'")
    if solve_rate is None or mode == "none":
        return False
    return mode == "all" or solve_rate <= 0.0


def reference_ids(tokenizer: Tokenizer, text: str) -> tuple[int, ...]:
    """Token ids of a reference answer as a completion: the text's tokens, then the EOS that
    ends an assistant turn (a sampled completion keeps its EOS too). Length >= 1."""
    ids = list(tokenizer.encode(text, add_special_tokens=False))
    if tokenizer.eos_token_id is not None:
        ids.append(int(tokenizer.eos_token_id))
    if not ids:
        raise ValueError(f"the reference answer {text!r} has no tokens")
    return tuple(ids)


def add_guidance(
    task,
    tokenizer: Tokenizer,
    games,
    prompt_ids: dict[int, tuple[int, ...]],
    samples: dict[str, list[Sample]],
    mode: Guidance,
    reward: float,
) -> int:
    """Append a reference sample to the group of every game that :func:`wants_guidance`.

    Args:
        task: the game's task; its ``reference_solution(problem, answer)`` writes the answer.
        tokenizer: the base's tokenizer.
        games: this step's :class:`evolora.selfplay.GameRecord` list, graded (``solve_rate`` set);
            the guided ones get ``guided = True``.
        prompt_ids: game index -> the student prompt's token ids (the group's shared prompt).
        samples: individual id -> samples, extended in place (the game's student gets the new one,
            in group ``problem<g>``, as its sampled attempts).
        mode: see :func:`wants_guidance`.
        reward: the reference's reward (``rewards.correct``).

    Returns:
        The number of reference samples added (0 … number of valid games).
    """
    added = 0
    for g, game in enumerate(games):
        if g not in prompt_ids or not wants_guidance(mode, game.solve_rate if game.valid else None):
            continue
        text = task.reference_solution(game.problem, game.answer)
        if text is None:
            continue
        samples.setdefault(game.student, []).append(
            Sample(
                prompt_ids=prompt_ids[g],
                completion_ids=reference_ids(tokenizer, text),
                reward=reward,
                group=f"problem{g}",
            )
        )
        game.guided = True
        added += 1
    return added
