"""Tokenized corpora as flat token memmaps: preparing, verifying and opening them.

    python -m merit_repro.data prepare --dataset shakespeare --tokenizer bytes --out results/data/shakespeare-bytes
    python -m merit_repro.data prepare --dataset openwebtext --tokenizer gpt2 --out results/data/owt-gpt2 --num-proc 16
    python -m merit_repro.data prepare --dataset c4 --tokenizer t5 --out results/data/c4-t5 --max-train-tokens 100000000
    python -m merit_repro.data prepare --dataset lambada --tokenizer gpt2 --out results/data/lambada-gpt2
    python -m merit_repro.data verify results/data/owt-gpt2

A prepared corpus is ``train.bin`` and ``val.bin`` (token ids, EOT after every document, dtype
from the vocabulary size) and ``meta.json`` (what was asked, the split rule, token counts,
sha256 of each file, library versions). LAMBADA becomes ``lambada.json`` (context and target
ids per passage) and ``meta.json``. Files are written under temporary names and renamed, and
``meta.json`` comes last, so a killed prepare never leaves a corpus that looks complete.
"""

import hashlib
import os
import shutil
import stat
from datetime import datetime
from pathlib import Path

import numpy as np

from merit_repro.utils import (
    UserError,
    atomic_write_json,
    library_versions,
    named_error,
    read_json,
    sha256_file,
)

from .corpora import (
    C4_VAL_TOKENS,
    OWT_TRAIN_TOKENS,
    OWT_VAL_TOKENS,
    Corpus,
    lambada_texts,
    load_corpus,
    source_fingerprint,
)
from .marker import fingerprint, mark_verified, read_marker
from .tokenizers import get_tokenizer, token_dtype

SPLITS = ("train", "val")


class DataError(UserError):
    pass


# ---------------------------------------------------------------- preparing


def requested(spec):
    """The request a workflow config's data entry makes (what meta.json records), with prepare's defaults."""
    return _request(spec["dataset"], spec["tokenizer"], spec.get("max_train_tokens"), spec.get("val_fraction", 0.1),
                    spec.get("seed", 2357), spec.get("revision"), spec.get("max_val_tokens"))


def _request(dataset, tokenizer, max_train_tokens, val_fraction, seed, revision=None, max_val_tokens=None):
    """What a preparation is asked for; its max_*_tokens are the caps prepare applies (C4's val: 10M by default)."""
    request = {"dataset": dataset, "tokenizer": tokenizer, "max_train_tokens": max_train_tokens}
    if dataset not in ("openwebtext", "c4") and not dataset.startswith("lambada"):
        request.update(val_fraction=val_fraction, seed=seed)
    max_val_tokens = max_val_tokens or (C4_VAL_TOKENS if dataset == "c4" else None)
    if max_val_tokens:
        request["max_val_tokens"] = max_val_tokens
    if revision:
        request["revision"] = revision
    return request


def check_token_counts(dataset, tokenizer_name, files, max_train_tokens):
    """OpenWebText with GPT-2 BPE must give nanoGPT's token counts (the paper's data); anything else means
    another revision of the dataset or another split, and the results would not be comparable."""
    if dataset != "openwebtext" or tokenizer_name != "gpt2":
        return
    expected = {"train": OWT_TRAIN_TOKENS if max_train_tokens is None else min(max_train_tokens, OWT_TRAIN_TOKENS),
                "val": OWT_VAL_TOKENS}
    wrong = {s: (files[s]["tokens"], n) for s, n in expected.items() if files[s]["tokens"] != n}
    if wrong:
        raise DataError("OpenWebText prepared to other token counts than nanoGPT's: " + "; ".join(
            f"{s} {got:,} tokens, expected {want:,}" for s, (got, want) in wrong.items())
            + ". Pin the dataset revision (data.<name>.revision) and check the datasets version; pass "
            "--no-token-check to keep this preparation anyway")


