"""Random numbers for the compiled kernels: xoshiro256+ and bounded draws.

xoshiro256+ (Blackman & Vigna), as in ``shared/limits/pod_limit.c``. Inside a hot loop the
256-bit state lives in four local ``uint64`` scalars (so LLVM keeps it in registers); helpers
take the four words and return ``(value, s0, s1, s2, s3)``. A kernel's state is seeded with
``numpy.random.SeedSequence(seed).generate_state(4, numpy.uint64)`` (:func:`seed_state`), so
results are bitwise reproducible for a given seed and inputs.

- :func:`next_raw`: one step, a raw 64-bit output.
- :func:`below`: an int in ``[0, n)``, ``n < 2**32``, as ``((x >> 32) * n) >> 32`` (Lemire's
  multiply-shift on the high 32 bits, bias < n / 2**32): the fast draw of the agent kernels.
- :func:`below64`: an exactly uniform int in ``[0, n)``, ``n < 2**63`` (Lemire 2019 with
  rejection, a 128-bit product): the draw of the occupancy kernels, where ``n`` is up to 1e18.
- :func:`u01`: a uniform double ``(x >> 11) * 2**-53``.
- :func:`threshold`: the ``uint64`` that a raw draw is below with probability ``p``, so that a
  Bernoulli(p) costs one comparison.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

__all__ = ["next_raw", "below", "below64", "mul128", "u01", "xoshiro_next", "threshold",
           "seed_state"]

_U11 = np.uint64(11)


_U17 = np.uint64(17)


_U19 = np.uint64(19)


_U32 = np.uint64(32)


_U45 = np.uint64(45)


_TWO_M53 = 2.0 ** -53


@njit(cache=True)
def next_raw(s0, s1, s2, s3):
    """One xoshiro256+ step: returns (output, new state words)."""
    r = s0 + s3
    t = s1 << _U17
    s2 ^= s0
    s3 ^= s1
    s1 ^= s2
    s0 ^= s3
    s2 ^= t
    s3 = (s3 << _U45) | (s3 >> _U19)
    return r, s0, s1, s2, s3


@njit(cache=True)
def below(r, n):
    """Map a 64-bit output ``r`` to an int in [0, n), n < 2**32."""
    return np.int64(((r >> _U32) * np.uint64(n)) >> _U32)


@njit(cache=True)
def u01(r):
    return np.int64(r >> _U11) * _TWO_M53


@njit(cache=True)
def xoshiro_next(state):
    """Advance ``state`` (uint64[4], in place) and return the next raw 64-bit output."""
    r, s0, s1, s2, s3 = next_raw(state[0], state[1], state[2], state[3])
    state[0] = s0
    state[1] = s1
    state[2] = s2
    state[3] = s3
    return r


_M32 = np.uint64(0xFFFFFFFF)


_U0 = np.uint64(0)


@njit(cache=True)
def mul128(a, b):
    """Full 128-bit product of two uint64: ``(high word, low word)``."""
    a_lo = a & _M32
    a_hi = a >> _U32
    b_lo = b & _M32
    b_hi = b >> _U32
    ll = a_lo * b_lo
    hl = a_hi * b_lo
    lh = a_lo * b_hi
    hh = a_hi * b_hi
    cross = (ll >> _U32) + (hl & _M32) + lh  # < 2**64: no overflow
    hi = (hl >> _U32) + (cross >> _U32) + hh
    lo = (cross << _U32) | (ll & _M32)
    return hi, lo


@njit(cache=True)
def below64(n, s0, s1, s2, s3):
    """Exactly uniform int in ``[0, n)``, ``1 <= n < 2**63`` (Lemire 2019, with rejection):
    returns ``(value, s0, s1, s2, s3)``. A rejection happens with probability < n / 2**64."""
    nn = np.uint64(n)
    r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
    hi, lo = mul128(r, nn)
    if lo < nn:
        t = (_U0 - nn) % nn  # 2**64 mod n
        while lo < t:
            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)
            hi, lo = mul128(r, nn)
    return np.int64(hi), s0, s1, s2, s3



def threshold(p: float) -> np.uint64:
    """uint64 ``t`` with P(raw 64-bit draw < t) = p (to 2**-64)."""
    if p >= 1.0:
        return np.uint64(2**64 - 1)
    return np.uint64(int(math.ldexp(max(p, 0.0), 64)))


def seed_state(seed: int) -> np.ndarray:
    """The four xoshiro256+ state words of a non-negative integer seed (``SeedSequence``)."""
    return np.random.SeedSequence(seed).generate_state(4, dtype=np.uint64)
