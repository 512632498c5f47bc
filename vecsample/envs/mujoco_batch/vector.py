"""``BatchMujocoEnv``: what every batch-native MuJoCo env shares, as a gymnasium ``VectorEnv``.

A subclass names its gymnasium v5 counterpart's keywords and defaults (``DEFAULTS``), the
``MjData`` fields it reads (``_fields``), and computes over the batch what the v5 env computes
for one: the observation, the step's reward, termination and info (``_evaluate``), the reset
info, and the reset noise it draws. This class does the rest, as ``gymnasium.make(id)`` envs in
a ``SyncVectorEnv`` do it: per-env generators seeded as ``SyncVectorEnv.reset`` seeds its envs
(an int ``s`` gives env ``i`` the seed ``s + i``; a list gives each its own), the time limit's
truncation (``TimeLimit``), the three autoreset modes, ``reset(options={"reset_mask": m})``,
and gymnasium's vector infos with their masks (``final_obs`` / ``final_info`` under SameStep).

Under Disabled an env that ended stays **frozen** until ``reset(options={"reset_mask": m})`` names
it, as a vecsample env block leaves a single env (docs/semantics.md): a step does not step its
physics, and returns its last observation, reward 0, its ``terminated`` / ``truncated`` as they
were, and no infos for it (``metadata["freezes_ended_envs"]``, which a hosted block reads).
gymnasium's ``SyncVectorEnv`` asserts there instead; every env that is stepped gives what
gymnasium's gives.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding
from numpy.typing import NDArray

from vecsample.adapters.vector_infos import Columns, LazyInfos, StepInfos, from_columns
from vecsample.envs.mujoco_batch.arrays import Array, Bools
from vecsample.envs.mujoco_batch.errors import (
    BatchActionError,
    RefusedKeywordError,
    SeedCountError,
    UnknownKeywordError,
)
from vecsample.envs.mujoco_batch.physics import Field, Physics
from vecsample.errors import ResetMaskError

AutoresetMode = gym.vector.AutoresetMode
Step = tuple[NDArray[Any], Array, Bools, Bools, dict[str, Any]]

#: ``MujocoEnv``'s rendering keywords: only their defaults are accepted, a batch env does not
#: render (render the same state with ``gymnasium.make(id, render_mode=...)``).
RENDERING = ("render_mode", "width", "height", "camera_id", "camera_name",
             "default_camera_config", "max_geom", "visual_options")
#: The keywords of every batch env beside its v5 env's own (``DEFAULTS``).
OWN_KEYWORDS = ("max_episode_steps", "autoreset_mode", "num_threads")


class BatchMujocoEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of a gymnasium v5 MuJoCo env, stepped as one batch.

    Args:
        num_envs: the envs of the batch.
        max_episode_steps: the time limit (``gymnasium.make``'s); ``None``: none.
        autoreset_mode: ``"NextStep"`` (default: gymnasium's vector default, so that
            ``make_vec("HalfCheetahBatch-v5", n)`` means what ``make_vec("HalfCheetah-v5", n)``
            means), ``"SameStep"`` or ``"Disabled"``; its ``metadata["autoreset_mode"]``. A
            sampler hosting it passes its own mode (``HostedVector``).
        num_threads: threads stepping the physics; default: one per core this process may run
            on (``os.sched_getaffinity``), capped by ``OMP_NUM_THREADS`` where set (a vecsample
            worker sets it to ``threads_per_worker``), at most one per env.
        kwargs: the gymnasium v5 env's own keywords (``DEFAULTS``), with the same meaning.
    """

    #: The v5 env's keywords and their defaults (rendering keywords apart).
    DEFAULTS: ClassVar[dict[str, Any]] = {}
    #: gymnasium's qvel reset noise: ``"normal"`` (scale * N(0, 1)) or ``"uniform"``.
    QVEL_NOISE: ClassVar[str] = "uniform"
    #: Whether the env reads ``cfrc_ext`` (gymnasium runs ``mj_rnePostConstraint`` per step).
    POST_CONSTRAINT: ClassVar[bool] = False
    #: What a reset computes after it sets the state (``physics.RESET_STAGES``): what the env
    #: reads after a reset of what gymnasium's ``mj_forward`` computes there.
    RESET_STAGE: ClassVar[str] = "forward"
    #: The observations' dtype (gymnasium's v5 envs: float64).
    OBS_DTYPE: ClassVar[type[np.floating[Any]]] = np.float64

    def __init__(self, num_envs: int = 1, *, max_episode_steps: int | None = None,
                 autoreset_mode: AutoresetMode | str = AutoresetMode.NEXT_STEP,
                 num_threads: int | None = None, **kwargs: Any) -> None:
        from gymnasium.envs.mujoco.mujoco_env import expand_model_path

        self.config = self._configure(kwargs)
        self.num_envs = num_envs
        self.max_episode_steps = max_episode_steps
        self.autoreset_mode = AutoresetMode(getattr(autoreset_mode, "value", autoreset_mode))
        self.physics = Physics(expand_model_path(self.config["xml_file"]), num_envs,
                               int(self.config["frame_skip"]), self._fields(),
                               post_constraint=self.POST_CONSTRAINT, num_threads=num_threads,
                               reset_stage=self.RESET_STAGE)
        self.dt = self.physics.dt
        self.metadata = {"autoreset_mode": self.autoreset_mode, "render_modes": [],
                         "render_fps": int(np.round(1.0 / self.dt)),
                         # reset(options={"reset_mask": m}) resets only those rows
                         "supports_reset_mask": True,
                         # Disabled: ended envs stay frozen (not stepped, obs and flags kept,
                         # reward 0, no infos); a hosted block steps such an env with ended
                         # rows (vecsample/hosted.py)
                         "freezes_ended_envs": True}
        self._define_spaces()
        self._generators: list[np.random.Generator | None] = [None] * num_envs
        self._elapsed = np.zeros(num_envs, dtype=np.int64)
        # Every env and none, as the rows of a step's infos (read only: never handed out).
        self._every, self._none = np.ones(num_envs, np.bool_), np.zeros(num_envs, np.bool_)
        self._every.flags.writeable = self._none.flags.writeable = False
        self._ended = np.zeros(num_envs, dtype=np.bool_)  # ended at the last step

    @classmethod
    def takes(cls, kwargs: Mapping[str, Any]) -> bool:
        """Whether the constructor takes every keyword of ``kwargs``: the v5 env's own
        (``DEFAULTS``), ``OWN_KEYWORDS`` and ``render_mode=None``."""
        return all(key in cls.DEFAULTS or key in OWN_KEYWORDS
                   or (key == "render_mode" and value is None) for key, value in kwargs.items())

    # --- what a subclass defines -----------------------------------------------------------------

    def _fields(self) -> list[Field]:
        """The ``MjData`` fields read after each step and reset, beyond qpos and qvel."""
        return []

    def _observe(self) -> NDArray[Any]:
        """Every env's observation, from the physics state and fields."""
        raise NotImplementedError

    def _before(self) -> Any:
        """What the step's evaluation needs from before the step (a position)."""
        raise NotImplementedError

    def _evaluate(self, actions: NDArray[Any], before: Any) -> tuple[
            NDArray[Any], Bools, Columns]:
        """Every env's reward, termination and step info columns, after the physics step
        (``actions``: the controls that ``_controls`` gave)."""
        raise NotImplementedError

    def _reset_info(self) -> Columns:
        """Every env's reset info columns (only the reset rows are used)."""
        raise NotImplementedError

    def _controls(self, actions: NDArray[Any]) -> NDArray[Any]:
        """The controls that the actions give (the actions themselves, unless a wrapper maps
        them)."""
        return actions

    # --- gymnasium's VectorEnv -------------------------------------------------------------------

    def reset(self, *, seed: int | list[int | None] | None = None,
              options: dict[str, Any] | None = None) -> tuple[NDArray[Any], dict[str, Any]]:
        """Resets every env (or those of ``options["reset_mask"]``), seeding env ``i`` with
        ``seed + i`` for an int, with ``seed[i]`` for a list, as ``SyncVectorEnv`` does."""
        seeds = self._seeds(seed)
        mask = self._reset_mask(options)
        self._reset_rows(np.flatnonzero(mask), seeds)
        return self._observe(), self._infos(StepInfos({}, self._none, self._reset_info(),
                                                      mask.copy()))

    def step(self, actions: Any) -> Step:
        """One step of every env; ended envs autoreset as ``metadata["autoreset_mode"]``
        says (NextStep: reset instead of stepped; Disabled: frozen)."""
        actions = self._check_actions(actions)
        held = self._held()
        before = self._before()
        controls = self._controls(actions)
        self.physics.step(controls, None if held is None else ~held)
        rewards, terminated, columns = self._evaluate(controls, before)
        rewards = np.asarray(rewards, dtype=np.float64)
        if held is None:
            self._elapsed += 1
        else:
            self._elapsed[~held] += 1
        truncated = self._truncated()
        mode = self.autoreset_mode
        if mode is AutoresetMode.NEXT_STEP:
            return self._next_step(held, rewards, terminated, truncated, columns)
        if mode is AutoresetMode.DISABLED:
            return self._disabled(held, rewards, terminated, truncated, columns)
        return self._same_step(rewards, terminated, truncated, columns)

    def _held(self) -> Bools | None:
        """The envs this step does not step: under NextStep those that ended at the last step
        (reset instead), under Disabled every ended env (frozen); None when every env steps."""
        if self.autoreset_mode is AutoresetMode.SAME_STEP or not self._ended.any():
            return None
        return self._ended.copy()

    def _infos(self, columns: StepInfos) -> LazyInfos:
        """gymnasium's vector infos of ``columns``, built when first read (a hosted block
        writes the columns to shared memory as they are, and never builds them)."""
        return LazyInfos(functools.partial(from_columns, columns, self._add_info), columns)

    def _plain(self, rewards: Array, terminated: Bools, truncated: Bools,
               columns: Columns) -> Step:
        """A step in which every env stepped and none resets: every row of every column."""
        return self._observe(), rewards, terminated, truncated, self._infos(
            StepInfos(columns, self._every, {}, self._none))

    def _disabled(self, frozen: Bools | None, rewards: Array, terminated: Bools,
                  truncated: Bools, columns: Columns) -> Step:
        """Disabled: the envs that ended before this step are frozen: reward 0, no infos.
        Their state and step count did not move, so their observation, termination and
        truncation, computed again, are what they were."""
        self._ended = terminated | truncated
        if frozen is None:
            return self._plain(rewards, terminated, truncated, columns)
        rewards[frozen] = 0.0
        return self._observe(), rewards, terminated, truncated, self._infos(
            StepInfos(columns, ~frozen, {}, self._none))

    def _same_step(self, rewards: Array, terminated: Bools, truncated: Bools,
                   columns: Columns) -> Step:
        """SameStep: ended envs are reset now; their last observation and step info go to
        ``final_obs`` and ``final_info``, their reset info to the infos."""
        ended = terminated | truncated
        if not ended.any():
            self._ended = ended
            return self._plain(rewards, terminated, truncated, columns)
        final_obs = self._observe()
        self._reset_rows(np.flatnonzero(ended), None)
        infos = StepInfos(columns, self._every, self._reset_info(), ended, ended, final_obs)
        return self._observe(), rewards, terminated, truncated, self._infos(infos)

    def _next_step(self, resetting: Bools | None, rewards: Array, terminated: Bools,
                   truncated: Bools, columns: Columns) -> Step:
        """NextStep: the envs that ended at the last step are reset instead of stepped; their
        reward is 0, their flags False and their infos the reset's."""
        if resetting is None:
            self._ended = terminated | truncated
            return self._plain(rewards, terminated, truncated, columns)
        self._reset_rows(np.flatnonzero(resetting), None)
        infos = StepInfos(columns, ~resetting, self._reset_info(), resetting)
        rewards[resetting] = 0.0
        terminated[resetting] = False
        truncated[resetting] = False
        self._ended = terminated | truncated
        return self._observe(), rewards, terminated, truncated, self._infos(infos)

    def close_extras(self, **kwargs: Any) -> None:
        self.physics.close()

    # --- helpers ---------------------------------------------------------------------------------

    def _configure(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """The v5 keywords with their defaults, the given ones checked."""
        name = type(self).__name__
        for key, value in kwargs.items():
            if key in RENDERING:
                if key == "render_mode" and value is None:
                    continue
                raise RefusedKeywordError(
                    env=name, keyword=key, got=value, reason="a batch env does not render",
                    fix="render the same states with gymnasium.make(id, render_mode=...)")
            if key not in self.DEFAULTS:
                raise UnknownKeywordError(env=name, keyword=key,
                                          accepted=[*self.DEFAULTS, *RENDERING])
        return {**self.DEFAULTS, **{k: v for k, v in kwargs.items() if k not in RENDERING}}

    def _control_space(self) -> gym.spaces.Box:
        """The v5 env's action space: the actuators' control ranges (``MujocoEnv``'s)."""
        bounds = self.physics.model.actuator_ctrlrange.copy().astype(np.float32)
        return gym.spaces.Box(bounds[:, 0], bounds[:, 1], dtype=np.float32)

    def _define_spaces(self) -> None:
        self.single_action_space = self._control_space()
        size = self._observe().shape[1]
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(size,),
                                                       dtype=self.OBS_DTYPE)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space,
                                                         self.num_envs)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              self.num_envs)

    def _seeds(self, seed: int | Sequence[int | None] | None) -> list[int | None]:
        if seed is None:
            return [None] * self.num_envs
        if isinstance(seed, int | np.integer):
            return [int(seed) + i for i in range(self.num_envs)]
        seeds = list(seed)
        if len(seeds) != self.num_envs:
            raise SeedCountError(env=type(self).__name__, expected=self.num_envs,
                                 got=len(seeds))
        return seeds

    def _reset_mask(self, options: dict[str, Any] | None) -> Bools:
        mask = (options or {}).get("reset_mask")
        if mask is None:
            return np.ones(self.num_envs, dtype=np.bool_)
        if not isinstance(mask, np.ndarray) or mask.dtype != np.bool_ or mask.shape != (
                self.num_envs,) or not mask.any():
            raise ResetMaskError(name="options['reset_mask']", got=mask,
                                 expected=f"a bool array of shape ({self.num_envs},) with a "
                                 "True entry", fix="name the envs to reset")
        return mask

    def _reset_rows(self, rows: NDArray[np.intp], seeds: list[int | None] | None) -> None:
        """gymnasium's reset of each env of ``rows``: seeding (``seeds``, one per env of the
        batch; None: no seeds), the reset state drawn from its own generator
        (``_reset_states``), set as ``mj_resetData`` and ``set_state`` leave it
        (``Physics.reset``)."""
        indices = rows.tolist()
        if seeds is not None:
            for i in indices:
                if seeds[i] is not None:
                    self._generators[i] = seeding.np_random(seeds[i])[0]
        self.physics.reset(indices, self._reset_states([self._generator(i) for i in indices]))
        self._elapsed[rows] = 0
        self._ended[rows] = False

    def _reset_states(self, rngs: list[np.random.Generator]) -> Array:
        """The ``qpos`` and ``qvel`` after a reset of each env whose generator ``rngs`` holds
        (one row each, ``qpos`` then ``qvel``): gymnasium's reset noise of scale
        ``reset_noise_scale`` around the initial state, drawn from the env's generator in
        gymnasium's order (qpos, then qvel).

        One draw per env: ``rng.uniform(low, high, k)`` is ``low + (high - low) * u`` of the
        raw doubles ``u = rng.random(k)``, bit for bit (numpy's own formula), and the two draws
        of a uniform noise are one stream of ``nq + nv`` doubles; the arithmetic is done for
        every reset env at once."""
        p, scale = self.physics, self.config["reset_noise_scale"]
        nq, nv = p.model.nq, p.model.nv
        low, span = -scale, scale - -scale  # uniform(low=-scale, high=scale)
        if self.QVEL_NOISE == "normal":
            draws = [(rng.random(nq), rng.standard_normal(nv)) for rng in rngs]
            u, z = np.stack([d[0] for d in draws]), np.stack([d[1] for d in draws])
            return np.concatenate((p.init_qpos + (low + span * u), p.init_qvel + scale * z),
                                  axis=1)
        noise: Array = low + span * np.stack([rng.random(nq + nv) for rng in rngs])
        return p.init_state + noise

    def _generator(self, i: int) -> np.random.Generator:
        """Env ``i``'s generator (an unseeded one until a seed is given, as ``Env.np_random``)."""
        rng = self._generators[i]
        if rng is None:
            rng = self._generators[i] = seeding.np_random()[0]
        return rng

    def _truncated(self) -> Bools:
        if self.max_episode_steps is None:
            return np.zeros(self.num_envs, dtype=np.bool_)
        return self._elapsed >= self.max_episode_steps

    def _check_actions(self, actions: Any) -> NDArray[Any]:
        batch: NDArray[Any] = np.asarray(actions)
        expected = self.action_space.shape or ()
        if batch.shape != expected:
            raise BatchActionError(env=type(self).__name__, expected=expected, got=batch.shape)
        return batch