def _existing(out_dir, request, source, force):
    """True when out_dir already holds this exact preparation, of the same source, undamaged. A different
    or stale preparation is refused (nothing is overwritten) unless force."""
    meta_path = out_dir / "meta.json"
    if not meta_path.exists():
        return False
    meta = read_json(meta_path)
    if force:
        return False
    if meta.get("request") != request:
        raise DataError(f"{out_dir} already holds a different preparation ({meta.get('request')}); "
                        "choose another --out, or pass --force to overwrite it")
    if meta.get("source_fingerprint") != source:
        raise DataError(f"the source of {out_dir} changed since it was prepared ({meta.get('source_fingerprint')} "
                        f"then, {source} now): runs trained on it are stale; prepare again with --force and retrain them")
    try:
        verify(out_dir, deep=True, trust_marker=False)   # every byte, before saying there is nothing to do
    except DataError as err:
        raise DataError(f"{err}. Re-run with --force to prepare {out_dir} again") from None
    return True


def _check_disk(out_dir, corpus, tokenizer, max_train_tokens):
    expected = corpus.expected_train_tokens
    if expected is None:
        return
    if max_train_tokens:
        expected = min(expected, max_train_tokens)
    need = expected * token_dtype(tokenizer.vocab_size).itemsize + corpus.extra_disk_bytes
    free = shutil.disk_usage(out_dir).free
    print(f"[data] {corpus.name}: about {expected / 1e9:.2f}B train tokens; needs about {need / 1e9:.0f} GB of disk "
          f"(token files plus the HuggingFace cache); {free / 1e9:.0f} GB free at {out_dir}", flush=True)
    if free < need:
        print("[data] WARNING: less free disk than estimated; set HF_HOME to a larger disk or pass "
              "--max-train-tokens", flush=True)


def _write_split(path, batches, tokenizer, n_docs, num_proc, max_tokens=None, desc=""):
    """Stream documents through the tokenizer into path (EOT after each), the first ones in order up to exactly
    max_tokens (the last one cut); returns (tokens, documents written, sha256)."""
    dtype = token_dtype(tokenizer.vocab_size)
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        written = _stream_tokens(tmp, batches, tokenizer, dtype, n_docs, num_proc, max_tokens, desc)
        os.replace(tmp, path)
    except BaseException as err:   # a full disk, an interrupt: no temporary file is left behind
        tmp.unlink(missing_ok=True)
        raise named_error(err, path)
    return written


def _stream_tokens(tmp, batches, tokenizer, dtype, n_docs, num_proc, max_tokens, desc):
    from tqdm import tqdm

    digest, n_tokens, docs = hashlib.sha256(), 0, 0
    with open(tmp, "wb") as f, tqdm(total=n_docs, unit="doc", desc=desc, disable=None, mininterval=2) as bar:
        for texts in batches():
            for ids in tokenizer.encode_ordinary_batch(texts, num_threads=num_proc):
                ids.append(tokenizer.eot)
                if max_tokens is not None:
                    ids = ids[: max_tokens - n_tokens]
                chunk = np.asarray(ids, dtype=dtype).tobytes()
                f.write(chunk)
                digest.update(chunk)
                n_tokens += len(ids)
                docs += 1
                if max_tokens is not None and n_tokens >= max_tokens:
                    break
            bar.update(len(texts))
            bar.set_postfix(tokens=f"{n_tokens:,}")
            if max_tokens is not None and n_tokens >= max_tokens:
                break
        f.flush()
        os.fsync(f.fileno())
    return n_tokens, docs, digest.hexdigest()


