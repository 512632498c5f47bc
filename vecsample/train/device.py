"""Device placement by measurement: where to run inference, where to train.

Small policies often run faster on the CPU than on a GPU, because a kernel launch and a
host-device copy cost more than the arithmetic. So vecsample measures instead of guessing. For
one policy, observation shape and workload it times, on each available device:

* inference at the sampling batch size, *including* numpy -> tensor -> device and back to numpy;
* one training step (forward + backward + optimizer step) at the training minibatch size;
* the weight sync from the training device to the sampling device (:class:`WeightSync`);
* the copy of one rollout's observations from the sampling device to the training device.

:func:`choose` then prices each ``(rollout_device, train_device)`` pair per rollout and leaves
the default (CPU, CPU) only when another pair is faster by more than ``margin`` (hysteresis), so
noise in the timings cannot flip the choice from run to run.

CUDA and fork: nothing here touches CUDA at import time. :func:`cuda_available` is called only
when ``"auto"`` or a ``"cuda"`` device is resolved, which the rollout does after its sampler has
started its workers, so no worker is ever forked from a parent holding a CUDA context.
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
from torch import nn

from vecsample.train.errors import PlacementError

Clock = Callable[[], float]
#: How a policy is called on a batch of observations; the default is ``module(obs)``.
Forward = Callable[[nn.Module, torch.Tensor], Any]
DevicePair = tuple[str, str]

CPU = "cpu"


def cuda_available() -> bool:
    """Whether a CUDA device can be used. Call only after workers have started (see module doc)."""
    return bool(torch.cuda.is_available())


def available_devices() -> list[str]:
    """``["cpu"]``, plus ``"cuda"`` when a CUDA device is present."""
    return [CPU, "cuda"] if cuda_available() else [CPU]


def resolve_device(device: str | torch.device) -> torch.device:
    """A concrete torch device for ``device`` (not ``"auto"``); CUDA is checked, not assumed."""
    if isinstance(device, str) and device == "auto":
        raise PlacementError(
            "resolve_device() got 'auto', expected a concrete device; "
            "use auto_placement() to measure and choose one."
        )
    try:
        dev = torch.device(device)
    except RuntimeError as exc:
        raise PlacementError(
            f"expected a device like 'cpu', 'cuda' or 'cuda:0', got {device!r}"
        ) from exc
    if dev.type == "cuda" and not cuda_available():
        raise PlacementError(
            f"device {device!r} asked for, but torch {torch.__version__} sees no CUDA device; "
            "use 'cpu' or 'auto' (which measures the devices that exist)."
        )
    return dev


def synchronize(*devices: torch.device | str) -> None:
    """Wait for queued work on every CUDA device given (a no-op for the CPU)."""
    for device in devices:
        dev = torch.device(device)
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)


# --- the weight sync ----------------------------------------------------------------------------


def state_tensors(module: nn.Module) -> list[torch.Tensor]:
    """The tensors a sync must copy: parameters and floating-point buffers (running stats)."""
    tensors: list[torch.Tensor] = list(module.parameters())
    tensors += [b for b in module.buffers() if b.is_floating_point()]
    return tensors


def _check_match(src: Sequence[torch.Tensor], dst: Sequence[torch.Tensor]) -> None:
    if len(src) != len(dst):
        raise PlacementError(
            f"the sampling copy has {len(dst)} parameter/buffer tensors, expected {len(src)} like "
            "the training policy; build it with copy.deepcopy(policy)."
        )
    for i, (s, d) in enumerate(zip(src, dst, strict=True)):
        if s.shape != d.shape or s.dtype != d.dtype:
            raise PlacementError(
                f"tensor {i} of the sampling copy is {tuple(d.shape)} {d.dtype}, expected "
                f"{tuple(s.shape)} {s.dtype} like the training policy; build it with "
                "copy.deepcopy(policy)."
            )


@dataclass
class _FlatGroup:
    """The tensors of one dtype: the source list, a staging buffer, the target's flat storage."""

    sources: list[torch.Tensor]
    staging: torch.Tensor | None  # on the source device; None when both sides share a device
    flat: torch.Tensor  # on the target device; the target's tensors are views into it


