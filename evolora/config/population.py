"""The ``population`` section: a mapping role → number of members, in one of two forms.

    population: {teachers: 2, students: 2}           # the named form (kept for every existing config)
    population: {roles: {teacher: 2, student: 2}}    # the general form: one size per role
    population: {roles: {teacher: 2, student: 2, critic: 2}}   # with critics (or critics: 2)

The first two give ``PopulationConfig.roles == {"teacher": 2, "student": 2}`` and the same
``teachers``/``students``; the roles are those of the ``population`` arm's pipeline
(:data:`evolora.game.POPULATION_ROLES`). ``teacher`` and ``student`` are required
(:data:`evolora.game.REQUIRED_ROLES`); ``critic`` is optional (``critics: 0``, the default, is a
run without critics, which then has no ``critic`` role). Any other role name (``judge: 2``) is a
further role, kept in ``others`` and played by a game of ``selfplay.plays``
(:mod:`evolora.config.plays`). A config mixing the two forms, naming a role no game plays, or
leaving a required one out is refused with the key to change. The resolved config is stored in the
named form.

Source: PopuLoRA (arXiv 2605.16727) §2 (teacher and student populations; paper: 4 each);
SPC (arXiv 2504.19162) for the critic.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator, model_validator

from evolora.config.types import Int, _Section
from evolora.game import POPULATION_ROLES, REQUIRED_ROLES
from evolora.spelling import did_you_mean

_NAMED = {role: f"{role}s" for role in POPULATION_ROLES}  # teacher -> teachers (the named form's keys)
_ROLE_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")
RESERVED_ROLES = ("agent",)
"""Role names a population may not declare: the single agent's (``selfplay.mode=single_agent``)."""


class PopulationConfig(_Section):
    teachers: Int = Field(default=2, ge=1, le=64)
    """Number of teacher individuals (paper: 4); ``roles.teacher`` in the general form."""
    students: Int = Field(default=2, ge=1, le=64)
    """Number of student individuals (paper: 4); ``roles.student`` in the general form."""
    critics: Int = Field(default=0, ge=0, le=64)
    """Number of critic individuals, who judge the students' answers (0: none, the paper's setup);
    ``roles.critic`` in the general form."""
    others: dict[str, Int] = Field(default_factory=dict)
    """Members of each further role, one a game of ``selfplay.plays`` plays (``roles: {judge: 2}``
    puts ``judge: 2`` here; :mod:`evolora.config.plays`); {}: none, the paper's setup."""

    @model_validator(mode="before")
    @classmethod
    def _from_roles(cls, data: Any) -> Any:
        """Read the general form ``roles: {teacher: 2, student: 2}`` into the named fields."""
        if not isinstance(data, dict) or "roles" not in data:
            return data
        named = [key for key in _NAMED.values() if key in data]
        if named:
            raise ValueError(
                f"population.roles and population.{named[0]} both given; declare the sizes once, "
                "either roles: {teacher: 2, student: 2} or teachers: 2, students: 2"
            )
        roles = data["roles"]
        if not isinstance(roles, dict):
            raise ValueError(
                f"population.roles must map each role to its size, such as {{teacher: 2, student: 2}}, got {roles!r}"
            )
        missing = [role for role in REQUIRED_ROLES if role not in roles]
        if missing:
            raise ValueError(
                f"population.roles: give a size for {missing[0]!r} too; the game needs "
                f"every one of {', '.join(REQUIRED_ROLES)}"
            )
        for role, size in roles.items():
            if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 64:
                raise ValueError(f"population.roles.{role} must be a whole number from 1 to 64, got {size!r}")
        rest = {key: value for key, value in data.items() if key != "roles"}
        others = {role: size for role, size in roles.items() if role not in POPULATION_ROLES}
        return {
            **rest,
            **{_NAMED[role]: roles[role] for role in POPULATION_ROLES if role in roles},
            **({"others": others} if others else {}),
        }

    @field_validator("others")
    @classmethod
    def _check_others(cls, others: dict[str, int]) -> dict[str, int]:
        """Further roles: lowercase names that are not the game's or the single agent's, with
        first letters (their ids' and slots') no other role has, sized 1 to 64."""
        initials = {role[0]: role for role in POPULATION_ROLES}
        for role, size in others.items():
            if not _ROLE_NAME.fullmatch(str(role)) or role in POPULATION_ROLES or role in RESERVED_ROLES:
                raise ValueError(
                    f"population.roles: {role!r} cannot name a further role; use a lowercase word "
                    f"(letters, digits, _) other than {', '.join((*POPULATION_ROLES, *RESERVED_ROLES))}"
                )
            if role[0] in initials:
                raise ValueError(
                    f"population.roles: {role!r} and {initials[role[0]]!r} share a first letter, which "
                    "names the ids and slots of their members; rename one"
                )
            initials[role[0]] = role
            if not 1 <= size <= 64:
                raise ValueError(f"population.roles.{role} must be a whole number from 1 to 64, got {size!r}")
        return others

    @property
    def roles(self) -> dict[str, int]:
        """Members per role, in the pipeline's order: ``{"teacher": 2, "student": 2}``, with
        ``"critic"`` after them when ``critics > 0``, then the further roles (``others``)."""
        named = {
            role: getattr(self, key) for role, key in _NAMED.items() if role in REQUIRED_ROLES or getattr(self, key) > 0
        }
        return {**named, **self.others}

    def key(self, role: str) -> str:
        """The config key of ``role``'s size, for error messages (``population.teachers``)."""
        return f"population.{_NAMED.get(role, role)}"


def check_evolvable(population: PopulationConfig, evolution) -> None:
    """Refuse an evolution that could never replace anyone, or a crossover without two parents.

    Args:
        population: the role sizes; evolution: the :class:`evolora.config.EvolutionConfig`.

    Raises:
        ValueError: ``evolution.roles`` names a role the population does not have,
            ``evolution.elitism`` protects every member of a role while ``gamma > 0``,
            or a crossover is possible but a role's parent pool holds fewer than 2 members.
    """
    evo = evolution
    unknown = sorted(set(evo.roles) - set(population.roles))
    if unknown:
        raise ValueError(
            f"evolution.roles.{unknown[0]}: no such role in the population; "
            f"{did_you_mean(unknown[0], population.roles)}its roles: {', '.join(population.roles)}"
        )
    for role, size in population.roles.items():
        if evo.elitism >= size and evo.gamma > 0:  # a silent no-op evolution is a config bug
            raise ValueError(
                f"evolution.elitism={evo.elitism} protects every {role} ({size} in all); "
                f"set evolution.elitism below {population.key(role)} or evolution.gamma to 0"
            )
    if evo.crossover_rate > 0 and evo.gamma > 0:
        from evolora.operators.selection import num_replaced

        for role, size in population.roles.items():
            pool = size if evo.parent_pool == "role" else size - num_replaced(size, evo.gamma, evo.elitism)
            if pool < 2:
                raise ValueError(
                    f"a crossover needs 2 parents but {population.key(role)}={size} leaves {pool} "
                    f"(evolution.parent_pool={evo.parent_pool}); grow {population.key(role)} "
                    "or set evolution.crossover_rate=0"
                )
