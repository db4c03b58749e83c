"""python -m merit_repro.train: see merit_repro.train.loop."""

import sys

from .loop import main

if __name__ == "__main__":
    sys.exit(main())
