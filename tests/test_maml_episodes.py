"""BatchEpisodes and the losses: layout like pytorch-maml-rl's, math against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.distributions import Independent, Normal

from vecsample.maml import BatchEpisodes, reinforce_loss, weighted_mean, weighted_normalize
from vecsample.maml.episodes import EpisodeSteps
from vecsample.maml.errors import EpisodesError
from vecsample.maml.losses import discounted_cumsum

SQRT2 = math.sqrt(2.0)


def fill(lengths: list[int], obs_shape: tuple[int, ...] = (3,), seed: int = 0) -> BatchEpisodes:
    """Steps every unfinished episode together, as a vectorised sampler does."""
    rng = np.random.default_rng(seed)
    episodes = BatchEpisodes(batch_size=len(lengths), gamma=0.95)
    for t in range(max(lengths)):
        ids = [i for i, n in enumerate(lengths) if t < n]
        episodes.append(
            rng.random((len(ids), *obs_shape)), rng.random((len(ids), 2)), rng.random(len(ids)), ids
        )
    return episodes


@pytest.mark.parametrize("batch_size", [1, 8])
def test_constructor_fields(batch_size: int) -> None:
    episodes = BatchEpisodes(batch_size, gamma=0.9, device="cpu")
    assert episodes.batch_size == batch_size and episodes.gamma == 0.9
    assert episodes.device == torch.device("cpu") and episodes.logs == {}
    episodes.log("duration", 1.5)
    assert episodes.logs == {"duration": 1.5}


def test_shapes_dtypes_and_zero_padding() -> None:
    lengths = [2, 3, 7, 5, 13, 11, 17]
    episodes = fill(lengths, obs_shape=(4, 5))
    assert len(episodes) == 17 and episodes.lengths == lengths
    assert episodes.observations.shape == (17, 7, 4, 5)
    assert episodes.actions.shape == (17, 7, 2)
    assert episodes.observation_shape == (4, 5) and episodes.action_shape == (2,)
    for name in ("observations", "actions", "rewards", "mask", "returns"):
        tensor = getattr(episodes, name)
        assert tensor.dtype == torch.float32 and tensor.shape[:2] == (17, 7), name
    for i, n in enumerate(lengths):
        assert (episodes.observations[n:, i] == 0).all() and (episodes.actions[n:, i] == 0).all()
        assert (episodes.rewards[n:, i] == 0).all() and (episodes.returns[n:, i] == 0).all()
        assert (episodes.mask[:n, i] == 1).all() and (episodes.mask[n:, i] == 0).all()
        assert (episodes.observations[:n, i] != 0).any()


def test_append_keeps_per_episode_order_and_skips_none() -> None:
    episodes = BatchEpisodes(batch_size=3)
    episodes.append([[1.0], [2.0]], [[0.0], [0.0]], [1.0, 2.0], [2, None])
    episodes.append([[3.0], [4.0]], [[0.0], [0.0]], [3.0, 4.0], [0, 2])
    assert episodes.lengths == [1, 0, 2]
    assert episodes.rewards.tolist() == [[3.0, 0.0, 1.0], [0.0, 0.0, 3.0 + 1.0]]
    grown = BatchEpisodes(batch_size=1)
    for t in range(40):  # past the first buffer's capacity
        grown.append([[float(t)]], [[0.0]], [0.0], [0])
    assert grown.observations[:, 0, 0].tolist() == [float(t) for t in range(40)]


def test_handed_out_tensors_do_not_change_on_append() -> None:
    episodes = BatchEpisodes(batch_size=2)
    episodes.append([[1.0]] * 2, [[0.0]] * 2, [1.0, 1.0], [0, 1])
    episodes.append([[1.0]], [[0.0]], [5.0], [0])
    rewards = episodes.rewards
    episodes.append([[1.0]], [[0.0]], [7.0], [1])
    assert rewards.tolist() == [[1.0, 1.0], [5.0, 0.0]]
    assert episodes.rewards.tolist() == [[1.0, 1.0], [5.0, 7.0]]


def test_misuse_raises_typed_errors() -> None:
    episodes = BatchEpisodes(batch_size=2)
    with pytest.raises(EpisodesError, match="before any step"):
        _ = episodes.observations
    with pytest.raises(EpisodesError, match="repeat"):
        episodes.append([[0.0], [0.0]], [[0.0], [0.0]], [0.0, 0.0], [1, 1])
    episodes.append([[0.0]], [[0.0]], [0.0], [1])
    with pytest.raises(EpisodesError, match="compute_advantages"):
        _ = episodes.advantages
    with pytest.raises(ValueError):  # EpisodesError is a ValueError, as theirs raises
        _ = episodes.advantages


# --- the hand-computed case --------------------------------------------------------------------
# Two episodes, gamma = 0.5: rewards [1, 2, 4] and [3]; a baseline worth 1 on every valid step.
#   returns:      [3, 4, 4] and [3]
#   deltas:       r_t + 0.5 V_{t+1} - V_t = [0.5, 1.5, 3] and [2]
#   GAE(1):       [2, 3, 3] and [2]              (= returns - V)
#   GAE(0.5):     [0.5 + 0.25 * 2.25, 1.5 + 0.25 * 3, 3] = [1.0625, 2.25, 3] and [2]
#   normalised:   mean of means (8/3 + 2) / 2 = 7/3; centred [-1/3, 2/3, 2/3] and [-1/3];
#                 spread sqrt((1/3 + 1/9) / 2) = sqrt(2)/3; so [-1/sqrt2, sqrt2, sqrt2], [-1/sqrt2]


def hand_case() -> BatchEpisodes:
    episodes = BatchEpisodes(batch_size=2, gamma=0.5)
    episodes.append([[0.0], [0.0]], [[0.0], [0.0]], [1.0, 3.0], [0, 1])
    episodes.append([[0.0]], [[0.0]], [2.0], [0])
    episodes.append([[0.0]], [[0.0]], [4.0], [0])
    return episodes


def ones_baseline(episodes: BatchEpisodes) -> torch.Tensor:
    return torch.ones(len(episodes), episodes.batch_size)


def test_returns_by_hand() -> None:
    assert hand_case().returns.tolist() == [[3.0, 3.0], [4.0, 0.0], [4.0, 0.0]]


@pytest.mark.parametrize("factors", [(), (0.9,), (0.99, 0.95)])
def test_the_numpy_discounted_cumsum_is_bitwise_the_torch_loop(factors: tuple[float, ...]) -> None:
    """CPU float32 tensors without a gradient take the numpy loop; a tensor that needs one
    takes torch's: the same bits either way."""
    torch.manual_seed(0)
    for length, width in ((1, 3), (100, 20), (37, 1)):
        values = torch.randn(length, width) * 50
        fast = discounted_cumsum(values, *factors)
        slow = discounted_cumsum(values.clone().requires_grad_(), *factors).detach()
        assert fast.dtype == slow.dtype == torch.float32 and torch.equal(fast, slow)


