"""The checkout's src/ first, for pytest (pyproject's pythonpath) and for the processes tests start."""
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
