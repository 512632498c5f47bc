"""``Options`` (vecsample/options.py): every option written once, checked once, with one meaning
in every public constructor; the replay header built from it (docs/semantics.md, "Options")."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from vecsample import AutoresetMode, Options, VecSampler, VectorEnv, errors
from vecsample._parent.layout import Layout
from vecsample._parent.replay import header
from vecsample._wire.replay_log import MAGIC
from vecsample.factories import Envs
from vecsample.options import MAX_SPIN_US, NAMES
from vecsample.testing import CountingEnv, fns

#: One bad value per field, and a piece of what the error must say was expected.
BAD: dict[str, tuple[Any, str]] = {
    "num_workers": (0, "an int >= 1"),
    "seed": (-1, "None or an int >= 0"),
    "autoreset_mode": ("Sometimes", "one of ['NextStep', 'SameStep', 'Disabled']"),
    "infos": ("yes", "True or False"),
    "context": ("telepathy", "'auto' or one of"),
    "deadline": (-1, "None or a number of seconds >= 0"),
    "startup_deadline": ("soon", "None or a number of seconds >= 0"),
    "threads_per_worker": (0, "an int >= 1"),
    "cpu_affinity": ([[0], [-1]], "core lists of ints >= 0"),
    "check_actions": (1, "True or False"),
    "restart": (None, "True or False"),
    "max_restarts": (-1, "an int >= 0"),
    "spin_us": (float("inf"), "a number of microseconds from 0 to 10000"),
    "uneven_split": ("no", "True or False"),
    "pipeline": (1, "True or False"),
    "record": (3, "None or a file path"),
    "replay": (b"run.log", "None or a file path"),
    "handshake": ("fast", "one of ['auto', 'native', 'python']"),
    "env_placement": ("cloud", "one of ['workers', 'share', 'parent', 'auto']"),
}


def test_the_defaults():
    o = Options()
    assert (o.num_workers, o.seed, o.autoreset_mode, o.infos, o.context) == (
        1, None, AutoresetMode.SAME_STEP, True, "auto")
    assert (o.deadline, o.startup_deadline, o.threads_per_worker, o.cpu_affinity) == (
        300.0, 120.0, 1, None)
    assert (o.check_actions, o.restart, o.max_restarts, o.spin_us) == (True, False, 3, None)
    assert (o.uneven_split, o.pipeline, o.record, o.replay) == (False, False, None, None)
    assert o.handshake == "auto" and o.env_placement == "workers"


def test_every_field_has_a_docstring_in_the_source():
    source = Path(Options.__module__.replace(".", "/") + ".py")
    tree = ast.parse((Path(__file__).resolve().parents[1] / source).read_text())
    body = next(node.body for node in tree.body
                if isinstance(node, ast.ClassDef) and node.name == "Options")
    documented = {stmt.target.id for stmt, after in itertools.pairwise(body)
                  if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                  and isinstance(after, ast.Expr) and isinstance(after.value, ast.Constant)
                  and isinstance(after.value.value, str)}
    assert set(NAMES) <= documented, f"no docstring under {sorted(set(NAMES) - documented)}"


def test_every_field_is_checked():
    assert set(BAD) == set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_a_bad_value_says_what_was_expected_what_came_and_how_to_fix_it(name):
    value, expected = BAD[name]
    with pytest.raises(errors.ConfigError) as info:
        Options(**{name: value})
    error = info.value
    assert error.name == name and expected in error.expected and error.got == value
    message = str(error)
    assert message.startswith(f"{name} must be {error.expected}, got {value!r}; ")
    assert len(message.split("; ", 1)[1]) > 10  # the fix


def test_values_are_normalised():
    o = Options(autoreset_mode="NextStep", deadline=float("inf"), cpu_affinity=[[0], [1, 2]],
                num_workers=2, infos=np.bool_(False), record=Path("run.log"))
    assert o.autoreset_mode is AutoresetMode.NEXT_STEP and o.deadline is None
    assert o.cpu_affinity == ((0,), (1, 2)) and o.infos is False
    assert Options(autoreset_mode=gym.vector.AutoresetMode.DISABLED).autoreset_mode is (
        AutoresetMode.DISABLED)
    assert hash(o) == hash(dataclasses.replace(o))  # frozen, and hashable once normalised


def test_checks_across_two_fields():
    with pytest.raises(errors.ConfigError, match="one core list per worker"):
        Options(num_workers=3, cpu_affinity=[[0], [1]])
    with pytest.raises(errors.ConfigError, match="pass one of them"):
        Options(record="a.log", replay="b.log")


def test_the_spin_is_bounded_and_the_error_names_the_bound():
    """Issue 33, item 5: spin_us=2e6 made every reset() wait 2 s, and spin_us=1e12 with
    deadline=None never returned (a worker spun 11 days before it read its pipe)."""
    assert Options(spin_us=MAX_SPIN_US).spin_us == MAX_SPIN_US == 10_000.0
    for value in (10_000.5, 2e6, 1e12):
        with pytest.raises(errors.ConfigError, match=r"^spin_us must be None or a number of "
                           r"microseconds from 0 to 10000 \(10 ms\), got"):
            Options(spin_us=value)


def test_replace_makes_a_checked_copy_and_names_the_closest_field():
    o = Options(num_workers=2)
    changed = o.replace(seed=3, deadline=5)
    assert (changed.num_workers, changed.seed, changed.deadline) == (2, 3, 5.0)
    assert o.seed is None  # the original is unchanged
    with pytest.raises(errors.ConfigError, match="an int >= 1"):
        o.replace(num_workers=0)
    with pytest.raises(errors.ConfigError,
                       match="got 'deadlin'; the closest field is 'deadline'"):
        o.replace(deadlin=5)
    with pytest.raises(errors.ConfigError, match="the fields are num_workers, seed"):
        o.replace(zzz=5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.seed = 3  # type: ignore[misc]


def test_the_sampler_takes_options_once_and_shows_them(make_sampler):
    s = make_sampler(fns(CountingEnv, 4), options=Options(num_workers=2, seed=1), seed=7,
                     deadline=float("inf"))
    assert s.options == Options(num_workers=2, seed=7, deadline=None)
    shown = str(s.options)
    for name in NAMES:
        assert f"{name}=" in shown
    assert "seed=7" in shown and "deadline=None" in shown
    with pytest.raises(AttributeError):
        s.options = Options()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        s.num_workers = 3  # type: ignore[misc]
    with pytest.raises(errors.ConfigError, match="the closest field is 'num_workers'"):
        make_sampler(fns(CountingEnv, 4), num_worker=2)
    with pytest.raises(errors.ConfigError, match=r"a vecsample\.Options or None"):
        make_sampler(fns(CountingEnv, 4), options={"num_workers": 2})


@pytest.mark.parametrize("pipeline", [False, True])
def test_num_workers_and_num_slots(make_sampler, pipeline):
    s = make_sampler(fns(CountingEnv, 8), num_workers=2, pipeline=pipeline, deadline=10)
    k = 2 if pipeline else 1
    assert s.num_workers == s.options.num_workers == 2  # processes, as given
    assert (s.num_slots, s.envs_per_worker, s.envs_per_slot) == (2 * k, 4, 4 // k)
    assert len(set(s.worker_pids())) == 2 and len(s.worker_pids()) == s.num_slots
    s.reset()
    for w in range(s.num_slots):
        s.step_send(w, np.ones(s.envs_per_slot, dtype=np.int64))
    assert sorted(r.worker for r in s.step_recv(None)) == list(range(s.num_slots))
    assert "2 workers x 4 envs" in repr(s)


# --- the same names, the same errors, in every public constructor -------------------------------


def _vec_sampler(name: str, value: Any) -> Any:
    return VecSampler(fns(CountingEnv, 2), **{name: value})


def _vector_env(name: str, value: Any) -> Any:
    if name == "num_workers":  # its second positional argument, as AsyncVectorEnv's place
        return VectorEnv(fns(CountingEnv, 2), value)
    return VectorEnv(fns(CountingEnv, 2), **{name: value})


def _sb3(name: str, value: Any) -> Any:
    sb3 = pytest.importorskip("vecsample.sb3")
    return sb3.VecEnv(fns(CountingEnv, 2), **{name: value})


def _maml(name: str, value: Any) -> Any:
    maml = pytest.importorskip("vecsample.maml")
    positional = {"seed": 6, "num_workers": 7}
    args: list[Any] = ["TabularMDP-v0", {}, 1, None, None, None, None, 1]
    if name in positional:
        args[positional[name]] = value
        return maml.MultiTaskSampler(*args)
    return maml.MultiTaskSampler(*args, **{name: value})


def _ray(name: str, value: Any) -> Any:
    ray_sampler = pytest.importorskip("vecsample.ray")
    from vecsample.testing import FixedActionPolicy

    # The Options fields by keyword, as for every constructor.
    return ray_sampler.RaySampler("CartPole-v1", FixedActionPolicy, num_envs=2,
                                  **{name: value})


CONSTRUCTORS: dict[str, Callable[[str, Any], Any]] = {
    "VecSampler": _vec_sampler, "VectorEnv": _vector_env, "sb3.VecEnv": _sb3,
    "MultiTaskSampler": _maml, "RaySampler": _ray,
}
#: Values that fail before any process starts (and, for RaySampler, before Ray starts).
SAME_ERRORS = [("deadline", -1), ("seed", -1), ("num_workers", 0), ("context", "telepathy")]


@pytest.mark.parametrize(("name", "value"), SAME_ERRORS)
def test_the_same_bad_value_is_the_same_error_everywhere(name, value):
    with pytest.raises(errors.ConfigError) as reference:
        Options(**{name: value})
    for constructor, build in CONSTRUCTORS.items():
        with pytest.raises(errors.ConfigError) as info:
            build(name, value)
        assert str(info.value) == str(reference.value), constructor


def test_an_unknown_option_is_the_same_error_everywhere():
    with pytest.raises(errors.ConfigError) as reference:
        Options().replace(restarts=True)
    assert "the closest field is 'restart'" in str(reference.value)
    with pytest.raises(errors.ConfigError) as constructed:  # issue 33, item 7: a TypeError was
        Options(restarts=True)  # type: ignore[call-arg]  # raised here, naming no field
    assert str(constructed.value) == str(reference.value)
    with pytest.raises(errors.ConfigError, match="got 'num_worker'; the closest field is "
                       "'num_workers'"):
        Options(num_worker=2)  # type: ignore[call-arg]
    for constructor, build in CONSTRUCTORS.items():
        if constructor == "MultiTaskSampler":
            continue  # pytorch-maml-rl's signature: no keywords beyond its own and options=
        with pytest.raises(errors.ConfigError) as info:
            build("restarts", True)
        assert str(info.value) == str(reference.value), constructor


def test_the_adapters_own_defaults_yield_to_options(make_vector_env):
    plain = make_vector_env(fns(CountingEnv, 3), 2, options=Options(deadline=7))
    assert plain.sampler.options.autoreset_mode is AutoresetMode.NEXT_STEP  # gymnasium's
    assert plain.sampler.options.uneven_split and plain.sampler.options.deadline == 7
    chosen = make_vector_env(fns(CountingEnv, 4), options=Options(
        autoreset_mode="Disabled", num_workers=2), deadline=3)
    assert chosen.sampler.options.autoreset_mode is AutoresetMode.DISABLED
    assert (chosen.sampler.num_workers, chosen.sampler.options.deadline) == (2, 3)
    with pytest.raises(errors.ConfigError, match=r"infos must be True on vecsample\.VectorEnv"):
        VectorEnv(fns(CountingEnv, 2), options=Options(infos=False))


def test_options_note_which_fields_were_given_whatever_their_value():
    assert Options().given == frozenset()
    assert Options(2, seed=0).given == {"num_workers", "seed"}
    same = Options(autoreset_mode="SameStep")  # the default value, given
    assert same == Options() and same.given == {"autoreset_mode"}
    assert same.replace(deadline=3).given == {"autoreset_mode", "deadline"}


def test_given_keeps_the_dataclass_signature_and_travels_with_the_options():
    """``given`` is noted before the dataclass's own ``__init__`` runs, so ``help(Options)``
    shows the fields; a pickled copy (an actor's, a worker's) keeps it."""
    assert tuple(inspect.signature(Options).parameters) == NAMES
    options = Options(2, infos=False)
    assert pickle.loads(pickle.dumps(options)).given == {"num_workers", "infos"}
    with pytest.raises(errors.ConfigError, match="the closest field is 'num_workers'"):
        Options(num_workrs=2)


def test_every_field_carries_its_check():
    """The check of each option sits in its field's metadata, beside its default."""
    for f in dataclasses.fields(Options):
        assert callable(f.metadata["check"]) and isinstance(f.metadata["tuning"], bool), f.name


