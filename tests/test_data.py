import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from merit_repro.data import batches, tokens
from merit_repro.data.corpora import CorpusUnavailable, load_corpus
from merit_repro.data.marker import VERIFIED_MARKER
from merit_repro.data.tokenizers import TokenizerUnavailable, get_tokenizer
from merit_repro.data.tokens import DataError, prepare, verify


@pytest.fixture(scope="module")
def shakespeare_gpt2(tmp_path_factory):
    out = tmp_path_factory.mktemp("shakespeare-gpt2")
    return out, prepare("shakespeare", "gpt2", out)


@pytest.fixture
def corpus_folder(tmp_path):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for i in range(10):
        (folder / f"doc{i}.txt").write_text(f"Document {i}: " + "héllo wörld. " * (20 + i), encoding="utf-8")
    return folder


def test_gpt2_hello_world_from_local_file():
    assert get_tokenizer("gpt2").encode_ordinary("Hello world") == [15496, 995]


@pytest.mark.parametrize("name", ["gpt2", "bytes"])
def test_decode_inverts_encode(name):
    tok = get_tokenizer(name)
    text = "To be, or not to be: that is the question.\nÆthelstan — naïve café 🙂"
    assert tok.decode(tok.encode_ordinary(text)) == text


def test_token_counts_sizes_and_eot_placement(shakespeare_gpt2):
    out, meta = shakespeare_gpt2
    assert meta["dtype"] == "uint16" and meta["eot"] == 50256
    for split, info in meta["splits"].items():
        tokens = np.fromfile(out / info["file"], dtype=np.uint16)
        assert len(tokens) == info["tokens"]
        # encode_ordinary never emits EOT, so EOTs are exactly the document ends
        assert (tokens == 50256).sum() == info["documents"]
        assert tokens[-1] == 50256
    assert meta["splits"]["train"]["documents"] + meta["splits"]["val"]["documents"] == 42


def test_shakespeare_split_is_deterministic_by_whole_play():
    a = load_corpus("shakespeare", 0.1, 2357)
    b = load_corpus("shakespeare", 0.1, 2357)
    c = load_corpus("shakespeare", 0.1, 1)
    assert a.details["val_documents"] == b.details["val_documents"] != c.details["val_documents"]
    assert "hamlet" in a.details["val_documents"] or a.n_docs["train"] == 38


def test_rerun_is_a_no_op_and_a_different_request_is_refused(shakespeare_gpt2):
    out, meta = shakespeare_gpt2
    before = (out / "train.bin").stat().st_mtime_ns
    assert prepare("shakespeare", "gpt2", out) == meta
    assert (out / "train.bin").stat().st_mtime_ns == before
    with pytest.raises(DataError, match="different preparation.*--force"):
        prepare("shakespeare", "bytes", out)


def test_corrupted_bin_is_refused(tmp_path, corpus_folder):
    out = tmp_path / "d"
    prepare(f"textfile:{corpus_folder}", "bytes", out)
    verify(out)
    raw = bytearray((out / "train.bin").read_bytes())
    raw[10] ^= 0xFF
    (out / "train.bin").write_bytes(bytes(raw))
    with pytest.raises(DataError, match="sha256"):
        verify(out)
    (out / "train.bin").write_bytes(bytes(raw[:-3]))
    with pytest.raises(DataError, match="truncated"):
        verify(out, deep=False)
    with pytest.raises(DataError, match="--force"):
        prepare(f"textfile:{corpus_folder}", "bytes", out)
    prepare(f"textfile:{corpus_folder}", "bytes", out, force=True)
    verify(out)


def marked_corpus(tmp_path, corpus_folder):
    """A small prepared corpus, its .verified.json written by prepare, and its train.bin's stat at that time."""
    out = tmp_path / "d"
    prepare(f"textfile:{corpus_folder}", "bytes", out)
    assert (out / VERIFIED_MARKER).is_file()
    time.sleep(0.05)   # ctime comes from a clock that ticks every few ms: a rewrite is one tick later at least
    return out, out / "train.bin", (out / "train.bin").stat()


def test_a_same_size_rewrite_with_its_mtime_put_back_is_hashed_again(tmp_path, corpus_folder):
    out, path, st = marked_corpus(tmp_path, corpus_folder)
    with open(path, "r+b") as f:   # other bytes in place: same inode, same size
        first = f.read(1)
        f.seek(0)
        f.write(bytes([first[0] ^ 0xFF]))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns, path.stat().st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    with pytest.raises(DataError, match="does not match the sha256"):
        verify(out)


