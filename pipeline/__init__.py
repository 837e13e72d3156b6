"""Orchestration: Hydra configs -> validated tasks -> Ray -> Parquet -> analysis -> MLflow -> archive.

Kept light on import: Ray workers import :mod:`pipeline.worker` only.
"""

import os as _os

# Ray >= 2.52 reads RAY_AUTH_MODE once, when it is first imported (Hydra's plugin discovery
# may import it before any of our code runs), and a local cluster started by ray.init() then
# uses token authentication with a generated token. We set it explicitly, as early as
# possible, unless the user joins an existing cluster (RAY_ADDRESS) or set it already.
if "RAY_ADDRESS" not in _os.environ:
    _os.environ.setdefault("RAY_AUTH_MODE", "token")