class WeightSync:
    """Copies a training policy's weights into its sampling copy through preallocated buffers.

    At construction the target's parameters and floating buffers are rebound as views into one
    flat buffer per dtype. A sync is then one ``torch.cat(..., out=staging)`` on the source
    device and one bulk copy into that flat buffer: two kernels, whatever the number of layers,
    and no allocation. Every call is timed (CUDA synchronised), so ``count``, ``total_s`` and
    ``last_s`` are the real cost.

    The copy is blocking on purpose: it runs once per rollout, and the sampling copy is read on
    the host right after, where a non_blocking device-to-host copy would be unsafe without an
    explicit synchronise anyway. A CPU side that faces a GPU uses pinned memory to speed it up.
    """

    def __init__(self, source: nn.Module, target: nn.Module, *, clock: Clock = time.perf_counter):
        sources, targets = state_tensors(source), state_tensors(target)
        _check_match(sources, targets)
        self._clock = clock
        self.source_device = sources[0].device if sources else torch.device(CPU)
        self.target_device = targets[0].device if targets else torch.device(CPU)
        self._groups = [
            self._build_group([sources[i] for i in idx], [targets[i] for i in idx])
            for idx in _indices_by_dtype(sources)
        ]
        self.nbytes = sum(g.flat.numel() * g.flat.element_size() for g in self._groups)
        self.count = 0
        self.total_s = 0.0
        self.last_s = 0.0

    def _build_group(self, sources: list[torch.Tensor], targets: list[torch.Tensor]) -> _FlatGroup:
        numel = sum(t.numel() for t in sources)
        dtype = sources[0].dtype
        cross = self.source_device != self.target_device
        uses_cuda = "cuda" in (self.source_device.type, self.target_device.type)
        flat = _empty(numel, dtype, self.target_device, pin=uses_cuda)
        staging = _empty(numel, dtype, self.source_device, pin=uses_cuda) if cross else None
        offset = 0
        with torch.no_grad():
            for t in targets:
                view = flat[offset : offset + t.numel()].view_as(t)
                view.copy_(t)
                t.data = view  # rebind: the target now reads its weights from the flat buffer
                offset += t.numel()
        return _FlatGroup(sources=sources, staging=staging, flat=flat)

    def __call__(self) -> float:
        """Copy the source's current weights into the target; returns the seconds it took."""
        start = self._clock()
        with torch.no_grad():
            for g in self._groups:
                pieces = [t.detach().reshape(-1) for t in g.sources]
                if g.staging is None:
                    torch.cat(pieces, out=g.flat)
                else:
                    torch.cat(pieces, out=g.staging)
                    g.flat.copy_(g.staging)
        synchronize(self.source_device, self.target_device)
        self.last_s = self._clock() - start
        self.total_s += self.last_s
        self.count += 1
        return self.last_s


def _indices_by_dtype(tensors: Sequence[torch.Tensor]) -> list[list[int]]:
    groups: dict[torch.dtype, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault(t.dtype, []).append(i)
    return list(groups.values())


def _empty(numel: int, dtype: torch.dtype, device: torch.device, *, pin: bool) -> torch.Tensor:
    pin_memory = pin and device.type == CPU  # pinned host memory makes host<->GPU copies DMA
    return torch.empty(numel, dtype=dtype, device=device, pin_memory=pin_memory)


# --- timing -------------------------------------------------------------------------------------


def median_time(
    fn: Callable[[], object],
    *,
    devices: Iterable[torch.device | str] = (),
    repeats: int = 20,
    warmup: int = 3,
    clock: Clock = time.perf_counter,
) -> float:
    """Median seconds of ``fn()`` over ``repeats`` calls after ``warmup``, CUDA synchronised."""
    devs = tuple(devices)
    for _ in range(warmup):
        fn()
    synchronize(*devs)
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        synchronize(*devs)
        times.append(clock() - start)
    return statistics.median(times)


def _call(module: nn.Module, obs: torch.Tensor) -> Any:
    return module(obs)


def _tensors(out: Any) -> list[torch.Tensor]:
    """The tensors in a policy's output: a tensor, or a (nested) tuple/list/dict of them."""
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, list | tuple):
        return [t for item in out for t in _tensors(item)]
    return []


