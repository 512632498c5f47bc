"""The sleep-env sampler of the scripts that measure the parent's cost (parent_scaling.py,
handshake_floor.py; docs/lab/benchmarks.md): ``vecsample bench``'s VecSampler row over
``vecsample.testing.sleep_fns``, whose first env per worker sleeps once per batch.

Not a script: its siblings import it (``python experiments/<script>.py`` puts this folder on
the path).
"""

from __future__ import annotations

from vecsample.tools.bench_backends import Config, Sampler


def sleeping(workers: int, envs_per_worker: int, sleep: float, timeout: float,
             partial: bool) -> Sampler:
    """The sleep-env scenario (one sleep of ``sleep`` seconds per worker batch), full batches or
    partial ones of ``timeout``."""
    # cores=2: only the machine-limit rows read it, and a sleep config has none.
    cfg = Config(f"sleep {sleep * 1e3:g} ms", workers * envs_per_worker, workers, 2, timeout,
                 "none", sleep)
    return Sampler(cfg, timeout if partial else None)
