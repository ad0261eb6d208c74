"""Results on stdout that outlive their reader: ``evolora evolve ... | head`` must not stop the run.

When the program reading stdout exits (``head``, a closed pager), the next write fails with EPIPE.
:class:`ResultStream` then points stdout at the null device, says so once on stderr, and lets the
caller go on: the run finishes and its results stay in the run directory.
"""

from __future__ import annotations

import io
import os
import sys
from typing import Callable


class ResultStream(io.TextIOBase):
    """A text stream over ``stream`` (default: ``sys.stdout`` at each call) that swallows a broken pipe.

    Args:
        stream: the stream written to; None follows ``sys.stdout`` (a test runner may replace it).
        say: called once with a note when the reader has gone (default: nothing).
    """

    def __init__(self, stream=None, say: Callable[[str], None] | None = None) -> None:
        super().__init__()
        self._stream = stream
        self._say = say

    @property
    def stream(self):
        return self._stream if self._stream is not None else sys.stdout

    def write(self, text: str) -> int:
        try:
            return self.stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    def _reader_gone(self) -> None:
        """Send the rest of stdout to the null device (also what Python flushes at exit), once."""
        try:
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, self.stream.fileno())
            os.close(null)
        except (OSError, ValueError, io.UnsupportedOperation):  # no file descriptor: nothing to redirect
            return
        if self._say is not None:
            self._say(
                "the reader of stdout has gone (e.g. `| head`); the run goes on and its results stay in its directory"
            )
