"""The MLP policies: functional forward, inner-loop update, names, choice per env."""

from __future__ import annotations

from collections import OrderedDict

import gymnasium as gym
import pytest
import torch
from torch.distributions import Categorical, Independent

import vecsample.envs  # noqa: F401  (registers the task envs)
from vecsample.maml import (
    CategoricalMLPPolicy,
    NormalMLPPolicy,
    get_input_size,
    get_policy_for_env,
)


def test_normal_policy_layout_and_distribution() -> None:
    policy = NormalMLPPolicy(4, 2, hidden_sizes=(8, 6), init_std=0.5)
    names = [name for name, _ in policy.named_parameters()]
    assert names == [
        "sigma", "layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias",
        "mu.weight", "mu.bias",
    ]  # fmt: skip
    pi = policy(torch.zeros(5, 3, 4))
    assert isinstance(pi, Independent)
    assert pi.batch_shape == (5, 3) and pi.event_shape == (2,)
    torch.testing.assert_close(pi.base_dist.scale, torch.full((5, 3, 2), 0.5))
    torch.testing.assert_close(pi.mean, torch.zeros(5, 3, 2))  # zero biases, zero input


def test_categorical_policy_layout_and_distribution() -> None:
    policy = CategoricalMLPPolicy(3, 5, hidden_sizes=(7,))
    assert [name for name, _ in policy.named_parameters()] == [
        "layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias",
    ]  # fmt: skip
    pi = policy(torch.randn(4, 3))
    assert isinstance(pi, Categorical) and pi.logits.shape == (4, 5)


def test_min_std_clamps_the_scale() -> None:
    policy = NormalMLPPolicy(2, 1, min_std=0.1)
    with torch.no_grad():
        policy.sigma.fill_(-50.0)
    assert policy(torch.zeros(1, 2)).base_dist.scale.item() == pytest.approx(0.1)


@pytest.mark.parametrize("policy_cls", [NormalMLPPolicy, CategoricalMLPPolicy])
def test_params_forward_and_update(policy_cls: type) -> None:
    torch.manual_seed(0)
    policy = policy_cls(3, 2, hidden_sizes=(5,))
    x = torch.randn(10, 3)
    actions = policy(x).sample()
    params = OrderedDict(policy.named_parameters())
    assert torch.equal(policy(x, params=params).log_prob(actions), policy(x).log_prob(actions))

    loss = -policy(x).log_prob(actions).mean()
    grads = torch.autograd.grad(loss, list(params.values()), retain_graph=True)
    updated = policy.update_params(loss, step_size=0.3, first_order=True)
    for (name, param), grad in zip(params.items(), grads, strict=True):
        torch.testing.assert_close(updated[name], param - 0.3 * grad)
        assert updated[name].grad_fn is not None  # still a function of the parameters
    # A second step from explicit params, and the adapted forward differs.
    again = policy.update_params(-policy(x, params=updated).log_prob(actions).mean(), updated)
    assert not torch.equal(policy(x, params=again).log_prob(actions), policy(x).log_prob(actions))


def test_second_order_update_keeps_the_graph() -> None:
    """Through a kept graph the meta-gradient has MAML's Hessian term; first-order drops it."""
    torch.manual_seed(0)
    policy = NormalMLPPolicy(3, 2, hidden_sizes=(5,), nonlinearity=torch.tanh)
    x, a = torch.randn(10, 3), torch.randn(10, 2)
    meta_grads = {}
    for first_order in (False, True):
        inner = -policy(x).log_prob(a).mean()
        adapted = policy.update_params(inner, step_size=0.5, first_order=first_order)
        outer = -policy(x, params=adapted).log_prob(a).mean()
        (meta_grads[first_order],) = torch.autograd.grad(outer, [policy.layer1.weight])
    assert not torch.allclose(meta_grads[False], meta_grads[True])
    # First order: d outer / d theta is the outer gradient at the adapted params.
    detached = OrderedDict((k, v.detach().requires_grad_()) for k, v in adapted.items())
    (at_adapted,) = torch.autograd.grad(
        -policy(x, params=detached).log_prob(a).mean(), [detached["layer1.weight"]]
    )
    torch.testing.assert_close(meta_grads[True], at_adapted)


@pytest.mark.parametrize(
    ("env_id", "policy_cls", "input_size"),
    [
        ("2DNavigation-v0", NormalMLPPolicy, 2),
        ("TabularMDP-v0", CategoricalMLPPolicy, 10),
        ("Bandit-K10-v0", CategoricalMLPPolicy, 1),
        ("HalfCheetahDir-v5", NormalMLPPolicy, 20),
    ],
)
def test_policy_for_env(env_id: str, policy_cls: type, input_size: int) -> None:
    env = gym.make(env_id)
    assert get_input_size(env) == input_size
    policy = get_policy_for_env(env, hidden_sizes=(16, 16), nonlinearity="tanh")
    assert isinstance(policy, policy_cls)
    assert policy.hidden_sizes == (16, 16) and policy.nonlinearity is torch.tanh
    assert policy.input_size == input_size
    env.close()


def test_stacked_gives_each_groups_forward() -> None:
    """``stacked`` over G groups, each with its own parameters, holds what ``forward`` gives
    per group (to float rounding: one batched matmul against one per group)."""
    torch.manual_seed(0)
    policy = NormalMLPPolicy(5, 3, hidden_sizes=(16, 8), nonlinearity=torch.tanh, min_std=0.5)
    groups = []
    for g in range(4):
        params = OrderedDict((k, v.detach() + 0.1 * g * torch.randn_like(v))
                             for k, v in policy.named_parameters())
        params["sigma"] = torch.tensor([-2.0, 0.1 * g, 1.0])  # the first one clamped
        groups.append(params)
    inputs = torch.randn(4, 6, 5)
    loc, scale = policy.stacked(inputs, groups)
    assert loc.shape == (4, 6, 3) and scale.shape == (4, 3)
    for g, params in enumerate(groups):
        pi = policy(inputs[g], params=params)
        torch.testing.assert_close(loc[g], pi.base_dist.loc, rtol=1e-6, atol=1e-6)
        assert torch.equal(scale[g].expand(6, 3), pi.base_dist.scale)
