"""A prepared corpus's marker (``.verified.json``): the stat fingerprints of its token files when they last checked
out, so that a trainer can skip hashing them again; read by the corpus's checks and by the workflow's folder claims,
which need nothing else of the corpus code (numpy)."""

import os
import stat
from pathlib import Path

from merit_repro.utils import atomic_write_json, read_plain_json

VERIFIED_MARKER = ".verified.json"
MARKER_BYTES = 1 << 16   # a marker names a few files; a larger one is not ours


def fingerprint(path):
    """What the marker vouches for: besides size and mtime (which os.utime puts back), the inode (a file swapped in
    has another) and ctime (a rewrite in place sets it, and nothing puts it back). None for a symlink or anything
    but a regular file, which the marker never vouches for."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        return None
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino, "ctime_ns": st.st_ctime_ns}


def mark_verified(data_dir, meta):
    """Remember that the files checked out (so a trainer can skip re-hashing them); a corpus on a read-only
    mount is simply hashed again next time."""
    marks = {s["file"]: mark for s in meta["splits"].values() if (mark := fingerprint(data_dir / s["file"]))}
    try:
        atomic_write_json(data_dir / VERIFIED_MARKER, marks)
    except OSError:
        pass


def read_marker(data_dir):
    """The marker's fingerprints by file name; {} (every file hashed, the marker written again) when there is none
    or it is damaged: not JSON, not an object of fingerprints (whole numbers), a link, a FIFO or another special file
    (never opened: it could block), or too large to be one."""
    try:
        marks = read_plain_json(Path(data_dir) / VERIFIED_MARKER, MARKER_BYTES)
    except (OSError, ValueError):
        return {}
    fingerprints = isinstance(marks, dict) and all(
        isinstance(mark, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in mark.values())
        for mark in marks.values())
    return marks if fingerprints else {}
