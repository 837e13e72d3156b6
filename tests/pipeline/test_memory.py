"""Memory estimated before compute (pipeline/memory.py, Model.memory_bytes; docs/sweeps.md):
the estimates' shapes, the default of a model that declares none, the refusal and plan=true."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

import sim.centralization
import sim.dispatch
import sim.jiq
import sim.led
from pipeline.errors import ConfigError
from pipeline.memory import GiB, allowed_bytes, check_memory, machine_memory
from sim.core.declare import DEFAULT_BYTES_PER_SERVER, DEFAULT_FIXED_BYTES, Entry, Model, default_memory_bytes
from sim.core.memory import longest_queue, ring_capacity, ring_slots
from tests.helpers import REPO


def _task(**kw) -> dict:
    task = {"model": "dispatch", "engine": "agent", "policy": "pod", "n_servers": 10**6, "lam": 0.9, "d": 2,
            "events": 4 * 10**6, "_meta": {"task_id": "p00000-x-r000", "replication": 0}}
    task.update(kw)
    return task


def test_longest_queue_from_the_mean_field_tail():
    # random routing: samples * lam**L >= 1 up to L = log(samples) / log(1 / lam) = 174.8 at 1e8
    assert longest_queue(1e8, 0.9, 1) == 174
    # power of 2: (2**L - 1) * log(1/0.9) <= log(1e8) up to L = 7.46
    assert longest_queue(1e8, 0.9, 2) == 7
    assert longest_queue(1e8, 0.9, 1, cap=20) == 20
    # a run of 100 time units at lam = 0.9 sees about 11 independent lengths per queue
    assert longest_queue(1e6, 0.9, 1, run_time=100) == longest_queue(11e6, 0.9, 1)
    assert ring_capacity(7) == 8 and ring_capacity(8) == 16 and ring_capacity(174) == 256
    # a ring that doubles during the run: old and new alive at the peak
    assert ring_slots(1e6, 0.9, 1) == 256 and ring_slots(1e6, 0.9, 1, run_time=1e7) == 1.5 * 512


def test_agent_estimates_grow_with_n_and_queue_length():
    est = sim.dispatch.memory_bytes
    small, big = est(_task(n_servers=10**5, events=10**8)), est(_task(n_servers=10**6, events=10**8))
    assert big - small == pytest.approx(9 * (small - est(_task(n_servers=10**4, events=10**8))) / 0.9, rel=1e-9)
    # pod (rings of 16 stamps) against random routing at the same load (rings of 256)
    assert est(_task(policy="random")) > 8 * est(_task())
    # the agent engine at N = 2e9 (issue 34; its service rates alone are 14.9 GiB): rates,
    # queue lengths, heads and rings of 8 int32 stamps at least
    assert est(_task(n_servers=2 * 10**9)) > 2e9 * (8 + 8 + 8 + 4 * 8)
    for model, kw in ((sim.jiq, {"model": "jiq", "policy": "jiq", "r": 10}),
                      (sim.centralization, {"model": "centralization", "policy": "central", "p": 0.1}),
                      (sim.led, {"model": "led", "engine": "slotted", "policy": "l_jsq", "m_dispatchers": 10})):
        one, ten = model.memory_bytes(_task(**kw)), model.memory_bytes(_task(**{**kw, "n_servers": 10**7}))
        assert 9 < ten / one < 10.5, model.__name__


def test_occupancy_and_limit_estimates_do_not_grow_with_n():
    est = sim.dispatch.memory_bytes
    occ = _task(engine="occupancy", policy="random", d=None)
    assert est({**occ, "n_servers": 10**15}) < 2 * est({**occ, "n_servers": 10**3}) < 64 * 2**20
    # but with k: the harmonic numbers 1..k and the level arrays (k = 1e9: tens of GiB)
    assert est({**occ, "k": 10**9, "n_servers": 10**9}) > 40 * GiB
    mf = _task(engine="meanfield", policy="batch_filling", k=1000, d=2)
    assert est({**mf, "n_servers": 10**15}) == est(mf)
    # batch-filling's exact program: six (k + 1)^2 tables
    assert est({**mf, "k": 10**5}) == pytest.approx(6 * 8 * (10**5 + 1) ** 2, rel=0.01)


def test_a_model_without_an_estimate_gets_the_default():
    bare = Model(name="bare_mem", title="t", entries=(Entry("agent", "x", "m:f"),), params={}, results={},
                 main_estimate="mean_response", events_per_time=lambda t: 1.0, check_task=lambda t: None,
                 labels={"x": "x"})
    assert bare.memory_bytes is default_memory_bytes
    assert bare.memory_bytes({"engine": "agent", "n_servers": 10**6}) == \
        DEFAULT_BYTES_PER_SERVER * 10**6 + DEFAULT_FIXED_BYTES
    assert bare.memory_bytes({"engine": "occupancy", "n_servers": 10**12}) == DEFAULT_FIXED_BYTES


def test_refusal_names_n_engine_and_estimate():
    tasks = [_task(n_servers=1000), _task(n_servers=2 * 10**9, _meta={"task_id": "p00001-agent-r000",
                                                                       "replication": 0})]
    with pytest.raises(ConfigError) as info:
        check_memory(tasks, {"memory_share": 0.5, "memory_gib": 64})
    msg = str(info.value)
    assert "p00001-agent-r000" in msg and "engine=agent" in msg and "n_servers=2000000000" in msg
    assert "GiB of memory (estimate)" in msg and "execution.memory_share=0.5 of 64 GiB" in msg
    out = check_memory(tasks, {"memory_share": 0.5, "memory_gib": 10**4})
    assert out["bytes"] == sim.dispatch.memory_bytes(tasks[1]) and "n_servers=2000000000" in out["task"]
    assert out["allowed"] == 0.5 * 10**4 * GiB


def test_machine_memory_is_read_without_psutil():
    total, source = machine_memory()
    psutil = pytest.importorskip("psutil")
    assert total <= psutil.virtual_memory().total * 1.01 and "machine" in source
    allowed, total2, _ = allowed_bytes({"memory_share": 0.25})
    assert allowed == pytest.approx(0.25 * total2)


def _limit_address_space():
    # 6 GiB of address space: the 14.9 GiB the agent engine once tried at N = 2e9 cannot be had
    resource.setrlimit(resource.RLIMIT_AS, (6 * GiB, 6 * GiB))


def test_plan_true_refuses_before_allocating(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RAY_ADDRESS")}
    env["PYTHONPATH"] = str(REPO)
    try:
        proc = subprocess.run([sys.executable, "-m", "pipeline", "params.n_servers=2000000000", "plan=true"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
                              preexec_fn=_limit_address_space)
    except subprocess.TimeoutExpired:
        pytest.fail("plan=true did not return within 300 s")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "Traceback" not in out and "MemoryError" not in out, out
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == 1 and "n_servers=2000000000" in lines[0] and "engine=agent" in lines[0], out