@pytest.mark.parametrize("mode", ["SameStep", "Disabled", "NextStep"])
def test_an_adapter_never_overrides_a_value_the_user_set(make_vector_env, mode):
    """SameStep is Options' default: VectorEnv used to take it for unset and run NextStep."""
    env = make_vector_env(fns(CountingEnv, 2), 1, options=Options(autoreset_mode=mode))
    assert env.sampler.options.autoreset_mode is AutoresetMode(mode)
    assert env.autoreset_mode.value == mode


def test_vector_env_keyword_counts_as_given_when_passed(make_vector_env):
    """An explicit keyword wins over ``options``, even when it names the adapter's default."""
    for mode in ("SameStep", "Disabled"):
        env = make_vector_env(fns(CountingEnv, 2), 1, options=Options(autoreset_mode=mode),
                              autoreset_mode="NextStep")  # gymnasium's default, passed
        assert env.sampler.options.autoreset_mode is AutoresetMode.NEXT_STEP


def test_multitasksampler_takes_options_and_refuses_what_it_sets():
    maml = pytest.importorskip("vecsample.maml")
    args = ["TabularMDP-v0", {}, 1, None, None]
    with maml.MultiTaskSampler(*args, seed=3, num_workers=2,
                               options=Options(restart=True, deadline=9)) as sampler:
        o = sampler.options
        assert (o.seed, o.num_workers, o.restart, o.deadline) == (3, 2, True, 9.0)
        assert o.autoreset_mode is AutoresetMode.DISABLED and not o.check_actions
        assert (sampler.num_workers, sampler.deadline) == (2, 9.0)
    with pytest.raises(errors.ConfigError, match="pipeline must be False on MultiTaskSampler"):
        maml.MultiTaskSampler(*args, options=Options(pipeline=True))


