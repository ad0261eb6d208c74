"""A lazily started sandbox worker pool for tasks whose verifier runs programs.

Tasks that mix this in set ``self.workers`` (pool size, >= 1) and ``self._pool = None`` in
their constructor; the pool starts on the first :meth:`_get_pool` call, so building a task
(config validation does) costs no processes, and pickling drops it.
"""

from __future__ import annotations

from evolora.sandbox import SandboxPool
from evolora.tasks.base import Task


class PooledVerifier(Task):
    """A :class:`evolora.tasks.base.Task` whose ``_get_pool()`` starts the :class:`evolora.sandbox.SandboxPool` on first use;
    ``close()`` stops it (a later call starts a new one); pickles without it."""

    workers: int
    _pool: SandboxPool | None

    def _get_pool(self) -> SandboxPool:
        if self._pool is None:
            self._pool = SandboxPool(self.workers)
        return self._pool

    def close(self) -> None:
        """Stop the verifier's worker threads (a later ``verify`` starts new ones)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_pool"] = None
        return state
