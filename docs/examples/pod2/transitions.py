"""Power-of-d on two classes of servers (rates mu1 and mu2), as transitions."""
import numpy as np
from numba import njit

from sim.core.population import Population, Transitions, Vector


@njit(inline="always")
def probes_in(x, n, d):          # all d distinct probes in a set of N x servers
    if n == np.inf:
        return x ** d
    c = x * n
    if c < d - 0.5:              # fewer than d servers in the set
        return 0.0
    out = 1.0
    for j in range(d):
        out *= (c - j) / (n - j)
    return out


@njit(inline="always")
def joins(i, mine, other, mine_first, n, d):
    # a job joins a queue of this class of length i - 1 (the shortest sampled)
    if mine_first:               # this class wins ties: any of its length-(i-1) queues sampled
        r = probes_in(mine[i - 1] + other[i - 1], n, d) - probes_in(mine[i] + other[i - 1], n, d)
    else:                        # none of the other class's length-(i-1) queues sampled
        r = probes_in(mine[i - 1] + other[i], n, d) - probes_in(mine[i] + other[i], n, d)
    return r if r > 0.0 else 0.0


@njit
def arrive1(i, s1, s2, n, p):    # p = (lam, d, gamma, mu1, mu2, L)
    return p[0] * joins(i, s1, s2, p[3] >= p[4], n, np.int64(p[1]))


@njit
def arrive2(i, s1, s2, n, p):
    return p[0] * joins(i, s2, s1, p[4] > p[3], n, np.int64(p[1]))


@njit
def depart1(i, s1, s2, n, p):    # a class-1 server with i tasks completes one
    return p[3] * (s1[i] - s1[i + 1])


@njit
def depart2(i, s1, s2, n, p):
    return p[4] * (s2[i] - s2[i + 1])


def params(task):
    return (float(task["lam"]), float(task["d"]), float(task["gamma"]), float(task["mu1"]),
            float(task["mu2"]), float(task.get("b") or 40))


def start(p, sizes):             # empty: s1_0 = gamma, s2_0 = 1 - gamma, the rest 0
    s1, s2 = np.zeros(sizes[0]), np.zeros(sizes[1])
    s1[0], s2[0] = p[2], 1.0 - p[2]
    return [s1, s2]


STENCIL = (("s1", -1), ("s1", 0), ("s2", -1), ("s2", 0))
POD2 = Population(
    name="pod2",
    vectors=(Vector("s1", lambda p: int(p[5]) + 2), Vector("s2", lambda p: int(p[5]) + 2)),
    transitions=(
        Transitions("arrive1", arrive1, (("s1", 0, +1),), 1, -1, reads=STENCIL,
                    arrival=True, position=0),
        Transitions("arrive2", arrive2, (("s2", 0, +1),), 1, -1, reads=STENCIL,
                    arrival=True, position=0),
        Transitions("depart1", depart1, (("s1", 0, -1),), 1, -1, reads=(("s1", 0), ("s1", 1))),
        Transitions("depart2", depart2, (("s2", 0, -1),), 1, -1, reads=(("s2", 0), ("s2", 1))),
    ),
    params=params,
    start=start,
    queue=(("s1", 1, 0, 1.0), ("s2", 1, 0, 1.0)),   # tasks per server
    tail=("s1", 1),                                 # the reported tail: class 1's
    arrival_rate=lambda p: p[0],
    mean_service=None,           # a job's service time depends on the class it joins
)