def test_gae_by_hand() -> None:
    episodes = hand_case()
    advantages = episodes.compute_advantages(ones_baseline, gae_lambda=1.0, normalize=False)
    assert advantages.tolist() == [[2.0, 2.0], [3.0, 0.0], [3.0, 0.0]]
    advantages = episodes.compute_advantages(ones_baseline, gae_lambda=0.5, normalize=False)
    assert advantages.tolist() == [[1.0625, 2.0], [2.25, 0.0], [3.0, 0.0]]
    assert episodes.advantages is advantages


def test_normalised_advantages_by_hand() -> None:
    advantages = hand_case().compute_advantages(ones_baseline, gae_lambda=1.0)
    expected = torch.tensor([[-1 / SQRT2, -1 / SQRT2], [SQRT2, 0.0], [SQRT2, 0.0]])
    torch.testing.assert_close(advantages, expected)


def test_weighted_mean_and_normalize_leave_input_alone() -> None:
    tensor = torch.tensor([[1.0, 5.0], [3.0, 9.0]])
    torch.testing.assert_close(weighted_mean(tensor, lengths=[2, 1]), torch.tensor([2.0, 5.0]))
    assert tensor.tolist() == [[1.0, 5.0], [3.0, 9.0]]
    normalised = weighted_normalize(tensor, lengths=[2, 1])
    assert normalised[1, 1] == 0.0 and tensor[1, 1] == 9.0
    assert weighted_mean(tensor) == 4.5


def test_reinforce_loss_by_hand() -> None:
    """A unit Gaussian policy: log pi(a) = -a^2/2 - log(2 pi)/2 per action dimension."""
    episodes = BatchEpisodes(batch_size=2, gamma=0.5)
    episodes.append([[0.0], [0.0]], [[1.0], [0.0]], [1.0, 3.0], [0, 1])
    episodes.append([[0.0]], [[2.0]], [2.0], [0])
    episodes.compute_advantages(ones_baseline, normalize=False)  # [[1, 2], [1, 0]]

    def policy(obs: torch.Tensor, params: object = None) -> Independent:
        return Independent(Normal(torch.zeros_like(obs), torch.ones_like(obs)), 1)

    half_log_2pi = 0.5 * math.log(2 * math.pi)
    logp = {1.0: -0.5 - half_log_2pi, 0.0: -half_log_2pi, 2.0: -2.0 - half_log_2pi}
    episode0 = (logp[1.0] * 1.0 + logp[2.0] * 1.0) / 2
    episode1 = logp[0.0] * 2.0 / 1
    expected = -(episode0 + episode1) / 2
    assert reinforce_loss(policy, episodes).item() == pytest.approx(expected, rel=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_everything_stays_on_the_cuda_device() -> None:
    episodes = BatchEpisodes(batch_size=2, gamma=0.5, device="cuda")
    episodes.append([[0.0], [0.0]], [[0.0], [0.0]], [1.0, 3.0], [0, 1])
    episodes.append([[0.0]], [[0.0]], [2.0], [0])
    advantages = episodes.compute_advantages(ones_baseline)
    assert advantages.device.type == "cuda" and episodes.returns.device.type == "cuda"


def test_episode_steps_cut_per_task_equal_batch_episodes_appended_per_task() -> None:
    """A round's steps recorded for every env at once, then cut into tasks, give what one
    BatchEpisodes per task, appended task by task, gives (episodes of different lengths, more
    steps than the buffers start with)."""
    rng = np.random.default_rng(0)
    steps, size = EpisodeSteps(6), 3
    per_task = [BatchEpisodes(size, gamma=0.9) for _ in range(2)]
    lengths = np.array([25, 4, 19, 1, 17, 23])
    for t in range(int(lengths.max())):
        rows = np.flatnonzero(t < lengths)
        obs, act, rew = rng.normal(size=(rows.size, 4)), rng.normal(size=(rows.size, 2)), (
            rng.normal(size=rows.size))
        steps.append(rows, obs, act, rew)
        for k, episodes in enumerate(per_task):
            mine = rows // size == k
            if mine.any():
                episodes.append(obs[mine], act[mine], rew[mine], rows[mine] - size * k)
    for k, expected in enumerate(per_task):
        got = steps.batch(size * k, size * (k + 1), gamma=0.9, device="cpu")
        assert got.lengths == expected.lengths == lengths[size * k:size * (k + 1)].tolist()
        for name in ("observations", "actions", "rewards", "mask", "returns"):
            assert torch.equal(getattr(got, name), getattr(expected, name)), name
