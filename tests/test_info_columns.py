"""Infos through shared-memory columns (vecsample/_wire/infos.py): what VectorEnv and VecSampler
return must equal what the envs gave, whatever the schema, including keys that appear late,
keys whose type changes between envs, and values no column can hold."""

from __future__ import annotations

import functools
import time
import zlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from helpers import kill_and_wait, posix_only
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vecsample
from vecsample._wire.infos import MASK_BYTES, Column, InfoMap
from vecsample.adapters import vector_infos
from vecsample.testing import CountingEnv, fns
from vecsample.types import AutoresetMode

#: The kinds of info value an env may return: every column kind, and ones that stay pickled.
KINDS = ["float", "int", "bool", "f32", "i16", "vec_f4", "mat_i8", "np_bool", "str", "nested",
         "mixed"]


def _value(kind: str, env: int, t: int) -> Any:
    x = env * 100 + t
    if kind == "mixed":  # a float in even envs, an int in odd ones: the first env sets the dtype
        kind = "float" if env % 2 == 0 else "int"
    return {
        "float": lambda: x + 0.25,
        "int": lambda: x - 7,
        "bool": lambda: bool(x % 2),
        "f32": lambda: np.float32(x / 3),
        "i16": lambda: np.int16(x % 300),
        "vec_f4": lambda: np.array([x, -x], dtype=np.float32),
        "mat_i8": lambda: np.arange(6, dtype=np.int64).reshape(2, 3) * x,
        "np_bool": lambda: np.bool_(x % 3 == 0),
        "str": lambda: f"s{x}",
        "nested": lambda: {"a": x + 0.5, "b": f"n{x}"},
    }[kind]()


class InfoEnv(gym.Env[np.ndarray, np.int64]):
    """Episodes of ``length + env % 3`` steps (envs end at different steps); infos follow
    ``schema``: (key, kind, every, start, when)."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (2,), np.float64)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env: int, schema: list[tuple[str, str, int, int, str]],
                 length: int) -> None:
        self.env, self.schema, self.length = env, schema, length + env % 3
        self.t = self.total = 0

    def _info(self, when: str) -> dict[str, Any]:
        info = {}
        for i, (key, kind, every, start, at) in enumerate(self.schema):
            h = zlib.crc32(f"{self.env}/{self.total}/{i}".encode()) % every
            if at in (when, "both") and self.total >= start and h == 0:
                info[key] = _value(kind, self.env, self.total)
        return info

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.t = 0
        self.total += 1
        return np.array([self.env, 0.0]), self._info("reset")

    def step(self, action: Any) -> Any:
        self.t += 1
        self.total += 1
        obs = np.array([self.env, self.t], dtype=np.float64)
        return obs, float(self.t), self.t >= self.length, False, self._info("step")


def assert_same(a: Any, b: Any, where: str = "infos") -> None:
    """Equal keys, values and dtypes, recursively (object arrays element by element)."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), (where, sorted(a), sorted(b))
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), (where, type(b))
        assert a.dtype == b.dtype and a.shape == b.shape, (where, a.dtype, b.dtype, a.shape)
        if a.dtype == object:
            for x, y in zip(a, b, strict=True):
                assert_same(x, y, where + "[i]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert type(a) is type(b) and a == b, (where, a, b)


schemas = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(1, 3), st.integers(0, 8),
              st.sampled_from(["step", "reset", "both"])),
    min_size=1, max_size=5,
).map(lambda specs: [(f"k{i}", *spec) for i, spec in enumerate(specs)])


@pytest.mark.parametrize("placement", ["workers", "share", "parent"])
@pytest.mark.parametrize("mode", list(AutoresetMode))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(schema=schemas, length=st.integers(2, 4))
def test_vector_infos_equal_sync_vector_env(mode: AutoresetMode, placement: str,
                                            schema: list[Any], length: int) -> None:
    """Whatever the placement: a block stepped in this process writes its infos to the
    columns as a worker process does."""
    fns = [functools.partial(InfoEnv, i, schema, length) for i in range(5)]
    sync = gym.vector.SyncVectorEnv(fns, autoreset_mode=gym.vector.AutoresetMode(mode.value))
    ours = vecsample.VectorEnv(fns, num_workers=2, autoreset_mode=mode.value, context="fork",
                               env_placement=placement)
    try:
        assert_same(sync.reset(seed=0)[1], ours.reset(seed=0)[1], "reset infos")
        ended = np.zeros(5, dtype=bool)
        for t in range(12):
            if mode is AutoresetMode.DISABLED and ended.any():  # sync pops the mask: two dicts
                assert_same(sync.reset(options={"reset_mask": ended})[1],
                            ours.reset(options={"reset_mask": ended})[1])
            actions = np.ones(5, dtype=np.int64)
            _, _, term, trunc, expected = sync.step(actions)
            _, _, term2, _, got = ours.step(actions)
            np.testing.assert_array_equal(term, term2)
            assert_same(expected, got, f"step {t} infos")
            ended = term | trunc
    finally:
        ours.close()
        sync.close()


