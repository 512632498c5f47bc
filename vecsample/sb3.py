"""``vecsample.sb3.VecEnv``: Stable-Baselines3's ``VecEnv`` on top of ``VecSampler``.

A drop-in for ``SubprocVecEnv``: ``SubprocVecEnv(env_fns)`` becomes
``vecsample.sb3.VecEnv(env_fns)``, ``start_method`` included. SB3 resets an ended env in the
same step and puts its last observation in ``infos[i]["terminal_observation"]``: that is
vecsample's ``SameStep`` autoreset, whose ``final_obs`` holds it. Needs the ``sb3`` extra
(``pip install "vecsample[sb3]"``); the core never imports this module. See docs/sb3.md.

Per-env requests (``env_method``, ``get_attr``, ``set_attr``, ``env_is_wrapped``, rendering,
each with ``indices``) go through one ``VecSampler.call`` of a helper that every env carries
in its worker as the attribute ``_vecsample_sb3``: it runs the request for the targeted envs
only and returns an env's exception as data, so that a failed request leaves the worker usable.
"""

from __future__ import annotations

import multiprocessing as mp
import traceback
import warnings
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import cloudpickle
import gymnasium as gym
import numpy as np
from gymnasium import spaces

from vecsample.extras import require

require("stable_baselines3", feature="vecsample.sb3")

# The imports below come after the check, so a missing SB3 is one error that names the extra.
# ruff: noqa: E402
from stable_baselines3.common.vec_env import VecEnv as _SB3VecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvIndices, VecEnvObs

from vecsample import errors
from vecsample._wire.spaces import copy_tree, flatten, index_tree, unflatten
from vecsample.factories import env_factories
from vecsample.machine import usable_cores
from vecsample.options import Options, adapted
from vecsample.results import StepResult
from vecsample.sampler import VecSampler
from vecsample.types import AutoresetMode

__all__ = ["EnvAttributeError", "EnvIndexError", "VecEnv"]

#: The attribute every env carries in its worker: the helper that runs the per-env requests.
HELPER = "_vecsample_sb3"
#: VecSampler options this adapter sets itself: SB3's API needs them as they are.
_FIXED = {
    "autoreset_mode": (AutoresetMode.SAME_STEP, "SB3 resets an ended env in the same step"),
    "infos": (True, "SB3 returns every env's info dict"),
}

#: One env's answer to a request: (True, cloudpickled value) or (False, error fields).
_Reply = tuple[bool, Any]


class EnvAttributeError(errors.WorkerError, AttributeError):
    """An env has no such attribute (``get_attr``, ``env_method``): an ``AttributeError``, as
    SB3's ``has_attr`` and wrappers expect, carrying the worker, the env and the traceback."""


class EnvIndexError(errors.ConfigError, IndexError):
    """``indices`` names an env that does not exist (an ``IndexError``, as in SubprocVecEnv)."""


