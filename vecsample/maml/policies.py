"""MLP policies with a functional ``params=`` forward, for MAML's inner-loop updates.

Parameter names (``layer{i}.weight``, ``mu.weight``, ``sigma``) match pytorch-maml-rl's, so a
``state_dict`` saved by either library loads into the other.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from functools import reduce
from operator import mul
from typing import Any

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Categorical, Distribution, Independent, Normal

Params = Mapping[str, torch.Tensor]
Activation = Callable[[torch.Tensor], torch.Tensor]


def _init_linear(module: nn.Module) -> None:
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight)
        nn.init.zeros_(module.bias)


class Policy(nn.Module):
    """Base class: ``forward(input, params=None) -> Distribution`` plus ``update_params``."""

    def __init__(self, input_size: int, output_size: int, hidden_sizes: Sequence[int],
                 nonlinearity: Activation, num_layers: int) -> None:
        super().__init__()
        self.input_size = input_size
        self.output_size = output_size
        self.hidden_sizes = tuple(hidden_sizes)
        self.nonlinearity = nonlinearity
        self.num_layers = num_layers

    def _add_layers(self, sizes: Sequence[int]) -> None:
        """``layer1``.. ``layerK``: a Linear between each two consecutive ``sizes`` (the
        parameter names of pytorch-maml-rl, so its checkpoints and ours line up)."""
        for i in range(1, len(sizes)):
            self.add_module(f"layer{i}", nn.Linear(sizes[i - 1], sizes[i]))

    def update_params(
        self,
        loss: torch.Tensor,
        params: Params | None = None,
        step_size: float = 0.5,
        first_order: bool = False,
    ) -> OrderedDict[str, torch.Tensor]:
        """One step of gradient descent on ``loss``: returns ``params - step_size * grad``.

        ``params`` defaults to the module's own parameters. With ``first_order=False`` the graph
        of the gradient is kept, so an outer loss can differentiate through the update (MAML).
        """
        if params is None:
            params = OrderedDict(self.named_parameters())
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=not first_order)
        return OrderedDict(
            (name, param - step_size * grad)
            for (name, param), grad in zip(params.items(), grads, strict=True)
        )

    def _hidden(self, input: torch.Tensor, params: Params, num_hidden: int) -> torch.Tensor:
        output = input
        for i in range(1, num_hidden + 1):
            weight, bias = params[f"layer{i}.weight"], params[f"layer{i}.bias"]
            output = self.nonlinearity(F.linear(output, weight, bias))
        return output


class NormalMLPPolicy(Policy):
    """Diagonal Gaussian over continuous actions; the log std is a free parameter (``sigma``)."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        hidden_sizes: Sequence[int] = (),
        nonlinearity: Activation = F.relu,
        init_std: float = 1.0,
        min_std: float = 1e-6,
    ) -> None:
        super().__init__(input_size, output_size, hidden_sizes, nonlinearity,
                         num_layers=len(hidden_sizes) + 1)
        self.min_log_std = math.log(min_std)
        sizes = (input_size, *self.hidden_sizes)
        self._add_layers(sizes)  # the hidden layers; mu is the last one
        self.mu = nn.Linear(sizes[-1], output_size)
        self.sigma = nn.Parameter(torch.full((output_size,), math.log(init_std)))
        self.apply(_init_linear)

    def forward(self, input: torch.Tensor, params: Params | None = None) -> Distribution:
        if params is None:
            params = OrderedDict(self.named_parameters())
        hidden = self._hidden(input, params, self.num_layers - 1)
        mu = F.linear(hidden, params["mu.weight"], params["mu.bias"])
        scale = torch.exp(torch.clamp(params["sigma"], min=self.min_log_std))
        return Independent(Normal(loc=mu, scale=scale), 1)

    def stacked(self, inputs: torch.Tensor,
                params: Sequence[Params]) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussians of G groups of inputs at once, group ``g`` (``inputs[g]``, of shape
        ``(R, input_size)``) with ``params[g]``: ``loc`` ``(G, R, output_size)`` and ``scale``
        ``(G, output_size)``, what ``forward(inputs[g], params[g])`` holds, with one batched
        matmul per layer instead of a forward per group (what MultiTaskSampler does for the
        tasks of a worker's block after their inner update)."""
        def stack(name: str) -> torch.Tensor:
            return torch.stack([p[name] for p in params])

        output = inputs
        layers = [*(f"layer{i}" for i in range(1, self.num_layers)), "mu"]
        for i, layer in enumerate(layers):
            weight, bias = stack(f"{layer}.weight"), stack(f"{layer}.bias")
            output = torch.matmul(output, weight.transpose(1, 2)) + bias.unsqueeze(1)
            if i < len(layers) - 1:
                output = self.nonlinearity(output)
        scale = torch.exp(torch.clamp(stack("sigma"), min=self.min_log_std))
        return output, scale


class CategoricalMLPPolicy(Policy):
    """Categorical over discrete actions; the last layer gives the logits."""

    def __init__(
        self,
        input_size: int,
        output_size: int,
        hidden_sizes: Sequence[int] = (),
        nonlinearity: Activation = F.relu,
    ) -> None:
        super().__init__(input_size, output_size, hidden_sizes, nonlinearity,
                         num_layers=len(hidden_sizes) + 1)
        self._add_layers((input_size, *self.hidden_sizes, output_size))
        self.apply(_init_linear)

    def forward(self, input: torch.Tensor, params: Params | None = None) -> Distribution:
        if params is None:
            params = OrderedDict(self.named_parameters())
        hidden = self._hidden(input, params, self.num_layers - 1)
        last = self.num_layers
        logits = F.linear(hidden, params[f"layer{last}.weight"], params[f"layer{last}.bias"])
        return Categorical(logits=logits)


def get_input_size(env: gym.Env[Any, Any]) -> int:
    """Number of floats in one observation of ``env``."""
    shape = env.observation_space.shape
    if shape is None:
        raise TypeError(f"Expected an observation space with a shape, got {env.observation_space}.")
    return reduce(mul, shape, 1)


def get_policy_for_env(
    env: gym.Env[Any, Any],
    hidden_sizes: Sequence[int] = (100, 100),
    nonlinearity: str = "relu",
) -> Policy:
    """A ``NormalMLPPolicy`` for Box actions, a ``CategoricalMLPPolicy`` for Discrete ones.

    ``nonlinearity`` names a function of the ``torch`` module (``"relu"``, ``"tanh"``...).
    """
    activation: Activation = getattr(torch, nonlinearity)
    space = env.action_space
    if isinstance(space, gym.spaces.Box):
        output_size = reduce(mul, space.shape, 1)
        return NormalMLPPolicy(
            get_input_size(env), output_size, tuple(hidden_sizes), nonlinearity=activation
        )
    if isinstance(space, gym.spaces.Discrete):
        return CategoricalMLPPolicy(
            get_input_size(env), int(space.n), tuple(hidden_sizes), nonlinearity=activation
        )
    raise TypeError(f"Expected a Box or Discrete action space, got {space}.")