@pytest.mark.parametrize("placement", ["workers", "parent"])
@pytest.mark.parametrize("every", [1, 2])
def test_a_step_where_every_env_gave_every_key_is_its_columns(monkeypatch, placement: str,
                                                              every: int) -> None:
    """The common step (no env reset or ended, every key in every env: ``every`` 1) takes
    the short path, the columns as they are, and equals gymnasium's; a key some envs lack
    (``every`` 2) takes the general one and equals it too. (The reset, and the first step,
    whose keys are not columns yet, take the general one.)"""
    schema = [("k0", "float", every, 0, "step"), ("k1", "vec_f4", 1, 0, "step"),
              ("k2", "int", 1, 0, "both")]
    fns = [functools.partial(InfoEnv, i, schema, 50) for i in range(4)]
    merge = vector_infos._merge
    calls = [0]

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return merge(*args)

    monkeypatch.setattr(vector_infos, "_merge", counted)
    sync = gym.vector.SyncVectorEnv(fns)
    ours = vecsample.VectorEnv(fns, num_workers=2, context="fork", env_placement=placement)
    try:
        sync.reset(seed=0), ours.reset(seed=0)
        general = 0  # the steps where some env lacks k0 (the general path: one merge each)
        for t in range(10):
            if t == 1:  # the keys have columns from here on
                calls[0] = 0
            expected = sync.step(np.ones(4, dtype=np.int64))[4]
            got = ours.step(np.ones(4, dtype=np.int64))[4]
            assert_same(expected, got, f"step {t} infos")
            general += t >= 1 and "_k0" in expected and not expected["_k0"].all()
    finally:
        ours.close()
        sync.close()
    assert (general > 0) == (every == 2), general  # each path was taken
    assert calls[0] == general, calls


class SlowInfoEnv(InfoEnv):
    """InfoEnv whose steps take ``delay`` seconds: makes its worker answer last."""

    def __init__(self, env: int, schema: list[tuple[str, str, int, int, str]], length: int,
                 delay: float) -> None:
        super().__init__(env, schema, length)
        self.delay = delay

    def step(self, action: Any) -> Any:
        time.sleep(self.delay)
        return super().step(action)