def _scalar_loss(out: Any) -> torch.Tensor:
    parts = [t.float().pow(2).mean() for t in _tensors(out) if t.is_floating_point()]
    if not parts:
        raise PlacementError(
            "the policy's forward returned no floating-point tensor, expected a tensor or a "
            "tuple/dict of tensors; pass forward=lambda module, obs: ... that returns one."
        )
    return torch.stack(parts).sum()


class Bench(Protocol):
    """What :func:`measure` times. Tests stub it; :class:`TorchBench` runs the real thing."""

    def inference(self, device: str, batch: int) -> float: ...
    def train_step(self, device: str, batch: int) -> float: ...
    def sync(self, source: str, target: str) -> float: ...
    def batch_copy(self, source: str, target: str, rows: int) -> float: ...


class TorchBench:
    """Times a policy on real devices. Each device gets its own deep copy; the policy is untouched.

    The optimizer step uses Adam (what PPO uses) with a tiny learning rate on the copy.
    """

    def __init__(
        self,
        policy: nn.Module,
        obs_shape: Sequence[int],
        *,
        forward: Forward | None = None,
        repeats: int = 20,
        warmup: int = 3,
        clock: Clock = time.perf_counter,
    ) -> None:
        self._policy = policy
        self._obs_shape = tuple(obs_shape)
        self._forward: Forward = forward or _call
        self._timing: dict[str, Any] = {"repeats": repeats, "warmup": warmup, "clock": clock}
        self._models: dict[str, nn.Module] = {}
        self._rng = np.random.default_rng(0)

    def _model(self, device: str) -> nn.Module:
        if device not in self._models:
            self._models[device] = copy.deepcopy(self._policy).to(device)
        return self._models[device]

    def _obs(self, batch: int) -> np.ndarray[Any, np.dtype[np.float32]]:
        return self._rng.standard_normal((batch, *self._obs_shape)).astype(np.float32)

    def inference(self, device: str, batch: int) -> float:
        """One batched forward, numpy in and numpy out, as the rollout does it each step."""
        model, obs = self._model(device), self._obs(batch)

        def once() -> None:
            with torch.no_grad():
                out = self._forward(model, torch.from_numpy(obs).to(device))
                for t in _tensors(out):
                    t.cpu().numpy()

        return median_time(once, devices=[device], **self._timing)

    def train_step(self, device: str, batch: int) -> float:
        """Forward + backward + Adam step on a ``batch``-row minibatch already on ``device``."""
        model = self._model(device)
        if not any(True for _ in model.parameters()):
            raise PlacementError(
                "the policy has no parameters, expected at least one to time a training step."
            )
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-8)
        obs = torch.from_numpy(self._obs(batch)).to(device)

        def once() -> None:
            optimizer.zero_grad(set_to_none=True)
            torch.autograd.backward(_scalar_loss(self._forward(model, obs)))
            optimizer.step()

        return median_time(once, devices=[device], **self._timing)

    def sync(self, source: str, target: str) -> float:
        """One :class:`WeightSync` from the copy on ``source`` into a fresh copy on ``target``."""
        sync = WeightSync(self._model(source), copy.deepcopy(self._policy).to(target))
        return median_time(sync, devices=[source, target], **self._timing)

    def batch_copy(self, source: str, target: str, rows: int) -> float:
        """Moving one rollout's observations (``rows`` of them) from ``source`` to ``target``."""
        src = torch.from_numpy(self._obs(rows)).to(source)
        dst = torch.empty_like(src, device=target)
        return median_time(lambda: dst.copy_(src), devices=[source, target], **self._timing)