def prepare(dataset, tokenizer_name, out_dir, *, tokenizer_file=None, max_train_tokens=None, max_val_tokens=None,
            val_fraction=0.1, seed=2357, num_proc=None, hf_path=None, revision=None, force=False, token_check=True):
    """Tokenize a corpus into out_dir; a no-op when out_dir already holds the same preparation."""
    out_dir = Path(out_dir)
    num_proc = num_proc or os.cpu_count() or 1
    for key, cap in (("max_train_tokens", max_train_tokens), ("max_val_tokens", max_val_tokens)):
        if cap is not None and cap < 1:
            raise ValueError(f"{key} must be >= 1, got {cap}")
    if dataset == "c4" and max_train_tokens is None:
        raise ValueError("dataset c4 needs max_train_tokens (data.<name>.max_train_tokens, --max-train-tokens): "
                         "its train split has 364,868,892 documents; prepare takes the first ones up to that cap")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    request = _request(dataset, tokenizer_name, max_train_tokens, val_fraction, seed, revision, max_val_tokens)
    source = source_fingerprint(dataset, hf_path, revision)
    out_dir.mkdir(parents=True, exist_ok=True)
    if _existing(out_dir, request, source, force):
        print(f"[data] {out_dir} already holds {request}; nothing to do", flush=True)
        return read_json(out_dir / "meta.json")
    tokenizer = get_tokenizer(tokenizer_name, tokenizer_file)  # fails fast when unavailable
    if dataset.startswith("lambada"):
        return _prepare_lambada(dataset.partition(":")[2], tokenizer, out_dir, request, source, revision)
    corpus: Corpus = load_corpus(dataset, val_fraction, seed, num_proc, hf_path, revision)
    _check_disk(out_dir, corpus, tokenizer, max_train_tokens)
    files = {}
    for split in SPLITS:
        n_tokens, docs, sha = _write_split(out_dir / f"{split}.bin", corpus.splits[split], tokenizer,
                                           corpus.n_docs[split], num_proc, request.get(f"max_{split}_tokens"),
                                           desc=f"{corpus.name} {split}")
        files[split] = {"file": f"{split}.bin", "tokens": n_tokens, "sha256": sha, "documents": docs}
        print(f"[data] {split}: {n_tokens:,} tokens from {docs:,} documents", flush=True)
    if token_check:   # before meta.json: a preparation that fails it is never taken as complete
        check_token_counts(dataset, tokenizer_name, files, max_train_tokens)
    if corpus.details.get("revision") is None and corpus.details.get("resolved_revision"):
        print(f"[data] {corpus.name} is not pinned; it came from commit {corpus.details['resolved_revision']}: "
              "set data.<name>.revision to it to prepare the same data again", flush=True)
    meta = {
        "request": request, "source_fingerprint": source, "dataset": dataset, "tokenizer": tokenizer.describe(),
        "vocab_size": tokenizer.vocab_size, "eot": tokenizer.eot,
        "dtype": token_dtype(tokenizer.vocab_size).name, "split_rule": corpus.split_rule,
        "splits": files, "details": corpus.details, "versions": library_versions(),
    }
    atomic_write_json(out_dir / "meta.json", meta)
    mark_verified(out_dir, meta)
    return meta


def last_word_split(text):
    """LAMBADA's target is the last word: context = text up to the last space, target = ' ' + word."""
    context, _, word = text.rstrip().rpartition(" ")
    return context, " " + word


def _prepare_lambada(path, tokenizer, out_dir, request, source, revision=None):
    examples = []
    for text in lambada_texts(path or None, revision):
        context, target = last_word_split(text)
        examples.append({"context": tokenizer.encode_ordinary(context), "target": tokenizer.encode_ordinary(target)})
    atomic_write_json(out_dir / "lambada.json", examples, indent=None)
    digest = hashlib.sha256((out_dir / "lambada.json").read_bytes()).hexdigest()
    meta = {"request": request, "source_fingerprint": source, "dataset": "lambada",
            "source": path or "EleutherAI/lambada_openai (test)",
            "tokenizer": tokenizer.describe(), "vocab_size": tokenizer.vocab_size, "eot": tokenizer.eot,
            "examples": len(examples), "split_rule": "last word after the last space is the target",
            "files": {"lambada": {"file": "lambada.json", "sha256": digest}}, "versions": library_versions()}
    atomic_write_json(out_dir / "meta.json", meta)
    print(f"[data] lambada: {len(examples):,} passages", flush=True)
    return meta


# ---------------------------------------------------------------- checking


def _check_size(path, size, n_tokens, itemsize, data_dir):
    if size != n_tokens * itemsize:
        raise DataError(f"{path} has {size} bytes but meta.json says {n_tokens} tokens x {itemsize} bytes; "
                        f"the file is truncated or corrupt: prepare {data_dir} again (--force)")


