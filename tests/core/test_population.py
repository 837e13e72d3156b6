"""The transitions declaration (sim.core.population), its generic engine and its mean field.

A toy declared here: N servers with random routing (each an M/M/1 queue), tail ``s_i``,
arrivals ``lam (s_{i-1} - s_i)``, departures ``s_i - s_{i+1}``, truncated at ``L`` (a buffer).
Its mean field is ``s_i = lam**i`` (to the truncation) and, with a large ``L``, E[T] = 1/(1 -
lam) for every N (independent M/M/1 queues). Statistical checks: 4 estimated SEs
(tests/helpers.py).
"""
from __future__ import annotations

import sys

import numpy as np
import pytest
from numba import njit

from sim.core.population import Population, Transitions, Vector
from sim.core.population_engine import simulate
from sim.core.population_limit import drift, fixed_point, limit_row
from tests.helpers import assert_engines_agree, assert_within_se


@njit
def _arr(i, s, n, p):
    return p[0] * (s[i - 1] - s[i])


@njit
def _dep(i, s, n, p):
    return s[i] - s[i + 1]


@njit
def _dep_forgets_bottom(i, s, n, p):  # wrong on purpose: positive where s_i = 0
    return s[i] - s[i + 1] + 0.5


@njit
def _negative(i, s, n, p):
    return -1.0


def _start(p, sizes):
    s = np.zeros(sizes[0])
    s[0] = 1.0
    return [s]


def toy(levels=40, reads=True, dep=_dep, arr=_arr, **kw):
    arr_reads = (("s", -1), ("s", 0)) if reads else None
    dep_reads = (("s", 0), ("s", 1)) if reads else None
    args = dict(
        name="mm1", vectors=(Vector("s", levels + 2),),
        transitions=(Transitions("arrive", arr, (("s", 0, 1),), 1, -1, reads=arr_reads,
                                 arrival=True, position=0),
                     Transitions("depart", dep, (("s", 0, -1),), 1, -1, reads=dep_reads)),
        params=lambda task: (float(task["lam"]),), start=_start, queue=(("s", 1, 0, 1.0),),
        tail=("s", 1), arrival_rate=lambda p: float(p[0]))
    args.update(kw)
    return Population(**args)


def _task(**kw):
    return {"n_servers": 200, "lam": 0.7, "events": 400_000, "seed": 3, "init": "empty",
            "n_batches": 20, "max_level": 16, "h": 1, **kw}


# ---------------------------------------------------------------------------------------------
# bad declarations: one clear line each
# ---------------------------------------------------------------------------------------------
def test_rate_must_be_jitted():
    with pytest.raises(ValueError, match="rate must be a numba @njit function"):
        Transitions("a", lambda i, s, n, p: 0.0, (("s", 0, 1),), 1, 2)


def test_jump_components_are_checked():
    with pytest.raises(ValueError, match="jump component"):
        Transitions("a", _arr, (("s", 0, 0),), 1, 2)
    with pytest.raises(ValueError, match="names a coordinate twice"):
        Transitions("a", _arr, (("s", 0, 1), ("s", 0, -1)), 1, 2)
    with pytest.raises(ValueError, match="position is for arrival"):
        Transitions("a", _arr, (("s", 0, 1),), 1, 2, position=0)


def test_unknown_vector_no_arrival_and_duplicates_are_refused():
    with pytest.raises(ValueError, match="jump names vector 'q'"):
        toy(transitions=(Transitions("a", _arr, (("q", 0, 1),), 1, -1, arrival=True),))
    with pytest.raises(ValueError, match="reads vector 'q'"):
        toy(transitions=(Transitions("a", _arr, (("s", 0, 1),), 1, -1, reads=(("q", 0),),
                                     arrival=True),))
    with pytest.raises(ValueError, match="no transitions are arrivals"):
        toy(transitions=(Transitions("d", _dep, (("s", 0, -1),), 1, -1),))
    with pytest.raises(ValueError, match="declared twice"):
        toy(transitions=(Transitions("a", _arr, (("s", 0, 1),), 1, -1, arrival=True),) * 2)


