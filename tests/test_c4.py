"""C4 (``dataset: c4``) and the T5 tokenizer (``tokenizer: t5``), offline: a tokenizer.json trained here on
Shakespeare with the ``tokenizers`` library, and a local folder laid out as allenai/c4 is (README configs,
``en/c4-{train,validation}.*.json.gz``) read through the same ``datasets.load_dataset(path, "en", streaming=True)``."""

import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from merit_repro.data.corpora import C4_VAL_TOKENS, CorpusUnavailable, read_text, shakespeare_dir
from merit_repro.data.tokenizers import TOKENIZERS, TokenizerUnavailable, get_tokenizer, token_dtype
from merit_repro.data.tokens import prepare, requested, verify

C4_README = """---
configs:
- config_name: en
  data_files:
  - split: train
    path: en/c4-train.*.json.gz
  - split: validation
    path: en/c4-validation.*.json.gz
---
"""


def paragraphs(name):
    return [p.strip() for p in read_text(shakespeare_dir() / f"{name}_gut.txt").split("\n\n") if len(p.strip()) > 40]


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory):
    """A T5-shaped tokenizer.json: <pad> 0, </s> 1, <unk> 2, and a post-processor that appends </s>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=["<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(paragraphs("hamlet") + paragraphs("macbeth"), trainer)
    tok.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    path = tmp_path_factory.mktemp("t5") / "tokenizer.json"
    tok.save(str(path))
    return path


@pytest.fixture(scope="module")
def c4_folder(tmp_path_factory):
    """Two train shards (Hamlet's, then Macbeth's paragraphs) and one validation shard (The Tempest's)."""
    root = tmp_path_factory.mktemp("c4")
    (root / "en").mkdir()
    (root / "README.md").write_text(C4_README)
    shards = {"c4-train.00001-of-00002": paragraphs("macbeth")[:60],
              "c4-train.00000-of-00002": paragraphs("hamlet")[:60],
              "c4-validation.00000-of-00001": paragraphs("tempest")[:40]}
    for name, docs in shards.items():   # shard 1 written first: the order read is the shards', not the disk's
        with gzip.open(root / "en" / f"{name}.json.gz", "wt", encoding="utf-8") as f:
            for i, text in enumerate(docs):
                f.write(json.dumps({"text": text, "timestamp": "2019-04-25T12:57:54Z", "url": f"https://x/{i}"}) + "\n")
    train = shards["c4-train.00000-of-00002"] + shards["c4-train.00001-of-00002"]
    return root, train, shards["c4-validation.00000-of-00001"]


def documents_stream(tok, docs, cap=None):
    """What prepare must write: each document's ids and </s>, in order, up to exactly cap; and how many it used."""
    ids, used = [], 0
    for doc in docs:
        ids += tok.encode_ordinary(doc) + [tok.eot]
        used += 1
        if cap is not None and len(ids) >= cap:
            break
    return np.asarray(ids[:cap], dtype=np.uint16), used


@pytest.fixture(scope="module")
def c4_prepared(tmp_path_factory, tokenizer_file, c4_folder):
    root, train, _ = c4_folder
    tok = get_tokenizer("t5", tokenizer_file)
    shard0 = sum(len(tok.encode_ordinary(d)) + 1 for d in train[:60])
    cap = shard0 + len(tok.encode_ordinary(train[60])) // 2   # into the second shard, cutting its first document
    out = tmp_path_factory.mktemp("c4-t5")
    meta = prepare("c4", "t5", out, tokenizer_file=tokenizer_file, max_train_tokens=cap, hf_path=str(root))
    return out, meta, tok, cap


def test_t5_tokenizer_from_a_local_tokenizer_json(tokenizer_file):
    tok = get_tokenizer("t5", tokenizer_file.parent)   # a folder holding tokenizer.json
    assert (tok.vocab_size, tok.eot) == (1000, 1) and token_dtype(tok.vocab_size) == np.uint16
    text = "To be, or not to be: that is the question.\nÆthelstan — naïve café 🙂"
    ids = tok.encode_ordinary(text)
    assert tok.decode(ids) == text and tok.eot not in ids   # the post-processor's </s> is left out
    assert tok.encode_ordinary_batch([text, "Ay"]) == [ids, tok.encode_ordinary("Ay")]
    assert tok.describe()["source"] == str(tokenizer_file) and len(tok.describe()["sha256"]) == 64
    assert TOKENIZERS["t5"].vocab_size == 32100   # t5-base's, for cost estimates without the file


def test_c4_train_is_the_first_documents_in_order_cut_at_max_train_tokens(c4_prepared, c4_folder):
    out, meta, tok, cap = c4_prepared
    _, train, val = c4_folder
    expected, used = documents_stream(tok, train, cap)
    assert meta["splits"]["train"]["tokens"] == cap and meta["splits"]["train"]["documents"] == used == 61
    assert np.array_equal(np.fromfile(out / "train.bin", dtype=np.uint16), expected)
    assert tok.decode(expected[:len(tok.encode_ordinary(train[0]))]) == train[0]   # round trip through the file
    # validation: the validation split only, whole (its 10M default cap is far above it)
    expected_val, _ = documents_stream(tok, val)
    assert np.array_equal(np.fromfile(out / "val.bin", dtype=np.uint16), expected_val)
    assert meta["splits"]["val"]["documents"] == len(val) == (expected_val == tok.eot).sum()


def test_c4_meta_records_tokenizer_vocab_and_revision(c4_prepared, c4_folder, tokenizer_file):
    out, meta, tok, cap = c4_prepared
    root = str(c4_folder[0])
    assert meta["tokenizer"]["name"] == "t5" and meta["tokenizer"]["source"] == str(tokenizer_file)
    assert (meta["vocab_size"], meta["eot"], meta["dtype"]) == (1000, 1, "uint16")
    assert meta["request"] == {"dataset": "c4", "tokenizer": "t5", "max_train_tokens": cap,
                               "max_val_tokens": C4_VAL_TOKENS}
    # the workflow's check of a prepared corpus against the config compares this request
    assert requested({"dataset": "c4", "tokenizer": "t5", "max_train_tokens": cap, "hf_path": root,
                      "max_val_tokens": None, "val_fraction": 0.1, "seed": 2357}) == meta["request"]
    assert meta["details"] == {"hf_path": root, "config": "en", "revision": None, "resolved_revision": None}
    assert meta["source_fingerprint"] == f"huggingface:{root}@unpinned"
    verify(out, tokenizer="t5")


def test_c4_preparing_again_gives_the_same_files(c4_prepared, c4_folder, tokenizer_file, tmp_path):
    out, meta, _, cap = c4_prepared
    again = prepare("c4", "t5", tmp_path / "again", tokenizer_file=tokenizer_file, max_train_tokens=cap,
                    hf_path=str(c4_folder[0]))
    assert again["splits"] == meta["splits"]
    for split in ("train", "val"):
        assert (tmp_path / "again" / f"{split}.bin").read_bytes() == (out / f"{split}.bin").read_bytes()
    before = (out / "train.bin").stat().st_mtime_ns
    assert prepare("c4", "t5", out, tokenizer_file=tokenizer_file, max_train_tokens=cap,
                   hf_path=str(c4_folder[0])) == meta   # the same request: nothing to do
    assert (out / "train.bin").stat().st_mtime_ns == before


@pytest.mark.slow
def test_c4_through_the_cli_offline_with_max_val_tokens(tmp_path, c4_folder, tokenizer_file):
    root, train, val = c4_folder
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf")}
    r = subprocess.run([sys.executable, "-m", "merit_repro.data", "prepare", "--dataset", "c4", "--tokenizer", "t5",
                        "--tokenizer-file", str(tokenizer_file), "--hf-path", str(root), "--out", str(tmp_path / "d"),
                        "--max-train-tokens", "3000", "--max-val-tokens", "500"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "d" / "meta.json").read_text())
    tok = get_tokenizer("t5", tokenizer_file)
    assert meta["splits"]["train"]["tokens"] == 3000 and meta["splits"]["val"]["tokens"] == 500
    assert np.array_equal(np.fromfile(tmp_path / "d" / "val.bin", dtype=np.uint16), documents_stream(tok, val, 500)[0])
    assert meta["request"]["max_val_tokens"] == 500


def test_c4_without_max_train_tokens_fails_at_once(tmp_path):
    with pytest.raises(ValueError, match=r"dataset c4 needs max_train_tokens.*--max-train-tokens"):
        prepare("c4", "t5", tmp_path / "d", tokenizer_file=tmp_path / "nope.json", hf_path=str(tmp_path / "nope"))
    assert not (tmp_path / "d").exists()


def test_missing_t5_tokenizer_file_is_named_before_the_corpus_is_read(tmp_path):
    missing = tmp_path / "t5-base" / "tokenizer.json"
    with pytest.raises(TokenizerUnavailable, match=rf"{missing} does not exist.*hf download google-t5/t5-base"):
        prepare("c4", "t5", tmp_path / "d", tokenizer_file=missing, max_train_tokens=100, hf_path=str(tmp_path))
    assert not (tmp_path / "d" / "meta.json").exists()


def test_t5_tokenizer_from_the_huggingface_hub_cache(tmp_path, monkeypatch, tokenizer_file):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(TokenizerUnavailable, match=rf"hub cache {tmp_path / 'hub'} has no tokenizer.json of "
                                                   r"google-t5/t5-base or t5-base.*tokenizer_file"):
        get_tokenizer("t5")
    repo = tmp_path / "hub" / "models--google-t5--t5-base"   # the layout `hf download` leaves
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123" / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    assert get_tokenizer("t5").describe()["source"] == str(repo / "snapshots" / "abc123" / "tokenizer.json")


def test_missing_c4_offline_names_what_is_missing(tmp_path, monkeypatch, tokenizer_file):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    missing = tmp_path / "c4"
    with pytest.raises(CorpusUnavailable, match=rf"(?s)C4 could not be loaded.*{missing}.*HF_DATASETS_OFFLINE.*"
                                                r"Fix:.*hf download allenai/c4.*hf_path"):
        prepare("c4", "t5", tmp_path / "d", tokenizer_file=tokenizer_file, max_train_tokens=100, hf_path=str(missing))
    assert not (tmp_path / "d" / "meta.json").exists()
