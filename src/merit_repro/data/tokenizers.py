"""Tokenizers by name: ``gpt2`` (GPT-2 BPE through tiktoken), ``bytes`` (UTF-8 bytes) and ``t5`` (T5's
SentencePiece vocabulary, which GaLore and C-Optim train their C4 Llamas with, through ``tokenizers``).

GPT-2 BPE offline: tiktoken downloads its ranks file at first use. Without the internet, point
``MERIT_GPT2_TIKTOKEN`` (or ``tokenizer_file`` in the config, ``--tokenizer-file`` on the CLI) at
a local copy of that file; the ``openai-whisper`` package ships one (``whisper/assets/gpt2.tiktoken``),
which is found automatically when that package is installed. Its checksum is verified.

T5 offline: ``tokenizer_file`` names a HuggingFace ``tokenizer.json`` (or a folder holding one); unset,
a ``t5-base`` snapshot in the HuggingFace hub cache is used (T5_FIX says how to get either).
"""

import hashlib
import importlib.util
import os
from pathlib import Path

import numpy as np

from merit_repro.utils import UserError

GPT2_TIKTOKEN_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
GPT2_EOT = 50256
TOKENIZER_FILE_ENV = "MERIT_GPT2_TIKTOKEN"
T5_HUB_REPOS = ("google-t5/t5-base", "t5-base")
T5_EOS = "</s>"
T5_FIX = ("on a machine with internet run `hf download google-t5/t5-base tokenizer.json` (it prints where the file "
          "is), copy the file here and set tokenizer_file: PATH in the data entry (--tokenizer-file PATH), or copy that "
          "HuggingFace cache (~/.cache/huggingface, or $HF_HOME) here")


class TokenizerUnavailable(UserError):
    pass


class ByteTokenizer:
    """UTF-8 bytes as tokens (vocab 256). Documents are separated by byte 0 (NUL), which plain text
    does not contain."""

    name = "bytes"
    vocab_size = 256
    eot = 0

    def encode_ordinary(self, text):
        return list(text.encode("utf-8"))

    def encode_ordinary_batch(self, texts, num_threads=1):
        return [self.encode_ordinary(t) for t in texts]

    def decode(self, ids):
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def describe(self):
        return {"name": self.name, "vocab_size": self.vocab_size, "eot": self.eot}


class GPT2Tokenizer:
    """GPT-2 BPE (tiktoken's r50k ranks), ``encode_ordinary`` as nanoGPT's prepare script uses."""

    name = "gpt2"
    vocab_size = 50257
    eot = GPT2_EOT

    def __init__(self, tokenizer_file=None):
        import tiktoken

        self.source = find_gpt2_file(tokenizer_file)
        if self.source is None:
            try:
                self.encoding = tiktoken.get_encoding("gpt2")
                self.source = "tiktoken download cache"
            except Exception as err:
                raise TokenizerUnavailable(
                    "GPT-2 BPE is not available offline: tiktoken could not download its ranks file "
                    f"({type(err).__name__}). Provide a local copy: set {TOKENIZER_FILE_ENV}=/path/to/gpt2.tiktoken "
                    "(or tokenizer_file in the config), or `pip install --no-deps openai-whisper==20250625`, "
                    "which ships whisper/assets/gpt2.tiktoken."
                ) from None
            return
        from tiktoken.load import load_tiktoken_bpe
        from tiktoken_ext.openai_public import r50k_pat_str

        ranks = load_tiktoken_bpe(str(self.source), expected_hash=GPT2_TIKTOKEN_SHA256)
        self.encoding = tiktoken.Encoding(name="gpt2", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                                          special_tokens={"<|endoftext|>": GPT2_EOT},
                                          explicit_n_vocab=self.vocab_size)

    def encode_ordinary(self, text):
        return self.encoding.encode_ordinary(text)

    def encode_ordinary_batch(self, texts, num_threads=1):
        return self.encoding.encode_ordinary_batch(texts, num_threads=num_threads)

    def decode(self, ids):
        return self.encoding.decode([int(i) for i in ids])

    def describe(self):
        return {"name": self.name, "vocab_size": self.vocab_size, "eot": self.eot, "source": str(self.source)}


