"""The simulators' skeleton (sim.core.skeleton): Run and PathRun check the run settings in one
line naming key and value, name the seed's streams the engines drew before, give the windows,
and end a run with the shared epilogue and the common result fields. No kernel runs here."""
from __future__ import annotations

import numpy as np
import pytest

from sim.core.output import epilogue
from sim.core.rng import seed_state
from sim.core.skeleton import PathRun, Run
from sim.core.trajectory import TRAJ_LEVELS, sup_distance, time_grid
from sim.core.windows import window_bounds

RUN = dict(events=5000, seed=7, init="empty", n_batches=10, max_level=4, n_windows=100)


@pytest.mark.parametrize("key, value, text", [
    ("events", 50, "events=50 must be an integer >= n_windows=100"),
    ("events", 5000.0, "events=5000.0 must be an integer >= n_windows=100"),
    ("seed", -1, "seed=-1 must be a non-negative integer"),
    ("init", "warm", "init='warm' is unknown; valid: meanfield, empty"),
    ("n_batches", 51, "n_batches=51 must be an integer in [2, 50]"),
    ("max_level", 0, "max_level=0 must be an integer >= 1"),
    ("n_windows", 5, "n_windows=5 must be an integer >= 10"),
    ("h", 0, "h=0 must be an integer >= 1"),
    ("h", 2.0, "h=2.0 must be an integer >= 1"),
    ("responses", "yes", "responses='yes' must be true or false"),
    ("se_method", "bootstrap", "se_method='bootstrap' is unknown; valid: obm, batch_means"),
])
def test_run_refuses_a_bad_setting_in_one_line(key, value, text):
    with pytest.raises(ValueError) as err:
        Run(**{**RUN, key: value})
    assert str(err.value) == text and "\n" not in str(err.value)


def test_run_holds_plain_settings_and_the_windows():
    run = Run(**{**RUN, "seed": np.int64(7)}, h=3, responses=np.bool_(True), se_method="batch_means")
    assert (run.events, run.seed, run.n_batches, run.max_level, run.h) == (5000, 7, 10, 4, 3)
    assert all(type(v) is int for v in (run.events, run.seed, run.n_batches, run.max_level, run.h))
    assert run.responses is True and run.se_method == "batch_means" and run.init == "empty"
    assert np.array_equal(run.bounds, window_bounds(5000, 100))
    assert run.n_win == run.bounds.size - 1
    assert run.zeros().dtype == np.int64 and run.zeros().shape == (run.n_win,)
    assert run.zeros(float).dtype == np.float64
    assert run.tail_zeros().shape == (run.n_win, 4) and run.tail_zeros(float).dtype == np.float64
    assert run.recorder() is not None
    assert Run(**RUN).recorder() is None


def test_run_names_the_streams_the_engines_drew_before():
    """The xoshiro words are SeedSequence(seed)'s (seed_state, and generate_state(8) with its
    first four equal to them); the numpy stream of child key is the one ``spawn`` gave."""
    run = Run(**RUN)
    assert np.array_equal(run.xoshiro(), seed_state(7))
    assert np.array_equal(run.xoshiro(8), np.random.SeedSequence(7).generate_state(8, np.uint64))
    assert np.array_equal(run.xoshiro(8)[:4], run.xoshiro())
    spawned = np.random.default_rng(np.random.SeedSequence(7).spawn(1)[0]).random(5)
    assert np.array_equal(run.generator().random(5), spawned)
    keyed = np.random.default_rng(np.random.SeedSequence(7, spawn_key=(1,))).random(5)
    assert np.array_equal(run.generator(1).random(5), keyed)
    assert not np.array_equal(run.generator(1).random(5), spawned)


def _series(run, rng):
    w_jobs = rng.integers(50, 100, run.n_win)
    w_resp = w_jobs * rng.uniform(1.5, 2.5, run.n_win)
    w_qarea = rng.integers(1000, 2000, run.n_win)
    w_tail = np.sort(rng.integers(0, 1000, (run.n_win, run.max_level)), axis=1)[:, ::-1].copy()
    return w_jobs, w_resp, w_qarea, w_tail


