"""Which new tokens could end a stop string: a (V,) mask on the device, so the host decodes only those rows.

The graph engine's host check (:meth:`evolora.generation.graph.GraphDecoder._check`) decodes the
tail of every live row at every step since the last check (``StopOnText.tails``: a
``batch_decode`` of the last 8 tokens). A row's tail text first holds a stop string at step t
only if the occurrence ends inside the text of token t, so token t's text ``u`` (decoded alone)

* holds the stop string s, or
* starts with a non-empty proper suffix of s (the occurrence began in earlier tokens).

:func:`stop_mask` marks every vocabulary id whose text could do that; :func:`stop_flags` reads it at
the step's new tokens (a gather, on any device, like the step's ``eos`` mask); :func:`flagged_stop_ends`
runs the host check over the flagged (row, step) pairs only. The mask is built to err towards
checking: an id is marked when any of its texts qualifies, alone or after another token (a leading
space a SentencePiece tokenizer drops alone), with its leading spaces removed (the spaces
``clean_up_tokenization_spaces`` deletes), or when its text holds U+FFFD (the partial UTF-8
character of a byte-level token, whose text depends on its neighbours). Ids the tokenizer does not
know (a model's padded vocabulary rows) are marked. A compiled pattern stop marks every id (every
live row checked, as now).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import torch

from evolora.generation.types import Stop

if TYPE_CHECKING:
    from evolora.hf_types import Tokenizer

REPLACEMENT = "\ufffd"
"""What a byte-level tokenizer decodes an incomplete UTF-8 character to."""


def could_end(text: str, stop: str) -> bool:
    """Whether a token with text ``text``, appended to any text, can complete an occurrence of ``stop``:
    ``text`` holds it, or starts with a non-empty proper suffix of it."""
    return stop in text or any(text.startswith(stop[k:]) for k in range(1, len(stop)))


def _texts(tokenizer: Tokenizer, ids: list[int]) -> list[list[str]]:
    """Per id: its text alone and after an anchor token, each also with its leading spaces removed."""
    alone = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True)
    anchor_ids = tokenizer.encode("a", add_special_tokens=False)[:1]
    anchor = tokenizer.decode(anchor_ids, skip_special_tokens=True)
    after = tokenizer.batch_decode([anchor_ids + [i] for i in ids], skip_special_tokens=True)
    after = [t[len(anchor) :] if t.startswith(anchor) else t for t in after]
    return [[u, u.lstrip(" "), v, v.lstrip(" ")] for u, v in zip(alone, after)]


def stop_mask(
    tokenizer: Tokenizer, stops: Sequence[Stop], size: int | None = None, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """(V,) bool: True for every token id whose text could end one of ``stops`` (see the module).

    Args:
        tokenizer: the rollouts' tokenizer (decoded with ``skip_special_tokens=True``, as
            :class:`evolora.generation.stops.StopOnText` does).
        stops: stop strings (a compiled pattern marks every id).
        size: V, the model's vocabulary rows (default ``len(tokenizer)``); ids from
            ``len(tokenizer)`` on are marked.
        device: where the mask lives (the step's device).

    Raises:
        ValueError: an empty stop string, or a ``size`` below 1.
    """
    size = len(tokenizer) if size is None else size
    if size < 1:
        raise ValueError(f"size must be at least 1 vocabulary row, got {size}")
    if any(isinstance(s, str) and not s for s in stops):
        raise ValueError("a stop string must not be empty")
    if any(isinstance(s, re.Pattern) for s in stops):
        return torch.ones(size, dtype=torch.bool, device=device)
    known = min(size, len(tokenizer))
    marked = (
        [
            any(REPLACEMENT in text or any(could_end(text, s) for s in stops) for text in texts)
            for texts in _texts(tokenizer, list(range(known)))
        ]
        if stops
        else [False] * known
    )
    mask = torch.ones(size, dtype=torch.bool, device="cpu")  # built on the host, then moved once
    mask[:known] = torch.tensor(marked, dtype=torch.bool, device="cpu")
    return mask.to(device)


def stop_flags(mask: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``mask[tokens]``: which of the step's new tokens (any shape, long) could end a stop string;
    one gather on the tokens' device, no host sync."""
    return mask[tokens]


def flagged_stop_ends(
    out: torch.Tensor, flags: torch.Tensor, stopped: Callable, checked: int, steps: int, ends: list
) -> list[tuple[int, int]]:
    """The stop-string part of the graph engine's host check, decoding only flagged rows.

    For t in (checked, steps]: the rows still live at t (``ends[i]`` None or ≥ t − 1) whose token
    t − 1 is flagged are passed to ``stopped(out[rows, :t], rows, t)`` in one call (a batch
    decode); a row that holds a stop gets ``ends[i] = t − 1``. The ends equal the unflagged
    check's whenever the mask marks every token that completes a stop (:func:`stop_mask`).

    Args:
        out: (B, ≥ steps) long, the generated tokens (on the host).
        flags: (B, ≥ steps) bool, :func:`stop_flags` of ``out`` (True: check this row at this step).
        stopped: the stop check, :meth:`evolora.generation.stops.StopOnText.tails`'s signature.
        checked, steps: the steps already checked and the steps generated.
        ends: per row, the step of its EOS or stop, or None; updated in place.

    Returns:
        (row, t) of each row that the check ended (its tokens from t on are the caller's to pad).
    """
    candidates: dict[int, list[int]] = {}
    for i, k in torch.nonzero(flags[:, checked:steps]).tolist():  # one pass over the flags, then by step
        candidates.setdefault(checked + 1 + k, []).append(i)
    hits = []
    for t in sorted(candidates):
        rows = [i for i in candidates[t] if ends[i] is None or ends[i] >= t - 1]
        if not rows:
            continue
        index = torch.tensor(rows, device=out.device)
        for i, hit in zip(rows, stopped(out[index, :t], index, t).tolist()):
            if hit and (ends[i] is None or ends[i] > t - 1):
                ends[i] = t - 1
                hits.append((i, t))
    return hits


class FlaggedStop:
    """A stop check that also says which tokens could end a stop: what a decode loop is given as
    ``stopped`` when it may skip rows whose new token is not flagged.

    Called as :meth:`evolora.generation.stops.StopOnText.tails` (``(generated (R, t) long, rows (R,),
    t) -> (R,) bool``); ``mask`` (V,) bool on the host (:func:`stop_mask`); :meth:`on` its copy on a
    device, made once per device. A loop that reads ``mask`` checks a row at step t only when its
    token t − 1 is flagged, and ends the same rows at the same steps as one that checks every row
    (tests/test_stops.py); a loop that does not simply calls it.

    Raises:
        ValueError: a mask that is not a 1-D bool tensor.
    """

    def __init__(self, check: Callable[[torch.Tensor, torch.Tensor, int], torch.Tensor], mask: torch.Tensor) -> None:
        if mask.dim() != 1 or mask.dtype != torch.bool:
            raise ValueError(f"the stop mask must be a (V,) bool tensor, got {mask.dtype} {tuple(mask.shape)}")
        self.check, self.mask = check, mask.cpu()
        self._copies: dict[str, torch.Tensor] = {"cpu": self.mask}

    def __call__(self, generated: torch.Tensor, rows: torch.Tensor, t: int) -> torch.Tensor:
        return self.check(generated, rows, t)

    def on(self, device: torch.device | str) -> torch.Tensor:
        """The mask on ``device`` (copied there once)."""
        key = str(torch.device(device))
        if key not in self._copies:
            self._copies[key] = self.mask.to(device)
        return self._copies[key]

    def shifted(self, offset: int) -> FlaggedStop:
        """The same check for rows numbered from ``offset`` (a chunk of a larger batch), same mask."""
        moved = FlaggedStop(lambda generated, rows, t: self.check(generated, rows + offset, t), self.mask)
        moved._copies = self._copies
        return moved


def flagged_rows(stopped, tokens: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
    """(n,) long: the rows a step's stop check must decode, the not-``done`` rows whose new token
    ``tokens`` (R,) could end a stop (every not-done row when ``stopped`` carries no mask)."""
    live = ~done
    if isinstance(stopped, FlaggedStop):
        live &= stopped.on(tokens.device)[tokens]
    return torch.nonzero(live).flatten()