@pytest.mark.parametrize("swap", ["symlink", "rename"])
def test_a_file_swapped_in_with_the_marked_size_and_mtime_is_hashed_again(tmp_path, corpus_folder, swap):
    out, path, st = marked_corpus(tmp_path, corpus_folder)
    other = tmp_path / "other.bin"
    raw = bytearray(path.read_bytes())
    raw[0] ^= 0xFF
    other.write_bytes(bytes(raw))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    if swap == "symlink":
        path.unlink()
        path.symlink_to(other)
    else:
        os.replace(other, path)
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
    with pytest.raises(DataError, match="does not match the sha256"):
        verify(out)


@pytest.mark.parametrize("damage", ["a list", "not JSON", "a FIFO", "a link to a FIFO"])
def test_a_damaged_marker_is_ignored_and_written_again(tmp_path, corpus_folder, damage):
    out, _, _ = marked_corpus(tmp_path, corpus_folder)
    marker = out / VERIFIED_MARKER
    marker.unlink()
    if damage == "a list":
        marker.write_text("[1, 2]")
    elif damage == "not JSON":
        marker.write_bytes(b"\xff{not json")
    elif damage == "a FIFO":
        os.mkfifo(marker)   # opened for reading, it would block until a writer came
    else:
        os.mkfifo(tmp_path / "fifo")
        marker.symlink_to(tmp_path / "fifo")
    code = "import sys; from merit_repro.data.tokens import verify; verify(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(Path(tokens.__file__).parents[2])}   # this checkout's code
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert not marker.is_symlink() and set(json.loads(marker.read_text())) == {"train.bin", "val.bin"}


@pytest.mark.parametrize("damage", ["a FIFO", "a link to /dev/zero", "a name outside the folder"])
def test_a_token_file_that_is_no_plain_file_of_the_corpus_is_refused_unread(tmp_path, corpus_folder, damage):
    """meta.json saying 0 tokens lets a FIFO or /dev/zero pass the size check; hashing it would never end."""
    out, path, _ = marked_corpus(tmp_path, corpus_folder)
    meta = json.loads((out / "meta.json").read_text())
    meta["splits"]["val"]["tokens"] = 0
    (out / "val.bin").unlink()
    if damage == "a FIFO":
        os.mkfifo(out / "val.bin")
    elif damage == "a link to /dev/zero":
        (out / "val.bin").symlink_to("/dev/zero")
    else:
        meta["splits"]["val"]["file"] = "/dev/zero"
    (out / "meta.json").write_text(json.dumps(meta))
    code = "import sys; from merit_repro.data.tokens import verify; verify(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(Path(tokens.__file__).parents[2])}
    r = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and ("not a plain file" in r.stderr or "not a file of the folder" in r.stderr), r.stderr


def test_tokenizer_mismatch_is_refused(tmp_path, corpus_folder):
    prepare(f"textfile:{corpus_folder}", "bytes", tmp_path / "d")
    with pytest.raises(DataError, match="prepared with tokenizer 'bytes'.*'gpt2'"):
        verify(tmp_path / "d", tokenizer="gpt2")


def test_textfile_single_file_splits_paragraphs_and_caps_train_tokens(tmp_path):
    f = tmp_path / "book.txt"
    f.write_text("\n\n".join(f"Paragraph {i} " * 10 for i in range(30)))
    meta = prepare(f"textfile:{f}", "bytes", tmp_path / "d", max_train_tokens=500)
    assert meta["splits"]["train"]["tokens"] == 500 and meta["splits"]["val"]["documents"] == 3
    assert meta["dtype"] == "uint8"


def test_batches_are_a_function_of_seed_and_step_only():
    a = batches.batch_offsets(10_000, 64, 16, seed=1, step=5)
    assert np.array_equal(a, batches.batch_offsets(10_000, 64, 16, seed=1, step=5))  # a resumed run
    assert not np.array_equal(a, batches.batch_offsets(10_000, 64, 16, seed=1, step=6))
    # any split into ranks x micro-steps covers the global batch exactly once
    for world, micro in [(1, 16), (2, 4), (4, 2)]:
        accum = 16 // (world * micro)
        seen = np.concatenate([a[batches.micro_batch_slice(16, micro, world, r, m)]
                               for m in range(accum) for r in range(world)])
        assert sorted(seen) == sorted(a)