# --- the replay header is built from the options ------------------------------------------------


def _header(**options: Any) -> dict[str, Any]:
    return header(Layout.build(Envs.of(fns(CountingEnv, 4)), Options(**options)))


def test_the_replay_header_holds_every_option_that_decides_what_is_sampled():
    base = _header(num_workers=2)
    assert set(Options().identity()) <= set(base)
    for name, value in [("num_workers", 4), ("seed", 1), ("autoreset_mode", "NextStep"),
                        ("infos", False), ("restart", True), ("max_restarts", 5),
                        ("uneven_split", True), ("pipeline", True)]:
        assert _header(**{"num_workers": 2, name: value}) != base, name
    for name, value in [("deadline", 1), ("context", "spawn"), ("spin_us", 0),
                        ("threads_per_worker", None), ("check_actions", False)]:
        assert _header(**{"num_workers": 2, name: value}) == base, name  # how, not what


@pytest.fixture
def recorded(tmp_path: Path) -> Path:
    log = tmp_path / "run.vsreplay"
    with VecSampler(fns(CountingEnv, 4), num_workers=2, seed=1, record=log) as s:
        s.reset()
        s.step(np.ones(4, dtype=np.int64))
    return log  # complete: the with block closed the sampler


def test_a_log_recorded_with_other_options_is_refused(make_sampler, recorded):
    with pytest.raises(errors.ReplayDivergedError, match="max_restarts=5"):
        make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, max_restarts=5,
                     replay=recorded)
    s = make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, deadline=30, replay=recorded)
    s.reset()  # a tuning option (the deadline) may differ
    assert s.step(np.ones(4, dtype=np.int64)).obs[0, 1] == 1


def test_a_log_of_the_older_format_is_refused_with_what_to_do(make_sampler, recorded):
    data = bytearray(recorded.read_bytes())
    data[len(MAGIC)] = 1  # format version 1: a header without every option
    recorded.write_bytes(bytes(data))
    with pytest.raises(errors.ReplayDivergedError, match=r"format version 1.*record the run again"):
        make_sampler(fns(CountingEnv, 4), num_workers=2, seed=1, replay=recorded)