def find_gpt2_file(tokenizer_file=None):
    """A local gpt2.tiktoken: the argument, then $MERIT_GPT2_TIKTOKEN, then openai-whisper's copy."""
    candidate = tokenizer_file or os.environ.get(TOKENIZER_FILE_ENV)
    if candidate:
        if not Path(candidate).is_file():
            raise TokenizerUnavailable(f"GPT-2 tokenizer file {candidate} does not exist; fix the path "
                                       f"(tokenizer_file / {TOKENIZER_FILE_ENV}) or unset it")
        return Path(candidate)
    spec = importlib.util.find_spec("whisper")  # located, never imported (it pulls in heavy deps)
    if spec and spec.submodule_search_locations:
        path = Path(spec.submodule_search_locations[0]) / "assets" / "gpt2.tiktoken"
        if path.is_file():
            return path
    return None


class T5Tokenizer:
    """A HuggingFace ``tokenizer.json`` (t5-base's: 32,000 SentencePiece pieces and 100 extra ids), without the
    post-processor's ``</s>``; that token is appended as the document separator instead. As with HuggingFace's
    own tokenizers (C-Optim's AutoTokenizer), a literal ``</s>`` inside a text is still that token."""

    name = "t5"
    vocab_size = 32100   # t5-base's, for cost estimates without the file; an instance has its file's
    eot = 1              # t5-base's </s>

    def __init__(self, tokenizer_file=None):
        from tokenizers import Tokenizer

        self.source = find_t5_file(tokenizer_file)
        try:
            self.tokenizer = Tokenizer.from_file(str(self.source))
        except Exception as err:
            raise TokenizerUnavailable(f"{self.source} is not a HuggingFace tokenizer.json ({type(err).__name__}: "
                                       f"{str(err)[:200]}); Fix: {T5_FIX}") from None
        self.eot = self.tokenizer.token_to_id(T5_EOS)
        if self.eot is None:
            raise TokenizerUnavailable(f"{self.source} has no {T5_EOS} token to separate documents; give T5's "
                                       f"tokenizer.json. Fix: {T5_FIX}")
        self.vocab_size = self.tokenizer.get_vocab_size()
        self.sha256 = hashlib.sha256(self.source.read_bytes()).hexdigest()

    def encode_ordinary(self, text):
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_ordinary_batch(self, texts, num_threads=1):   # threads: the library's own (TOKENIZERS_PARALLELISM)
        return [e.ids for e in self.tokenizer.encode_batch(texts, add_special_tokens=False)]

    def decode(self, ids):
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=False)

    def describe(self):
        return {"name": self.name, "vocab_size": self.vocab_size, "eot": self.eot, "source": str(self.source),
                "sha256": self.sha256}


def find_t5_file(tokenizer_file=None):
    """T5's tokenizer.json: the argument (the file, or a folder holding it), else a t5-base snapshot in the
    HuggingFace hub cache (looked up offline)."""
    if tokenizer_file:
        path = Path(tokenizer_file)
        path = path / "tokenizer.json" if path.is_dir() else path
        if not path.is_file():
            raise TokenizerUnavailable(f"T5 tokenizer file {path} does not exist; fix the path (tokenizer_file) or "
                                       f"unset it. Fix: {T5_FIX}")
        return path
    from huggingface_hub import constants, try_to_load_from_cache

    for repo in T5_HUB_REPOS:
        found = try_to_load_from_cache(repo, "tokenizer.json")
        if isinstance(found, str):
            return Path(found)
    raise TokenizerUnavailable(f"The T5 tokenizer is not available: tokenizer_file is not set and the HuggingFace "
                               f"hub cache {constants.HF_HUB_CACHE} has no tokenizer.json of "
                               f"{' or '.join(T5_HUB_REPOS)}. Fix: {T5_FIX}")


TOKENIZERS = {"gpt2": GPT2Tokenizer, "bytes": ByteTokenizer, "t5": T5Tokenizer}


def get_tokenizer(name, tokenizer_file=None):
    if name == "gpt2":
        return GPT2Tokenizer(tokenizer_file)
    if name == "t5":
        return T5Tokenizer(tokenizer_file)
    if name == "bytes":
        return ByteTokenizer()
    raise ValueError(f"Unknown tokenizer {name!r}; known tokenizers: {', '.join(TOKENIZERS)}")


def token_dtype(vocab_size):
    """The smallest unsigned dtype that holds every token id."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    raise ValueError(f"vocab_size {vocab_size} is too large")
