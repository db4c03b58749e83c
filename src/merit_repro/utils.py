"""Small helpers shared by the CLIs: atomic files, versions, provenance (torch imported only where used,
so the job launcher starts fast)."""

import functools
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

TRACKED_LIBRARIES = ("torch", "numpy", "pandas", "tiktoken", "datasets", "snakemake", "merit-repro")


class UserError(Exception):
    """Bad input (a config, a file, an argument): reported as one `error:` line, never a traceback."""


def cli(main):
    """Wrap a CLI's main: a user error ends it with one `error: ...` line on stderr and exit code 2.

    Besides UserError, what a bad file or argument raises at the boundary counts as a user error: a
    missing or unreadable file, undecodable text, malformed YAML/JSON, a value of the wrong kind."""
    import yaml

    @functools.wraps(main)
    def wrapper(argv=None):
        try:
            return main(argv)
        except (UserError, ValueError, yaml.YAMLError, FileNotFoundError, IsADirectoryError, PermissionError,
                NotADirectoryError) as err:
            print(f"error: {one_line(err)}", file=sys.stderr)
            return 2
    return wrapper


def one_line(err):
    text = str(err) if not isinstance(err, (FileNotFoundError, IsADirectoryError, PermissionError)) \
        else f"{err.strerror}: {err.filename}"
    return " ".join(part.strip() for part in text.splitlines() if part.strip())


def finite_or_none(obj):
    """obj with every NaN or infinite float replaced by None, so that it is valid JSON."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_none(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_none(v) for v in obj]
    return obj


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
    """Strict JSON (a non-finite number becomes null), written atomically."""
    text = json.dumps(finite_or_none(obj), indent=indent, default=str, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode())


def atomic_torch_save(obj, path):
    """torch.save to a temporary file beside path, fsync, then rename; a failed write (a full disk)
    leaves neither a temporary file nor a damaged path."""
    import torch

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


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
