"""``python -m pipeline [+sweep=NAME] [key=value ...]``: run a sweep (see README.md)."""
from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

import pipeline.config  # noqa: F401  (registers the typed schema with Hydra)
from pipeline.errors import ConfigError

log = logging.getLogger("pipeline")


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from pipeline.run import run_sweep

    try:
        run_sweep(cfg)
    except ConfigError as exc:
        log.error("configuration error: %s", exc)
        sys.exit(2)


if __name__ == "__main__":
    main()
