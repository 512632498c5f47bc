"""The policies the tools run in the parent: random, pre-sampled, and a torch MLP.

A policy here is a function from a batch of observations ``[N, ...]`` to a batch of actions. The
MLP comes from one builder, ``mlp``, for ``compare``, ``bench`` and ``probe`` alike. torch is
imported inside the functions that need it, so importing this module stays light.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from vecsample.errors import ConfigError
from vecsample.extras import require

if TYPE_CHECKING:
    from torch import nn

Policy = Callable[[np.ndarray], np.ndarray]

#: How many distinct pre-sampled action batches an ``ActionTable`` cycles through.
ACTION_TABLE = 8
#: The hidden sizes of ``"mlp"`` without sizes, and of ``vecsample bench --policy mlp``.
DEFAULT_HIDDEN = (64, 64)
SPEC_HELP = "'random' or 'mlp:H1,H2,...' (a torch MLP of those widths)"


def mlp(in_dim: int, hidden: Sequence[int], out_dim: int) -> nn.Sequential:
    """A tanh MLP: a Linear + Tanh per hidden size, then a Linear to ``out_dim`` (CleanRL style)."""
    require("torch", feature="a torch MLP policy ('mlp')", extra="cli")
    from torch import nn  # lazily: `import vecsample` stays free of torch

    modules: list[nn.Module] = []
    for a, b in itertools.pairwise([in_dim, *hidden]):
        modules += [nn.Linear(a, b), nn.Tanh()]
    modules.append(nn.Linear(hidden[-1] if hidden else in_dim, out_dim))
    return nn.Sequential(*modules)


def random_policy(action_space: gym.Space[Any] | int, seed: int = 0) -> Policy:
    """Uniform actions (Discrete or bounded Box): a policy whose cost does not matter."""
    rng = np.random.default_rng(seed)
    space = gym.spaces.Discrete(action_space) if isinstance(action_space, int) else action_space
    if isinstance(space, gym.spaces.Discrete):
        lo, n = int(space.start), int(space.n)
        return lambda obs: rng.integers(lo, lo + n, size=len(obs))
    if isinstance(space, gym.spaces.Box) and space.is_bounded():
        low, high, dtype = space.low, space.high, space.dtype
        return lambda obs: rng.uniform(low, high, size=(len(obs), *low.shape)).astype(dtype)
    raise ConfigError(name="the random policy's action space",
                      expected="a Discrete or bounded Box space", got=space,
                      fix="use an env with such actions, or wrap it (e.g. ClipAction)")


class ActionTable:
    """Pre-sampled action batches, cycled, so acting costs nothing (``bench --policy none``)."""

    def __init__(self, space: gym.Space[Any], num_envs: int, seed: int = 0) -> None:
        space.seed(seed)
        self.batches = [np.stack([np.asarray(space.sample()) for _ in range(num_envs)])
                        for _ in range(ACTION_TABLE)]
        self.i = 0

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        self.i = (self.i + 1) % ACTION_TABLE
        return self.batches[self.i][: len(obs)]


def mlp_policy(observation_space: gym.Space[Any], action_space: gym.Space[Any],
               hidden: Sequence[int] = DEFAULT_HIDDEN, seed: int = 0) -> Policy:
    """``mlp`` on the flat observation, in inference mode: its cost grows with batch and width.

    Discrete actions are the argmax of the logits; Box actions are squashed into the bounds.
    The weights come from ``seed``, without touching torch's global generator.
    """
    import torch

    with torch.random.fork_rng(devices=[]):  # the CPU generator only: CUDA stays untouched
        torch.default_generator.manual_seed(seed)
        in_dim = int(np.prod(observation_space.shape or (1,)))  # what ``act`` feeds it
        net = mlp(in_dim, hidden, _action_dim(action_space))
    net.eval()
    decode = _decoder(action_space)

    def act(obs: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.asarray(obs, dtype=np.float32).reshape(len(obs), -1))
        with torch.inference_mode():
            return decode(net(x).numpy())

    return act


def _action_dim(space: gym.Space[Any]) -> int:
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box) and space.is_bounded():
        return int(np.prod(space.shape))
    raise ConfigError(name="the MLP policy's action space",
                      expected="a Discrete or bounded Box space", got=space,
                      fix="use an env with such actions, or the random policy")


def _decoder(space: gym.Space[Any]) -> Callable[[np.ndarray], np.ndarray]:
    if isinstance(space, gym.spaces.Discrete):
        start = int(space.start)
        return lambda out: out.argmax(axis=1) + start
    assert isinstance(space, gym.spaces.Box)
    low, high = space.low.reshape(-1), space.high.reshape(-1)
    shape, dtype = space.shape, space.dtype
    return lambda out: (low + (np.tanh(out) + 1) / 2 * (high - low)).astype(dtype).reshape(
        len(out), *shape)


def parse_hidden(spec: str) -> tuple[int, ...]:
    """``"mlp:64,64"`` -> (64, 64); ``"mlp"`` -> (64, 64)."""
    _, _, sizes = spec.partition(":")
    try:
        hidden = tuple(int(s) for s in sizes.split(",")) if sizes else DEFAULT_HIDDEN
    except ValueError as exc:
        raise ConfigError(name="a policy", expected=SPEC_HELP, got=spec) from exc
    if not hidden or min(hidden) < 1:
        raise ConfigError(name="the hidden sizes of an MLP policy", expected="ints >= 1",
                          got=spec, fix="write e.g. 'mlp:64,64'")
    return hidden


def with_latency(policy: Policy, latency: float) -> Policy:
    """Adds a fixed ``latency`` (sleep) to every call: a per-call cost independent of the batch,
    like the GPU launch and sync of a small network (the seed's case)."""
    if latency <= 0:
        return policy

    def slow(obs: np.ndarray) -> np.ndarray:
        out = policy(obs)
        time.sleep(latency)
        return out

    return slow


def make_policy(spec: str, observation_space: gym.Space[Any], action_space: gym.Space[Any],
                latency: float = 0.0, seed: int = 0) -> Policy:
    """``"random"`` or ``"mlp:H1,H2,..."`` for these spaces, plus a per-call latency."""
    if spec == "random":
        base = random_policy(action_space, seed)
    elif spec.split(":")[0] == "mlp":
        base = mlp_policy(observation_space, action_space, parse_hidden(spec), seed)
    else:
        raise ConfigError(name="a policy", expected=SPEC_HELP, got=spec)
    return with_latency(base, latency)
