"""Self-play sections of the run configuration: matchmaking, rewards and the game's rollouts
(:class:`SelfPlayConfig`, the ``selfplay`` key), re-exported by :mod:`evolora.config`.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 1-4."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from evolora.config.types import Float, Int, _Section
from evolora.game import POPULATION_ROLES
from evolora.generation.types import Sampling
from evolora.matchmaking import Scheme


class MatchmakingConfig(_Section):
    weighting: Literal["variance", "hard", "uniform"] = "variance"
    """PFSP weighting f(p): p(1 − p), (1 − p)^k, or 1 (paper §2 step 1)."""
    k: Float = Field(default=2.0, gt=0)
    """Exponent of the ``hard`` weighting."""
    scheme: Scheme = "per_teacher_without_replacement"
    """How pairs are drawn each step; ``fixed_pairs``: teacher i always meets student i (no cross-play)."""
    hall_of_fame: Int = Field(default=0, ge=0, le=64)
    """Past student champions kept as frozen opponents (AlphaStar league); 0 turns the hall off.
    After every evolution step the best student (by μ − 3σ) is snapshotted into it."""
    hall_prob: Float = Field(default=0.2, ge=0, le=1)
    """Probability that a teacher's opponent this step is a frozen hall-of-fame student."""


class RewardConfig(_Section):
    malformed: Float = -1.0
    """Teacher reward for a proposal that does not parse (format error)."""
    invalid: Float = -0.5
    """Teacher reward for a proposal that parses but fails verification (AZR code: −0.5; paper: −1)."""
    trivial: Float = 0.0
    """Teacher reward when the student solve rate is 0 or 1 (AZR paper 0, AZR code −0.5)."""
    correct: Float = 1.0
    """Student reward for a correct answer."""
    wrong: Float = -0.5
    """Student reward for a well-formed wrong answer."""
    format: Float = -1.0
    """Student reward when no final answer can be parsed."""
    copied: Float | None = None
    """Teacher reward for a valid proposal equal (after :func:`evolora.tasks.base.normalise_problem`)
    to a reference example of its own prompt; None gives it the ``trivial`` reward."""
    repetition: Float = Field(default=0.0, ge=0)
    """R-Zero's repetition penalty λ (arXiv 2508.05004 §3): a proposal whose normalised problem
    occurs k times among the step's N proposals loses λ · (k − 1) / (N − 1); 0 turns it off."""
    repetition_window: Int = Field(default=0, ge=0)
    """Steps a proposed problem is remembered (:class:`evolora.selfplay.memory.ProblemMemory`): proposing
    it again within them costs the full λ of ``repetition``; 0 keeps the penalty within the step.
    Whatever the window, a question that was valid with one answer is invalid
    (``inconsistent_answer``) when a later program gives it another."""
    refuted: Float = Field(default=0.0, le=0)
    """Added to a student's wrong answer for each critic that flagged it ``incorrect`` (≤ 0; 0: off)."""
    survived: Float = Field(default=0.0, ge=0)
    """Added to a student's correct answer for each critic that accepted it (≥ 0; 0: off)."""


class AgreementConfig(_Section):
    """R-Zero's agreement gate (:mod:`evolora.selfplay.agreement`): a valid proposal stays valid only when at
    least ``threshold`` of ``samples`` answers of an independent solver reach its program's answer."""

    solver: Literal["none", "base"] = "none"
    """``base``: the frozen base model (adapters off) answers each valid problem ``samples`` times at
    the student's sampling settings; ``none``: no gate."""
    samples: Int = Field(default=4, ge=1)
    """Solver answers m per valid proposal."""
    threshold: Float = Field(default=0.25, gt=0, le=1)
    """Least fraction τ of the m answers that must equal the program's answer."""