class VecEnv(_SB3VecEnv):
    """SB3's ``VecEnv`` over vecsample's workers and shared memory: a drop-in for
    ``SubprocVecEnv``.

    Args:
        env_fns: One factory per env, each returning a ``gymnasium.Env`` (an old ``gym`` env is
            converted as SubprocVecEnv does). Lambdas and closures work under every start
            method: each factory travels by cloudpickle.
        start_method: SubprocVecEnv's argument: the multiprocessing start method ("fork",
            "forkserver", "spawn"); None: vecsample's default. It is the ``context`` option
            under SB3's name (give one of the two).
        num_workers: Worker processes, each stepping ``len(env_fns) // num_workers`` envs one
            after another; must divide ``len(env_fns)`` unless ``uneven_split=True``. None:
            ``options``' if set, else the largest divisor not above the usable cores
            (SubprocVecEnv: one per env).
        check_actions: Reject actions outside the action space before sending (ActionError).
            Off by default here, unlike ``Options``' default: SubprocVecEnv never checks, and
            SB3's ``unscale_action`` can land one float rounding outside a Box. Shapes and
            dtypes are checked either way.
        options: The ``VecSampler`` underneath's ``vecsample.Options`` (``deadline``,
            ``restart``, ``max_restarts``, ``seed``, ``cpu_affinity``, ...);
            ``autoreset_mode`` ('SameStep') and ``infos`` (on) are SB3's and cannot change.
        **overrides: ``Options`` fields by name, applied on top of ``options``; an unknown
            name is a ``ConfigError`` naming the closest field.

    Raises:
        vecsample.errors.ConfigError: a bad ``start_method`` (a ValueError naming the choices),
            ``num_workers`` or other setting, or ``autoreset_mode``/``infos``, which SB3 fixes.
        vecsample.errors.EnvFactoryError: a factory raises or cannot be pickled.
        vecsample.errors.UnsupportedSpaceError: a space that cannot live in shared memory.

    Example:
        >>> import gymnasium as gym
        >>> import numpy as np
        >>> from vecsample.sb3 import VecEnv
        >>> venv = VecEnv([lambda: gym.make("CartPole-v1")] * 2, num_workers=2)
        >>> venv.seed(0)
        [0, 1]
        >>> venv.reset().shape
        (2, 4)
        >>> obs, rewards, dones, infos = venv.step(np.array([0, 1]))
        >>> rewards, dones, infos[0]
        (array([1., 1.]), array([False, False]), {'TimeLimit.truncated': False})
        >>> venv.close()
    """

    def __init__(
        self,
        env_fns: Sequence[Callable[[], gym.Env[Any, Any]]],
        start_method: str | None = None,
        *,
        num_workers: int | None = None,
        check_actions: bool | None = None,  # None: off, as SubprocVecEnv (docs/sb3.md)
        options: Options | None = None,
        **overrides: Any,
    ) -> None:
        self.waiting = False
        self.closed = True  # until the workers are up: close() is then a no-op
        fns = _factories(env_fns)
        given = _given(start_method, num_workers, check_actions, overrides)
        # SubprocVecEnv runs one process per env; vecsample groups envs so that the workers
        # do not outnumber the cores, unless the caller asks for more.
        chosen = adapted(options, given, where="vecsample.sb3.VecEnv", fixed=_FIXED,
                         defaults={"num_workers": _default_workers(len(fns)),
                                   "check_actions": False})
        self._sampler = VecSampler(fns, options=chosen)
        self.closed = False
        s = self._sampler
        self.num_envs = s.num_envs  # read by get_attr, which SB3's __init__ calls
        self._worker_of = [w for w in range(s.num_slots) for _ in s.worker_env_ids(w)]
        super().__init__(s.num_envs, s.single_observation_space, s.single_action_space)

    @property
    def sampler(self) -> VecSampler:
        """The VecSampler underneath, for ``stats()`` and partial batches."""
        return self._sampler

    # --- stepping --------------------------------------------------------------------------------

    def reset(self) -> VecEnvObs:
        """Resets every env with the seeds of ``seed()`` and the options of ``set_options()``
        (both used once, then cleared), and returns the observations."""
        self._drain()
        seeds = None if all(s is None for s in self._seeds) else list(self._seeds)
        groups = _option_groups(self._options)
        for options, ids in groups:
            mask = None
            if len(groups) > 1:  # envs with different options: one reset per distinct options
                mask = np.zeros(self.num_envs, dtype=bool)
                mask[ids] = True
            obs, infos = self._sampler.reset(seeds, options or None, mask=mask)
            for i in ids:
                self.reset_infos[i] = infos[i]
        self._reset_seeds()
        self._reset_options()
        return self._observations(obs)

    def step(self, actions: np.ndarray) -> tuple[VecEnvObs, np.ndarray, np.ndarray,
                                                 list[dict[str, Any]]]:
        """``step_async`` then ``step_wait``, as SB3's VecEnv.step (``step_async``'s
        ``send_all`` hands this process's core to the workers before the wait)."""
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: np.ndarray) -> None:
        """Writes one action per env (an array, or a list of per-env actions) and starts the
        workers."""
        self._sampler.send_all(self._batch_actions(actions))
        self.waiting = True

    def step_wait(self) -> tuple[VecEnvObs, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        """(observations, rewards, dones, infos) of the step started by ``step_async``."""
        if not self.waiting:
            raise errors.NoPendingError(
                "step_wait() without a pending step; call step_async(actions) first, or "
                "step(actions).")
        v = self._sampler.recv_batch()
        self.waiting = False
        dones = v.terminated | v.truncated
        infos = [self._info(v, i, bool(dones[i])) for i in range(self.num_envs)]
        return self._observations(v.obs), v.rewards.copy(), dones, infos

    def _info(self, v: StepResult, i: int, done: bool) -> dict[str, Any]:
        """Env ``i``'s info as SubprocVecEnv builds it: its step info, ``TimeLimit.truncated``
        and, if it ended, ``terminal_observation``; its autoreset's info goes to reset_infos."""
        info = v.infos.get(i) or {}
        info["TimeLimit.truncated"] = bool(v.truncated[i] and not v.terminated[i])
        if done and v.has_final_obs[i]:
            info["terminal_observation"] = copy_tree(index_tree(v.final_obs, i))
        if i in v.reset_infos:
            self.reset_infos[i] = v.reset_infos[i]
        return info

    def _drain(self) -> None:
        """Receives (and drops) a step still in flight: reset() cancels it, as SB3 says."""
        if self.waiting:
            self._sampler.step_recv(None)
            self.waiting = False

    def _observations(self, obs: Any) -> VecEnvObs:
        """Copies of the shared-memory views, nested as SB3 expects (OrderedDict for Dict)."""
        copied = copy_tree(obs)
        return OrderedDict(copied) if isinstance(copied, dict) else copied

    def _batch_actions(self, actions: Any) -> Any:
        """Dict/Tuple actions come from SB3 one per env; the sampler takes one batch per leaf."""
        space = self.action_space
        if not isinstance(space, spaces.Dict | spaces.Tuple) or isinstance(actions, Mapping):
            return actions
        rows = [flatten(space, action) for action in actions]
        if len(rows) != self.num_envs:
            raise errors.ActionShapeError(
                f"expected one action per env ({self.num_envs}) for {space}, got {len(rows)}; "
                f"pass a list with one action per env.")
        return unflatten(space, iter([np.stack(leaf) for leaf in zip(*rows, strict=True)]))

    # --- per-env requests ------------------------------------------------------------------------

    def env_method(self, method_name: str, *method_args: Any, indices: VecEnvIndices = None,
                   **method_kwargs: Any) -> list[Any]:
        """Calls ``method_name`` (found through the wrappers) on the envs in ``indices``."""
        return self._ask("env_method", indices, method_name, method_args, method_kwargs)

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        """The attribute ``attr_name`` (found through the wrappers) of the envs in ``indices``."""
        return self._ask("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        """Sets ``attr_name`` on the outermost wrapper of the envs in ``indices``, as
        SubprocVecEnv does (``env_method("set_wrapper_attr", ...)`` reaches inner ones)."""
        self._ask("set_attr", indices, attr_name, value)

    def has_attr(self, attr_name: str) -> bool:
        """Whether every env has ``attr_name`` (through its wrappers)."""
        return all(self._ask("has_attr", None, attr_name))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper[Any, Any, Any, Any]],
                       indices: VecEnvIndices = None) -> list[bool]:
        """For each env in ``indices``, whether a wrapper in its chain is a ``wrapper_class``."""
        return self._ask("is_wrapped", indices, wrapper_class)

    def get_images(self) -> Sequence[np.ndarray | None]:
        """Every env's ``render()`` when the render mode is ``rgb_array``; else a warning and
        Nones, as SubprocVecEnv does."""
        if self.render_mode != "rgb_array":
            warnings.warn(f"The render mode is {self.render_mode}, but get_images() needs "
                          f"'rgb_array' to obtain images.", stacklevel=2)
            return [None] * self.num_envs
        images: list[np.ndarray | None] = self._ask("render", None)
        return images

    def _ask(self, op: str, indices: VecEnvIndices, *args: Any) -> list[Any]:
        """Runs ``op`` on the envs in ``indices`` (in that order, repeats included)."""
        targets = None if indices is None else self._targets(indices)
        try:
            payload = cloudpickle.dumps(args)
        except Exception as exc:
            raise errors.ConfigError(
                f"the arguments of {op}() cannot be pickled to the workers ({type(exc).__name__}"
                f": {exc}); pass picklable values.") from exc
        replies = self._sampler.call(HELPER, op, targets, payload)
        queues = [iter(r or ()) for r in replies]
        order = range(self.num_envs) if targets is None else targets
        return [self._unpack(op, i, next(queues[i])) for i in order]

    def _unpack(self, op: str, i: int, reply: _Reply) -> Any:
        ok, data = reply
        if ok:
            return cloudpickle.loads(data)
        exc_type, message, remote_traceback, is_attribute_error = data
        cls = EnvAttributeError if is_attribute_error else errors.WorkerError
        raise cls(worker=self._worker_of[i], env=i, command=op, exc_type=exc_type,
                  message=message, remote_traceback=remote_traceback)

    def _targets(self, indices: int | Iterable[int]) -> tuple[int, ...]:
        """``indices`` as env ids in ``range(num_envs)``; negative ones count from the end."""
        n = self.num_envs
        items = list(indices) if isinstance(indices, Iterable) else [indices]
        for i in items:
            if isinstance(i, bool) or not isinstance(i, int | np.integer) or not -n <= i < n:
                raise EnvIndexError(name="indices", expected=f"env indices in range({-n}, {n})",
                                    got=i, fix=f"this VecEnv has {n} envs")
        return tuple(int(i) % n for i in items)

    # --- lifetime --------------------------------------------------------------------------------

    def close(self) -> None:
        """Stops every worker (a step in flight is dropped). Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.waiting = False
        self._sampler.close()

    def __repr__(self) -> str:
        return f"vecsample.sb3.VecEnv({self.num_envs} envs, {self._sampler!r})"


# --- construction --------------------------------------------------------------------------------


def _factories(env_fns: Sequence[Callable[[], Any]]) -> list[_Factory]:
    if isinstance(env_fns, str):
        raise errors.ConfigError(
            name="env_fns", expected="a list of env factories, as for SubprocVecEnv",
            got=env_fns, fix="pass [lambda: gym.make(id)] * n, or use SB3's "
            "make_vec_env(id, n_envs, vec_env_cls=vecsample.sb3.VecEnv)")
    return [_Factory(fn, i) for i, fn in enumerate(env_factories(env_fns, None, None))]


def _given(start_method: str | None, num_workers: int | None, check_actions: bool | None,
           overrides: dict[str, Any]) -> dict[str, Any]:
    """The Options fields this call names: ``overrides``, ``start_method`` as ``context``, and
    ``num_workers`` and ``check_actions`` where given (not None)."""
    given = dict(overrides)
    if num_workers is not None:
        given["num_workers"] = num_workers
    if check_actions is not None:
        given["check_actions"] = check_actions
    if start_method is None:  # vecsample's default ("auto"), not SB3's forkserver: startup.py
        return given
    if "context" in overrides:
        raise errors.ConfigError(
            f"start_method={start_method!r} and context={overrides['context']!r} name the "
            f"same setting; pass only one of them.")
    methods = mp.get_all_start_methods()
    if start_method not in methods:
        # multiprocessing's own words are kept: code written for SubprocVecEnv may match them.
        raise errors.ConfigError(
            f"start_method must be one of {methods}, got {start_method!r} (multiprocessing: "
            f"cannot find context for {start_method!r}); pick one of those or pass None.")
    return {**given, "context": start_method}


def _default_workers(num_envs: int) -> int:
    """The largest divisor of num_envs that does not exceed the cores we may use."""
    limit = max(1, min(num_envs, usable_cores()))
    return max(d for d in range(1, limit + 1) if num_envs % d == 0)


def _option_groups(options: Sequence[Any]) -> list[tuple[Any, list[int]]]:
    """The envs grouped by equal reset options, in env order (one group when all are equal)."""
    groups: list[tuple[Any, list[int]]] = []
    for i, option in enumerate(options):
        group = next((g for g in groups if _same(g[0], option)), None)
        if group is None:
            groups.append((option, [i]))
        else:
            group[1].append(i)
    return groups


def _same(a: Any, b: Any) -> bool:
    try:
        return a is b or bool(a == b)
    except Exception:  # options holding arrays compare elementwise: treat them as different
        return False


# --- the worker side -----------------------------------------------------------------------------


class _Factory:
    """Builds env ``index`` in its worker and gives it the helper. The factory travels by
    cloudpickle, so lambdas and closures work under every start method, as in SubprocVecEnv."""

    def __init__(self, fn: Callable[[], Any], index: int) -> None:
        self.fn = fn
        self.index = index

    def __call__(self) -> gym.Env[Any, Any]:
        env = self.fn()
        if not isinstance(env, gym.Env):  # an old gym env: converted as SubprocVecEnv does
            from stable_baselines3.common.vec_env.patch_gym import _patch_env

            env = _patch_env(env)
        setattr(env, HELPER, _EnvHelper(env, self.index))
        return env

    def __getstate__(self) -> tuple[bytes, int]:
        return cloudpickle.dumps(self.fn), self.index

    def __setstate__(self, state: tuple[bytes, int]) -> None:
        fn, self.index = state
        self.fn = cloudpickle.loads(fn)


class _EnvHelper:
    """``env._vecsample_sb3``: runs the adapter's requests on its env, in the worker."""

    def __init__(self, env: gym.Env[Any, Any], index: int) -> None:
        self.env = env
        self.index = index

    def __call__(self, op: str, targets: tuple[int, ...] | None,
                 payload: bytes) -> list[_Reply] | None:
        """One reply per time this env is named in ``targets`` (None: every env, once)."""
        count = 1 if targets is None else targets.count(self.index)
        if not count:
            return None
        args = cloudpickle.loads(payload)
        return [self._run(op, args) for _ in range(count)]

    def _run(self, op: str, args: tuple[Any, ...]) -> _Reply:
        # An env's exception is returned, not raised: raised, it would mark the worker failed.
        try:
            return True, cloudpickle.dumps(_OPS[op](self.env, *args))
        except Exception as exc:
            fields = (type(exc).__name__, str(exc), traceback.format_exc(),
                      isinstance(exc, AttributeError))
            return False, fields


def _env_method(env: gym.Env[Any, Any], name: str, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    return env.get_wrapper_attr(name)(*args, **kwargs)


def _has_attr(env: gym.Env[Any, Any], name: str) -> bool:
    try:
        env.get_wrapper_attr(name)
    except AttributeError:
        return False
    return True


def _is_wrapped(env: gym.Env[Any, Any], wrapper_class: type) -> bool:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, wrapper_class):
            return True
        env = env.env
    return False


_OPS: dict[str, Callable[..., Any]] = {
    "env_method": _env_method,
    "get_attr": lambda env, name: env.get_wrapper_attr(name),
    "has_attr": _has_attr,
    "set_attr": setattr,
    "is_wrapped": _is_wrapped,
    "render": lambda env: env.render(),
}
