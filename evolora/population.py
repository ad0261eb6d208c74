"""Individuals and populations: the pure handles of a run's members, no tensors.

An :class:`Individual` is a small, cheap-to-copy handle (id, role, slot, lineage). Its heavy LoRA
factors live in the adapter bank (:class:`evolora.bank.local.AdapterBank`, or the Ray
:class:`evolora.distributed.sharded_bank.ShardedBank`), in the slot the handle names.

Source: PopuLoRA (arXiv 2605.16727) §1-2 (one frozen base shared by every adapter; a child
takes over the slot of the individual it replaces).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from evolora.game import Game


@dataclass
class Individual:
    """One member of the population: a handle on an adapter slot plus its lineage.

    Attributes:
        id: unique for the whole run, e.g. ``"t0"``, ``"s5"`` (never reused).
        role: a role of the run's game (:mod:`evolora.game`): ``"teacher"``, ``"student"``, or
            ``"agent"`` (the single-agent baseline, which proposes and solves).
        slot: name of the PEFT adapter in the bank holding its factors, e.g. ``"T0"``.
        parents: ids of the parents ((), one or two).
        operator: how it was born: ``"init"`` or an operator name such as ``"svd_merge"``.
        born_step: RL step at which it was born (0 for the initial population).
    """

    id: str
    role: str
    slot: str
    parents: tuple[str, ...] = ()
    operator: str = "init"
    born_step: int = 0

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "role": self.role,
            "slot": self.slot,
            "parents": list(self.parents),
            "operator": self.operator,
            "born_step": self.born_step,
        }

    @classmethod
    def from_dict(cls, data: dict) -> Individual:
        return cls(
            id=data["id"],
            role=data["role"],
            slot=data["slot"],
            parents=tuple(data["parents"]),
            operator=data["operator"],
            born_step=data["born_step"],
        )


@dataclass
class Population:
    """The individuals of a run, a mapping role → members, and the id counter for newborns."""

    members: list[Individual] = field(default_factory=list)
    next_index: dict[str, int] = field(default_factory=dict)

    @classmethod
    def initial(cls, sizes: Mapping[str, int]) -> Population:
        """Founders of every role, in the order of ``sizes``: role ``teacher`` gets ids ``t0..`` on
        slots ``T0..``, ``student`` ``s0..`` on ``S0..``, the single ``agent`` ``a0`` on ``A0``.

        Raises:
            ValueError: two roles share a first letter (their ids and slots would collide).
        """
        initials = [role[0] for role in sizes]
        if len(set(initials)) != len(initials):
            raise ValueError(f"roles {list(sizes)} share a first letter; ids and slots need distinct ones")
        population = cls()
        for role, size in sizes.items():
            population.next_index[role] = 0
            for index in range(size):
                population.members.append(population.new_individual(role, f"{role[0].upper()}{index}"))
        return population

    @property
    def roles(self) -> list[str]:
        """The roles of the members, in order of first appearance (founders' order)."""
        return list(dict.fromkeys(member.role for member in self.members))

    def players(self, game: Game) -> tuple[list[Individual], list[Individual]]:
        """(proposers, solvers) of ``game``: the members of its two roles (the same list when one
        role plays both sides, as the single agent does)."""
        return self.role(game.proposer), self.role(game.solver)

    def new_individual(self, role: str, slot: str, **lineage) -> Individual:
        """Allocate a fresh id in ``role`` for an individual living in ``slot``."""
        index = self.next_index.setdefault(role, 0)
        self.next_index[role] = index + 1
        return Individual(id=f"{role[0]}{index}", role=role, slot=slot, **lineage)

    def role(self, role: str) -> list[Individual]:
        """The members of ``role``, in population order (empty for a role it does not have)."""
        return [member for member in self.members if member.role == role]

    def by_id(self, individual_id: str) -> Individual:
        for member in self.members:
            if member.id == individual_id:
                return member
        raise KeyError(f"no individual {individual_id!r} in the population")

    def replace(self, old: Individual, new: Individual) -> None:
        self.members[self.members.index(old)] = new

    def state_dict(self) -> dict:
        return {"members": [m.to_dict() for m in self.members], "next_index": dict(self.next_index)}

    @classmethod
    def from_state_dict(cls, data: dict) -> Population:
        return cls(members=[Individual.from_dict(m) for m in data["members"]], next_index=dict(data["next_index"]))


def __getattr__(name: str):
    """``from evolora.population import AdapterBank`` still works, without importing torch here:
    the bank lives in :mod:`evolora.bank.local`."""
    if name == "AdapterBank":
        from evolora.bank.local import AdapterBank

        return AdapterBank
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
