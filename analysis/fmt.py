"""Small number formatters of reports, tables and console lines: one module, so that a report
and a console line written by different analyses print a number alike.

Formatters that print alike are one function here; where two analyses print a number
differently both behaviours are kept under their own names (the reports must not change by a
byte):

- :func:`num`: ``-`` for None or a non-finite float, ``%.{digits}g`` for a float, ``str``
  otherwise (an int prints in full);
- :func:`num_significant`: ``-`` for None or a non-finite float, ``%.{digits}g`` for any number (an int
  of more than ``digits`` digits prints in exponent form);
- :func:`num_nan`: ``-`` for None or NaN only (an infinity prints ``inf``), ``%.{digits}g``
  otherwise;
- :func:`value`: ``%.4g`` for a float, ``str`` otherwise (None prints ``None``): parameter
  values in labels;
- :func:`short`: ``%g`` for a float, ``str`` otherwise: parameter values in console lines;
- :func:`pct`: a fraction as a percentage, signed to 2 decimals or unsigned to 1;
- :func:`pow10` and :func:`sci`: ``10^6`` / ``10^6.5`` for a decimal exponent or a number;
- :func:`pm`: ``v ± hw``, without the ``±`` where the half-width is rounding noise of a
  deterministic value (``3.691 ± 2.9e-16`` prints ``3.691``);
- :func:`interval`: ``[lo, hi]`` with enough digits that a nonzero width shows (a CI of
  +-0.00002 printed to 4 digits would read ``0.3293 [0.3293, 0.3293]``);
- :func:`positive`: a positive limit value, ``< 1e-300`` where it underflowed to 0.
"""
from __future__ import annotations

import math

__all__ = ["num", "num_significant", "num_nan", "value", "short", "pct", "pow10", "sci", "pm", "interval", "positive",
           "ROUNDING_REL", "UNDERFLOW"]


def _missing(v) -> bool:
    return v is None or (isinstance(v, float) and not math.isfinite(v))


def num(v, digits: int = 4) -> str:
    """``-`` for None, NaN or an infinity; a float to ``digits`` significant digits
    (``%g``); anything else (an int, a string) as ``str``."""
    if _missing(v):
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def num_significant(v, digits: int = 4) -> str:
    """``-`` for None, NaN or an infinity; any number to ``digits`` significant digits
    (``%g``, ints included: ``123456`` -> ``1.235e+05``)."""
    if _missing(v):
        return "-"
    return f"{v:.{digits}g}"


def num_nan(v, digits: int = 4) -> str:
    """``-`` for None or NaN; any other number to ``digits`` significant digits (``%g``: an
    infinity prints ``inf``, an int of more than ``digits`` digits in exponent form)."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}g}"


def value(v) -> str:
    """``0.9`` for a float (``%.4g``), ``str(v)`` otherwise: parameter values in labels."""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def short(v) -> str:
    """``0.9`` for a float (``%g``), ``str(v)`` otherwise: parameter values in console lines."""
    return f"{v:g}" if isinstance(v, float) else str(v)


def pct(v, sign: bool = True) -> str:
    """A fraction as a percentage: ``+1.23%`` (signed, 2 decimals) or ``1.2%``; ``-`` for None."""
    if v is None:
        return "-"
    return f"{100 * v:+.2f}%" if sign else f"{100 * v:.1f}%"


def pow10(e: float) -> str:
    """``10^6`` for a whole decimal exponent, else ``10^6.5`` (one decimal)."""
    return f"10^{e:.0f}" if abs(e - round(e)) < 1e-9 else f"10^{e:.1f}"


def sci(n) -> str:
    """A positive number as a power of ten: ``10^6``, or ``10^6.5`` between powers."""
    return pow10(math.log10(n))


def n_value(n) -> str:
    """An N for a sentence: the integer below 10^5 (``316``), a power of ten from there
    (``10^6``, ``10^6.5``)."""
    return f"{int(round(n))}" if n < 1e5 else sci(n)


def n_span(a, b) -> str:
    """The range of N a claim rests on: ``N = 100..10^6``."""
    return f"N = {n_value(a)}..{n_value(b)}"


#: a half-width at most this fraction of its value is rounding noise of a deterministic value
#: (replications that agree to the last bits: the buffered arm's E[T] = H_k in every run)
ROUNDING_REL = 1e-12


def pm(v, hw, digits: int = 4) -> str:
    """``v ± hw`` (``v`` by :func:`num`, ``hw`` to 2 digits); ``v`` alone when there is no
    half-width, or when it is at most :data:`ROUNDING_REL` of ``|v|`` (rounding noise, not an
    uncertainty: ``3.691 ± 2.9e-16`` prints ``3.691``); ``-`` for a missing ``v``."""
    if v is None:
        return "-"
    if _missing(hw) or hw == 0.0 or (not _missing(v) and abs(hw) <= ROUNDING_REL * abs(v)):
        return num(v, digits)
    return f"{num(v, digits)} ± {num(hw, 2)}"


def interval(lo, hi, digits: int = 3, max_digits: int = 8) -> str:
    """``[lo, hi]`` to ``digits`` significant digits, more (up to ``max_digits``) where fewer
    would print the two ends alike although they differ: a narrow interval shows its width
    (``[0.32928, 0.32932]``, never ``[0.3293, 0.3293]``). ``-`` for a missing end."""
    def text(v, n):
        return "-" if _missing(v) else f"{v:.{n}g}"
    n = digits
    while (n < max_digits and not _missing(lo) and not _missing(hi) and lo != hi
           and text(lo, n) == text(hi, n)):
        n += 1
    return f"[{text(lo, n)}, {text(hi, n)}]"


#: below this a positive limit value is printed as a bound: 0.0 there is an underflow of the
#: double range (about 1e-308), not a zero
UNDERFLOW = 1e-300


def positive(v, digits: int = 3) -> str:
    """A value that is positive by construction (a limit's queueing ratio, an excess computed
    directly): ``%.{digits}g``, or ``< 1e-300`` when it is below :data:`UNDERFLOW` (0.0 is then
    the double range's underflow); ``-`` for None or NaN."""
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if 0 <= v < UNDERFLOW:
        return f"< {UNDERFLOW:g}"
    return f"{v:.{digits}g}"
