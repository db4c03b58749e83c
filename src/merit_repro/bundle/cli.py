"""The bundle's command line (python -m merit_repro.bundle, merit_repro.bundle.main): inspect, unpack, merge, audit."""

import argparse

from merit_repro.utils import cli

from . import __doc__ as PACKAGE_DOC
from .rebuild import audit, describe, merge, rebuild_config, unpack
from .safetar import read


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.bundle", description=PACKAGE_DOC.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    inspect = sub.add_parser("inspect", help="what a bundle holds and whether it verifies")
    inspect.add_argument("path")
    inspect.add_argument("--config", action="store_true", help="print the bundle's effective config (YAML) instead")
    take = sub.add_parser("unpack", help="write a bundle's files under a folder (what the workflow's rebuild does)")
    take.add_argument("path")
    take.add_argument("--into", required=True)
    join = sub.add_parser("merge", help="add a bundle's runs to a local results tree, to train the rest beside them")
    join.add_argument("path")
    join.add_argument("--results", default="results")
    check = sub.add_parser("audit", help="compare a rebuild's tables with the bundle's own (the workflow does)")
    check.add_argument("--results", required=True, help="the rebuild's results folder (results/from_bundle/...)")
    args = parser.parse_args(argv)
    if args.command == "audit":
        print("\n".join(audit(args.results)))
        return 0
    if args.command == "inspect":
        manifest, files = read(args.path)
        print(rebuild_config(manifest) if args.config else "\n".join(describe(manifest, files)),
              end="" if args.config else "\n")
    elif args.command == "unpack":
        written, kept = unpack(args.path, args.into)
        print(f"unpacked {args.path} into {args.into}: {written} files written, {kept} already there")
    else:
        written, kept = merge(args.path, args.results)
        print(f"merged {args.path} into {args.results}: {written} files written, {kept} already there; "
              "`snakemake` now trains only the cells the bundle lacks")
    return 0