def verify(data_dir, tokenizer=None, deep=True, trust_marker=True):
    """Check a prepared corpus against its meta.json and return the meta.

    Sizes are always checked; checksums too when ``deep`` (a trainer skips files whose size, mtime, inode
    and ctime match the last successful check, ``trust_marker``; ``data verify`` reads every byte). Raises
    DataError naming the problem and the fix.
    """
    data_dir = Path(data_dir)
    meta_path = data_dir / "meta.json"
    if not meta_path.exists():
        raise DataError(f"{data_dir} is not a prepared corpus (no meta.json); run "
                        f"`python -m merit_repro.data prepare --dataset ... --tokenizer ... --out {data_dir}`")
    try:
        meta = read_json(meta_path)
        meta["splits" if "splits" in meta else "files"].values()
    except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
        raise DataError(f"{meta_path} cannot be read as a corpus's meta.json; prepare {data_dir} again (--force)") from None
    if tokenizer is not None and meta["tokenizer"]["name"] != tokenizer:
        raise DataError(f"{data_dir} was prepared with tokenizer {meta['tokenizer']['name']!r} but the config asks for "
                        f"{tokenizer!r}; prepare the data with that tokenizer or fix the config")
    if "splits" not in meta:
        return meta
    marks = read_marker(data_dir) if trust_marker else {}
    itemsize = np.dtype(meta["dtype"]).itemsize
    hashed = False
    for split, info in meta["splits"].items():
        path = data_dir / info["file"]
        if Path(info["file"]).name != info["file"]:   # "../x", "/dev/zero": a corpus's files lie in its folder
            raise DataError(f"{data_dir}/meta.json names {info['file']!r} as its {split} split, not a file of the "
                            f"folder; prepare {data_dir} again (--force)")
        if not path.exists():
            raise DataError(f"{path} is missing; prepare {data_dir} again (--force)")
        if not stat.S_ISREG(path.stat().st_mode):   # a FIFO or a device would be read without end
            raise DataError(f"{path} is not a plain file (a FIFO, a device or a folder); prepare {data_dir} again "
                            "(--force)")
        _check_size(path, path.stat().st_size, info["tokens"], itemsize, data_dir)
        seen = fingerprint(path)
        if deep and (seen is None or marks.get(info["file"]) != seen):
            hashed = True
            if sha256_file(path) != info["sha256"]:
                raise DataError(f"{path} does not match the sha256 in meta.json; the file is corrupt: "
                                f"prepare {data_dir} again (--force)")
    if hashed:   # a marker that vouched for every file stays as it is: trainers in parallel do not rewrite it
        mark_verified(data_dir, meta)
    return meta


# ---------------------------------------------------------------- reading


def open_tokens(data_dir, split, meta):
    """The split as a read-only memmap (re-opened by callers per use, as nanoGPT does)."""
    info = meta["splits"][split]
    return np.memmap(Path(data_dir) / info["file"], dtype=np.dtype(meta["dtype"]), mode="r")


class HeldSplit:
    """A split a trainer reads for its whole run, as a memmap opened afresh per use (see Run.batch). The first
    opening records the file's size (checked against meta.json) and mtime; each later one checks them, so a file
    truncated or rewritten mid-run stops the run instead of training the rest of it on other tokens."""

    def __init__(self, data_dir, split, meta):
        info = meta["splits"][split]
        self.data_dir, self.path = Path(data_dir), Path(data_dir) / info["file"]
        self.n_tokens, self.dtype = info["tokens"], np.dtype(meta["dtype"])
        self.opened_as = None   # (size, mtime_ns) at the first opening

    def open(self):
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                self._check((st.st_size, st.st_mtime_ns))
                return np.memmap(f, dtype=self.dtype, mode="r")
        except FileNotFoundError:
            raise DataError(f"{self.path} is missing{' since this run opened it' if self.opened_as else ''}; "
                            f"prepare {self.data_dir} again (--force), then restart the run") from None

    def _check(self, now):
        if self.opened_as is None:
            _check_size(self.path, now[0], self.n_tokens, self.dtype.itemsize, self.data_dir)
            self.opened_as = now
        elif now != self.opened_as:
            raise DataError(f"{self.path} changed while this run was training on it (it was "
                            f"{_described(self.opened_as)}, now {_described(now)}), so the run stopped rather than "
                            f"train on other tokens; prepare {self.data_dir} again (--force) if it is damaged, then "
                            "restart the run (it resumes from its last checkpoint)")


def _described(size_and_mtime):
    size, mtime_ns = size_and_mtime
    modified = datetime.fromtimestamp(mtime_ns / 1e9).isoformat(timespec="microseconds")
    return f"{size} bytes modified {modified}"