def test_a_coordinate_outside_its_vector_is_refused_at_layout():
    bad = toy(transitions=(Transitions("arrive", _arr, (("s", 1, 1),), 1, 0,
                                       reads=(("s", -1), ("s", 0)), arrival=True),
                           Transitions("depart", _dep, (("s", 0, -1),), 1, -1,
                                       reads=(("s", 0), ("s", 1)))))
    with pytest.raises(ValueError, match=r"coordinate i\+1 of vector 's' leaves"):
        bad.layout(np.array([0.5]))
    bad2 = toy(transitions=(Transitions("arrive", _arr, (("s", 0, 1),), 1, -1, arrival=True),
                            Transitions("depart", _dep, (("s", 0, -1),), 1, -1,
                                        reads=(("s", 0), ("s", 2)))))
    with pytest.raises(ValueError, match=r"coordinate i\+2 of vector 's' leaves"):
        bad2.layout(np.array([0.5]))


def test_a_rate_that_does_not_vanish_at_the_boundary_is_named():
    with pytest.raises(ValueError, match="drove a count outside .* transitions 'depart'"):
        simulate(toy(dep=_dep_forgets_bottom), _task(events=20_000))


def test_a_negative_rate_is_named():
    with pytest.raises(ValueError, match="'arrive' at i=1 returned a negative"):
        simulate(toy(arr=_negative), _task(events=20_000))


# ---------------------------------------------------------------------------------------------
# the mean field
# ---------------------------------------------------------------------------------------------
def test_mean_field_is_the_geometric_tail():
    lam, levels = 0.7, 80
    decl = toy(levels)
    p = np.array([lam])
    fp = fixed_point(decl, p)
    want = np.concatenate(([1.0], lam ** np.arange(1, levels + 1), [0.0]))
    # the truncation at L is a buffer: s_i = lam**i (1 - lam**(L+1-i)) / (1 - lam**(L+1)), which
    # differs from lam**i by less than lam**L here
    assert np.max(np.abs(fp.x - want)) < 1e-11
    assert np.max(np.abs(drift(decl, fp.x, p))) < 1e-13
    assert np.max(np.abs(fp.ode_x - fp.x)) < 1e-6
    row = limit_row(decl, {"lam": lam, "max_level": 4})
    assert row["mean_response"] == pytest.approx(1.0 / (1.0 - lam), abs=1e-9)
    assert row["prob_wait"] == pytest.approx(lam, abs=1e-12)
    assert row["tail"] == pytest.approx([lam, lam**2, lam**3, lam**4], abs=1e-12)


# ---------------------------------------------------------------------------------------------
# the simulation
# ---------------------------------------------------------------------------------------------
def test_simulation_matches_mm1():
    lam = 0.7
    out = simulate(toy(), _task(lam=lam))
    assert_within_se(out.mean_response, 1.0 / (1.0 - lam), out.mean_response_se, "E[T]")
    assert_within_se(out.prob_wait, lam, out.prob_wait_se, "P(wait)")
    assert_within_se(out.tail[1], lam**2, out.tail_se[1], "s_2")
    assert out.drop_prob < 1e-9
    assert out.n_jobs > 0 and out.events_run == 400_000


def test_arrivals_without_a_position_report_no_waiting_probability():
    """A declaration whose arrivals do not say where the job lands (position=None) runs:
    Little's law still gives the mean response; prob_wait is None, not a made-up number."""
    lam = 0.7
    decl = toy(transitions=(
        Transitions("arrive", _arr, (("s", 0, 1),), 1, -1, reads=(("s", -1), ("s", 0)), arrival=True),
        Transitions("depart", _dep, (("s", 0, -1),), 1, -1, reads=(("s", 0), ("s", 1)))))
    out = simulate(decl, _task(lam=lam))
    assert_within_se(out.mean_response, 1.0 / (1.0 - lam), out.mean_response_se, "E[T]")
    assert out.prob_wait is None and out.frac_within_h is None