def test_windows_and_validation_offsets():
    tokens = np.arange(1000, dtype=np.uint16)
    x, y = batches.windows(tokens, [0, 10], 8)
    assert x.shape == (2, 8) and (y - x == 1).all() and x[1, 0] == 10
    assert list(batches.validation_offsets(1000, 100, 350)) == [0, 333, 666]     # spread over the split
    assert list(batches.validation_offsets(1000, 100, 10**6)) == [0, 111, 222, 333, 444, 555, 666, 777, 888]
    for n, block, budget in [(1000, 100, 350), (1001, 100, 10**6), (5000, 64, 4096)]:
        offsets = batches.validation_offsets(n, block, budget)
        assert (np.diff(offsets) >= block).all() and offsets[-1] + block + 1 <= n
    with pytest.raises(DataError, match="block_size"):
        batches.batch_offsets(50, 64, 2, 0, 0)


def test_lambada_from_local_jsonl(tmp_path):
    src = tmp_path / "lambada.jsonl"
    src.write_text("\n".join(json.dumps({"text": t}) for t in ["he said hello world", "the cat sat on the mat"]))
    meta = prepare(f"lambada:{src}", "gpt2", tmp_path / "lam")
    examples = json.loads((tmp_path / "lam" / "lambada.json").read_text())
    tok = get_tokenizer("gpt2")
    assert meta["examples"] == 2
    assert tok.decode(examples[1]["target"]) == " mat"
    assert tok.decode(examples[1]["context"]) == "the cat sat on the"


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["openwebtext", "lambada"])
def test_offline_hf_datasets_fail_fast_with_a_fix(tmp_path, monkeypatch, dataset):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    # The libraries read these at import: after an earlier test's import, the variables alone would not stop them
    # from trying the network (23 s of timeouts a dataset, where the Hub cannot be reached).
    for module, names in [("datasets.config", ["HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"]),
                          ("huggingface_hub.constants", ["HF_HUB_OFFLINE"])]:
        for name in names if module in sys.modules else []:
            monkeypatch.setattr(sys.modules[module], name, True)
    with pytest.raises(CorpusUnavailable, match="HF_DATASETS_OFFLINE.*Fix"):
        prepare(dataset, "gpt2", tmp_path / "d")
    assert not (tmp_path / "d" / "meta.json").exists()


def test_missing_tokenizer_file_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("MERIT_GPT2_TIKTOKEN", str(tmp_path / "nope.tiktoken"))
    with pytest.raises(TokenizerUnavailable, match="does not exist"):
        get_tokenizer("gpt2")


def test_cli_reports_errors_with_exit_code_2(tmp_path):
    r = subprocess.run([sys.executable, "-m", "merit_repro.data", "prepare", "--dataset", "nope", "--tokenizer",
                        "bytes", "--out", str(tmp_path / "x")], capture_output=True, text=True)
    assert r.returncode == 2 and "Unknown dataset 'nope'" in r.stderr


def test_openwebtext_must_give_nanogpts_token_counts():
    from merit_repro.data.corpora import OWT_TRAIN_TOKENS, OWT_VAL_TOKENS
    from merit_repro.data.tokens import check_token_counts

    right = {"train": {"tokens": OWT_TRAIN_TOKENS}, "val": {"tokens": OWT_VAL_TOKENS}}
    check_token_counts("openwebtext", "gpt2", right, None)
    check_token_counts("openwebtext", "gpt2", {"train": {"tokens": 10**6}, "val": {"tokens": OWT_VAL_TOKENS}}, 10**6)
    check_token_counts("shakespeare", "gpt2", {"train": {"tokens": 5}, "val": {"tokens": 5}}, None)
    with pytest.raises(DataError, match=r"val 4,434,000 tokens, expected 4,434,897.*--no-token-check"):
        check_token_counts("openwebtext", "gpt2", {**right, "val": {"tokens": 4_434_000}}, None)


def test_a_revision_reaches_the_request_and_the_fingerprint():
    from merit_repro.data.corpora import source_fingerprint

    assert source_fingerprint("openwebtext", revision="abc") == "huggingface:Skylion007/openwebtext@abc"
    assert source_fingerprint("lambada") == "huggingface:EleutherAI/lambada_openai@unpinned"
    assert tokens._request("openwebtext", "gpt2", None, 0.1, 1, "abc")["revision"] == "abc"


def test_each_seed_draws_its_own_batches_and_the_same_seed_the_same_ones():
    a = [batches.batch_offsets(10_000, 64, 16, seed=0, step=s) for s in range(5)]
    b = [batches.batch_offsets(10_000, 64, 16, seed=1, step=s) for s in range(5)]
    again = [batches.batch_offsets(10_000, 64, 16, seed=0, step=s) for s in range(5)]
    assert all((x == y).all() for x, y in zip(a, again))
    assert not any((x == y).all() for x, y in zip(a, b))
    assert not (a[0] == a[1]).all()   # and each step its own
