"""What one arm's simulations show, kept apart from what its limit claims (docs/analysis.md,
"Two claims, kept apart").

- :func:`trend`: the simulated ratio's trend *over the simulated range* (falling, flat or
  rising, with the power-law rate and its 95% interval, and where the upper half of the range
  says otherwise, that too). It is a description of the points, never a limit.
- :func:`follows`: the simulations against their limit path at the N they share: the gap
  relative to the limit's ratio with its 95% interval at the largest such N, whether the finite
  systems follow the path (:data:`FOLLOW_REL`), and the gap's trend in N.

The limit claim itself is the limit path's (the heavy-traffic form, a derived form or
*undecided beyond* the path's end: :mod:`analysis.models.zero_queueing_limit`); an arm with no
limit path claims no limit (:func:`limit_claim`).
"""
from __future__ import annotations

from analysis.fmt import sci as _sci

#: an arm follows its limit path when the 95% interval of the relative gap at the largest shared
#: N lies within +-FOLLOW_REL of 0 (the simulations there are within 5% of the limit's ratio)
FOLLOW_REL = 0.05
#: below this the limit's ratio is too small for a relative gap (the same as the verdicts')
RATIO_ZERO = 1e-3
FALLING, FLAT, RISING, ZERO, FEW = "falling", "flat", "rising", "zero", "too few points"


def _cls(slope, lo, hi) -> str | None:
    if slope is None or lo is None or hi is None:
        return None
    return FALLING if hi < 0 else RISING if lo > 0 else FLAT


def _span(a: float, b: float) -> str:
    return f"N = {_sci(a)}..{_sci(b)}"


def trend(v: dict) -> dict:
    """The trend of one arm's simulated ratio over its range, from the fits :func:`verdict`
    made (``slope``, ``slope_lo``, ``slope_hi`` on all points; ``tail_*`` on the upper half) and
    its resolution rule (``below_resolution``: the ratio's 95% interval below 1e-3 on the upper
    half). Returns
    ``trend`` (:data:`FALLING`, :data:`FLAT`, :data:`RISING`, :data:`ZERO` or :data:`FEW`) and
    ``trend_text`` (the words, with the range)."""
    n_lo, n_hi = v.get("n_min"), v.get("n_max")
    span = _span(n_lo, n_hi) if n_lo and n_hi else "the simulated range"
    if v.get("below_resolution"):
        return {"trend": ZERO, "trend_text": f"below {RATIO_ZERO:g} (95% CI) on the upper half of {span}"}
    c = _cls(v.get("slope"), v.get("slope_lo"), v.get("slope_hi"))
    if c is None:
        return {"trend": FEW, "trend_text": f"{FEW} for a trend over {span}"}
    rate = f"N^{v['slope']:.2f} [{v['slope_lo']:.2f}, {v['slope_hi']:.2f}]"
    text = {FALLING: f"falling like {rate}", RISING: f"rising like {rate}", FLAT: f"flat (slope {rate[2:]})"}[c]
    text += f" over {span}"
    tc = _cls(v.get("tail_slope"), v.get("tail_slope_lo"), v.get("tail_slope_hi"))
    if tc is not None and tc != c and v.get("tail_min_n"):
        text += f"; {tc} over {_span(v['tail_min_n'], n_hi)} (N^{v['tail_slope']:.2f})"
    return {"trend": c, "trend_text": text, "trend_upper": tc}


def follows(v: dict) -> dict:
    """The simulations against their limit path (``gaps``, from :func:`verdicts._gaps`: per shared
    N the simulated ratio, the limit's, and the 95% interval of their difference; ``gap_slope``
    and its interval: the gap's power-law rate). Returns ``follows`` (True, False or None
    without a path or where the limit is below :data:`RATIO_ZERO`), ``rel_gap`` with
    ``rel_gap_lo``/``_hi`` and ``rel_gap_n`` at the largest shared N, and ``follows_text``."""
    gaps = [g for g in (v.get("gaps") or []) if g.get("limit") is not None and g.get("sim") is not None]
    out = {"follows": None, "rel_gap": None, "rel_gap_lo": None, "rel_gap_hi": None, "rel_gap_n": None,
           "follows_text": "no limit path at these N"}
    if not gaps:
        return out
    g = gaps[-1]
    at = _sci(g["n"])
    if not (g["limit"] > RATIO_ZERO):
        out["follows_text"] = f"limit {g['limit']:.2g} at {at}, simulated {g['sim']:.3g}: no relative gap"
        return out
    rel = g["gap"] / g["limit"]
    lo = None if g.get("lo") is None else g["lo"] / g["limit"]
    hi = None if g.get("hi") is None else g["hi"] / g["limit"]
    out.update(rel_gap=rel, rel_gap_lo=lo, rel_gap_hi=hi, rel_gap_n=g["n"])
    band = "" if lo is None or hi is None else f" [{_pct(lo)}, {_pct(hi)}]"
    if lo is not None and hi is not None and -FOLLOW_REL <= lo and hi <= FOLLOW_REL:
        out.update(follows=True, follows_text=f"on the limit path: {_pct(rel)}{band} at {at}")
        return out
    way = "above" if rel > 0 else "below"
    text = f"{_pct(abs(rel), sign=False)} {way} the limit path{band} at {at}"
    gs, gl, gh = v.get("gap_slope"), v.get("gap_slope_lo"), v.get("gap_slope_hi")
    if gs is not None and gh is not None and gh < 0:
        text += f", the gap falling like N^{gs:.2f} [{gl:.2f}, {gh:.2f}]"
    elif gs is not None and gl is not None and gl > 0:
        text += f", the gap growing like N^{gs:.2f}"
    out.update(follows=False, follows_text=text)
    return out


def limit_claim(v: dict) -> dict:
    """The arm's limit claim and what carries it: the limit path's (``path_verdict``, with
    ``limit_carried_by``, set by the heavy-traffic, closed-form or derived forms); a claim that
    nothing carries is *undecided beyond* the path's end; an arm without a path claims nothing
    past its simulated range. Returns ``limit`` and ``limit_carrier``."""
    if v.get("path_verdict") is None or v.get("path_n_max") is None:
        end = _sci(v["n_max"]) if v.get("n_max") else "the simulated range"
        if v.get("trend") == ZERO and v.get("b") == 1:
            return {"limit": "zero at every N", "limit_carrier": "b = 1: each server holds one task, none waits"}
        return {"limit": f"undecided beyond N = {end}", "limit_carrier": "no limit path"}
    carrier = v.get("limit_carried_by")
    if v["path_verdict"] == "undecided" or not carrier:
        return {"limit": f"undecided beyond N = {_sci(v['path_n_max'])}",
                "limit_carrier": "the limit path ends there; nothing carries a claim past it"}
    return {"limit": v["path_verdict"], "limit_carrier": carrier}


def _pct(r: float, sign: bool = True) -> str:
    p = 100 * r
    s = f"{p:+.2g}%" if abs(p) < 10 else f"{p:+.0f}%"
    return s if sign else s.lstrip("+")
