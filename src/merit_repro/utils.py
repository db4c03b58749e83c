"""Small helpers shared by the CLIs: atomic files, versions, provenance (torch imported only where used,
so the job launcher starts fast)."""

import functools
import json
import os
import platform
import subprocess
import tempfile
from importlib import metadata
from pathlib import Path

TRACKED_LIBRARIES = ("torch", "numpy", "pandas", "tiktoken", "datasets", "snakemake", "merit-repro")


def atomic_write_bytes(path, data: bytes):
    """Write to a temporary file beside path, fsync, then rename over it."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path, obj, indent=2):
    atomic_write_bytes(path, (json.dumps(obj, indent=indent, default=str) + "\n").encode())


def atomic_torch_save(obj, path):
    import torch

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def library_versions():
    versions = {"python": platform.python_version()}
    for name in TRACKED_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


@functools.lru_cache(maxsize=None)
def git_commit():
    """The code version: the commit of this checkout, '+dirty' when it has uncommitted changes."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (commit or "unknown") + ("+dirty" if dirty else "")


def describe_device(device):
    import torch

    device = torch.device(device)
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda:{device.index or 0} {props.name} ({props.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
    return f"cpu {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads"