@pytest.mark.parametrize("slow_worker", [0, 1])
def test_vector_infos_equal_sync_vector_env_whichever_worker_answers_first(
        slow_worker: int) -> None:
    """Every env has every key at every step (the common step, whose columns are joined whole):
    the values land in their envs' rows whichever worker's columns arrive first."""
    schema = [("f", "float", 1, 0, "both"), ("v", "vec_f4", 1, 0, "step"),
              ("i", "int", 1, 0, "both")]
    fns = [functools.partial(SlowInfoEnv, i, schema, 3, 0.02 if i // 3 == slow_worker else 0.0)
           for i in range(6)]
    sync = gym.vector.SyncVectorEnv(fns)
    ours = vecsample.VectorEnv(fns, num_workers=2, context="fork")
    try:
        assert_same(sync.reset(seed=0)[1], ours.reset(seed=0)[1], "reset infos")
        for t in range(8):
            actions = np.ones(6, dtype=np.int64)
            assert_same(sync.step(actions)[4], ours.step(actions)[4], f"step {t} infos")
    finally:
        ours.close()
        sync.close()


def test_sampler_infos_are_the_envs_own_values(make_sampler) -> None:
    """VecSampler's per-env dicts: the same values and types the env returned, after the
    schema learned the keys (the first steps travel pickled, later ones in columns)."""
    schema = [("f", "float", 1, 0, "step"), ("v", "vec_f4", 1, 0, "step"),
              ("s", "str", 1, 0, "step"), ("m", "mixed", 1, 0, "step"),
              ("r", "i16", 1, 0, "reset")]
    fns = [functools.partial(InfoEnv, i, schema, 3) for i in range(4)]
    local = [fn() for fn in fns]
    s = make_sampler(fns, num_workers=2)
    s.reset(seed=0)
    for env in local:
        env.reset(seed=0)
    for t in range(8):
        r = s.step(np.ones(4, dtype=np.int64), copy=True)
        for i, env in enumerate(local):
            _, _, term, trunc, info = env.step(1)
            assert_same(info, r.infos.get(i, {}), f"step {t} env {i}")
            if term or trunc:
                assert_same(env.reset()[1], r.reset_infos.get(i, {}), f"reset {t} env {i}")


def test_infos_read_later_keep_their_step_values(make_sampler) -> None:
    """The columns are copied on receipt: infos read after the next step are still this
    step's, though their shared-memory rows were overwritten."""
    schema = [("f", "float", 1, 0, "step")]
    s = make_sampler([functools.partial(InfoEnv, 0, schema, 50)], num_workers=1)
    s.reset(seed=0)
    firsts = [s.step(np.ones(1, dtype=np.int64)) for _ in range(4)]
    assert [r.infos[0]["f"] for r in firsts] == [2.25, 3.25, 4.25, 5.25]


# --- restarts: the respawned worker's infos join the columns of the others ----------------------



class _Gymnasium(gym.vector.VectorEnv[Any, Any, Any]):
    """Only for gymnasium's own ``_add_info``."""

    def __init__(self, num_envs: int) -> None:
        self.num_envs = num_envs


def _kill_mid_run(step: Callable[[], Any], pids: Callable[[], list[int]]) -> None:
    """Two steps (the numeric keys have columns from the second on), then worker 1 SIGKILLed."""
    step()
    step()
    kill_and_wait(pids()[1])


def _key_names(blocks: list[Any]) -> set[str]:
    return {column.key for _, columns in blocks for column, _, _ in columns}


@posix_only
def test_a_restart_leaves_the_infos_columnar(make_sampler) -> None:
    """Worker 0's numeric infos stay columns; the restarted envs' restart_reason and reset
    infos ride beside them as per-env leftovers (they were a rebuilt dict before issue 23)."""
    s = make_sampler(fns(CountingEnv, 4, length=10, info=True), num_workers=2, restart=True,
                     context="fork")
    s.reset(seed=0)
    _kill_mid_run(lambda: s.step(np.ones(4, dtype=np.int64)), s.worker_pids)
    r = s.step(np.ones(4, dtype=np.int64), copy=True)
    assert r.restarted.tolist() == [False, False, True, True]
    step, reset = r.infos.columnar(), r.reset_infos.columnar()
    assert step is not None and reset is not None, "the restart rebuilt the infos env by env"
    assert _key_names(step[0]) == {"t", "noise"} and not reset[0]
    assert step[1] == {e: {"restart_reason": "died with exit code -9"} for e in (2, 3)}
    assert reset[1] == {2: {"episode_index": 0}, 3: {"episode_index": 0}}


def _env_by_env(step: Any, reset: Any, mode: AutoresetMode, has_final: np.ndarray,
                final_obs: Callable[[int], Any]) -> dict[str, Any]:
    """gymnasium's vector infos built env by env with its own ``_add_info``, from the per-env
    dicts of the step and of its resets, as SyncVectorEnv would in ``mode``."""
    add_info = _Gymnasium(len(has_final))._add_info
    infos: dict[str, Any] = {}
    for i in range(len(has_final)):
        info = step.get(i, {})
        if mode is AutoresetMode.SAME_STEP and has_final[i]:
            info = {**reset.get(i, {}), "final_obs": final_obs(i), "final_info": info}
        elif mode is AutoresetMode.NEXT_STEP and i in reset:
            info = reset[i]
        infos = add_info(infos, info, i)
    return infos


@posix_only
@pytest.mark.parametrize("mode", list(AutoresetMode))
def test_restart_step_infos_equal_gymnasium_env_by_env(make_vector_env, monkeypatch,
                                                       mode: AutoresetMode) -> None:
    """The step that returns a restarted worker: the vector infos equal gymnasium's own, built
    env by env from the same per-env dicts (numeric keys, restart_reason, reset infos, and in
    SAME_STEP the final infos of envs 0 and 1, which end in that very step)."""
    env = make_vector_env(fns(CountingEnv, 4, length=3, info=True), num_workers=2,
                          autoreset_mode=mode.value, restart=True, context="fork")
    seen: list[dict[str, Any]] = []
    build = vector_infos.build

    def spy(step: Any, reset: Any, mode: Any, has_final: Any, final_obs: Any,
            add_info: Any) -> Any:
        seen.append(_env_by_env(dict(step), dict(reset), mode, has_final.copy(), final_obs))
        return build(step, reset, mode, has_final, final_obs, add_info)

    monkeypatch.setattr(vector_infos, "build", spy)
    env.reset(seed=0)
    _kill_mid_run(lambda: env.step(np.ones(4, dtype=np.int64)), env.sampler.worker_pids)
    seen.clear()
    *_, truncated, infos = env.step(np.ones(4, dtype=np.int64))
    assert truncated[2:].all() and len(seen) == 1  # built once, at the step
    assert type(infos) is dict  # the plain dict gymnasium's own vector envs return
    assert_same(seen[-1], infos, f"{mode.value} restart step")
    shown = "episode_index" if mode is AutoresetMode.NEXT_STEP else "restart_reason"
    ended = infos["final_info"] if mode is AutoresetMode.SAME_STEP else infos  # envs 0 and 1
    assert infos[f"_{shown}"][2:].all() and ended["_t"][:2].all()


def test_an_info_map_set_by_hand_is_built_like_gymnasium_env_by_env() -> None:
    """An item set by hand turns the map into per-env leftovers, which the one builder reads
    (an int where the column held floats: the first env's float sets the dtype)."""
    column = Column(0, "a", float, "<f8", (), MASK_BYTES)
    step = InfoMap()
    step.add((0, [(column, np.array([1.5, 0.0, 2.5]), np.array([True, False, True]))]), {})
    step[1] = {"a": 7, "s": "hand"}
    none = np.zeros(3, dtype=bool)
    got = vector_infos.build(step, InfoMap(), AutoresetMode.DISABLED, none, lambda i: None,
                             _Gymnasium(3)._add_info)
    expected = _env_by_env(dict(step), {}, AutoresetMode.DISABLED, none, lambda i: None)
    assert_same(expected, got)
    assert got["a"].tolist() == [1.5, 7.0, 2.5] and got["_s"].tolist() == [False, True, False]
