"""``BatchEpisodes``: one task's batch of episodes as padded ``(T, B, ...)`` float32 tensors.

Same constructor, fields and math as pytorch-maml-rl's ``maml_rl.episode.BatchEpisodes``, so its
``MAMLTRPO`` reads our batches unchanged. Steps are stored in growable numpy buffers as they are
appended (one vectorised write per call, not one list append per env), and every tensor is made
on ``device``, the discount and GAE loops included.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike, NDArray

from vecsample.maml.errors import EpisodesError
from vecsample.maml.losses import discounted_cumsum, valid_mask, weighted_normalize


class Baseline(Protocol):
    """A value estimate per step: ``baseline(episodes) -> (T, B)`` tensor."""

    def __call__(self, episodes: BatchEpisodes) -> torch.Tensor: ...


class _Buffer:
    """A zero-filled ``(capacity, batch, *shape)`` float32 array that doubles when full."""

    def __init__(self, batch_size: int, shape: tuple[int, ...],
                 data: NDArray[np.float32] | None = None) -> None:
        self.data: NDArray[np.float32] = np.zeros((16, batch_size, *shape), dtype=np.float32) \
            if data is None else data

    def write(self, steps: NDArray[np.int64], ids: NDArray[np.int64], values: ArrayLike) -> None:
        needed = int(steps.max()) + 1
        if needed > self.data.shape[0]:
            grown = np.zeros(
                (max(needed, 2 * self.data.shape[0]), *self.data.shape[1:]), np.float32
            )
            grown[: self.data.shape[0]] = self.data
            self.data = grown
        self.data[steps, ids] = values


class EpisodeSteps:
    """The steps of ``num_episodes`` episodes, appended a group of episodes at a time (one
    write per array for the group), then cut into ``BatchEpisodes`` of consecutive episodes:
    what ``BatchEpisodes.append`` per task would give, for a whole round at once."""

    def __init__(self, num_episodes: int) -> None:
        self._counts = np.zeros(num_episodes, dtype=np.int64)
        self._buffers: dict[str, _Buffer] = {}

    def append(self, episodes: NDArray[np.int64], observations: ArrayLike, actions: ArrayLike,
               rewards: ArrayLike) -> None:
        """One more step of each episode of ``episodes`` (distinct), whose row ``i`` of the
        arrays belongs to episode ``episodes[i]``."""
        steps = self._counts[episodes]
        arrays = {"observations": observations, "actions": actions, "rewards": rewards}
        for name, values in arrays.items():
            rows = np.asarray(values, dtype=np.float32)
            if name not in self._buffers:
                self._buffers[name] = _Buffer(len(self._counts), rows.shape[1:])
            self._buffers[name].write(steps, episodes, rows)
        self._counts[episodes] += 1

    def batch(self, start: int, stop: int, gamma: float,
              device: str | torch.device) -> BatchEpisodes:
        """Episodes ``start`` to ``stop`` (excluded) as one ``BatchEpisodes``, with copies of
        their steps."""
        batch = BatchEpisodes(stop - start, gamma=gamma, device=device)
        batch._counts = self._counts[start:stop].copy()
        length = len(batch)
        for name, buffer in self._buffers.items():
            data = np.array(buffer.data[:length, start:stop])
            batch._buffers[name] = _Buffer(stop - start, data.shape[2:], data)
        return batch


class BatchEpisodes:
    """Episodes of one task, padded with zeros after each episode's end.

    ``observations`` (T, B, *obs_shape), ``actions`` (T, B, *action_shape), ``rewards``,
    ``mask``, ``returns`` and ``advantages`` (T, B) are float32 tensors on ``device``, where
    ``T = len(self)`` is the longest episode and ``B = batch_size``; ``lengths`` is a list of
    ints. ``advantages`` exist once ``compute_advantages`` ran.
    """

    def __init__(
        self, batch_size: int, gamma: float = 0.95, device: str | torch.device = "cpu"
    ) -> None:
        self.batch_size = batch_size
        self.gamma = gamma
        self.device = torch.device(device)
        self._counts = np.zeros(batch_size, dtype=np.int64)
        self._buffers: dict[str, _Buffer] = {}
        self._tensors: dict[str, torch.Tensor] = {}
        self._advantages: torch.Tensor | None = None
        self._logs: dict[str, Any] = {}

    # --- filling --------------------------------------------------------------------------------

    def append(
        self,
        observations: ArrayLike,
        actions: ArrayLike,
        rewards: ArrayLike,
        batch_ids: Sequence[int | None] | NDArray[np.integer[Any]],
    ) -> None:
        """Adds one step for each episode in ``batch_ids`` (``None`` entries are skipped).

        Row ``i`` of ``observations``/``actions``/``rewards`` belongs to episode ``batch_ids[i]``;
        an episode's steps are kept in the order they are appended.
        """
        keep = np.array([i is not None for i in batch_ids], dtype=bool)
        ids = np.array([i for i in batch_ids if i is not None], dtype=np.int64)
        if ids.size == 0:
            return
        if np.unique(ids).size != ids.size:
            raise EpisodesError(f"batch_ids must not repeat within one append, got {batch_ids}.")
        steps = self._counts[ids]
        arrays = {"observations": observations, "actions": actions, "rewards": rewards}
        for name, values in arrays.items():
            rows = np.asarray(values, dtype=np.float32)[keep]
            if name not in self._buffers:
                self._buffers[name] = _Buffer(self.batch_size, rows.shape[1:])
            self._buffers[name].write(steps, ids, rows)
        self._counts[ids] += 1
        self._tensors.clear()
        self._advantages = None

    # --- shapes ---------------------------------------------------------------------------------

    @property
    def lengths(self) -> list[int]:
        return [int(n) for n in self._counts]

    def __len__(self) -> int:
        return int(self._counts.max())

    @property
    def observation_shape(self) -> torch.Size:
        return self.observations.shape[2:]

    @property
    def action_shape(self) -> torch.Size:
        return self.actions.shape[2:]

    # --- tensors --------------------------------------------------------------------------------

    def _stacked(self, name: str) -> torch.Tensor:
        if name not in self._tensors:
            if name not in self._buffers:
                raise EpisodesError(
                    f"BatchEpisodes.{name} read before any step was appended; "
                    "call append(observations, actions, rewards, batch_ids) first."
                )
            # torch.tensor copies: later appends must not change a tensor handed out already.
            data = self._buffers[name].data[: len(self)]
            self._tensors[name] = torch.tensor(data, device=self.device)
        return self._tensors[name]

    @property
    def observations(self) -> torch.Tensor:
        return self._stacked("observations")

    @property
    def actions(self) -> torch.Tensor:
        return self._stacked("actions")

    @property
    def rewards(self) -> torch.Tensor:
        return self._stacked("rewards")

    @property
    def mask(self) -> torch.Tensor:
        """1.0 for the steps of each episode, 0.0 for the padding after it."""
        if "mask" not in self._tensors:
            valid = valid_mask(len(self), self.lengths, self.device)
            self._tensors["mask"] = valid.to(torch.float32)
        return self._tensors["mask"]

    @property
    def returns(self) -> torch.Tensor:
        """Discounted returns-to-go, ``R_t = r_t + gamma * R_{t+1}``, 0 in the padding."""
        if "returns" not in self._tensors:
            self._tensors["returns"] = discounted_cumsum(self.rewards * self.mask, self.gamma)
        return self._tensors["returns"]

    @property
    def advantages(self) -> torch.Tensor:
        if self._advantages is None:
            raise EpisodesError(
                "The advantages have not been computed; call "
                "episodes.compute_advantages(baseline) first."
            )
        return self._advantages

    def compute_advantages(
        self, baseline: Baseline, gae_lambda: float = 1.0, normalize: bool = True
    ) -> torch.Tensor:
        """GAE(gamma, lambda) on the baseline's values (0 after each episode's last step).

        With ``normalize`` the advantages are passed through ``weighted_normalize``.
        """
        values = baseline(self).detach().to(self.device) * self.mask
        values = F.pad(values, (0, 0, 0, 1))  # V = 0 after the last step: no bootstrapping
        deltas = self.rewards + self.gamma * values[1:] - values[:-1]
        advantages = discounted_cumsum(deltas, self.gamma, gae_lambda)
        if normalize:
            advantages = weighted_normalize(advantages, lengths=self.lengths)
        self._advantages = advantages
        return advantages

    # --- logs -----------------------------------------------------------------------------------

    @property
    def logs(self) -> dict[str, Any]:
        return self._logs

    def log(self, key: str, value: Any) -> None:
        self._logs[key] = value