def test_stencils_agree_with_recomputing_every_rate():
    task = _task(lam=0.8, seed=11)
    a = simulate(toy(reads=True), task)
    b = simulate(toy(reads=False), {**task, "seed": 12})
    assert_engines_agree(a.mean_response, a.mean_response_se, b.mean_response, b.mean_response_se,
                         "E[T], stencil vs whole-family recompute")


def test_a_binding_truncation_shows_as_drops():
    """L = 2: M/M/1/2 per server, blocking probability lam**2 (1 - lam) / (1 - lam**3)."""
    lam = 0.7
    out = simulate(toy(levels=2), _task(lam=lam))
    want = lam**2 * (1 - lam) / (1 - lam**3)
    assert_within_se(out.drop_prob, want, out.drop_prob_se, "drop probability")


def test_same_seed_same_numbers():
    a = simulate(toy(), _task(events=50_000))
    b = simulate(toy(), _task(events=50_000))
    c = simulate(toy(), _task(events=50_000, seed=4))
    assert a.mean_response == b.mean_response and a.mean_response != c.mean_response


# ---------------------------------------------------------------------------------------------
# a fixed coordinate (At): declared, checked, generated
# ---------------------------------------------------------------------------------------------
def test_a_fixed_coordinate_is_checked():
    from sim.core.population import At

    for bad in (-1, True, "1", 1.0):
        with pytest.raises(ValueError, match="fixed coordinate must be an int >= 0"):
            At(bad)
    with pytest.raises(ValueError, match="jump component"):
        Transitions("a", _arr, (("s", 1.0, 1),), 1, 2)
    with pytest.raises(ValueError, match="reads must be None"):
        Transitions("a", _arr, (("s", 0, 1),), 1, 2, reads=(("s", 0.5),))
    with pytest.raises(ValueError, match="position=.* must be an int, At or None"):
        Transitions("a", _arr, (("s", 0, 1),), 1, 2, arrival=True, position="1")
    ok = Transitions("a", _arr, (("s", 0, 1), ("s", At(1), -1)), 2, 3, reads=(("s", At(0)),),
                     arrival=True, position=At(1))
    assert ok.jump[1][1] == At(1)
    # At outside its vector, and At meeting the moving coordinate of the same jump
    outside = toy(transitions=(Transitions("arrive", _arr, (("s", 0, 1), ("s", At(99), 1)), 1, -1,
                                           arrival=True),))
    with pytest.raises(ValueError, match=r"coordinate At\(99\) of vector 's' is outside"):
        outside.layout(np.array([0.5]))
    twice = toy(transitions=(Transitions("arrive", _arr, (("s", 0, 1), ("s", At(3), -1)), 1, -1,
                                         arrival=True),))
    with pytest.raises(ValueError, match=r"names coordinate 3 of vector 's' twice at i=3"):
        twice.layout(np.array([0.5]))


