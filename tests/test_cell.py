"""A cell's warmup rule, its MAL probe schedule, and its identity while settings are added to it."""
import hashlib
import json
import time

import pytest
from helpers import tiny_config

from merit_repro.plan.cell import CellConfig, identity, identity_text, load_cell_config
from merit_repro.plan.validate import validate

# What the mechanism experiment compares: 8x apart in batch, equal tokens (config/mechanism.yaml's setting).
SMALL, LARGE = (dict(block_size=64, tokens=2**21, batch_size=b) for b in (8, 64))


def identity_hash(cfg):
    return hashlib.sha256(json.dumps(identity(cfg), sort_keys=True).encode()).hexdigest()


def test_cells_that_set_none_of_the_new_keys_keep_their_identity():
    """Hashes of a cell's identity taken before warmup_steps, warmup_tokens and mal_probes existed: runs and
    checkpoints made then are still these cells' (the workflow's params and paths: see the report of issue 43)."""
    assert identity_hash(CellConfig()) == "691a992efd48aa51020d40f721310224fdf41087d418f63f604b39054f5eeda3"
    mechanism = CellConfig(warmup_frac=0.05, mal_every=8, batch_size=64, tokens=2**21, block_size=64)
    assert identity_hash(mechanism) == "7da1ad4b8627715ccd6c682634f346b5c1fffc93e964b6914c8ef103694988a1"
    assert CellConfig.from_dict(CellConfig().to_dict()).warmup_frac == 0.02   # a summary.json read back


def test_the_new_keys_set_are_part_of_the_identity():
    assert identity_hash(CellConfig(warmup_steps=10)) != identity_hash(CellConfig(warmup_tokens=10 * 32 * 128))
    assert identity_hash(CellConfig(mal_probes=64)) != identity_hash(CellConfig())
    assert identity(CellConfig(warmup_steps=10))["warmup_frac"] is None


def test_an_identity_does_not_depend_on_how_a_config_writes_the_cell():
    """Defaults written out (1 for 1.0 too), keys in another order, and settings of how a cell runs: one identity,
    one text; a setting that changes the result: another."""
    cell = {"model": "demo-tiny", "lr": 3e-3, "batch_size": 8, "tokens": 4096.0, "seed": 1}
    written = dict(reversed({**cell, "grad_clip": 1, "eps": 1e-6, "warmup_frac": None, "save_model": "bf16",
                             "compile": True, "micro_batch_size": 2, "data_dir": "elsewhere"}.items()))
    assert identity(written) == identity(cell) and identity_text(written) == identity_text(cell)
    assert identity_text({**cell, "tokens": 4096}) == identity_text(cell)
    assert identity_text({**cell, "grad_clip": 0.5}) != identity_text(cell)
    assert identity_text(CellConfig()) == json.dumps(identity(CellConfig()), sort_keys=True)


def test_a_share_of_the_steps_warms_up_a_large_batch_over_fewer_steps():
    """The review's numbers: 5% of the steps is 205 steps at batch 8 and 26 at batch 64."""
    assert [CellConfig(warmup_frac=0.05, **s).lr_warmup_steps for s in (SMALL, LARGE)] == [205, 26]


def test_the_steps_rule_warms_up_over_the_same_steps_at_every_batch():
    for setting in (SMALL, LARGE):
        cfg = CellConfig(lr=1e-3, warmup_steps=20, **setting).validate()
        assert cfg.lr_warmup_steps == 20
        assert cfg.lr_at(0) == pytest.approx(1e-3 / 20) and cfg.lr_at(19) == pytest.approx(1e-3)
        assert cfg.lr_at(20) == pytest.approx(1e-3) and cfg.lr_at(21) < 1e-3   # then the cosine


def test_the_tokens_rule_warms_up_over_the_same_tokens_at_every_batch():
    cells = [CellConfig(warmup_tokens=2**17, **s).validate() for s in (SMALL, LARGE)]
    assert [c.lr_warmup_steps for c in cells] == [256, 32]
    assert {c.lr_warmup_steps * c.tokens_per_step for c in cells} == {2**17}
    assert CellConfig(warmup_tokens=10_000, **LARGE).lr_warmup_steps == 2     # nearest step: 10000 / 4096
    assert CellConfig(warmup_tokens=1, **LARGE).lr_warmup_steps == 1          # any warmup is at least one step
    assert CellConfig(warmup_tokens=0, **LARGE).lr_warmup_steps == 0


