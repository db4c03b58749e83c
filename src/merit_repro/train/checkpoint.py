"""A training run's checkpoint: what a resumed run needs to continue as if never stopped.

``save`` writes model, optimizer, RNG states, the loop's state and the CSV logs' text, with the cell's
result settings and the fingerprint of the corpus it was trained on (written by rank 0 only). ``load``
reads one back on every rank as tensors and plain data only (``weights_only``), memory-mapped for
GPU runs: the ranks of one node share the file's pages instead of each holding its own copy in host
memory (a GPT-2 Large checkpoint is about 9 GB); loading copies every tensor onto the GPU, so nothing
keeps the file mapped afterwards. It refuses a checkpoint of another cell or another corpus with the
way on.
"""

import os
import pickle
import random
import warnings
import zipfile
from pathlib import Path

import numpy as np
import torch

from merit_repro.plan.cell import identity
from merit_repro.utils import UserError, named_error

KEYS = {"config", "step", "model", "optimizer", "rng", "loop", "logs"}


class _Recording:
    """A binary file that keeps the OSError its write() raised: torch.save reports a failed write as a
    RuntimeError ("unexpected pos ..."), which would hide a full disk."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data):
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = err
            raise

    def __getattr__(self, name):
        return getattr(self.f, name)


def atomic_torch_save(obj, path):
    """torch.save to a temporary file beside path, fsync, then rename; a failed write (a full disk)
    leaves neither a temporary file nor a damaged path, and raises the OSError that stopped it."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    recording = None
    try:
        with open(tmp, "wb") as f:
            recording = _Recording(f)
            torch.save(obj, recording)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        tmp.unlink(missing_ok=True)
        if recording is not None and recording.error is not None:
            raise named_error(recording.error, path) from None
        raise named_error(err, path)


def rng_state(device):
    """Every RNG's state as tensors and plain data. For CUDA only this device's generator: a resumed run
    may see a different number of GPUs, and every rank restores the one it trains on."""
    kind, keys, pos, has_gauss, cached_gaussian = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": random.getstate(),
             "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)}}
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def set_rng_state(state, device):
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    random.setstate(state["python"])
    cuda = state.get("cuda")
    if cuda is not None and device.type == "cuda":
        if isinstance(cuda, (list, tuple)):   # every visible device's, as checkpoints before this module had
            cuda = cuda[min(device.index or 0, len(cuda) - 1)]
        torch.cuda.set_rng_state(cuda, device)


def save(path, cfg, fingerprints, step, model, optimizer, loop, logs, device):
    atomic_torch_save({"config": identity(cfg), "data_fingerprint": fingerprints, "step": step,
                       "model": model.state_dict(), "optimizer": optimizer.state_dict(), "rng": rng_state(device),
                       "loop": loop, "logs": {name: log.snapshot() for name, log in logs.items()}}, path)


def load(path, cfg, fingerprints, mmap=True):
    """The checkpoint at path, on the CPU (memory-mapped with mmap), or an error saying how to go on."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mmap = mmap and zipfile.is_zipfile(path)   # anything else is no checkpoint of ours: torch.load says what
            ckpt = torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
        if not isinstance(ckpt, dict) or not KEYS <= set(ckpt):
            raise ValueError("it is not a checkpoint of merit_repro.train")
    except pickle.UnpicklingError:
        raise UserError(f"{path} holds objects other than tensors and plain data, which a checkpoint of "
                        "merit_repro.train never does, so it was not loaded; delete it to start the cell over") from None
    except (RuntimeError, EOFError, ValueError, OSError, AttributeError) as err:
        reason = str(err).splitlines()[0][:200] if str(err) else "truncated"
        raise UserError(f"{path} cannot be read as a checkpoint ({type(err).__name__}: {reason}); delete it to start "
                        "the cell over, or restore it") from None
    # identities, not the saved dict: one saved before data_dir became a resource key records it, one saved before
    # optimizer_source existed lacks it (it trained a built-in optimizer)
    try:
        saved, want = identity(ckpt["config"]), identity(cfg)
    except (TypeError, ValueError) as err:
        raise UserError(f"{path} holds no cell config of this version ({err}); delete it to start the cell over") from None
    if saved != want:
        changed = sorted(k for k in set(saved) | set(want) if saved.get(k) != want.get(k))
        raise UserError(f"{path} is a checkpoint of a different cell (keys {changed} differ); "
                        "delete it to start over, or use another --out")
    trained_on = (ckpt.get("data_fingerprint") or {}).get("data")   # LAMBADA is read only at the end
    if trained_on != fingerprints["data"]:
        raise UserError(f"{path} was trained on corpus {trained_on} but the cell now reads {fingerprints['data']} "
                        f"(was {cfg.data_dir} prepared again?): resuming would mix two corpora; restore "
                        "the data, or delete the checkpoint to start the cell over on the new one")
    return ckpt
