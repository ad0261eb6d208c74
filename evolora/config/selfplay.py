"""Self-play sections of the run configuration: matchmaking, rewards and the game's rollouts
(:class:`SelfPlayConfig`, the ``selfplay`` key), re-exported by :mod:`evolora.config`.
Source: PopuLoRA (arXiv 2605.16727) §2 steps 1-4."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from evolora.config.plays import PlayConfig
from evolora.config.renamed import RENAMED
from evolora.config.roles import ReviewConfig, RoleSampling, default_roles, merge_roles
from evolora.config.types import Float, Int, _Section
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
    roles: dict[str, RoleSampling] = Field(default_factory=default_roles)
    """Rollout settings per role name (:class:`evolora.config.roles.RoleSampling`: ``temperature``,
    ``top_p``, ``max_new_tokens``, ``stop``), e.g. ``roles: {student: {temperature: 0.5, stop: ["\\n"]}}``.
    Each built-in role (teacher, student, critic) keeps its defaults under the keys a config leaves
    out; a role of one's own (``roles.judge``) takes the section's defaults."""
    temperature: Float = Field(default=1.0, gt=0)
    """Sampling temperature of every role without its own (``roles.<name>.temperature`` None)."""
    top_p: Float = Field(default=1.0, gt=0, le=1)
    """Nucleus mass of every role without its own (``roles.<name>.top_p`` None)."""
    agreement: AgreementConfig = AgreementConfig()
    """The agreement gate on valid proposals (off by default; see :class:`AgreementConfig`)."""
    guidance: Literal["none", "unsolved", "all"] = "none"
    """Off-policy guidance (:mod:`evolora.selfplay.guidance`, LUFFY arXiv 2504.14945): the task's reference
    answer joins a student's GRPO group with the ``correct`` reward, on problems none of its attempts
    solved (``unsolved``) or on every valid one (``all``). ŝ, teacher rewards and ratings ignore it.
    Needs a task with reference solutions (arith)."""
    review: ReviewConfig = ReviewConfig()
    """How critics review the students' answers (:class:`evolora.config.roles.ReviewConfig`; runs with critics only)."""
    generation_batch_size: Int | None = Field(default=None, ge=1)
    """Rows per decode batch (all adapters mixed in one batch); None: the engine's default for the
    device (16 on a CPU, 256 on a GPU: :data:`evolora.generation.engine.BATCH_SIZE`)."""
    teacher_prompt: Literal["per_proposal", "per_teacher"] = "per_proposal"
    """per_teacher: one prompt per teacher and step for all its proposals (one GRPO group, prefilled once)."""
    matchmaking: MatchmakingConfig = MatchmakingConfig()
    rewards: RewardConfig = RewardConfig()
    plays: tuple[PlayConfig, ...] = ()
    """Further games of every step, after the arm's own, each ``{play: NAME, proposer: ROLE, solver: ROLE}``:
    a registered play or ``package.module:function`` and the roles on its two sides
    (:mod:`evolora.config.plays`, :mod:`evolora.plays`); empty: none."""

    @field_validator("roles", mode="before")
    @classmethod
    def _merge_roles(cls, value):
        return merge_roles(value)

    @model_validator(mode="before")
    @classmethod
    def _no_old_keys(cls, data):
        old = [key for key in data if key in RENAMED] if isinstance(data, dict) else []
        if old:  # configs are renamed when they load (evolora.config.renamed); this is the Python API
            raise ValueError(f"{old[0]} is now {'.'.join(RENAMED[old[0]])}; pass it there")
        return data

    def sampling(self, role: str, stop: tuple | None = None) -> Sampling:
        """The role's rollout settings (``roles[role]``: its temperature and top-p, else the
        section's, and its token cap), the one value that goes to the engine.

        Args:
            role: a key of ``roles`` (``teacher``, ``student``, ``critic`` or a role of one's own).
            stop: the stop strings or patterns of its free-form rows; None: the role's own ``stop``.

        Raises:
            ValueError: ``roles`` holds no settings for ``role``; the message names the key to add.
        """
        own = self.roles.get(role)
        if own is None:
            raise ValueError(
                f"no rollout settings for role {role!r}: add selfplay.roles.{role} (max_new_tokens, "
                f"temperature, top_p, stop); the roles with settings are {', '.join(self.roles)}"
            )
        return Sampling(
            temperature=own.temperature if own.temperature is not None else self.temperature,
            top_p=own.top_p if own.top_p is not None else self.top_p,
            max_new_tokens=own.max_new_tokens,
            stop=own.stop if stop is None else tuple(stop),
        )
