"""The ``population`` engine: exact simulation of a declared population process.

The state is the counts ``c = N x`` of a :class:`~sim.core.population.Population` (all its
vectors laid end to end). The embedded jump chain: from the state, transition ``(g, i)`` (family
``g``, index ``i``) is the next event with probability ``beta_{g,i}(x) / sum beta``, and the
state is weighted by its expected holding time ``1 / (N sum beta)`` (as the occupancy engines'
clock, :mod:`sim.dispatch.occupancy`). The rates live in one array with a running total per
family; after a jump only the rates whose stencil (``Transitions.reads``) reads a changed
coordinate are recomputed (a family without a stencil is recomputed whole), and a family's
total is summed anew at each window start, so that rounding cannot build up. An event costs
O(families + the index scanned within the chosen family + the rates recomputed): nothing
grows with N.

The kernel is generated per declaration (Python source with one block per family, the rate
functions called by name) and compiled by numba on first use. Where every rate function can be
imported by its module and name, the source is written as a module into a cache folder
(``$NUMBA_CACHE_DIR/population``, else ``~/.cache/lbsweep/numba/population``) named by a digest
of its text, of the rate functions' module files and of ``sim/``, so that numba keeps the
machine code on disk: a declaration compiles once a machine (JIQ-Po2's: 21.6 s, then 0.8 s in
the next process), not once a process. Otherwise (a lambda, a closure) it is compiled in
memory in each process. Either way the kernels are kept on the declaration object
(``Population._cache``).

Output: per window the time, the queue area (Little's law: ``mean_response`` is the queue
area over the admitted jobs), the area of every count (the tail), admitted arrivals, the
expected jobs the truncation refused (``N (arrival_rate - sum of the arrival rates)`` times
the holding time; a shortfall below 1e-10 of the arrival rate is the rounding of the running
totals and is not counted) and, where the arrival families give the queue position, the jobs that
waited and those within position ``h``. Warm-up cut (MSER-5), batch means and seeds as the
other stochastic engines (:mod:`sim.core.output`, :mod:`sim.core.rng`).
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import numpy as np
from numba import njit

from sim.core.population import At, Population
from sim.core.results import is_int, simulation_result
from sim.core.rng import next_raw, u01
from sim.core.settings import N_WINDOWS, RunSettings
from sim.core.skeleton import Run

__all__ = ["PopulationResult", "simulate", "kernels", "fill_rates", "ERRORS"]


#: estimates of one population run
PopulationResult = simulation_result("PopulationResult", "Estimates of one population run (the mean response by Little's law).", {
    "mean_response": "queue area over the admitted jobs (Little's law)",
    "prob_wait": "fraction of admitted jobs at position >= 2 (where the arrivals give it)",
    "drop_prob": "expected jobs the truncation refused / (those + admitted)",
    "n_jobs": "admitted jobs after the warm-up cut"})


@njit(cache=True, inline="always")
def _pick(rates, start, stop, u):
    """The offset in ``rates[start:stop]`` where the running sum first exceeds ``u`` (the last
    positive rate if rounding leaves ``u`` above the sum), or -1 if every rate is 0."""
    cum = 0.0
    last = -1
    for k in range(start, stop):
        r = rates[k]
        if r > 0.0:
            cum += r
            last = k
            if u < cum:
                return k
    return last


#: the kernel's error codes (its return value; ``err`` holds the family, index, coordinate)
ERRORS = {
    1: "no transition has a positive rate (an absorbing state)",
    2: "a jump drove a count outside [0, N]: the rate of transitions {fam!r} at i={i} must vanish "
       "there (coordinate {coord} of the flat state)",
    3: "transitions {fam!r} at i={i} returned a negative or non-finite rate",
}


def _views(decl: Population) -> str:
    return ", ".join(f"v{j}" for j in range(len(decl.vectors)))


def _rate_check(add, indent, g, idx):
    """Lines that stop the kernel (code 3) on a negative or non-finite new rate ``nr``."""
    add(f"{indent}if nr != nr or abs(nr) == np.inf or nr < 0.0:")
    add(f"{indent}    err[0] = {g}")
    add(f"{indent}    err[1] = {idx}")
    add(f"{indent}    state[0], state[1], state[2], state[3] = s0, s1, s2, s3")
    add(f"{indent}    return 3")


def _jump_lines(decl: Population, g: int, ind: str, add, areas: bool) -> None:
    """The lines that apply the jump of transition ``i`` of family ``g`` to the counts ``c``
    and fractions ``x`` (code 2 if a count leaves ``[0, n]``); ``areas``: also the lazy area
    and queue bookkeeping of the stationary kernel (``acc``, ``q``, ``qacc``, ``t_w``). Shared
    with the path kernel (:mod:`sim.core.population_paths`), which passes False."""
    vindex = {v.name: j for j, v in enumerate(decl.vectors)}
    t = decl.transitions[g]
    for v, o, dl in t.jump:
        jv = vindex[v]
        add(f"{ind}j = off{jv} + {o.k}" if isinstance(o, At) else f"{ind}j = off{jv} + i + {o}")
        add(f"{ind}c[j] += {dl}")
        add(f"{ind}if c[j] < 0 or c[j] > n:")
        add(f"{ind}    err[0] = {g}")
        add(f"{ind}    err[1] = i")
        add(f"{ind}    err[2] = j")
        add(f"{ind}    state[0], state[1], state[2], state[3] = s0, s1, s2, s3")
        add(f"{ind}    return 2")
        add(f"{ind}x[j] = c[j] / nf")
        if areas:
            add(f"{ind}acc[j] += {dl} * t_w")
            add(f"{ind}q += qw[j] * {dl}")
            add(f"{ind}qacc += qw[j] * {dl} * t_w")


def _select_lines(decl: Population, g: int, ind: str, top: str, add) -> str:
    """The branch of family ``g`` in the choice of the next transition (``u`` against the
    running totals), the index ``i`` picked within it (a null event where only rounding residue
    is left); ``top`` names the end of the last family's rates. Returns the branch's indent.
    Shared with the path kernel."""
    nfam = len(decl.transitions)
    nxt = f"base{g + 1}" if g + 1 < nfam else top
    last = g == nfam - 1
    below = " + ".join(f"ftot{h}" for h in range(g + 1))
    if g == 0:
        add(f"{ind}if u < ftot0{' or True' if last else ''}:")
    elif last:
        add(f"{ind}else:")
    else:
        add(f"{ind}elif u < {below}:")
    ind += "    "
    if g > 0:
        add(f"{ind}u -= " + " + ".join(f"ftot{h}" for h in range(g)))
    add(f"{ind}k = _pick(rates, base{g}, {nxt}, u)")
    add(f"{ind}if k < 0:  # only rounding residue left in this family's total")
    add(f"{ind}    ftot{g} = 0.0")
    add(f"{ind}    continue")
    add(f"{ind}i = lo{g} + k - base{g}")
    return ind


def _update_lines(decl: Population, g: int, ind: str, add) -> None:
    """The lines that recompute, after a jump of family ``g`` at index ``i``, the rates that
    read a changed coordinate (and every family without a stencil), keeping each family's
    running total ``ftot<h>``. Shared with the path kernel."""
    views = _views(decl)
    t = decl.transitions[g]
    shifts, fixed, whole, whole_if = _recompute(decl, t)

    def refresh(indent, h, idx):
        add(f"{indent}if {idx} >= lo{h} and {idx} < hi{h}:")
        add(f"{indent}    nr = beta{h}({idx}, {views}, nf, p)")
        _rate_check(add, indent + "    ", h, idx)
        add(f"{indent}    kk = base{h} + {idx} - lo{h}")
        add(f"{indent}    ftot{h} += nr - rates[kk]")
        add(f"{indent}    rates[kk] = nr")

    def refresh_all(indent, h):
        add(f"{indent}ftot{h} = 0.0")
        add(f"{indent}for jj in range(lo{h}, hi{h}):")
        add(f"{indent}    nr = beta{h}(jj, {views}, nf, p)")
        _rate_check(add, indent + "    ", h, "jj")
        add(f"{indent}    rates[base{h} + jj - lo{h}] = nr")
        add(f"{indent}    ftot{h} += nr")

    for h in sorted(set(shifts) | set(fixed)):
        if h in whole:
            continue
        conds = sorted(whole_if.get(h, ()))
        sub = ind
        if conds:  # a coordinate the whole family reads may have moved: all of it, or the stencil
            add(f"{ind}if " + " or ".join(f"i == {c}" for c in conds) + ":")
            refresh_all(ind + "    ", h)
            add(f"{ind}else:")
            sub = ind + "    "
        for sh in sorted(shifts.get(h, ())):
            add(f"{sub}jj = i + {sh}")
            refresh(sub, h, "jj")
        for k in sorted(fixed.get(h, ())):
            refresh(sub, h, str(k))
    for h in sorted(set(whole_if) - set(shifts) - set(fixed) - set(whole)):
        add(f"{ind}if " + " or ".join(f"i == {c}" for c in sorted(whole_if[h])) + ":")
        refresh_all(ind + "    ", h)
    for h in sorted(whole):
        refresh_all(ind, h)


def _unpack_lines(decl: Population, add) -> None:
    """The kernels' prologue: each vector's view and offset, and each family's index range,
    base and running total, in scalars (numba keeps scalars in registers)."""
    for j in range(len(decl.vectors)):
        add(f"    v{j} = x[offs[{j}]:offs[{j}] + sizes[{j}]]")
        add(f"    off{j} = offs[{j}]")
    for g in range(len(decl.transitions)):
        add(f"    lo{g} = lo[{g}]")
        add(f"    hi{g} = hi[{g}]")
        add(f"    base{g} = base[{g}]")
        add(f"    ftot{g} = 0.0")


def _source(decl: Population) -> str:
    """The Python source of the kernel and of the rate filler of ``decl``.

    The kernel keeps the index tables (``lo``, ``hi``, ``base``, the vectors' offsets) and the
    families' running totals in local scalars, one per family, and gets ``p`` as a tuple:
    LLVM then keeps them in registers instead of reloading them after every store to an array
    that might alias them (measured on pod at N = 10**6: 59 -> 40 ns an event with the rate
    functions inlined)."""
    nv, nfam = len(decl.vectors), len(decl.transitions)
    views = _views(decl)
    lines = []
    add = lines.append

    # ---- the rates of every transition at x (start of a run, mean field)
    add("def fill_rates(x, nf, p, lo, hi, offs, sizes, base, rates, err, strict):")
    for j in range(nv):
        add(f"    v{j} = x[offs[{j}]:offs[{j}] + sizes[{j}]]")
    for g in range(nfam):
        add(f"    for i in range(lo[{g}], hi[{g}]):")
        add(f"        r = beta{g}(i, {views}, nf, p)")
        add("        if r != r or abs(r) == np.inf or (strict and r < 0.0):")
        add(f"            err[0] = {g}")
        add("            err[1] = i")
        add("            return 3")
        add(f"        rates[base[{g}] + i - lo[{g}]] = r")
    add("    return 0")
    add("")
    # ---- the event loop
    add("def kernel(c, x, n, nf, p, lo, hi, offs, sizes, base, rates, bounds, state, arr_rate,")
    add("           h_thr, qw, w_time, w_qarea, w_area, w_adm, w_lost, w_waited, w_within, acc, err):")
    _unpack_lines(decl, add)
    add(f"    top = base[{nfam}]")
    add("    code = fill_rates(x, nf, p, lo, hi, offs, sizes, base, rates, err, True)")
    add("    if code != 0:")
    add("        return code")
    add("    q = 0.0")
    add("    for j in range(c.size):")
    add("        q += qw[j] * c[j]")
    add("    s0, s1, s2, s3 = state[0], state[1], state[2], state[3]")
    add("    for w in range(bounds.size - 1):")
    for g in range(nfam):  # the running totals summed anew: rounding cannot build up
        nxt = f"base{g + 1}" if g + 1 < nfam else "top"
        add(f"        ftot{g} = 0.0")
        add(f"        for k in range(base{g}, {nxt}):")
        add(f"            ftot{g} += rates[k]")
    add("        t_w = 0.0")
    add("        qacc = 0.0")
    add("        e = bounds[w]")
    add("        e1 = bounds[w + 1]")
    add("        while e < e1:")
    add("            tot = " + " + ".join(f"ftot{g}" for g in range(nfam)))
    add("            if not tot > 0.0:")
    add("                state[0], state[1], state[2], state[3] = s0, s1, s2, s3")
    add("                return 1")
    add("            r, s0, s1, s2, s3 = next_raw(s0, s1, s2, s3)")
    add("            u = u01(r) * tot")
    add("            hold = 1.0 / (nf * tot)")
    arrivals = [g for g, t in enumerate(decl.transitions) if t.arrival]
    add("            arr_now = " + " + ".join(f"ftot{g}" for g in arrivals))
    for g, t in enumerate(decl.transitions):
        ind = _select_lines(decl, g, "            ", "top", add)
        add(f"{ind}t_w += hold")
        add(f"{ind}if arr_rate - arr_now > 1e-10 * arr_rate:  # below: rounding of the totals")
        add(f"{ind}    w_lost[w] += (arr_rate - arr_now) * nf * hold")
        _jump_lines(decl, g, ind, add, areas=True)
        if t.arrival:
            add(f"{ind}w_adm[w] += 1")
            if t.position is not None:
                pos = t.position
                add(f"{ind}pos = {pos.k}" if isinstance(pos, At) else f"{ind}pos = i + {pos}")
                add(f"{ind}if pos >= 2:")
                add(f"{ind}    w_waited[w] += 1")
                add(f"{ind}if pos <= h_thr:")
                add(f"{ind}    w_within[w] += 1")
        _update_lines(decl, g, ind, add)
    add("            e += 1")
    add("        w_time[w] = t_w")
    add("        w_qarea[w] = q * t_w - qacc")
    add("        for j in range(c.size):")
    add("            w_area[w, j] = c[j] * t_w - acc[j]")
    add("            acc[j] = 0.0")
    add("    state[0], state[1], state[2], state[3] = s0, s1, s2, s3")
    add("    return 0")
    return "\n".join(lines) + "\n"


def _recompute(decl: Population, t) -> tuple[dict, dict, set, dict]:
    """Which rates a jump of family ``t`` (at index ``i``) changes, per family ``h``:
    ``shifts[h]``: indices ``i + shift`` (a moving coordinate meets a moving read);
    ``fixed[h]``: set indices ``k`` (a fixed coordinate ``At`` of the jump meets a moving
    read); ``whole``: the families recomputed whole after every jump of ``t`` (no stencil, or a
    read of a fixed coordinate the jump always moves); ``whole_if[h]``: the values of ``i`` for
    which the jump moves a fixed coordinate family ``h`` reads (whole recompute then)."""
    shifts, fixed, whole, whole_if = {}, {}, set(), {}
    for h, th in enumerate(decl.transitions):
        if th.reads is None:
            whole.add(h)
            continue
        for v, o, _ in t.jump:
            for rv, ro in th.reads:
                if rv != v:
                    continue
                if isinstance(ro, At) and isinstance(o, At):
                    if ro.k == o.k:
                        whole.add(h)
                elif isinstance(ro, At):  # coordinate i + o is ro.k when i = ro.k - o
                    whole_if.setdefault(h, set()).add(ro.k - o)
                elif isinstance(o, At):  # the rate at index jj reads o.k when jj + ro = o.k
                    fixed.setdefault(h, set()).add(o.k - ro)
                else:
                    shifts.setdefault(h, set()).add(o - ro)
    return shifts, fixed, whole, whole_if


def kernels(decl: Population):
    """``(kernel, fill_rates)`` of ``decl``, generated and compiled on first use (kept on the
    declaration)."""
    return compiled_once(decl, "kernels", "source", _source, _cached_kernels, _exec_kernels)


def compiled_once(decl: Population, key: str, source_key: str, source, from_disk, in_memory):
    """What ``decl._cache[key]`` holds, else: the generated source ``source(decl)``, compiled by
    ``from_disk(decl, src)`` (a generated module numba caches on disk; None where it cannot be
    imported by name), else by ``in_memory(decl, src)``; kept on the declaration with its
    source under ``source_key``."""
    cached = decl._cache.get(key)
    if cached is not None:
        return cached
    src = source(decl)
    out = None
    try:
        out = from_disk(decl, src)
    except Exception:  # noqa: BLE001 -- a cache that cannot be written or read: compile here
        out = None
    if out is None:
        out = in_memory(decl, src)
    decl._cache[key] = out
    decl._cache[source_key] = src
    return out


def loop_rate(t):
    """The rate function of transitions ``t`` as a generated loop calls it: inlined into the
    loop at numba's level (an out-of-line call passes each array view's struct on the stack,
    which cost more than the rate itself, measured on pod), or its own compiled body where
    the declaration says ``inline=False``."""
    return njit(inline="always")(t.rate.py_func) if t.inline else t.rate


def _exec_kernels(decl: Population, src: str):
    """The kernels of ``decl`` compiled from ``src`` in memory (no disk cache)."""
    namespace = {"np": np, "next_raw": next_raw, "u01": u01, "_pick": _pick}
    for g, t in enumerate(decl.transitions):
        namespace[f"beta{g}"] = loop_rate(t)
    code = compile(src, f"<population kernel of {decl.name}>", "exec")
    exec(code, namespace)  # noqa: S102 -- our own generated source, no user text in it
    namespace["fill_rates"] = njit(namespace["fill_rates"])  # the kernel calls it by name
    return (njit(namespace["kernel"]), namespace["fill_rates"])


def _module_text(decl: Population, src: str) -> str | None:
    """``src`` as a module whose kernels numba may cache on disk: the rate functions imported
    by name, the two kernels ``@njit(cache=True)``. None where a rate function cannot be
    imported by its module and name (a lambda, a closure, a function made at run time)."""
    lines = ["import numpy as np", "from numba import njit", "",
             "from sim.core.population_engine import _pick", "from sim.core.rng import next_raw, u01"]
    for g, t in enumerate(decl.transitions):
        f = t.rate.py_func
        mod, name = getattr(f, "__module__", None), getattr(f, "__qualname__", "")
        if not mod or mod == "__main__" or not name.isidentifier():
            return None
        if getattr(sys.modules.get(mod), name, None) is not t.rate:
            return None
        lines.append(f"from {mod} import {name} as _rate{g}")
        lines.append(f"beta{g} = njit(inline='always')(_rate{g}.py_func)" if t.inline
                     else f"beta{g} = _rate{g}")
    body = src.replace("def fill_rates(", "@njit(cache=True)\ndef fill_rates(", 1)
    body = body.replace("def kernel(", "@njit(cache=True)\ndef kernel(", 1)
    return "\n".join(lines) + "\n\n\n" + body


def _cached_kernels(decl: Population, src: str):
    """The kernels of ``decl`` from a generated module in a cache folder (:func:`cached_module`).
    None where the rate functions cannot be imported by name."""
    text = _module_text(decl, src)
    if text is None:
        return None
    m = cached_module(decl, text)
    return None if m is None else (m.kernel, m.fill_rates)


def cached_module(decl: Population, text: str):
    """The module of generated source ``text`` (kernels of ``decl`` marked ``cache=True``)
    written to a cache folder and imported from there, so that numba keeps their machine code on
    disk (a declaration then compiles once a machine, not once a process: 10-30 s for JIQ's
    five families). The module's name is a digest of its text, of the files of the rate
    functions' modules and of every file of ``sim/`` (numba keys a cached function on its own
    file's time stamp only, so a changed helper elsewhere must give a new module). None where
    a rate function's module has no file."""
    h = hashlib.sha256(text.encode())
    for mod in sorted({t.rate.py_func.__module__ for t in decl.transitions}):
        path = getattr(sys.modules[mod], "__file__", None)
        if path is None:
            return None
        h.update(Path(path).read_bytes())
    h.update(_sim_digest().encode())
    name = f"_lbsweep_population_{h.hexdigest()[:20]}"
    if name in sys.modules:
        return sys.modules[name]
    folder = Path(os.environ.get("NUMBA_CACHE_DIR") or Path(
        os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lbsweep" / "numba") / "population"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    if not path.exists():  # written whole, then renamed: a reader never sees half a file
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        tmp.write_text(text)
        os.replace(tmp, path)
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec)
    sys.modules[name] = m
    try:
        spec.loader.exec_module(m)
    except BaseException:
        del sys.modules[name]
        raise
    return m


_SIM_DIGEST: list[str] = []


def _sim_digest() -> str:
    """A digest of every ``.py`` file of the ``sim`` package (once a process)."""
    if not _SIM_DIGEST:
        root = Path(__file__).resolve().parents[1]
        h = hashlib.sha256()
        for f in sorted(root.rglob("*.py")):
            if "__pycache__" not in f.parts:
                h.update(f.relative_to(root).as_posix().encode() + b"\0" + f.read_bytes() + b"\0")
        _SIM_DIGEST.append(h.hexdigest())
    return _SIM_DIGEST[0]


def _tables(decl: Population, lay):
    lo = np.array([r[0] for r in lay.ranges], dtype=np.int64)
    hi = np.array([r[1] for r in lay.ranges], dtype=np.int64)
    base = np.concatenate(([0], np.cumsum(hi - lo))).astype(np.int64)
    return lo, hi, base, np.array(lay.offsets[:-1], dtype=np.int64), np.array(lay.sizes, dtype=np.int64)


def _raise(decl: Population, code: int, err: np.ndarray):
    fam = decl.transitions[int(err[0])].name if code in (2, 3) else ""
    raise ValueError(f"population {decl.name!r}: " + ERRORS[code].format(
        fam=fam, i=int(err[1]), coord=int(err[2])))


def fill_rates(decl: Population, x: np.ndarray, nf: float, p: np.ndarray, lay,
               strict: bool = True) -> np.ndarray:
    """Every transition's ``beta`` at fractions ``x`` (flat), family after family. ``strict``:
    a negative rate is an error (a simulation); the mean-field ODE passes False, as its solver
    tries states a rounding error outside the domain where a rate like ``s_i - s_{i+1}`` is
    slightly negative (a non-finite rate is an error either way)."""
    _, filler = kernels(decl)
    lo, hi, base, offs, sizes = _tables(decl, lay)
    rates = np.zeros(int(base[-1]))
    err = np.zeros(3, dtype=np.int64)
    code = filler(np.ascontiguousarray(x, dtype=np.float64), float(nf), tuple(p), lo, hi, offs, sizes,
                  base, rates, err, bool(strict))
    if code:
        _raise(decl, code, err)
    return rates


def simulate(decl: Population, task: dict, *, n_windows: int = N_WINDOWS) -> PopulationResult:
    """Run ``task`` (``n_servers``, ``events``, the run settings of
    :class:`sim.core.settings.RunSettings` and the declaration's parameters) on the population
    engine."""
    n = task["n_servers"]
    if not is_int(n) or not 1 <= n < 2**53:
        raise ValueError(f"n_servers={n!r} must be an integer with 1 <= n_servers < 2**53")
    settings = RunSettings.from_task(task)
    run = Run(events=task["events"], seed=settings.seed, init=settings.init,
              n_batches=settings.n_batches, max_level=settings.max_level, n_windows=n_windows,
              h=settings.h, se_method=settings.se_method)
    p = np.asarray(decl.params(task), dtype=np.float64)
    lay = decl.layout(p)
    n, nf = int(n), float(n)
    if run.init != "empty":  # the fixed point of the declaration's drift
        from sim.core.population_limit import fixed_point

        x0 = fixed_point(decl, p).x
    else:
        x0 = decl.start_state(p, lay)
    c = decl.start_counts(p, x0, n)
    x = c / nf
    kernel, _ = kernels(decl)
    lo, hi, base, offs, sizes = _tables(decl, lay)
    rates = np.zeros(int(base[-1]))
    dim = c.size
    w_time, w_qarea = run.zeros(float), run.zeros(float)
    w_area = np.zeros((run.n_win, dim))
    w_adm, w_waited, w_within = (run.zeros() for _ in range(3))
    w_lost = run.zeros(float)
    acc = np.zeros(dim)
    err = np.zeros(3, dtype=np.int64)
    state = run.xoshiro()
    qw = decl.queue_weights(lay)
    arr_rate = float(decl.arrival_rate(p))
    code = kernel(c, x, n, nf, tuple(p), lo, hi, offs, sizes, base, rates, run.bounds, state,
                  arr_rate, run.h, qw, w_time, w_qarea, w_area, w_adm, w_lost, w_waited, w_within,
                  acc, err)
    if code:
        _raise(decl, code, err)

    tv, tlo = decl.tail
    j = lay.index[tv]
    first = int(lay.offsets[j]) + tlo
    top = min(int(lay.offsets[j]) + lay.sizes[j], first + run.max_level)
    w_tail = run.tail_zeros(float)
    w_tail[:, : top - first] = w_area[:, first:top]
    has_pos = any(t.arrival and t.position is not None for t in decl.transitions)
    ratios = {"mean_response": (w_qarea, w_adm),  # Little's law
              "drop_prob": (w_lost, w_lost + w_adm)}
    if has_pos:
        ratios.update(prob_wait=(w_waited, w_adm), frac_within_h=(w_within, w_adm))
    est = run.epilogue(n_servers=n, w_qarea=w_qarea, w_tail=w_tail, ratios=ratios, jobs=w_adm,
                       w_time=w_time, ci_note="; population jump chain, expected holding times; "
                       "mean response by Little's law")
    ms = decl.mean_service
    resp, resp_se = est["mean_response"], est["mean_response_se"]
    if not has_pos:  # no arrival says where its job lands: no waiting probability
        est = {**est, "prob_wait": None}
    return PopulationResult(
        **est,
        mean_wait=resp - ms if ms is not None else None, mean_wait_se=resp_se if ms is not None else None,
        queueing_ratio=(resp - ms) / ms if ms else None, queueing_ratio_se=resp_se / ms if ms else None,
        messages_per_job=decl.messages(p) if decl.messages is not None else None,
    )