def test_fixed_coordinate_stencils_agree_with_recomputing_every_rate():
    """JIQ-Po(2) (sim.jiq.population) moves the fixed coordinate s_1 from families indexed by
    I-queue size and reads s_1, s_2 and P_1 from families indexed by level or size: the
    generated recomputation (stencils with At) must give the numbers of recomputing every rate
    after every jump (reads=None), the same seed: the same path up to the rounding of the
    running totals (which could flip a draw with probability ~1e-16 an event)."""
    import dataclasses

    from sim.jiq.population import DECLS

    JIQ_POD = DECLS["jiq_pod"]

    def called(rate):
        # the same rate function behind a one-line one: the kernel inlines every rate it
        # calls, and with each of the five families recomputed after each jump the JIQ rates
        # inlined 25 times made a kernel that took minutes to compile; called out of line they
        # give the same numbers (no fast-math: inlining does not change a float operation)
        @njit
        def call(i, s, P, n, p):
            return rate(i, s, P, n, p)
        return call

    whole = dataclasses.replace(
        JIQ_POD, name="jiq_pod_whole",
        transitions=tuple(dataclasses.replace(t, reads=None, rate=called(t.rate)) for t in JIQ_POD.transitions),
        _cache={})
    task = {"policy": "jiq_pod", "n_servers": 60, "lam": 0.85, "r": 3.0, "d": 2,
            "events": 20_000, "seed": 5, "init": "empty", "n_batches": 10, "max_level": 8,
            "h": 1}
    a = simulate(JIQ_POD, task)
    b = simulate(whole, task)
    assert a.mean_response == pytest.approx(b.mean_response, rel=1e-9)
    assert np.allclose(a.tail, b.tail, rtol=1e-9, atol=0.0)
    src = JIQ_POD._cache["source"]
    assert "j = off1 + 1" not in src and "j = off0 + 1\n" in src  # c[s_1] by its fixed offset


def test_kernels_come_from_a_cached_module_and_match_the_in_memory_ones(tmp_path, monkeypatch):
    """A declaration whose rate functions are importable by name gets its kernels from a
    generated module in the cache folder (numba's disk cache then serves the next process);
    the numbers are those of the kernels compiled in memory; a rate made at run time (a
    closure) is compiled in memory."""
    from sim.core import population_engine as pe

    # the toy of this file: its rates are importable by name (tests.core.test_population._arr),
    # and its two-family kernel compiles in a fraction of a shipped model's time (it is
    # compiled twice here, in a fresh cache folder and in memory)
    assert _arr.py_func.__module__ == __name__ and sys.modules[__name__]._arr is _arr
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    for name in [m for m in sys.modules if m.startswith("_lbsweep_population_")]:
        monkeypatch.delitem(sys.modules, name)  # loaded by an earlier test: written anew here
    decl = toy()
    kernel, _ = pe.kernels(decl)
    written = list((tmp_path / "population").glob("_lbsweep_population_*.py"))
    assert len(written) == 1 and kernel.__module__ == written[0].stem
    task = _task(lam=0.8, events=20_000)
    cached = simulate(decl, task)
    memory = toy()
    memory._cache["kernels"] = pe._exec_kernels(memory, pe._source(memory))
    again = simulate(memory, task)
    for name in cached._fields:  # bitwise, every field
        a, b = getattr(again, name), getattr(cached, name)
        assert np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b, name

    @njit
    def depart_closure(i, s, n, p):
        return s[i] - s[i + 1]

    assert pe._module_text(toy(dep=depart_closure), "") is None


def test_a_rate_declared_out_of_line_is_called_not_inlined():
    """``inline=False``: the generated loops call the rate's own compiled body (the cached module
    binds it by name; the in-memory loops get the dispatcher itself), the default inlines it;
    tail_vector gives a tail vector's queue and tail."""
    from sim.core.population import tail_vector
    from sim.core.population_engine import _module_text, _source, loop_rate
    from sim.dispatch.population import POD

    assert tail_vector("s") == {"queue": (("s", 1, 0, 1.0),), "tail": ("s", 1)}
    assert (POD.queue, POD.tail) == (tail_vector("s")["queue"], ("s", 1))
    inlined = POD.transitions[0]
    out_of_line = Transitions(**{**inlined.__dict__, "inline": False})
    assert loop_rate(out_of_line) is out_of_line.rate
    assert loop_rate(inlined) is not inlined.rate
    decl = Population(**{**{f: getattr(POD, f) for f in ("name", "vectors", "params", "start",
                                                          "queue", "tail", "arrival_rate")},
                         "transitions": (out_of_line, *POD.transitions[1:])})
    text = _module_text(decl, _source(decl))
    assert "beta0 = _rate0\n" in text and "beta1 = njit(inline='always')(_rate1.py_func)" in text
