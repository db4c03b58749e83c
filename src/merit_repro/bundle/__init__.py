"""Results bundles: the small files a report is made from, packed with a manifest of their hashes, so the
report can be rebuilt and audited anywhere without training anything.

    python -m merit_repro.bundle inspect PATH [--config]     # what it holds, whether it verifies
    python -m merit_repro.bundle unpack PATH --into DIR      # its files under DIR (the workflow's rebuild)
    python -m merit_repro.bundle merge PATH --results DIR    # its runs into a local results tree, to train beside
    python -m merit_repro.bundle audit --results DIR         # a rebuild's tables against the bundle's own

A bundle is a gzipped tar whose members are paths under the results folder (``runs/<cell>/`` small files,
``tuning/<group>/`` decisions, ``data/<corpus>/meta.json``, ``tables/*.csv``), the effective config
(``config.yaml``) and ``MANIFEST.json``: schema version, git commit, effective config, the lock file's sha256,
the corpora's fingerprints, and the sha256 and size of every other member. Members are sorted and carry no
time, owner or mode of their own, so the same runs give the same bytes. Checkpoints and weights never go in.

A package of its own: ``safetar`` (what a bundle is and reading one safely), ``pack`` (making one), ``rebuild``
(unpacking, merging and auditing), ``cli`` (the command line, ``python -m merit_repro.bundle``). It reads the
plan's paths and records and the config, and nothing of the report.
"""

from .cli import main
from .pack import NOT_IDENTITY, ORIGIN, create, default_name, member_paths, write_tar
from .rebuild import (
    audit,
    blocking,
    check_for_rebuild,
    config_differences,
    describe,
    destination,
    merge,
    rebuild_config,
    rebuild_folder,
    unpack,
)
from .safetar import CONFIG, MANIFEST, MEMBER_PATTERNS, SCHEMA_VERSION, check_records, config_text, is_member, plain, read

__all__ = ["CONFIG", "MANIFEST", "MEMBER_PATTERNS", "NOT_IDENTITY", "ORIGIN", "SCHEMA_VERSION", "audit", "blocking",
           "check_for_rebuild", "check_records", "config_differences", "config_text", "create", "default_name",
           "describe", "destination", "is_member", "main", "member_paths", "merge", "plain", "read", "rebuild_config",
           "rebuild_folder", "unpack", "write_tar"]
