"""Masked means over padded ``(T, B, ...)`` batches and the REINFORCE loss of the inner loop."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch.distributions import Distribution

if TYPE_CHECKING:
    from vecsample.maml.episodes import BatchEpisodes


class FunctionalPolicy(Protocol):
    """A policy callable with explicit parameters: ``policy(obs, params=None) -> Distribution``."""

    def __call__(
        self, input: torch.Tensor, params: Mapping[str, torch.Tensor] | None = None
    ) -> Distribution: ...


def valid_mask(
    num_steps: int, lengths: Sequence[int], device: torch.device | str = "cpu"
) -> torch.Tensor:
    """Boolean ``(T, B)`` mask, True where ``t < lengths[b]`` (the steps of each episode)."""
    steps = torch.arange(num_steps, device=device).unsqueeze(1)
    return steps < torch.as_tensor(lengths, device=device).unsqueeze(0)


def _valid_mask(tensor: torch.Tensor, lengths: Sequence[int]) -> torch.Tensor:
    """``valid_mask`` shaped ``(T, B, 1, ...)``, to broadcast on a ``(T, B, ...)`` tensor."""
    valid = valid_mask(tensor.shape[0], lengths, tensor.device)
    return valid.view(*valid.shape, *(1,) * (tensor.dim() - 2))


#: What discounted_cumsum's loop runs on: a torch tensor, or the numpy array of a CPU one.
_Rows = TypeVar("_Rows", torch.Tensor, NDArray[np.float32])


def discounted_cumsum(values: torch.Tensor, *factors: float) -> torch.Tensor:
    """``out[t] = out[t + 1] * f1 * f2 ... + values[t]`` along dim 0 (returns-to-go, GAE).

    The factors are applied one by one, in pytorch-maml-rl's order, so that the results are
    bitwise theirs. A float32 CPU tensor that needs no gradient runs the same loop in numpy
    (the same float32 operations, a few times faster than a torch op per step: the loop runs
    at the end of every MAML round, while the workers wait).
    """
    if values.device.type == "cpu" and values.dtype == torch.float32 and (
            not values.requires_grad):
        array = values.numpy()  # each factor a float32, as torch casts a Python scalar for it
        scalars = [np.float32(factor) for factor in factors]
        return torch.from_numpy(_cumsum_into(array, scalars, np.zeros_like(array),
                                             np.zeros_like(array[0])))
    return _cumsum_into(values, factors, torch.zeros_like(values), torch.zeros_like(values[0]))


def _cumsum_into(values: _Rows, factors: Sequence[Any], out: _Rows, running: Any) -> _Rows:
    """``discounted_cumsum``'s loop, written into ``out`` from a zero ``running`` row: the same
    operations in the same order on a torch tensor or a numpy array."""
    for t in range(values.shape[0] - 1, -1, -1):
        for factor in factors:
            running = running * factor
        running = running + values[t]
        out[t] = running
    return out


def weighted_mean(tensor: torch.Tensor, lengths: Sequence[int] | None = None) -> torch.Tensor:
    """Per-episode mean over time of a ``(T, B, ...)`` tensor; entries past each length count 0.

    Returns a ``(B, ...)`` tensor, or the plain mean when ``lengths`` is None. Unlike
    pytorch-maml-rl's version it leaves ``tensor`` unchanged.
    """
    if lengths is None:
        return torch.mean(tensor)
    if tensor.dim() < 2:
        raise ValueError(
            f"weighted_mean needs a (T, B, ...) tensor, got {tensor.dim()} dimension(s)."
        )
    masked = torch.where(_valid_mask(tensor, lengths), tensor, torch.zeros_like(tensor))
    counts = torch.as_tensor(lengths, dtype=tensor.dtype, device=tensor.device)
    return masked.sum(dim=0) / counts.view(-1, *(1,) * (tensor.dim() - 2))


def weighted_normalize(
    tensor: torch.Tensor, lengths: Sequence[int] | None = None, epsilon: float = 1e-8
) -> torch.Tensor:
    """Centres a padded batch on the mean of its per-episode means and scales it to unit spread.

    The spread is ``sqrt(mean over episodes of the per-episode mean of squares)``; padding stays
    0. This is pytorch-maml-rl's normalisation, without modifying the input.
    """
    if lengths is None:
        centred = tensor - tensor.mean()
        return centred / (torch.sqrt(torch.mean(centred**2)) + epsilon)
    centred = tensor - weighted_mean(tensor, lengths).mean()
    centred = torch.where(_valid_mask(tensor, lengths), centred, torch.zeros_like(centred))
    std = torch.sqrt(weighted_mean(centred**2, lengths).mean())
    return centred / (std + epsilon)


def reinforce_loss(
    policy: FunctionalPolicy,
    episodes: BatchEpisodes,
    params: Mapping[str, torch.Tensor] | None = None,
) -> torch.Tensor:
    """``-mean_b [ mean_t log pi(a_t|s_t) * A_t ]`` over one task's batch (the inner-loop loss)."""
    observations = episodes.observations.view(-1, *episodes.observation_shape)
    pi = policy(observations, params=params)
    log_probs = pi.log_prob(episodes.actions.view(-1, *episodes.action_shape))
    log_probs = log_probs.view(len(episodes), episodes.batch_size)
    losses = -weighted_mean(log_probs * episodes.advantages, lengths=episodes.lengths)
    return losses.mean()
