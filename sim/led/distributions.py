"""Arrival and service laws of the slotted model, by name, each carrying its own moments.

A law is a :class:`Law` (name, mean, number of trials for the binomial): its ``variance`` is
computed from the name and the mean, so that the heavy-traffic constants of the model
(``zeta = (sigma_Sigma^2 + nu_Sigma^2) / 2``, ``eps``) are derived, never typed in.

- arrivals (tasks reaching one dispatcher in a slot): ``poisson`` (any mean), ``bernoulli``
  (mean <= 1), ``binomial`` (``n`` trials, ``p = mean / n``, mean <= n);
- services (tasks a server can complete in a slot): ``bernoulli`` (mean <= 1), ``binomial``
  (``n`` trials), ``poisson``, ``geometric`` on {0, 1, 2, ...} (``P(S = k) = (1 - q) q^k`` with
  ``q = mu / (1 + mu)``: mean ``mu``, variance ``mu (1 + mu)``; numpy's and scipy's geometric
  start at 1, this one is scipy's ``geom(1 - q, loc=-1)``).

Sampling inside the compiled kernel (:func:`sim.led._slotted_kernel.sample_law`) is exact
inversion by a table: for a law ``X`` on {0, 1, ...} the table holds
``t_k = floor(2**64 * P(X <= k))`` for ``k < K``, with ``K`` the first ``k`` such that
``P(X > k) < 2**-64``; a raw 64-bit draw ``r`` gives ``X = #{k < K : t_k <= r}``, so every atom
has its exact probability to 2**-64 (the law's mass beyond ``K``, below 2**-64, is lumped into
``K``). The ``t_k`` are built from scipy's cdf below the median and its survival function above,
so the tail probabilities keep full relative precision. A guide table (Chen & Asau 1974) of
``G >= K`` cells indexed by the top bits of ``r`` gives the starting ``k``, so a draw costs one
raw number and on average fewer than two comparisons, for any mean. A Poisson law of mean above
:data:`POISSON_PIECE` is the sum of ``ceil(mean / POISSON_PIECE)`` independent Poisson pieces of
equal mean (exact by additivity), which bounds the table length; a binomial or geometric law
whose table would exceed :data:`MAX_TABLE` entries is refused (means of order 10**6 tasks per
slot for the binomial, 4 * 10**4 for the geometric).

The module is light (numpy; scipy is imported only when tables are built): ``check_task`` uses it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from sim.core.declare import INT_LIMIT, Param

__all__ = ["ARRIVAL_DISTS", "SERVICE_DISTS", "TRIALS", "Law", "make_law", "LawTables", "build_tables",
           "POISSON_PIECE", "MAX_TABLE"]

#: arrival laws by name (tasks reaching one dispatcher in one slot)
ARRIVAL_DISTS: tuple[str, ...] = ("poisson", "bernoulli", "binomial")
#: service laws by name (tasks one server can complete in one slot)
SERVICE_DISTS: tuple[str, ...] = ("bernoulli", "binomial", "poisson", "geometric")

#: largest mean of one Poisson piece (larger means are sums of equal pieces)
POISSON_PIECE = float(2**16)
#: largest inversion table (entries) of one law
MAX_TABLE = 2**21

_TWO64 = 2**64
_EPS64 = 2.0**-64


@dataclass(frozen=True)
class Law:
    """A law on {0, 1, 2, ...} by name: ``mean`` and, for the binomial, ``n`` trials."""

    name: str
    mean: float
    n: int | None = None

    @property
    def variance(self) -> float:
        m = self.mean
        if self.name == "poisson":
            return m
        if self.name == "bernoulli":
            return m * (1.0 - m)
        if self.name == "binomial":
            return m * (1.0 - m / self.n)
        if self.name == "geometric":
            return m * (1.0 + m)
        raise ValueError(f"unknown law {self.name!r}")

    @property
    def pieces(self) -> int:
        """Independent pieces summed by the sampler (Poisson of a large mean)."""
        if self.name == "poisson" and self.mean > POISSON_PIECE:
            return int(math.ceil(self.mean / POISSON_PIECE))
        return 1

    def scipy(self):
        """The frozen scipy law of one piece."""
        from scipy import stats

        m = self.mean / self.pieces
        if self.name == "poisson":
            return stats.poisson(m)
        if self.name == "bernoulli":
            return stats.bernoulli(m)
        if self.name == "binomial":
            return stats.binom(self.n, m / self.n)
        if self.name == "geometric":
            return stats.geom(1.0 / (1.0 + m), loc=-1)
        raise ValueError(f"unknown law {self.name!r}")


#: the declarations of ``arrival_n`` and ``service_n``, the trials of a binomial law (the LED
#: model's parameters: :data:`sim.led.model.PARAMS` lists these)
TRIALS = {"arrival": Param("int", "trials of binomial arrivals", domain=(1, INT_LIMIT)),
          "service": Param("int", "trials of binomial services", domain=(1, INT_LIMIT))}


def make_law(name, mean, n=None, *, role: str, what: str) -> Law:
    """A validated :class:`Law`; ``ValueError`` naming ``what`` (the key) and the value.

    ``role`` is ``"arrival"`` or ``"service"`` (their lists of names differ); ``what`` says which
    mean is meant (for example ``"service_rates[3]"`` or ``"lam_m of dispatcher 2"``).
    """
    names = ARRIVAL_DISTS if role == "arrival" else SERVICE_DISTS
    key = f"{role}_dist"
    if not isinstance(name, str) or name not in names:
        raise ValueError(f"{key}={name!r} is unknown; valid: {', '.join(names)}")
    try:
        mean = float(mean)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={mean!r} must be a number") from None
    if not math.isfinite(mean) or mean < 0:
        raise ValueError(f"{what}={mean!r} must be a finite mean >= 0")
    if name == "bernoulli" and mean > 1.0:
        raise ValueError(f"{key}='bernoulli' cannot carry the mean {what}={mean!r} "
                         "(a Bernoulli mean is at most 1)")
    if name == "binomial":
        nk = f"{role}_n"
        if n is None:
            raise ValueError(f"{nk}=None: the binomial {role} law needs {nk}, its number of trials")
        n = TRIALS[role].check(nk, n)
        if mean > n:
            raise ValueError(f"{key}='binomial' with {nk}={n} cannot carry the mean "
                             f"{what}={mean!r} (a binomial mean is at most n)")
    else:
        n = None
    law = Law(name, mean, n)
    # the table bound (a limit of the sampler, far beyond the model's use)
    m = law.mean / law.pieces
    if name == "binomial" and m + 20.0 * math.sqrt(max(law.variance, 1.0)) + 64 > MAX_TABLE:
        raise ValueError(f"{what}={mean!r}: a binomial mean this large is beyond the sampler's "
                         f"table limit ({MAX_TABLE} entries)")
    if name == "geometric" and m > 0 and 45.0 * (1.0 + m) > MAX_TABLE:
        raise ValueError(f"{what}={mean!r}: a geometric mean this large is beyond the sampler's "
                         f"table limit ({MAX_TABLE} entries)")
    return law


def _table(law: Law) -> np.ndarray:
    """The inversion thresholds ``t_k`` (uint64) of one piece of ``law`` (module docstring)."""
    piece_mean = law.mean / law.pieces
    if piece_mean == 0.0:
        return np.zeros(0, dtype=np.uint64)
    dist = law.scipy()
    # a first guess of the support needed (Bernstein's bound for Poisson and binomial, the
    # exact geometric tail), extended until P(X > k) < 2**-64 is reached
    if law.name == "bernoulli":
        upper = 2
    elif law.name == "geometric":
        upper = int(math.ceil(45.0 / math.log1p(1.0 / piece_mean))) + 2
    else:
        upper = int(piece_mean + 10.0 * math.sqrt(piece_mean) + 64)
        if law.name == "binomial":
            upper = min(upper, law.n + 1)
    while True:
        k = np.arange(upper, dtype=np.float64)
        sf = dist.sf(k)  # P(X > k)
        below = np.nonzero(sf < _EPS64)[0]
        if below.size or upper > MAX_TABLE:
            break
        upper *= 2
    kk = int(below[0]) if below.size else upper
    if kk > MAX_TABLE:
        raise ValueError(f"law {law}: inversion table of {kk} entries exceeds {MAX_TABLE}")
    cdf = dist.cdf(k)
    t = []
    for j in range(kk):
        if cdf[j] <= 0.5:
            v = int(math.ldexp(float(cdf[j]), 64))
        else:
            v = _TWO64 - int(math.ceil(math.ldexp(float(sf[j]), 64)))
        t.append(min(max(v, 0), _TWO64 - 1))
    out = np.array(t, dtype=np.uint64)
    return np.maximum.accumulate(out) if out.size else out


class LawTables(NamedTuple):
    """Flat inversion and guide tables of several laws, for the compiled sampler."""

    thr: np.ndarray  #: uint64: thresholds of all laws, concatenated
    off: np.ndarray  #: int64[L+1]: law ``i`` has ``thr[off[i]:off[i+1]]``
    guide: np.ndarray  #: int64: guide tables, concatenated
    goff: np.ndarray  #: int64[L]: first guide cell of law ``i``
    gshift: np.ndarray  #: uint64[L]: ``r >> gshift[i]`` is the guide cell (64 - log2 G)
    pieces: np.ndarray  #: int64[L]: independent pieces summed


def build_tables(laws: list[Law]) -> LawTables:
    """Tables of ``laws`` (in that order; the kernel refers to a law by its index)."""
    thr, guide, off, goff, gshift, pieces = [], [], [0], [], [], []
    g_at = 0
    for law in laws:
        t = _table(law)
        kk = t.size
        g = 2
        while g < kk:
            g *= 2
        shift = 64 - (g.bit_length() - 1)
        cells = np.array([c << shift for c in range(g)], dtype=np.uint64)
        gd = np.searchsorted(t, cells, side="right").astype(np.int64)
        thr.append(t)
        guide.append(gd)
        off.append(off[-1] + kk)
        goff.append(g_at)
        g_at += g
        gshift.append(shift)
        pieces.append(law.pieces)
    return LawTables(
        thr=np.concatenate(thr) if thr else np.zeros(0, dtype=np.uint64),
        off=np.array(off, dtype=np.int64),
        guide=np.concatenate(guide) if guide else np.zeros(0, dtype=np.int64),
        goff=np.array(goff, dtype=np.int64),
        gshift=np.array(gshift, dtype=np.uint64),
        pieces=np.array(pieces, dtype=np.int64),
    )
