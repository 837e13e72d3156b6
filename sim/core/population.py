"""A model from its transitions: the declaration of a density-dependent population process.

A model whose servers are exchangeable is a Markov chain on counts: ``N x`` where ``x`` is one
or more vectors of fractions (the tail ``s_i`` of servers with at least ``i`` tasks, JIQ's
I-queue lengths, ...), each truncated at a level. Its dynamics are a finite list of
transitions: from ``x`` the state jumps by ``l / N`` (``l`` a vector of small integers) at rate
``N beta_l(x, N, params)``. :class:`Population` declares that, in families of transitions
indexed by a level ``i`` (:class:`Transitions`: one rate function and one jump pattern for
``i = lo .. hi - 1``; a component may name a fixed coordinate, :class:`At`), and says what to report (the queue as a linear form of the state, the
tail, which transitions are arrivals and at which queue position an arriving job lands).

From one declaration the project derives

- the exact simulation of the N-server process (:mod:`sim.core.population_engine`: the
  embedded jump chain on the counts, cost per event independent of N, the run settings,
  warm-up cut, batch means and seeds of the other stochastic engines);
- the mean-field drift ``f(x) = sum_l l beta_l(x, N = inf)``, its fixed point and the ODE
  (:mod:`sim.core.population_limit`).

A rate function is a numba ``@njit`` function ``beta(i, v_1, ..., v_m, n, p)``: the index ``i``
of the transition in its family, the state's vectors as float arrays of fractions (in the order
of :attr:`Population.vectors`), ``n`` the number of servers as a float (``inf`` for the mean
field: write ``j / n``, never ``1 / (n - j)`` forms that are not defined there) and ``p`` the
parameters as a tuple of floats (:attr:`Population.params`; a tuple, not an array, so that the
compiled loop keeps them in registers). It returns ``beta >= 0`` (the rate divided by N). The
engine compiles it inlined into its loop; a helper it calls is best declared
``@njit(inline="always")`` too (an out-of-line call costs more than a small rate). A long rate
that the loop recomputes at many places is declared ``inline=False`` (:class:`Transitions`):
the loop then calls its one compiled body, as a declaration of many such families needs
(:mod:`sim.dispatch.phase_population`). N enters where the model needs it: ``d`` servers sampled without replacement all
lie in a set of ``N x`` with probability ``prod_{j<d} (x - j/n) / (1 - j/n)`` (``x**d`` at
``n = inf``). docs/extending.md has a worked example; :mod:`sim.dispatch.population` declares
power-of-d this way.

Nothing here knows a model. A bad declaration is refused when it is made, in one line naming
the family and what is wrong.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

__all__ = ["Vector", "Transitions", "Population", "At", "Fluid", "tail_vector"]


def _is_jitted(f) -> bool:
    return hasattr(f, "py_func") and callable(f)


@dataclass(frozen=True)
class At:
    """A fixed coordinate ``k`` of a vector, whatever the index ``i`` of the transition: in a
    jump component ``(vector, At(k), delta)``, a stencil entry ``(vector, At(k))`` or a
    ``position``. For a family indexed by one vector that also moves a set coordinate of
    another (JIQ: an I-queue of size ``j`` shrinks, indexed by ``j``, and a server leaves the
    idle level, ``s_1``)."""

    k: int

    def __post_init__(self):
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 0:
            raise ValueError(f"At({self.k!r}): a fixed coordinate must be an int >= 0")


def _is_offset(o) -> bool:
    """An offset from the index (an int) or a fixed coordinate (:class:`At`)."""
    return isinstance(o, At) or (isinstance(o, int) and not isinstance(o, bool))


def coordinate(o, i):
    """The coordinate ``o`` names for transition ``i`` (an int offset: ``i + o``; ``At(k)``:
    ``k``); ``i`` may be an int or an integer array."""
    return o.k + 0 * i if isinstance(o, At) else i + o


@dataclass(frozen=True)
class Vector:
    """One vector of the state: its name and its length (coordinates ``0 .. size - 1``), a
    number or a function of the parameter array ``p`` (a truncation level that depends on the
    load). A coordinate no transition moves keeps its start value (``s_0 = 1`` of a tail)."""

    name: str
    size: int | Callable[[np.ndarray], int]

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"vector name {self.name!r} must be an identifier")
        if not callable(self.size) and (not isinstance(self.size, int) or self.size < 1):
            raise ValueError(f"vector {self.name!r}: size={self.size!r} must be an int >= 1 or a "
                             "function of the parameters")


@dataclass(frozen=True)
class Transitions:
    """A family of transitions ``i = lo .. hi - 1`` (``hi <= 0`` counts from the end of the
    first vector of ``jump``: ``hi = -1`` stops one short of its last coordinate).

    ``jump``: the jump of transition ``i`` as ``(vector, offset, delta)`` triples: coordinate
    ``i + offset`` of ``vector`` changes by ``delta / N`` (``delta`` a non-zero int); an offset
    :class:`At` ``(k)`` names coordinate ``k`` whatever ``i`` (a fixed coordinate).
    ``rate``: the ``@njit`` rate function ``beta(i, *vectors, n, p)`` (module docstring).
    ``reads``: the coordinates the rate of transition ``i`` depends on, as ``(vector, offset)``
    pairs (a stencil: ``(("s", -1), ("s", 0))`` for a rate of ``s_{i-1}`` and ``s_i``; ``("s",
    At(1))`` for one that reads ``s_1`` whatever ``i``: a change of ``s_1`` then recomputes the
    whole family); after a
    jump the engine recomputes only the rates that read a changed coordinate. ``None``: the
    rate may read anything, and the whole family is recomputed after every jump (correct
    whatever the rate reads, slower). A stencil that misses a coordinate the rate reads gives
    wrong results: declare ``None`` when in doubt.
    ``arrival``: the transitions are job arrivals (counted for Little's law and the drop
    probability); ``position``: then the arriving job's queue position is ``i + position``
    (``At(k)``: ``k`` whatever ``i``; its wait for ``prob_wait`` and ``frac_within_h``), or
    None where the state does not say.
    ``inline``: the engines compile ``rate`` into their loops (the default: an out-of-line call
    passes each array view's struct on the stack, which costs more than a small rate), or, with
    False, call its one compiled body at every place the loop recomputes a rate. Many long
    inlined rates make a loop too large to compile (the hyperexponential's ten families of
    :mod:`sim.dispatch.phase_population`: 154 places, not compiled after 4 CPU minutes and
    5 GB); out of line they compile once.
    """

    name: str
    rate: Callable
    jump: tuple[tuple[str, int | At, int], ...]
    lo: int
    hi: int
    reads: tuple[tuple[str, int | At], ...] | None = None
    arrival: bool = False
    position: int | At | None = None
    inline: bool = True

    def __post_init__(self):
        where = f"transitions {self.name!r}"
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"transitions name {self.name!r} must be an identifier")
        if not _is_jitted(self.rate):
            raise ValueError(f"{where}: rate must be a numba @njit function "
                             "beta(i, *vectors, n, p)")
        if not isinstance(self.jump, tuple) or not self.jump:
            raise ValueError(f"{where}: jump must be a non-empty tuple of (vector, offset, delta)")
        for comp in self.jump:
            if (not isinstance(comp, tuple) or len(comp) != 3 or not isinstance(comp[0], str)
                    or not _is_offset(comp[1]) or not isinstance(comp[2], int)
                    or isinstance(comp[2], bool) or comp[2] == 0):
                raise ValueError(f"{where}: jump component {comp!r} is not (vector, offset, "
                                 "non-zero delta) with an integer (or At) offset and integer delta")
        if len({(v, o) for v, o, _ in self.jump}) != len(self.jump):
            raise ValueError(f"{where}: jump names a coordinate twice")
        if self.reads is not None:
            if not isinstance(self.reads, tuple) or not all(
                    isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], str)
                    and _is_offset(r[1]) for r in self.reads):
                raise ValueError(f"{where}: reads must be None or a tuple of (vector, offset) "
                                 "(an int or At offset)")
        if not all(isinstance(b, int) and not isinstance(b, bool) for b in (self.lo, self.hi)):
            raise ValueError(f"{where}: lo and hi must be integers")
        if self.lo < 0:
            raise ValueError(f"{where}: lo={self.lo!r} must be >= 0")
        if self.position is not None and not self.arrival:
            raise ValueError(f"{where}: position is for arrival transitions only")
        if self.position is not None and not _is_offset(self.position):
            raise ValueError(f"{where}: position={self.position!r} must be an int, At or None")


@dataclass(frozen=True)
class Fluid:
    """A fluid limit a declaration supplies itself (``Population.fluid``), where its drift is
    not smooth: ``fixed_point(p, lay) -> flat x``, the invariant state (``init: meanfield``),
    and ``path(p, lay, x0, t) -> array of shape (t.size, dim)``, the fluid path from the flat
    state ``x0`` at the times ``t`` (the path engine's ODE, :mod:`sim.core.population_paths`)."""

    fixed_point: Callable
    path: Callable

    def __post_init__(self):
        if not callable(self.fixed_point) or not callable(self.path):
            raise ValueError("Fluid: fixed_point and path must be callables")


def _declared_names(where: str, attr: str, noun: str, items, cls) -> list[str]:
    """The names of ``items``, refused (``ValueError`` naming ``where`` and ``attr``) unless a
    non-empty tuple of ``cls`` with no name twice."""
    if not isinstance(items, tuple) or not items or not all(isinstance(i, cls) for i in items):
        raise ValueError(f"{where}: {attr} must be a non-empty tuple of {cls.__name__}")
    names = [i.name for i in items]
    if len(set(names)) != len(names):
        raise ValueError(f"{where}: a {noun} name is declared twice")
    return names


def tail_vector(name: str) -> dict:
    """``queue`` and ``tail`` of a :class:`Population` whose vector ``name`` holds the tail
    ``s_i`` (the fraction of servers with at least ``i`` tasks, ``s_0 = 1``): the mean queue
    is ``sum_{i >= 1} s_i``, the reported tail ``s_1, s_2, ...``; as keyword arguments,
    ``Population(..., **tail_vector("s"))``."""
    return {"queue": ((name, 1, 0, 1.0),), "tail": (name, 1)}


@dataclass(frozen=True)
class Population:
    """A model (or a policy of one) declared by its transitions.

    ``params(task) -> tuple of floats``: the parameter array ``p`` the rate functions get
    (e.g. ``(lam, d, replacement)``). ``start(p, sizes) -> list of arrays``: the empty state
    as fractions, one array per vector (``init: empty``; ``init: meanfield`` starts from the
    fixed point of the drift, :mod:`sim.core.population_limit`). ``queue``: the mean queue per
    server as ``sum weight * x[vector][lo:hi]`` over ``(vector, lo, hi, weight)`` terms (``hi
    <= 0`` counts from the end); ``tail``: ``(vector, lo)``, the reported tail
    ``x[vector][lo:]``; ``arrival_rate(p)``: the job arrival rate per server (``lam``), so that
    jobs the truncation refuses show as ``drop_prob``; ``mean_service``: the mean service time
    (``mean_wait = mean_response - mean_service``, ``queueing_ratio`` in its units), or None;
    ``messages(p)``: messages per job, or None. ``counts(p, x, n) -> int64 array``: the
    start counts of ``n`` servers from a flat state of fractions ``x`` (the fixed point, for
    ``init: meanfield``); None rounds each coordinate. A model whose jumps keep a quantity
    exactly (JIQ: the listed servers are the idle ones) rounds so that it holds at the start.
    ``smooth=False``: the drift is discontinuous (a server of the longest queue), so no mean
    field, fixed point or refined term is derived from it: the ``population_meanfield`` and
    ``population_refined`` engines refuse the declaration, and ``init: meanfield`` and the
    path's fluid limit come from ``fluid`` (:class:`Fluid`; without it they are refused too).
    A smooth declaration may give ``fluid`` as well: its path then replaces the integrated drift.
    """

    name: str
    vectors: tuple[Vector, ...]
    transitions: tuple[Transitions, ...]
    params: Callable[[dict], tuple]
    start: Callable
    queue: tuple[tuple[str, int, int, float], ...]
    tail: tuple[str, int]
    arrival_rate: Callable[[np.ndarray], float]
    mean_service: float | None = 1.0
    messages: Callable[[np.ndarray], float] | None = None
    smooth: bool = True
    fluid: "Fluid | None" = None
    counts: Callable | None = None
    #: the compiled kernels of this declaration (filled on first use; not part of equality)
    _cache: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    def __post_init__(self):
        where = f"population {self.name!r}"
        names = _declared_names(where, "vectors", "vector", self.vectors, Vector)
        _declared_names(where, "transitions", "transitions", self.transitions, Transitions)
        for t in self.transitions:
            for v, _, _ in t.jump:
                if v not in names:
                    raise ValueError(f"{where}, transitions {t.name!r}: jump names vector {v!r}; "
                                     f"declared: {', '.join(names)}")
            for v, _ in t.reads or ():
                if v not in names:
                    raise ValueError(f"{where}, transitions {t.name!r}: reads vector {v!r}; "
                                     f"declared: {', '.join(names)}")
        for term in self.queue:
            if (not isinstance(term, tuple) or len(term) != 4 or term[0] not in names):
                raise ValueError(f"{where}: queue term {term!r} is not (vector, lo, hi, weight) "
                                 "of a declared vector")
        if (not isinstance(self.tail, tuple) or len(self.tail) != 2 or self.tail[0] not in names):
            raise ValueError(f"{where}: tail={self.tail!r} is not (vector, lo) of a declared vector")
        if not any(t.arrival for t in self.transitions):
            raise ValueError(f"{where}: no transitions are arrivals (arrival=True): Little's law "
                             "needs the admitted jobs")
        for f in (self.params, self.start, self.arrival_rate):
            if not callable(f):
                raise ValueError(f"{where}: params, start and arrival_rate must be callables")
        if not isinstance(self.smooth, bool):
            raise ValueError(f"{where}: smooth={self.smooth!r} must be True or False")
        if self.fluid is not None and not isinstance(self.fluid, Fluid):
            raise ValueError(f"{where}: fluid must be a Fluid (fixed_point, path) or None")
        if self.counts is not None and not callable(self.counts):
            raise ValueError(f"{where}: counts must be None or a callable counts(p, x, n)")

    # ---- the layout of one run's state (sizes may depend on the parameters)
    def layout(self, p: np.ndarray) -> "Layout":
        """Sizes and offsets of the vectors for parameters ``p``, and each family's index
        range, checked: every coordinate a jump or a stencil names is inside its vector."""
        sizes = []
        for v in self.vectors:
            n = int(v.size(p)) if callable(v.size) else v.size
            if n < 1:
                raise ValueError(f"population {self.name!r}: vector {v.name!r} has size {n} for "
                                 f"parameters {tuple(p)}")
            sizes.append(n)
        offsets = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)
        index = {v.name: j for j, v in enumerate(self.vectors)}
        ranges = []
        for t in self.transitions:
            first = index[t.jump[0][0]]
            hi = t.hi if t.hi > 0 else sizes[first] + t.hi
            if hi <= t.lo:
                raise ValueError(f"population {self.name!r}, transitions {t.name!r}: empty index "
                                 f"range [{t.lo}, {hi}) for sizes {sizes}")
            for v, o, *_ in tuple(t.jump) + tuple((r[0], r[1], 0) for r in t.reads or ()):
                size = sizes[index[v]]
                if isinstance(o, At):
                    if o.k >= size:
                        raise ValueError(f"population {self.name!r}, transitions {t.name!r}: "
                                         f"coordinate At({o.k}) of vector {v!r} is outside [0, {size})")
                elif t.lo + o < 0 or hi - 1 + o >= size:
                    raise ValueError(f"population {self.name!r}, transitions {t.name!r}: coordinate "
                                     f"i{o:+d} of vector {v!r} leaves [0, {size}) for i in "
                                     f"[{t.lo}, {hi})")
            for v, o, _ in t.jump:  # a fixed coordinate must not meet a moving one of the jump
                if isinstance(o, At):
                    for v2, o2, _ in t.jump:
                        if v2 == v and not isinstance(o2, At) and t.lo <= o.k - o2 < hi:
                            raise ValueError(f"population {self.name!r}, transitions {t.name!r}: "
                                             f"the jump names coordinate {o.k} of vector {v!r} "
                                             f"twice at i={o.k - o2} (At({o.k}) and i{o2:+d})")
            ranges.append((t.lo, hi))
        return Layout(tuple(sizes), offsets, tuple(ranges), index)

    def queue_weights(self, lay: "Layout") -> np.ndarray:
        """The queue per server as weights on the flat state."""
        w = np.zeros(int(lay.offsets[-1]))
        for v, lo, hi, weight in self.queue:
            j = lay.index[v]
            top = hi if hi > 0 else lay.sizes[j] + hi
            w[lay.offsets[j] + lo: lay.offsets[j] + top] += float(weight)
        return w

    def start_counts(self, p: np.ndarray, x: np.ndarray, n: int) -> np.ndarray:
        """The counts of ``n`` servers for the state of fractions ``x`` (flat): the
        declaration's ``counts`` or each coordinate rounded; checked to be >= 0 (a coordinate
        may exceed ``n``: JIQ's ``P_0 = M / N`` with more schedulers than servers; the engine
        checks the moved ones at every jump)."""
        c = (np.rint(np.asarray(x) * float(n)) if self.counts is None
             else np.asarray(self.counts(p, np.asarray(x, dtype=np.float64), int(n))))
        c = c.astype(np.int64)
        if c.shape != np.shape(x) or c.min() < 0:
            raise ValueError(f"population {self.name!r}: start counts negative or of the wrong "
                             "length")
        return c

    def start_state(self, p: np.ndarray, lay: "Layout") -> np.ndarray:
        """The declared empty state as one flat array of fractions, checked."""
        parts = self.start(p, lay.sizes)
        if len(parts) != len(lay.sizes) or any(np.size(a) != s for a, s in zip(parts, lay.sizes)):
            raise ValueError(f"population {self.name!r}: start returned arrays of sizes "
                             f"{[np.size(a) for a in parts]}; the vectors have {list(lay.sizes)}")
        x = np.concatenate([np.asarray(a, dtype=np.float64).ravel() for a in parts])
        if not np.all(np.isfinite(x)) or x.min() < 0.0:
            raise ValueError(f"population {self.name!r}: start has negative or non-finite fractions")
        return x


@dataclass(frozen=True)
class Layout:
    """The flat state of one run: vector sizes and offsets, each family's ``(lo, hi)``."""

    sizes: tuple[int, ...]
    offsets: np.ndarray
    ranges: tuple[tuple[int, int], ...]
    index: dict
