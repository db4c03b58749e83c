"""Small helpers every stage shares: one-line errors for the CLIs, atomic files, versions and provenance.
Standard library and PyYAML only."""

import errno
import functools
import hashlib
import json
import math
import os
import platform
import shlex
import stat
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import yaml

TRACKED_LIBRARIES = ("torch", "numpy", "pandas", "tiktoken", "datasets", "snakemake", "merit-repro")


class UserError(Exception):
    """Bad input (a config, a file, an argument): reported as one `error:` line, never a traceback."""


# What a full, read-only or over-quota disk raises: the user's to fix, named as such.
DISK_ERRORS = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exceeded",
               errno.EROFS: "the file system is read-only"}


def cli(main):
    """Wrap a CLI's main: a user error ends it with one `error: ...` line on stderr and exit code 2.

    Besides UserError, what a bad file or argument raises at the boundary counts as a user error: a
    missing or unreadable file, undecodable text, malformed YAML/JSON, a value of the wrong kind, a
    full or read-only disk."""
    @functools.wraps(main)
    def wrapper(argv=None):
        take_console()
        try:
            return main(argv)
        except (UserError, ValueError, yaml.YAMLError, FileNotFoundError, IsADirectoryError, PermissionError,
                NotADirectoryError) as err:
            to_console(f"error: {one_line(err)}")
            return 2
        except OSError as err:
            if err.errno not in DISK_ERRORS:
                raise
            to_console(f"error: {one_line(err)}")
            return 2
    return wrapper


def failure_line(what, command, stderr, log_path):
    """One line for a command that failed without an `error:` line of its own (a traceback): the last line of its
    stderr (the exception), and the file its command and full stderr are written to, to read or to run it again."""
    last = (stderr.strip().splitlines() or ["no output"])[-1].strip()
    try:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_text(f"$ {shlex.join(map(str, command))}\n{stderr}")
        where = f"its command and full output are in {log_path}"
    except OSError:
        where = f"run it for the full output: {shlex.join(map(str, command))}"
    return f"{what} failed ({last}); {where}"


def lead_within(lead_seconds, job_seconds):
    """Seconds between a scheduler's SIGTERM and a job's limit: lead_seconds, at most a fifth of a short job (SLURM
    sends a signal whose lead exceeds what is left of the job at once, when training has hardly begun)."""
    return min(lead_seconds, 0.2 * job_seconds) if job_seconds else lead_seconds


ERROR_FD = "MERIT_ERROR_FD"
_console = None


def take_console():
    """Take the descriptor MERIT_ERROR_FD names out of the environment (a child process would not have it open,
    and could hold another file there). A workflow rule sends stderr to its log and `exec`s the CLI, so that the
    CLI, not a shell, gets the scheduler's signals; it keeps its own stderr open there for the CLI's `error:`
    line (and a launcher's stop) to reach the console, or a SLURM job's log, too."""
    global _console
    fd = os.environ.pop(ERROR_FD, None)
    try:
        os.fstat(int(fd))
        _console = int(fd)
    except (TypeError, ValueError, OSError):
        _console = None


def to_console(line):
    """A line on stderr, and on the console descriptor when there is one."""
    print(line, file=sys.stderr, flush=True)
    if _console is not None:
        try:
            os.write(_console, (line + "\n").encode())
        except OSError:
            pass   # the console is gone: the log has the line


def one_line(err):
    if isinstance(err, OSError) and err.errno in DISK_ERRORS:
        fix = "write somewhere writable" if err.errno == errno.EROFS else "free space (or write somewhere else)"
        text = (f"{DISK_ERRORS[err.errno]} ({err.strerror}) writing {err.filename or 'a file'}: {fix} and run again; "
                "nothing complete is lost (an interrupted run resumes from its last checkpoint)")
    elif isinstance(err, (FileNotFoundError, IsADirectoryError, PermissionError)):
        text = f"{err.strerror}: {err.filename}"
    else:
        text = str(err)
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


def current_umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def named_error(err, path):
    """err with the file it was writing named (a failed write() says only its errno)."""
    if isinstance(err, OSError) and not err.filename:
        err.filename = str(path)
    return err


def atomic_write_bytes(path, data: bytes):
    """Write to a temporary file beside path, fsync, then rename over it; the file gets the mode an ordinary
    open() would (0666 less the umask), so collaborators the umask lets read results can read them."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~current_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        Path(tmp).unlink(missing_ok=True)
        raise named_error(err, path)


def atomic_write_json(path, obj, indent=2):
    """Strict JSON (a non-finite number becomes null), written atomically."""
    text = json.dumps(finite_or_none(obj), indent=indent, default=str, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode())


def sha256_bytes(data):
    return hashlib.sha256(data).hexdigest()


def sha256_file(path, block=1 << 24):
    """The sha256 of a file read in blocks (token files are gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(block):
            digest.update(chunk)
    return digest.hexdigest()


def parse_data(text, source, load=json.loads):
    """load(text) (JSON unless told), with nesting past Python's recursion limit (json and PyYAML read recursively)
    refused as a UserError naming source, instead of a RecursionError's traceback."""
    try:
        return load(text)
    except RecursionError:
        raise UserError(f"{source} is nested too deeply to read (past Python's recursion limit); nothing this "
                        "project reads needs more than a few levels: fix or replace it") from None


def read_json(path):
    with open(path) as f:
        return parse_data(f.read(), path)


def open_plain(path):
    """A file opened for reading in binary, without following a link or opening a special file (a FIFO would block,
    /dev/zero never end): a ValueError saying why not, an OSError where it cannot be opened."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise ValueError("a symlink or special file" if stat.S_ISLNK(st.st_mode) else "not a plain file")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)   # (swapped for either since the lstat)
    return os.fdopen(fd, "rb")


def read_plain_bytes(path, limit):
    """A file's bytes, opened as open_plain opens it, at most limit bytes of it: a ValueError saying why not, an
    OSError where it cannot be read."""
    with open_plain(path) as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise ValueError(f"larger than {limit:,} bytes")
    return data


def read_plain_json(path, limit):
    """A JSON file's content, read as read_plain_bytes reads it: a ValueError saying why not (nor JSON), an OSError
    where it cannot be read."""
    data = read_plain_bytes(path, limit)
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("nested too deep") from None


def check_numbers(args, positive=(), non_negative=(), at_most=None):
    """A UserError naming the first parsed flag (by its dest) that is not a finite number > 0 (positive) or >= 0
    (non_negative), or is above its bound (at_most: {dest: the largest value}); a flag not given (None) passes, and
    every value of a list is checked."""
    def given(name):
        values = getattr(args, name)
        return [v for v in (values if isinstance(values, list) else [values]) if v is not None]

    for name in (*positive, *non_negative):
        for value in given(name):
            if not (math.isfinite(value) and (value > 0 or value == 0 and name in non_negative)):
                wanted = ">= 0" if name in non_negative else "> 0"
                raise UserError(f"--{name.replace('_', '-')} {value:g} must be a finite number {wanted}")
    for name, most in (at_most or {}).items():
        for value in given(name):
            if value > most:
                raise UserError(f"--{name.replace('_', '-')} {value:g} must be at most {most:g}: give a smaller one")


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
