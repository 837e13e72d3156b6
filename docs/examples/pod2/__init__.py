"""Power-of-d on two classes of servers, declared by its transitions, out of tree."""
from sim.core.declare import Entry, Model, Param


def run_sim(task: dict) -> dict:
    from pod2.transitions import POD2
    from sim.core.population_engine import simulate
    from sim.core.results import simulation_row
    fast = task["n_servers"] * task["gamma"]
    if abs(fast - round(fast)) > 1e-9:
        raise ValueError(f"n_servers * gamma = {fast!r} must be a whole number of servers")
    return simulation_row(simulate(POD2, task))


def run_limit(task: dict) -> dict:
    from pod2.transitions import POD2
    from sim.core.population_limit import limit_row
    return limit_row(POD2, task)


def check_task(task: dict) -> None:
    gamma, mu1, mu2 = task["gamma"], task["mu1"], task["mu2"]
    if not (0.0 < gamma < 1.0 and mu1 > 0.0 and mu2 > 0.0):
        raise ValueError(f"gamma={gamma!r} must be in (0, 1), mu1={mu1!r} and mu2={mu2!r} > 0")
    if not 0.0 < task["lam"] < gamma * mu1 + (1.0 - gamma) * mu2:
        raise ValueError(f"lam={task['lam']!r} must be in (0, gamma mu1 + (1 - gamma) mu2)")
    if not 1 <= task["d"] <= task["n_servers"]:
        raise ValueError(f"d={task['d']!r} must be in [1, n_servers]")


_EX = {"n_servers": 200, "lam": 0.8, "d": 2, "gamma": 0.5, "mu1": 1.5, "mu2": 0.5}
_NEEDS = ("d", "gamma", "mu1", "mu2")
MODEL = Model(
    name="pod2",
    title="power-of-d on two classes of servers, declared by its transitions",
    entries=(
        Entry("population", "pod2", "pod2:run_sim", _NEEDS, ("b",),
              example={**_EX, "events": 400_000}),
        Entry("population_meanfield", "pod2", "pod2:run_limit", _NEEDS, ("b",), example=_EX),
    ),
    params={"d": Param("int", "queues probed per job"),
            "gamma": Param("float", "fraction of servers of class 1",
                           label="fraction γ of servers of class 1", symbol="γ"),
            "mu1": Param("float", "service rate of class 1", symbol="μ1"),
            "mu2": Param("float", "service rate of class 2", symbol="μ2"),
            "b": Param("int", "truncation level (default 40)")},
    results={},
    main_estimate="mean_response",
    events_per_time=lambda task: 2.0 * task["n_servers"] * task["lam"],
    check_task=check_task,
    labels={"pod2": "power-of-d, two server classes"},
)