class SelfPlayConfig(_Section):
    mode: Literal["population", "single_agent"] = "population"
    """``population``: teachers and students co-evolve (PopuLoRA). ``single_agent``: one adapter
    proposes and solves its own problems (AZR), the compute-matched baseline: per step it makes
    ``proposals_per_teacher`` proposals and ``samples_per_problem`` attempts per valid one, the
    rollouts of one teacher plus its matched student; the population section and evolution
    are not used."""
    proposals_per_teacher: Int = Field(default=2, ge=1)
    """Problems each teacher proposes per step."""
    samples_per_problem: Int = Field(default=4, ge=1)
    """Student attempts n per valid problem (AZR: 8)."""
    teacher_max_new_tokens: Int = Field(default=160, ge=1)
    """Token cap of each teacher rollout (a proposal)."""
    student_max_new_tokens: Int = Field(default=128, ge=1)
    """Token cap of each student rollout (an answer)."""
    temperature: Float = Field(default=1.0, gt=0)
    """Sampling temperature of every role without its own (``teacher_temperature`` …)."""
    top_p: Float = Field(default=1.0, gt=0, le=1)
    """Nucleus mass of every role without its own."""
    teacher_temperature: Float | None = Field(default=None, gt=0)
    """Teacher sampling temperature; None uses ``temperature``. Held-out evaluation is greedy."""
    teacher_top_p: Float | None = Field(default=None, gt=0, le=1)
    """Teacher nucleus mass; None uses ``top_p``."""
    student_temperature: Float | None = Field(default=None, gt=0)
    """Student sampling temperature; None uses ``temperature``."""
    student_top_p: Float | None = Field(default=None, gt=0, le=1)
    """Student nucleus mass; None uses ``top_p``."""
    student_stop: tuple[str, ...] = ()
    r"""Student rollout stop strings, kept like an EOS (``["\n"]``: one-line answers); empty: EOS or the cap. Not in eval."""
    teacher_stop: tuple[str, ...] = ()
    r"""Stop strings of free-form teacher rollouts, kept like an EOS (``["\n"]``: one proposal line, what
    arith parses); a task's structured proposals (segments) stop as their segments say. Empty: EOS or the cap."""
    agreement: AgreementConfig = AgreementConfig()
    """The agreement gate on valid proposals (off by default; see :class:`AgreementConfig`)."""
    guidance: Literal["none", "unsolved", "all"] = "none"
    """Off-policy guidance (:mod:`evolora.selfplay.guidance`, LUFFY arXiv 2504.14945): the task's reference
    answer joins a student's GRPO group with the ``correct`` reward, on problems none of its attempts
    solved (``unsolved``) or on every valid one (``all``). ŝ, teacher rewards and ratings ignore it.
    Needs a task with reference solutions (arith)."""
    critic_max_new_tokens: Int = Field(default=8, ge=1)
    """Tokens of a critic's verdict after the forced ``Verdict:`` (a word or two)."""
    critic_temperature: Float | None = Field(default=None, gt=0)
    """Critic sampling temperature; None uses ``temperature``."""
    critic_top_p: Float | None = Field(default=None, gt=0, le=1)
    """Critic nucleus mass; None uses ``top_p``."""
    critic_samples: Int = Field(default=1, ge=1, le=64)
    """Verdicts k per reviewed answer (not ``eval.critic_samples``). k > 1: the k verdicts on one
    answer are a GRPO group, the advantage times the balanced class weight; a critic that says the
    same k times gets 0 (:func:`evolora.critic.verdict_sample`). 1: the critic's reviews are one group."""
    critic_entropy: Float = Field(default=0.0, ge=0)
    """β of the marginal-verdict-entropy bonus β (−log q(v) − H(q)) on each verdict's sample reward,
    q = the critic's verdict shares in the step (:func:`evolora.critic.entropy_bonuses`); 0: off."""
    critic_std: bool = True
    """Divide a critic group's centred rewards by their std (as every group); False: centre only
    (Dr. GRPO, arXiv 2503.20783), so ``critic_entropy`` acts by its size, not only its sign."""
    critic_reviews: Int | None = Field(default=None, ge=2)
    """Answers each critic reviews per step, up to half from each true class (the rest from the
    other; :func:`evolora.critic.pick_reviews`); None: every parsed answer of its student."""
    generation_batch_size: Int | None = Field(default=None, ge=1)
    """Rows per decode batch (all adapters mixed in one batch); None: the engine's default for the
    device (16 on a CPU, 256 on a GPU: :data:`evolora.generation.engine.BATCH_SIZE`)."""
    teacher_prompt: Literal["per_proposal", "per_teacher"] = "per_proposal"
    """per_teacher: one prompt per teacher and step for all its proposals (one GRPO group, prefilled once)."""
    matchmaking: MatchmakingConfig = MatchmakingConfig()
    rewards: RewardConfig = RewardConfig()

    @field_validator("student_stop", "teacher_stop")
    @classmethod
    def _no_empty_stop(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if any(not stop for stop in value):
            raise ValueError("an empty stop string would end every answer at once; give e.g. ['\\n'] or []")
        return value

    def sampling(self, role: str, stop: tuple = ()) -> Sampling:
        """The role's rollout settings (its temperature, top-p and token cap; ``stop``: the stop
        strings or patterns of its free-form rows), the one value that goes to the engine.

        Raises:
            ValueError: ``role`` is none of :data:`evolora.game.POPULATION_ROLES`.
        """
        if role not in POPULATION_ROLES:
            raise ValueError(f"unknown role {role!r}; use one of {', '.join(POPULATION_ROLES)}")
        own = lambda key: getattr(self, f"{role}_{key}")  # noqa: E731
        return Sampling(
            temperature=own("temperature") if own("temperature") is not None else self.temperature,
            top_p=own("top_p") if own("top_p") is not None else self.top_p,
            max_new_tokens=own("max_new_tokens"),
            stop=tuple(stop),
        )
