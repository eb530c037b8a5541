import re

import pytest

from hpcgc import config
from hpcgc.errors import ConfigError


def test_design_example_file_parses(tmp_path):
    """The experiment file of DESIGN.md, verbatim keys, must keep working."""
    p = tmp_path / "x.toml"
    p.write_text('''name = "diana-vs-dcgd-a9a"
[data]
dataset   = "libsvm:../shared/data/libsvm/a9a"
partition = "label-sorted"
[problem]
kind = "logreg"
l2   = 1e-3
l1   = 0.0
[run]
algorithm   = "diana"
compressor  = "qsgd:s=4"
allocation  = "uniform"
budget      = 0.1
iterations  = 1000
step_multiplier = 1.0
seed        = 0
eval_every  = 10
tolerance   = 1e-10
[sweep]
algorithm  = ["dcgd", "diana"]
compressor = ["quant:p=inf,block=32", "randk:k=10"]
''')
    cfg = config.load_file(str(p))
    runs = config.expand(cfg)
    assert len(runs) == 4
    assert [(r["run"]["algorithm"], r["run"]["compressor"]) for r in runs][:2] == [
        ("dcgd", "quant:p=inf,block=32"), ("dcgd", "randk:k=10")]
    assert all(r["problem"]["l2"] == 1e-3 and "sweep" not in r for r in runs)


def test_set_overrides_and_wins_over_sweep():
    cfg = config.default_experiment()
    config.apply_overrides(cfg, ["run.algorithm=diana", "problem.l2=0.5", "run.iterations=7",
                                 "data.dataset=libsvm:/x/y", "sweep.seed=[1, 2]", "name=abc"])
    runs = config.expand(cfg)
    assert {r["run"]["algorithm"] for r in runs} == {"diana"}
    assert len(runs) == 3 * 2 and {r["run"]["seed"] for r in runs} == {1, 2}
    assert runs[0]["problem"]["l2"] == 0.5 and runs[0]["run"]["iterations"] == 7 and runs[0]["name"] == "abc"


@pytest.mark.parametrize("item,needle", [
    ("run.iterations=ten", "run.iterations"),
    ("run.iterations=0", "run.iterations"),
    ("run.iterations=1.5", "run.iterations"),
    ("problem.l2=-1", "problem.l2"),
    ("run.stepsize=1", "run.stepsize"),
    ("bogus=1", "bogus"),
    ("run.server=remote", "run.server"),
    ("sweep.algorithm=diana", "sweep.algorithm"),
    ("noequals", "--set"),
])
def test_bad_values_name_the_key(item, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        config.apply_overrides(config.default_experiment(), [item])


def test_run_wait_takes_three_values_and_names_them_when_wrong(tmp_path):
    """run.wait: "spin" by default, "auto" or "yield"; anything else is one ConfigError naming the key,
    the choices and the value — from --set, from a file and as a sweep value."""
    cfg = config.default_experiment()
    assert cfg["run"]["wait"] == "spin"
    for ok in ("spin", "yield", "auto"):
        config.apply_overrides(cfg, [f"run.wait={ok}"])
        assert cfg["run"]["wait"] == ok
    msg = "run.wait: must be one of auto, spin, yield; got 'sleep'"
    with pytest.raises(ConfigError, match=re.escape(msg)):
        config.apply_overrides(config.default_experiment(), ["run.wait=sleep"])
    f = tmp_path / "e.toml"
    f.write_text('[run]\nwait = "sleep"\n')
    with pytest.raises(ConfigError, match=re.escape(msg)):
        config.load_file(str(f))
    with pytest.raises(ConfigError, match="run.wait"):
        config.expand(config.apply_overrides(config.default_experiment(), ['sweep.wait=["spin", "poll"]']))


def test_unknown_section_and_key_in_file(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text("[runs]\nalgorithm = 'diana'\n")
    with pytest.raises(ConfigError, match="runs"):
        config.load_file(str(p))
    p.write_text("[data]\ndatset = 'a9a'\n")
    with pytest.raises(ConfigError, match="data.datset"):
        config.load_file(str(p))
    p.write_text("[data\n")
    with pytest.raises(ConfigError, match="invalid TOML"):
        config.load_file(str(p))


def test_resolved_config_round_trips_through_toml():
    for run in config.expand(config.default_experiment()):
        assert config.tomllib.loads(config.to_toml(run)) == run


def test_variants_times_sweep_and_set_wins(tmp_path):
    p = tmp_path / "v.toml"
    p.write_text('''name = "v"
[run]
algorithm = "local-sgd"
[[variant]]
label = "uniform top-k"
run.allocation = "uniform"
run.compressor = "topk:k=1"
run.budget = 0.1
[[variant]]
label = "DAGC-A"
[variant.run]
allocation = "dagc-a"
compressor = "threshold:lam=0.01"
budget = 0.002
[sweep]
seed = [0, 1, 2]
''')
    cfg = config.load_file(str(p))
    runs = config.expand(cfg)
    assert len(runs) == 2 * 3
    assert [(r["run"]["allocation"], r["run"]["budget"], r["run"]["seed"]) for r in runs[2:4]] == [
        ("uniform", 0.1, 2), ("dagc-a", 0.002, 0)]
    config.apply_overrides(cfg, ["run.budget=0.5"])
    assert {r["run"]["budget"] for r in config.expand(cfg)} == {0.5}
    p.write_text('[[variant]]\nrun.budgt = 1\n')
    with pytest.raises(ConfigError, match="run.budgt"):
        config.load_file(str(p))


def test_every_bad_key_is_reported_at_once(tmp_path):
    p = tmp_path / "x.toml"
    p.write_text('[run]\nalgorithmm = "diana"\niterations = "many"\n[problem]\nl3 = 1\n')
    with pytest.raises(ConfigError) as exc:
        config.load_file(str(p))
    lines = str(exc.value).splitlines()
    assert len(lines) == 3 and "algorithmm" in lines[0] and "run.iterations" in lines[1] and "l3" in lines[2], lines
    problems = []
    cfg = config.load_file(str(p), problems)
    config.apply_overrides(cfg, ["run.seed=x", "nokey=1", "run.seed=3"], problems)
    assert len(problems) == 5 and cfg["run"]["seed"] == 3, problems
