"""python -m merit_repro.train: see merit_repro.train.loop."""

import sys

from .loop import main
from .stops import outlive_stops

if __name__ == "__main__":
    code = main()
    outlive_stops()   # the code is decided (here, not in main: a test or the warm trainer calls main in-process)
    sys.exit(code)
