"""python -m merit_repro.launch: see merit_repro.launch.launcher."""

import sys

from .launcher import main

if __name__ == "__main__":
    sys.exit(main())
