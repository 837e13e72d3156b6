"""The stable import path of the zero-queueing analysis: ``analysis.zero_queueing.verdict``
and ``analyze_zero_queueing``. The module is :mod:`analysis.models.zero_queueing` (one module
per model's analysis); this name is kept for users and scripts that import it."""
from analysis.models.zero_queueing import *  # noqa: F403
