"""The MAML-TRPO configs of pytorch-maml-rl (configs/maml/*.yaml), shipped as Python data.

Every number is theirs; only the MuJoCo ids move from ``-v2``/``-v1`` (mujoco-py) to our
``-v5`` task envs. The ``metaworld-*`` configs are garage's MAML-TRPO on Meta-World.
``MetaConfig.from_dict`` reads their key spelling (``fast-batch-size``), so one of their YAML
files, converted to JSON, loads with ``load_config(path)``.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vecsample.errors import ConfigError


@dataclass(frozen=True)
class MetaConfig:
    """One MAML-TRPO experiment: env, policy, inner loop, outer loop (TRPO)."""

    env_name: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    gamma: float = 0.95  # discount
    gae_lambda: float = 1.0  # GAE's lambda
    first_order: bool = False  # first-order MAML in the outer loop
    hidden_sizes: tuple[int, ...] = (100, 100)  # policy MLP
    nonlinearity: str = "relu"  # a function of the torch module
    fast_batch_size: int = 20  # episodes per task (the sampler's batch_size)
    num_steps: int = 1  # inner-loop gradient steps
    fast_lr: float = 0.5  # inner-loop step size
    num_batches: int = 500  # outer-loop updates (meta-batches)
    meta_batch_size: int = 20  # tasks per meta-batch
    max_kl: float = 1e-2  # TRPO trust region
    cg_iters: int = 10  # conjugate-gradient iterations
    cg_damping: float = 1e-5  # conjugate-gradient damping
    ls_max_steps: int = 15  # line-search steps
    ls_backtrack_ratio: float = 0.8  # line-search shrink factor

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetaConfig:
        """Reads pytorch-maml-rl's keys (``env-name``) or ours (``env_name``)."""
        names = {f.name for f in dataclasses.fields(cls)}
        values = {key.replace("-", "_"): value for key, value in data.items()}
        unknown = sorted(set(values) - names)
        if unknown:
            raise ConfigError(
                f"Unknown config keys {unknown}; expected keys among {sorted(names)}."
            )
        if "hidden_sizes" in values:
            values["hidden_sizes"] = tuple(values["hidden_sizes"])
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        """pytorch-maml-rl's spelling, for a ``config.json`` their ``test.py`` can read too."""
        return {
            key.replace("_", "-"): list(value) if isinstance(value, tuple) else value
            for key, value in dataclasses.asdict(self).items()
        }


def _mujoco(env_name: str, **task_range: float) -> MetaConfig:
    """Their MuJoCo configs differ only in env and task range."""
    env_kwargs = {**task_range, "normalization_scale": 10.0, "max_episode_steps": 100}
    return MetaConfig(
        env_name,
        env_kwargs,
        gamma=0.99,
        hidden_sizes=(64, 64),
        nonlinearity="tanh",
        fast_batch_size=20,
        fast_lr=0.1,
        meta_batch_size=40,
    )


def _bandit(k: int, n: int) -> MetaConfig:
    return MetaConfig(f"Bandit-K{k}-v0", hidden_sizes=(32, 32), fast_batch_size=n)


def _metaworld(benchmark: str, env_name: str | None = None) -> MetaConfig:
    """MAML-TRPO on Meta-World as garage's examples run it (the Meta-World paper's baseline):
    20 tasks x 10 episodes, 100-100 tanh policy, inner lr 0.1, gamma 0.99, GAE lambda 1, one
    inner step, max KL 0.01. Episodes are Meta-World+'s 500 steps (``max_path_length``)."""
    kwargs: dict[str, Any] = {"benchmark": benchmark, "split": "train"}
    if env_name is not None:
        kwargs["env_name"] = env_name
    return MetaConfig(
        "MetaWorld-v3",
        kwargs,
        gamma=0.99,
        hidden_sizes=(100, 100),
        nonlinearity="tanh",
        fast_batch_size=10,
        fast_lr=0.1,
        num_batches=300,
        meta_batch_size=20,
    )


#: The shipped configs by name (their file names, without ``.yaml``).
CONFIGS: dict[str, MetaConfig] = {
    "2d-navigation": MetaConfig(
        "2DNavigation-v0",
        {"low": -0.5, "high": 0.5},
        gamma=0.99,
        hidden_sizes=(64, 64),
        nonlinearity="tanh",
        fast_lr=0.1,
    ),
    "halfcheetah-vel": _mujoco("HalfCheetahVel-v5", low=0.0, high=2.0),
    "halfcheetah-dir": _mujoco("HalfCheetahDir-v5"),
    "ant-vel": _mujoco("AntVel-v5", low=0.0, high=3.0),
    "ant-dir": _mujoco("AntDir-v5"),
    "ant-goal": _mujoco("AntPos-v5", low=-3.0, high=3.0),
    **{f"bandit-k{k}-n{n}": _bandit(k, n) for k in (5, 10, 50) for n in (10, 100, 500)},
    # Meta-World+ (the metaworld extra): ML1 on three classes, ML10, ML45.
    **{f"metaworld-ml1-{name}": _metaworld("ML1", f"{name}-v3")
       for name in ("reach", "push", "pick-place")},
    "metaworld-ml10": _metaworld("ML10"),
    "metaworld-ml45": _metaworld("ML45"),
}


def load_config(name_or_path: str | Path) -> MetaConfig:
    """A shipped config by name (see ``CONFIGS``), or a ``.json`` / ``.yaml`` file.

    YAML needs PyYAML, which vecsample does not depend on; JSON always works.
    """
    key = str(name_or_path)
    if key in CONFIGS:
        return copy.deepcopy(CONFIGS[key])  # callers may edit env_kwargs; keep ours intact
    path = Path(name_or_path)
    if not path.is_file():
        raise ConfigError(
            f"No config named {key!r}: expected one of {sorted(CONFIGS)} or a JSON/YAML file."
        )
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            yaml = importlib.import_module("yaml")
        except ImportError as exc:
            raise ConfigError(f"Reading {path} needs PyYAML: pip install pyyaml.") from exc
        return MetaConfig.from_dict(yaml.safe_load(text))
    return MetaConfig.from_dict(json.loads(text))
