"""GPU slots for concurrent jobs on one multi-GPU machine.

Snakemake counts GPUs (``--resources gpu=8``) but does not say which ones a job gets. Each job
takes an exclusive lock (``fcntl.flock``) on one lock file per device it needs, all or none, and
exports those ids in CUDA_VISIBLE_DEVICES. The kernel drops the locks when the job's process ends,
however it ends, so a killed job never leaks a slot.

The pool is $MERIT_GPUS (a count, "4", or ids with commas, "0,2,3"), else $CUDA_VISIBLE_DEVICES, else every
device torch sees; $MERIT_GPUS stays within a $CUDA_VISIBLE_DEVICES the workflow was started with. Lock files live in $MERIT_GPU_LOCK_DIR (default /tmp/merit-repro-gpu-slots-<uid>).

A device is one job's alone unless $MERIT_CELLS_PER_GPU (default 1) lets that many jobs share it, each holding one
of its slots: a small model's cell leaves most of a GPU idle (config/mechanism_gpu.yaml runs 12 at once on one).
A job of several GPUs still takes each of them on a different device.
"""

import fcntl
import os
import re
import time
from contextlib import contextmanager
from pathlib import Path

from merit_repro.utils import UserError

# Jobs that may share one GPU at most (each tries one lock file per place): scripts/mechanism_gpu.sh's bound too.
MAX_CELLS_PER_GPU = 64
MAX_GPUS = 64   # devices of one node
DEVICE_ID = re.compile(r"[0-9]{1,3}|(GPU|MIG)-[0-9A-Za-z-]{1,64}")   # as CUDA_VISIBLE_DEVICES takes them


def device_pool(scheduler=False):
    """Device ids to share: $MERIT_GPUS (a count, or ids with commas), $CUDA_VISIBLE_DEVICES, or all.

    Within a $CUDA_VISIBLE_DEVICES this process was given, a count takes its first devices and ids must be
    among its ids: a job never escapes the devices its parent was limited to. In a scheduler's job
    (``scheduler``) the job's own $CUDA_VISIBLE_DEVICES alone counts: a $MERIT_GPUS exported from a
    workstation session means nothing there."""
    spec = "" if scheduler else os.environ.get("MERIT_GPUS", "").strip()
    visible = [s.strip() for s in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if s.strip()]
    if "CUDA_VISIBLE_DEVICES" in os.environ and not visible:
        return []   # CUDA_VISIBLE_DEVICES="" hides every device
    if not visible:
        import torch
        visible = [str(i) for i in range(torch.cuda.device_count())] if not spec else None
    if not spec:
        return visible
    if spec.isdigit():
        count = whole_count("MERIT_GPUS", spec, MAX_GPUS, "how many GPUs the cells share, or their ids with commas "
                            "(device 0 alone: MERIT_GPUS=0,)")
        if visible is not None and count > len(visible):
            raise UserError(f"MERIT_GPUS={spec} asks for more GPUs than CUDA_VISIBLE_DEVICES={','.join(visible)} "
                            "allows; lower MERIT_GPUS or widen CUDA_VISIBLE_DEVICES")
        return visible[:count] if visible is not None else [str(i) for i in range(count)]
    ids = [s.strip() for s in spec.split(",") if s.strip()]
    if len(ids) > MAX_GPUS:
        raise UserError(f"MERIT_GPUS names {len(ids)} devices, more than a node holds (at most {MAX_GPUS}): name the "
                        "devices the cells share, with commas")
    odd = [f"names {i!r}, not a device" for i in ids if not DEVICE_ID.fullmatch(i)]
    odd += [f"names {i!r} twice" for i in ids if ids.count(i) > 1] + ([] if ids else ["names no device"])
    if odd:
        raise UserError(f"MERIT_GPUS={spec!r} {odd[0]}: give device numbers (or GPU-/MIG- UUIDs) once each, with "
                        "commas, e.g. MERIT_GPUS=0,1, or a count")
    outside = [i for i in ids if visible is not None and i not in visible]
    if outside:
        raise UserError(f"MERIT_GPUS={spec} names devices {','.join(outside)} outside CUDA_VISIBLE_DEVICES="
                        f"{','.join(visible)}; name devices among those, or give MERIT_GPUS as a count")
    return ids


def lock_dir():
    return Path(os.environ.get("MERIT_GPU_LOCK_DIR", f"/tmp/merit-repro-gpu-slots-{os.getuid()}"))


def cells_per_gpu():
    """How many jobs may share one device: $MERIT_CELLS_PER_GPU, a whole number from 1 to MAX_CELLS_PER_GPU (default
    1)."""
    text = os.environ.get("MERIT_CELLS_PER_GPU", "1").strip()
    return whole_count("MERIT_CELLS_PER_GPU", text, MAX_CELLS_PER_GPU, "how many cells share one GPU, e.g. 12")


def whole_count(variable, text, largest, meaning):
    """text as a whole number from 1 to largest, read as ASCII digits of bounded length (str.isdigit takes '²',
    which int() then refuses in words of its own); else a UserError naming the variable."""
    digits = text.isascii() and text.isdigit() and len(text) <= len(str(largest))
    if not digits or not 1 <= int(text) <= largest:
        raise UserError(f"{variable}={text!r} must be a whole number >= 1 and <= {largest}: set it to {meaning}")
    return int(text)


def slot_lock(directory, device, slot):
    """The lock file of one job's place on a device (slot 0 is the device's only one when devices are not shared)."""
    return directory / (f"gpu{device}.lock" if slot == 0 else f"gpu{device}.{slot}.lock")


def _try_lock(path):
    handle = open(path, "a")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return handle
    except BlockingIOError:
        handle.close()
        return None


@contextmanager
def gpu_slots(n, pool=None, poll_seconds=1.0, timeout_seconds=None, log=print):
    """Hold n devices of the pool for the duration of the block; yields their ids."""
    pool = pool if pool is not None else device_pool()
    if n > len(pool):
        raise UserError(f"a job needs {n} GPUs but the pool has {len(pool)} ({','.join(pool) or 'none'}); "
                        "set MERIT_GPUS or give the model fewer gpus in the config")
    directory, share = lock_dir(), cells_per_gpu()
    directory.mkdir(parents=True, exist_ok=True)
    start, waited = time.monotonic(), False
    while True:
        held = []
        for device in pool:
            handle = next((h for h in (_try_lock(slot_lock(directory, device, s)) for s in range(share)) if h), None)
            if handle:
                held.append((device, handle))
                if len(held) == n:
                    break
        if len(held) == n:
            break
        for _, handle in held:
            handle.close()
        if timeout_seconds is not None and time.monotonic() - start > timeout_seconds:
            raise TimeoutError(f"no {n} free GPU slots among {pool} after {timeout_seconds} s")
        if not waited:
            log(f"[gpu_slots] waiting for {n} free GPU(s) among {pool}")
            waited = True
        time.sleep(poll_seconds)
    try:
        yield [device for device, _ in held]
    finally:
        for _, handle in held:
            handle.close()