# --- the choice ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Workload:
    """What one rollout + update costs in calls: the shape of the job being placed."""

    num_envs: int  # inference batch: one forward per step over all envs
    steps_per_rollout: int  # T
    minibatch_size: int  # rows per training step
    updates_per_rollout: int  # optimizer steps per rollout (epochs x minibatches)


@dataclass(frozen=True)
class Measurements:
    """Seconds per call. ``sync_s`` is keyed (train, rollout); ``copy_s`` is (rollout, train)."""

    inference_s: dict[str, float]
    train_s: dict[str, float]
    sync_s: dict[DevicePair, float]
    copy_s: dict[DevicePair, float]


@dataclass(frozen=True)
class Placement:
    """The chosen devices, the price of every pair per rollout, and why this one."""

    rollout_device: str
    train_device: str
    costs: dict[DevicePair, float] = field(default_factory=dict)  # (rollout, train) -> s/rollout
    measurements: Measurements | None = None
    reason: str = ""


def measure(bench: Bench, devices: Sequence[str], workload: Workload) -> Measurements:
    """Time every role on every device and every cross-device transfer the pairs need."""
    rows = workload.num_envs * workload.steps_per_rollout
    pairs = [(a, b) for a in devices for b in devices]
    return Measurements(
        inference_s={d: bench.inference(d, workload.num_envs) for d in devices},
        train_s={d: bench.train_step(d, workload.minibatch_size) for d in devices},
        sync_s={(t, r): bench.sync(t, r) for t, r in pairs},
        # On one device the rollout storage already is the training batch: nothing to copy.
        copy_s={(r, t): 0.0 if r == t else bench.batch_copy(r, t, rows) for r, t in pairs},
    )


def rollout_cost(m: Measurements, w: Workload, rollout: str, train: str) -> float:
    """Seconds of device work per rollout + update for one placement (env time excluded)."""
    return (
        w.steps_per_rollout * m.inference_s[rollout]
        + w.updates_per_rollout * m.train_s[train]
        + m.sync_s[(train, rollout)]
        + m.copy_s[(rollout, train)]
    )


def choose(
    m: Measurements,
    w: Workload,
    *,
    margin: float = 0.1,
    default: DevicePair = (CPU, CPU),
) -> Placement:
    """The cheapest pair; the ``default`` unless the cheapest beats it by more than ``margin``."""
    if not 0.0 <= margin < 1.0:
        raise PlacementError(f"margin must be in [0, 1), got {margin}")
    devices = list(m.inference_s)
    costs = {(r, t): rollout_cost(m, w, r, t) for r in devices for t in devices}
    best = min(costs, key=lambda pair: costs[pair])
    if default in costs and costs[best] >= (1.0 - margin) * costs[default]:
        gain = 1.0 - costs[best] / costs[default] if costs[default] > 0 else 0.0
        reason = f"kept default {default}: best {best} is only {100 * gain:.1f}% faster"
        return Placement(*default, costs=costs, measurements=m, reason=reason)
    reason = f"{best} is the cheapest at {1e3 * costs[best]:.3f} ms per rollout"
    if default in costs:
        reason += f" (default {default}: {1e3 * costs[default]:.3f} ms)"
    return Placement(*best, costs=costs, measurements=m, reason=reason)


def auto_placement(
    policy: nn.Module,
    obs_shape: Sequence[int],
    workload: Workload,
    *,
    devices: Sequence[str] | None = None,
    margin: float = 0.1,
    bench: Bench | None = None,
    forward: Forward | None = None,
) -> Placement:
    """Measure ``policy`` on ``devices`` (default: all available) and choose a placement.

    With a single device there is nothing to measure and nothing is run.
    """
    devs = list(devices) if devices is not None else available_devices()
    if len(devs) == 1:
        return Placement(devs[0], devs[0], reason=f"only {devs[0]!r} is available")
    bench = bench or TorchBench(policy, obs_shape, forward=forward)
    return choose(measure(bench, devs, workload), workload, margin=margin)
