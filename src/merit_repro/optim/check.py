"""Build each optimizer setting a workflow trains with once, on a dummy tensor: a mistyped hyperparameter or a
bad value fails when a run starts, named by its key path in the config, not in the middle of training.

    python -m merit_repro.optim.check --settings '[{"where": "optimizers.adamw", "cell": "in experiments.sweep, ...",
        "optimizer": "adamw", "hparams": {"betas": [0.9, 0.95], "eps": 1e-8}, "weight_decay": 0.1, "source": null}]'

Prints one ``error:`` line per setting that does not build and exits 2; prints nothing and exits 0 otherwise.
"""

import argparse
import json
import sys

import torch

from . import build


def problems(settings):
    found = []
    for setting in settings:
        group = {"params": [torch.nn.Parameter(torch.zeros(2, 2))], "weight_decay": setting["weight_decay"]}
        try:
            build(setting["optimizer"], [group], setting.get("source"), **setting["hparams"])
        except (TypeError, ValueError, ImportError) as err:   # ImportError: an entry point's module
            found.append(f"{setting['where']}: {err} ({setting['cell']})")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.optim.check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", required=True,
                        help="JSON: [{where, cell, optimizer, hparams, weight_decay, source}]")
    found = problems(json.loads(parser.parse_args(argv).settings))
    for line in found:
        print(f"error: {line}", file=sys.stderr)
    return 2 if found else 0


if __name__ == "__main__":
    sys.exit(main())
