"""The method registry (dpdist.methods): every name builds its estimator, and every front end
(the run config, the plan, the pipelines, the estimators) accepts exactly the registry's names."""

from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

from dpdist import methods
from dpdist.exceptions import ParameterError
from dpdist.methods import KINDS, REGISTRY, get, names


@pytest.mark.parametrize("name", list(REGISTRY))
@pytest.mark.parametrize("task", ["binary", "regression"])
def test_every_name_builds_its_estimator_with_its_defaults(name: str, task: str) -> None:
    entry = get(name)
    if task not in entry.tasks:  # a method for one task only refuses the other, naming it
        with pytest.raises(ParameterError, match=f"no estimator for a {task} task"):
            entry.build(task)
        return
    model = entry.build(task)
    params = model.get_params()
    for key, value in entry.defaults.items():
        assert params[key] == value, (name, key)
    assert callable(getattr(model, "privacy_charge", None))
    taken = set(inspect.signature(type(model)).parameters)
    for p in entry.params:
        assert p.target in taken, (name, p.name)  # each public parameter sets an estimator parameter
    assert entry.kind in KINDS and entry.name == name


def test_names_are_unique_and_lookups_refuse_unknown_names() -> None:
    assert len(set(REGISTRY)) == len(REGISTRY) == len(names())
    assert set(names()) == set().union(*(names(k) for k in KINDS))
    with pytest.raises(ParameterError, match="unknown method 'nope'"):
        get("nope")
    with pytest.raises(ValueError, match="kind must be one of"):
        names("learners")


def test_the_run_config_accepts_the_registry_names() -> None:
    from dpdist.flows import config

    assert set(config.SELECT_METHODS) == set(names(("selection", "best-subset"), front_end="run"))
    assert set(config.TRAIN_METHODS) == set(names(("learner", "screening"), front_end="run"))
    assert set(config.BSS_METHODS) == set(names("best-subset"))
    assert set(config.SCREEN_METHODS) == set(names("screening"))
    assert config.GRADIENT_METHODS == methods.GRADIENT_METHODS  # one meaning everywhere
    assert set(names(counted=True)) == {methods.SEARCH, *methods.GRADIENT_METHODS}  # they take a public count
    assert set(config.FW_METHODS) == {n for n in names() if get(n).family == "frank-wolfe" and get(n).private}
    # everything the run config accepts is private; the non-private baselines are the CLI's only
    assert all(get(n).private for n in config.SELECT_METHODS + config.TRAIN_METHODS)


def test_the_estimators_agree_with_the_registry() -> None:
    from sklearn.base import is_classifier, is_regressor

    from dpdist.gradient_models import GradientModel
    from dpdist.linear_model import METHODS, PRIVATE

    assert set(METHODS) == set(names("learner", family="frank-wolfe"))
    assert set(PRIVATE) == set(names("learner", family="frank-wolfe", private=True))
    assert {n: get(n).defaults["screening"] for n in names("screening")} == {"rnm-screen": "rnm", "adp-screen": "adp"}
    for name in methods.GRADIENT_METHODS:
        clf, reg = get(name).estimator_class("binary"), get(name).estimator_class("regression")
        assert issubclass(clf, GradientModel) and issubclass(reg, GradientModel)
        assert is_classifier(clf()) and is_regressor(reg())


def test_the_plan_charges_every_run_method(tmp_path) -> None:
    from dpdist.flows.config import load_config
    from dpdist.flows.plan import plan

    cfg = load_config(
        None,
        {
            "output": str(tmp_path),
            # k = 120 selected features: wide enough for select-train's k = 100 (the plan refuses a narrower one)
            "select": {"methods": list(names(("selection", "best-subset"), front_end="run")), "k": 120},
            "train": {
                "methods": list(names(("learner", "screening"), front_end="run")),
                "features": "dp-sis",
                "screen_epsilon": 0.5,
                "screen_delta": 1e-7,
                "n_max": 200_000,
            },
        },
    )
    steps = plan(cfg)
    assert {p.method for p in steps if p.step == "select"} == set(cfg.select.methods)
    assert {p.key_method for p in steps if p.step == "train"} == set(cfg.train.methods)


def test_one_value_for_each_default() -> None:
    """The main job's values (flows/defaults.toml), the run config's, and the estimators' agree."""
    import tomllib
    from importlib import resources

    from dpdist.flows.config import SelectConfig, TrainConfig
    from dpdist.linear_model import DPFrankWolfeClassifier, DPFrankWolfeRegressor
    from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector

    main = tomllib.loads(resources.files("dpdist.flows").joinpath("defaults.toml").read_text())["train"]
    assert (TrainConfig.lam, TrainConfig.iters) == (main["lam"], main["iters"]) == (methods.FW_LAM, methods.FW_ITERS)
    for cls in (DPFrankWolfeClassifier, DPFrankWolfeRegressor):
        assert (cls().lam, cls().max_iter) == (methods.FW_LAM, methods.FW_ITERS)
    assert SelectConfig.bss_ridge is None
    for cls in (BSSTopRSelector, BSSMistakesSelector):
        assert cls(loss="squared").ridge_value() == 120.0 and cls(loss="hinge").ridge_value() == 100.0
        assert cls(loss="hinge", ridge=7.0).ridge_value() == 7.0


