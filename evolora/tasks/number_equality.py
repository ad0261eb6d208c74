"""Comparing a predicted number with the reference: exact for integers and rationals, a tolerance
only between genuinely non-integer values, float noise forgiven.

``numbers_equal(0.1 + 0.2, 0.3)`` is True; ``numbers_equal(7, 7.0000001)`` is False (an integer
answer must be exact); ``numbers_equal(2.5, 2.5000001, rel=1e-6)`` is True. Reading numbers from
text is :mod:`evolora.tasks.numeric`. Source: PopuLoRA (arXiv 2605.16727) §2 step 4 (grading).
"""

from __future__ import annotations

import math
import numbers
from decimal import Decimal
from fractions import Fraction

from evolora.tasks.numeric import EXACT_FLOAT_INT, FLOAT_NOISE

_abs = abs  # numbers_equal's keyword ``abs`` shadows the builtin there


def _exact(value) -> tuple[Fraction, bool] | None:
    """(exact value, carries float rounding noise) of a number; None for None/inf/nan/non-numbers."""
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return Fraction(value), not (value.is_integer() and _abs(value) <= EXACT_FLOAT_INT)
    if isinstance(value, (numbers.Rational, Decimal)) and not isinstance(value, bool):
        try:
            return Fraction(value), False
        except (ValueError, OverflowError):  # Decimal nan/inf
            return None
    return None


def _within_noise(gap: Fraction, size: Fraction) -> bool:
    return gap <= FLOAT_NOISE * max(size, 1)  # relative, and absolute near zero (0.1 + 0.2 - 0.3)


def _integer_like(value: Fraction, noisy: bool) -> bool:
    return value.denominator == 1 or (noisy and _within_noise(_abs(value - round(value)), _abs(value)))


def _nearest_integer(value: Fraction, noisy: bool, other: Fraction) -> bool:
    """False when ``other`` is an integer and ``value`` a noisy float (exact below 2**53) nearer another one."""
    return not (noisy and other.denominator == 1 and _abs(value) <= EXACT_FLOAT_INT and round(value) != other)


def numbers_equal(a, b, rel: float = 1e-6, abs: float = 1e-6) -> bool:  # noqa: A002 (public keyword)
    """True when ``a`` and ``b`` (int, float, Fraction or Decimal; None is never equal)
    are the same number.

    Integers and rationals compare exactly (``1000001`` is not ``1e6``; huge integers
    beyond float precision too). A float operand may differ by its rounding noise
    (:data:`FLOAT_NOISE`), so ``0.1 + 0.2`` equals ``0.3`` and a float reference
    ``17.999999999999996`` equals ``18`` (its nearest integer only, never ``17`` or ``19``).
    Only when neither value is an integer (a float within its noise of one counts as one)
    are they compared with ``rel`` (relative) or ``abs`` (absolute) tolerance, as
    :func:`math.isclose`. Never raises.

    >>> numbers_equal(0.1 + 0.2, 0.3), numbers_equal(18, 18.5), numbers_equal(None, 1)
    (True, False, False)
    >>> numbers_equal(1000001, 1e6), numbers_equal(Fraction(1, 3), 0.333333), numbers_equal(10**20 + 1, 10**20)
    (False, True, False)
    """
    x, y = _exact(a), _exact(b)
    if x is None or y is None:
        return False
    (x, x_noisy), (y, y_noisy) = x, y
    if x == y:
        return True
    gap, size = _abs(x - y), max(_abs(x), _abs(y))
    if (
        (x_noisy or y_noisy)
        and _within_noise(gap, size)
        and _nearest_integer(x, x_noisy, y)
        and _nearest_integer(y, y_noisy, x)
    ):
        return True
    if _integer_like(x, x_noisy) or _integer_like(y, y_noisy):
        return False
    return gap <= max(Fraction(rel) * size, Fraction(abs))
