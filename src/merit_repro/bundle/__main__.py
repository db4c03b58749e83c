"""python -m merit_repro.bundle: the bundle's command line (merit_repro.bundle.cli)."""

import sys

from .cli import main

sys.exit(main())