@pytest.mark.parametrize("overrides, key, message", [
    ({"warmup_frac": 0.1, "warmup_steps": 5}, "warmup_steps",
     "warmup_frac=0.1 and warmup_steps=5 are 2 warmup rules: set one of warmup_frac, warmup_steps, warmup_tokens"),
    ({"warmup_steps": 5, "warmup_tokens": 100}, "warmup_tokens", "warmup_steps=5 and warmup_tokens=100 are 2"),
    ({"warmup_frac": 1.0}, "warmup_frac", "warmup_frac=1.0 must be in [0, 1)"),
    ({"warmup_steps": -1}, "warmup_steps", "warmup_steps=-1 must be >= 0"),
    ({"warmup_tokens": -1.0}, "warmup_tokens", "warmup_tokens=-1.0 must be >= 0"),
    ({"warmup_steps": 512}, "warmup_steps", "warmup_steps=512 warms up over 512 steps, not fewer than the cell's 512"),
    ({"warmup_tokens": 2**21}, "warmup_tokens", "warmup_tokens=2.09715e+06 warms up over 512 steps"),
    ({"warmup_steps": 2.5}, "warmup_steps", "warmup_steps=2.5 must be int or null"),
    ({"mal_probes": 0}, "mal_probes", "mal_probes=0 must be >= 1 or null"),
    # the same bound as warmup_steps': 0.9995 of 512 steps is all 512 (it used to pass, and the LR never decayed)
    ({"warmup_frac": 0.9995}, "warmup_frac",
     "warmup_frac=0.9995 warms up over 512 steps, not fewer than the cell's 512"),
    # used to pass every check, then keep the trainer building probe steps for minutes
    ({"mal_probes": 10**9}, "mal_probes", "mal_probes=1000000000 is more probes than the cell's 512 steps (batch 64, "
                                          "2.09715e+06 tokens): set mal_probes to at most 512"),
    ({"mal_probes": 513}, "mal_probes", "mal_probes=513 is more probes than the cell's 512 steps"),
])
def test_a_bad_warmup_rule_or_probe_count_is_named(overrides, key, message):
    problems = CellConfig(**LARGE, **overrides).problems()
    assert [k for k, _ in problems] == [key] and problems[0][1].startswith(message), problems


def test_the_workflow_names_where_two_warmup_rules_meet():
    config = tiny_config()
    config["models"]["T"]["warmup_steps"] = 2   # cell_defaults sets warmup_frac
    with pytest.raises(ValueError, match=r"models.T.warmup_steps: warmup_frac=0.1 and warmup_steps=2 are 2 warmup "
                                         r"rules: .* sets the others to null"):
        validate(config)
    config["models"]["T"]["warmup_frac"] = None
    validate(config)


def test_a_cell_file_may_give_warmup_tokens_as_yaml_text(tmp_path):
    path = tmp_path / "cell.yaml"
    path.write_text("warmup_tokens: 1e5\n")   # YAML 1.1 reads it as text
    assert load_cell_config(path).warmup_tokens == 1e5


def old_probe_steps(cfg):
    """The trainer's schedule before probe_steps: step 0, every mal_every-th step and the last."""
    return sorted({0, cfg.steps} | {s for s in range(1, cfg.steps + 1) if s % cfg.mal_every == 0})


@pytest.mark.parametrize("mal_every, tokens", [(8, 2**21), (10, 8 * 32 * 40), (3, 8 * 32 * 20), (10**6, 10**5)])
def test_without_mal_probes_the_probes_are_where_they_were(mal_every, tokens):
    cfg = CellConfig(batch_size=8, block_size=32, mal_every=mal_every, tokens=tokens)
    assert cfg.probe_steps() == old_probe_steps(cfg)


def test_mal_probes_probe_every_batch_at_the_same_tokens():
    small, large = (CellConfig(mal_probes=64, mal_every=1, **s) for s in (SMALL, LARGE))
    positions = [[step * c.tokens_per_step for step in c.probe_steps()] for c in (small, large)]
    assert positions[0] == positions[1] == [k * 2**21 // 64 for k in range(65)]   # step 0, then 64 probes
    assert small.probe_steps()[-1] == small.steps and large.probe_steps()[-1] == large.steps


@pytest.mark.parametrize("batch", [3, 8, 64, 100])
def test_mal_probes_fall_on_the_nearest_step_and_the_last(batch):
    cfg = CellConfig(batch_size=batch, block_size=64, tokens=10**6, mal_probes=10)
    steps = cfg.probe_steps()
    assert steps[0] == 0 and steps[-1] == cfg.steps and steps == sorted(set(steps)) and len(steps) == 11
    for k, step in enumerate(steps[1:-1], start=1):
        assert abs(step * cfg.tokens_per_step - k * cfg.tokens / 10) <= cfg.tokens_per_step / 2


def test_more_probes_than_steps_probe_every_step_once():
    cfg = CellConfig(batch_size=64, block_size=64, tokens=64 * 64 * 5, mal_probes=12)
    assert cfg.probe_steps() == [0, 1, 2, 3, 4, 5]


def test_probe_steps_never_loop_over_more_probes_than_steps():
    """(problems() refuses such a cell; a CellConfig made without it used to loop over every probe.)"""
    cfg = CellConfig(batch_size=64, block_size=64, tokens=64 * 64 * 5, mal_probes=10**7)
    start = time.perf_counter()
    assert cfg.probe_steps() == [0, 1, 2, 3, 4, 5]
    assert time.perf_counter() - start < 0.5
    assert CellConfig(batch_size=64, block_size=64, tokens=64 * 64 * 5, mal_probes=5).validate()   # one a step: passes


@pytest.mark.parametrize("key", ["tokens", "block_size", "lr", "eps", "warmup_tokens"])
def test_a_whole_number_past_a_floats_range_is_named_not_overflowed(key):
    """A 400-digit integer in YAML is an int, which passed as a finite float and then overflowed where it met one."""
    settings = {key: 10**400, **({"warmup_frac": None} if key == "warmup_tokens" else {})}
    [(named, message)] = CellConfig(**settings).problems()
    assert named == key and "401 digits" in message