@pytest.mark.parametrize("se_method", ["obm", "batch_means"])
def test_epilogue_on_the_uniformized_clock(se_method):
    run = Run(**RUN, se_method=se_method)
    w_jobs, w_resp, w_qarea, w_tail = _series(run, np.random.default_rng(1))
    dt = 1.0 / 30.0
    ratios = {"mean_response": (w_resp * dt, w_jobs)}
    est = run.epilogue(n_servers=3, ratios=ratios, w_qarea=w_qarea, w_tail=w_tail, jobs=w_jobs,
                       dt=dt, ci_note="; note")
    ref = epilogue(n_servers=3, n_batches=10, weights=np.diff(run.bounds), w_qarea=w_qarea,
                   w_tail=w_tail, ratios=ratios, ci_note="; note", se_method=se_method)
    cut = ref["warmup_windows"]
    for key, value in ref.items():
        assert np.array_equal(est[key], value) if isinstance(value, np.ndarray) else est[key] == value
    assert est["n_jobs"] == int(w_jobs[cut:].sum()) and type(est["n_jobs"]) is int
    assert est["events_run"] == 5000
    assert est["sim_time"] == 5000 * dt and est["warmup_time"] == float(run.bounds[cut]) * dt
    assert est["ci_method"].endswith("; note")


def test_epilogue_on_the_windows_own_times():
    run = Run(**RUN, se_method="batch_means")
    rng = np.random.default_rng(2)
    w_jobs, w_resp, w_qarea, w_tail = _series(run, rng)
    w_time = rng.uniform(0.5, 1.5, run.n_win)
    est = run.epilogue(n_servers=3, ratios={"mean_response": (w_resp, w_jobs)}, w_qarea=w_qarea,
                       w_tail=w_tail, jobs=w_jobs, w_time=w_time, cut=7)
    assert est["warmup_windows"] == 7  # the engine's own cut under batch_means
    assert est["sim_time"] == float(w_time.sum())
    assert est["warmup_time"] == float(w_time[:7].sum())
    assert est["n_jobs"] == int(w_jobs[7:].sum())
    ref = epilogue(n_servers=3, n_batches=10, weights=w_time, w_qarea=w_qarea, w_tail=w_tail,
                   ratios={"mean_response": (w_resp, w_jobs)}, cut=7, se_method="batch_means")
    assert est["mean_queue"] == ref["mean_queue"] and np.array_equal(est["tail"], ref["tail"])


def test_epilogue_takes_one_clock():
    run = Run(**RUN)
    w_jobs, w_resp, w_qarea, w_tail = _series(run, np.random.default_rng(3))
    args = dict(n_servers=3, ratios={"mean_response": (w_resp, w_jobs)}, w_qarea=w_qarea,
                w_tail=w_tail, jobs=w_jobs)
    with pytest.raises(TypeError, match="one clock"):
        run.epilogue(**args)
    with pytest.raises(TypeError, match="one clock"):
        run.epilogue(**args, dt=0.1, w_time=np.ones(run.n_win))


PATH = dict(time=5.0, grid=11, seed=3, init="empty", max_level=64)


@pytest.mark.parametrize("key, value, text", [
    ("time", 0.0, "time=0.0 must be a finite number > 0 (the horizon T)"),
    ("grid", 1, "grid=1 must be an integer >= 2 (grid points from 0 to T, both ends included)"),
    ("seed", -2, "seed=-2 must be a non-negative integer"),
    ("max_level", 0, "max_level=0 must be an integer >= 1"),
    ("events", 0, "events=0 must be None (no cap) or an integer >= 1 (a cap)"),
    ("init_tail", [0.2, 0.5], "init_tail=[0.2, 0.5] must be non-increasing (s_2 = 0.5 > s_1 = 0.2)"),
])
def test_path_run_refuses_a_bad_setting_in_one_line(key, value, text):
    with pytest.raises(ValueError) as err:
        PathRun(**{**PATH, key: value})
    assert str(err.value) == text


def test_path_run_grid_levels_cap_seed_and_result():
    run = PathRun(**PATH, init_tail=[0.5, 0.25])
    assert np.array_equal(run.t, time_grid(5.0, 11)) and run.levels == TRAJ_LEVELS
    assert PathRun(**{**PATH, "max_level": 3}).levels == 3
    assert run.cap == 2**62 and PathRun(**PATH, events=400).cap == 400
    assert np.array_equal(run.init_tail, [0.5, 0.25])
    assert np.array_equal(run.xoshiro(), seed_state(3))
    tail, top = run.record(), run.record(levels=False)
    assert tail.shape == (11, TRAJ_LEVELS) and top.shape == (11,) and np.isnan(tail).all()
    tail[:] = 0.25
    ode = np.full_like(tail, 0.5)
    ode[3, 2] = 1.0

    class Result(dict):
        def __init__(self, **fields):
            super().__init__(fields)

    res = run.result(Result, tail=tail, ode=ode, events_run=9, sim_time=4.5, top=top)
    assert res["sup_dist"] == sup_distance(tail, ode) == 0.75
    assert res["levels"] == TRAJ_LEVELS and res["t"] is run.t and res["top"] is top
    assert (res["events_run"], res["sim_time"]) == (9, 4.5)
