"""The adapter bank interface (:mod:`evolora.bank.protocol`: :class:`Bank`, and what a run asks
beyond it of an in-process or a Ray bank) and the in-process bank (:mod:`evolora.bank.local`)."""

from __future__ import annotations

from evolora.bank.protocol import BANK_METHODS, Bank, LocalBank, RemoteBank, RunBank

__all__ = ["BANK_METHODS", "Bank", "LocalBank", "RemoteBank", "RunBank"]