def test_importing_the_registry_stays_light() -> None:
    heavy = ("sklearn", "numba", "dpdist.linear_model", "dpdist.gradient_models", "dpdist.selection", "dpdist.tuning")
    code = f"import sys, dpdist.methods; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_every_config_key_is_documented_in_the_generated_reference() -> None:
    import dataclasses
    import typing

    from dpdist.flows.config import RunConfig, config_reference

    text = config_reference()
    for top in dataclasses.fields(RunConfig):
        kind = typing.get_type_hints(RunConfig)[top.name]
        fields = dataclasses.fields(kind) if dataclasses.is_dataclass(kind) else [top]
        for f in fields:
            if f.name != "source_file":
                assert f.metadata.get("help"), f"{top.name}.{f.name} has no help"
                assert f"| `{f.name}` |" in text
    for name in names(front_end="run"):
        assert f"| `{name}` |" in text
    assert "| `lam` | `float` | `500.0` |" in text  # the main job's default (flows/defaults.toml)


def _method_choices(command: str) -> tuple[str, ...]:
    import argparse

    from dpdist.cli import build_parser

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices[command]._actions if a.dest == "method")
    return tuple(action.choices or ())


def test_the_cli_accepts_the_registry_names() -> None:
    assert set(_method_choices("select")) == set(names(("selection", "best-subset"), front_end="cli"))
    assert set(_method_choices("train")) == set(names(("learner", "screening"), front_end="cli"))
    # the run config's names are the CLI's, but for the private search (`--tune`) and objective
    # perturbation (`select --stage2`) there, and the non-private baselines and the one-task learners
    # (a run reaches those through auto's rule) here
    cli = set(_method_choices("select") + _method_choices("train"))
    run = set(names(front_end="run"))
    assert run - cli == {"private-search", "objective-perturbation"}
    assert set(names(private=False)) == {"fw", "fast-fw"}
    assert cli - run == {"fw", "fast-fw", "adassp", "screened-centroid"}


def test_the_cli_options_a_method_takes_come_from_its_entry(tmp_path) -> None:
    """``train --k`` sets the entry's ``sparsity`` parameter and is refused by a learner without one;
    ``select --delta`` is required by a method whose entry takes a delta and refused by the others."""
    import argparse

    import numpy as np
    import scipy.sparse as sp

    from dpdist.cli.select import _bss_selector
    from dpdist.cli.select import _plan as select_plan
    from dpdist.cli.train_gradient import _gradient_learner, _plan
    from dpdist.data.store import open_store, write_store

    write_store(
        tmp_path / "s", sp.csr_matrix(np.eye(4)), np.array([1.0, -1.0, 1.0, -1.0]), task="binary", labels=[-1, 1]
    )
    store = open_store(tmp_path / "s")
    base = dict(epsilon=1.0, delta=1e-6, n_records=100, count_epsilon=0.01, seed=None, features=None, k=3)
    base.update(test_fraction=0.0, eval_epsilon=0.1)
    for name in names("learner"):
        entry = get(name)
        if entry.family != "gradient":
            continue
        if entry.sparsity is None:
            with pytest.raises(ParameterError, match="--k is an option of"):
                args = argparse.Namespace(**base)
                _gradient_learner(args, store, "binary", name, _plan(args, entry, 1e-5))
        else:
            args = argparse.Namespace(**base)
            model, _ = _gradient_learner(args, store, "binary", name, _plan(args, entry, 1e-5))
            assert model.get_params()[entry.sparsity] == 3
    bss = dict(k=2, epsilon=1.0, loss="squared", r=1.0, ridge=None, x_bound=1.0, y_bound=1.0, clip=False, tol=0.01)
    bss.update(nonprivate_time_limit=None, time_limit=None, seed=None, ptr_fraction=0.5, stage2=None)
    for name in names("best-subset"):
        takes_delta = get(name).param("delta") is not None
        if takes_delta:
            with pytest.raises(ParameterError, match="--delta"):
                args = argparse.Namespace(**bss, method=name, delta=0.0)
                _bss_selector(args, select_plan(args, 1e-5))
        args = argparse.Namespace(**bss, method=name, delta=1e-6 if takes_delta else 0.0)
        assert _bss_selector(args, select_plan(args, 1e-5)) is not None
