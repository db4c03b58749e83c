"""Tokenize the Shakespeare corpus with GPT-2 BPE our way and the nanoGPT way, in one run.

    python benchmarks/tokenize_corpus.py [--num-proc N] [--repeats 3]

Ours: merit_repro.data's streaming writer (tiktoken encode_ordinary_batch on N threads, written
straight to the .bin). nanoGPT's: datasets.Dataset.map(encode_ordinary per document, num_proc=N),
then the concatenation into a uint16 memmap, as its prepare.py does. Prints tokens/s and the ratio
(target >= 1.0x).
"""

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from merit_repro.data.corpora import shakespeare
from merit_repro.data.tokenizers import get_tokenizer
from merit_repro.data.tokens import _write_split


def ours(texts, tokenizer, num_proc, out):
    n, _, _ = _write_split(out / "ours.bin", lambda: iter([texts]), tokenizer, len(texts), num_proc)
    return n


def nanogpt_way(texts, tokenizer, num_proc, out):
    import datasets

    datasets.disable_progress_bars()
    enc = tokenizer.encoding

    def process(example):
        ids = enc.encode_ordinary(example["text"])
        ids.append(enc.eot_token)
        return {"ids": ids, "len": len(ids)}

    ds = datasets.Dataset.from_dict({"text": texts})
    tokenized = ds.map(process, remove_columns=["text"], num_proc=num_proc, load_from_cache_file=False)
    total = int(np.sum(tokenized["len"], dtype=np.uint64))
    arr = np.memmap(out / "nanogpt.bin", dtype=np.uint16, mode="w+", shape=(total,))
    idx = 0
    for batch in tokenized.iter(batch_size=8):
        chunk = np.concatenate(batch["ids"])
        arr[idx: idx + len(chunk)] = chunk
        idx += len(chunk)
    arr.flush()
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-proc", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    corpus = shakespeare(0.1, 2357)
    texts = [t for split in ("train", "val") for batch in corpus.splits[split]() for t in batch]
    tokenizer = get_tokenizer("gpt2")
    rates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, fn in [("ours", ours), ("nanogpt", nanogpt_way)]:
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                n = fn(texts, tokenizer, args.num_proc, Path(tmp))
                times.append(time.perf_counter() - t0)
            rates[name] = n / statistics.median(times)
            print(f"{name:<8} {n:,} tokens  {statistics.median(times):.2f} s  {rates[name]:,.0f} tokens/s")
        same = np.array_equal(np.fromfile(Path(tmp) / "ours.bin", np.uint16), np.fromfile(Path(tmp) / "nanogpt.bin", np.uint16))
    print(f"identical tokens: {same}")
    print(f"ratio ours / nanoGPT: {rates['ours'] / rates['nanogpt']:.2f}x  ({args.num_proc} processes/threads)")


if __name__ == "__main__":
    main()
