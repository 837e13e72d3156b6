"""One analysis module or package per model (or per question a model's sweeps ask), beside the general ones.

Each function here takes ``(frame, params, outdir, sweep_name)`` and returns a dict with at least
``report``, ``plots``, ``metrics`` and ``verdict_lines`` (the console lines of its verdicts); a
sweep asks for it by the name :data:`analysis.catalog.ANALYSES` lists it under.

- :mod:`~analysis.models.zero_queueing`: the dispatch model's headline question (queueing ratio
  of k-task jobs as N grows);
- :mod:`~analysis.models.centralization`: partial centralization against its invariant state;
- :mod:`~analysis.models.jiq`: distributed JIQ against the paper and the mean field;
- :mod:`~analysis.models.led`: multiple dispatchers with local estimates.
"""
