"""LinearFeatureBaseline: the fit against an independent ridge solve, padding, failure."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from vecsample.maml import BatchEpisodes, LinearFeatureBaseline
from vecsample.maml.errors import BaselineFitError


def random_episodes(lengths: list[int], obs_dim: int = 3, seed: int = 0) -> BatchEpisodes:
    rng = np.random.default_rng(seed)
    episodes = BatchEpisodes(batch_size=len(lengths), gamma=0.9)
    for t in range(max(lengths)):
        ids = [i for i, n in enumerate(lengths) if t < n]
        obs = rng.normal(size=(len(ids), obs_dim))
        episodes.append(obs, rng.normal(size=(len(ids), 1)), rng.normal(size=len(ids)), ids)
    return episodes


def numpy_ridge(episodes: BatchEpisodes, reg: float = 1e-5) -> np.ndarray:
    """The features and the ridge solution, written out again in numpy on the valid steps."""
    rows, targets = [], []
    for b, n in enumerate(episodes.lengths):
        for t in range(n):
            s = episodes.observations[t, b].double().numpy()
            u = t / 100.0
            rows.append(np.concatenate([s, s**2, [u, u**2, u**3, 1.0]]))
            targets.append(float(episodes.returns[t, b]))
    x, y = np.array(rows), np.array(targets)
    return np.linalg.solve(x.T @ x + reg * np.eye(x.shape[1]), x.T @ y)


def test_feature_size_and_initial_weight() -> None:
    baseline = LinearFeatureBaseline(5)
    assert baseline.feature_size == 14
    assert baseline.weight.shape == (14,) and not baseline.weight.requires_grad
    assert (baseline.weight == 0).all()


def test_fit_matches_an_independent_ridge_solve() -> None:
    episodes = random_episodes([30, 12, 25, 40])
    baseline = LinearFeatureBaseline(3)
    baseline.fit(episodes)
    expected = numpy_ridge(episodes)
    np.testing.assert_allclose(baseline.weight.numpy(), expected, rtol=1e-4, atol=1e-4)


def test_fit_is_repeatable_and_padding_is_ignored() -> None:
    episodes = random_episodes([30, 5, 18])
    baseline = LinearFeatureBaseline(3)
    baseline.fit(episodes)
    first = baseline.weight.clone()
    baseline.fit(episodes)
    assert torch.equal(first, baseline.weight)
    values = baseline(episodes)
    assert values.shape == (30, 3)
    assert (values[5:, 1] == 0).all() and (values[18:, 2] == 0).all()  # mask zeroes features


def test_fit_recovers_returns_that_are_linear_in_the_features() -> None:
    """Returns 20 - t are linear in the time features: fitted to the ridge term's bias."""
    episodes = BatchEpisodes(batch_size=2, gamma=1.0)
    rng = np.random.default_rng(1)
    for _ in range(20):
        episodes.append(rng.normal(size=(2, 2)), np.zeros((2, 1)), [1.0, 1.0], [0, 1])
    baseline = LinearFeatureBaseline(2)
    baseline.fit(episodes)
    torch.testing.assert_close(baseline(episodes), episodes.returns, atol=1e-2, rtol=0)


def test_rank_deficient_batch_still_fits() -> None:
    """Fewer valid steps than features: the ridge term makes the equations solvable."""
    episodes = random_episodes([2, 1])
    baseline = LinearFeatureBaseline(3)
    baseline.fit(episodes)
    assert torch.isfinite(baseline.weight).all()


def test_non_finite_batch_raises_typed_error() -> None:
    episodes = BatchEpisodes(batch_size=1)
    episodes.append([[np.inf, 0.0]], [[0.0]], [1.0], [0])
    with pytest.raises(BaselineFitError, match="no finite solution"):
        LinearFeatureBaseline(2).fit(episodes)
