"""The checkout's src/ first, for pytest (pyproject's pythonpath) and for the processes tests start; the fixtures
the test files share (the helpers they share are tests/helpers.py's and tests/synthetic.py's)."""
import os
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src")
os.environ["PYTHONPATH"] = os.pathsep.join([SRC, *filter(None, [os.environ.get("PYTHONPATH")])])


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """The demo corpus, Shakespeare as bytes, prepared once for every test that trains."""
    from merit_repro.data.tokens import prepare

    out = tmp_path_factory.mktemp("data") / "shakespeare-bytes"
    prepare("shakespeare", "bytes", out)
    return out


@pytest.fixture(scope="module")
def warm_dir():
    """A short private TMPDIR for these tests' warm trainer (a socket path must fit in 107 bytes)."""
    import shutil
    import tempfile

    folder = tempfile.mkdtemp(prefix="mw-", dir="/tmp")
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


# The files that take minutes (SLURM polling, pip, whole workflows), first: with two workers each taking a file at a
# time (pyproject's addopts), the short files then fill the gaps, and no long file starts last, alone.
LONGEST_FIRST = ("test_cluster.py", "test_workflow.py", "test_wheelhouse.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))   # stable: each file's own order is kept
