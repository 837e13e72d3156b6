"""The worked example of docs/extending.md ("A model from its transitions"): its two files,
taken from the page, written into a temporary package and loaded as an out-of-tree model; the
contract check (sim.testing.check_model) must pass on it, and its mean field must be
power-of-d's closed form (probes with replacement are the mean field's law)."""
from __future__ import annotations

import re

from sim.dispatch.meanfield.pod import pod_mean_response
from tests.helpers import REPO, registry_restored, write_package


def _example_files() -> dict[str, str]:
    text = (REPO / "docs" / "extending.md").read_text()
    found = re.findall(r"<!-- population example: my_pod/(\S+) -->\n```python\n(.*?)```", text, re.S)
    assert [name for name, _ in found] == ["transitions.py", "__init__.py"], found
    return dict(found)


def test_the_worked_example_runs(tmp_path, monkeypatch):
    import sim
    from sim import registry
    from sim.testing import check_model

    write_package(tmp_path, "my_pod", _example_files())
    monkeypatch.syspath_prepend(str(tmp_path))
    with registry_restored("my_pod"):
        model = registry.load_model("my_pod")
        check_model(model)
        row = sim.run({"model": "my_pod", "engine": "population_meanfield", "policy": "pod_rep",
                       "n_servers": 100, "lam": 0.9, "d": 2})
        assert abs(row["mean_response"] - pod_mean_response(0.9, 2)) < 1e-9
