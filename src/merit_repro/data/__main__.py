"""python -m merit_repro.data prepare|verify: see merit_repro.data.tokens."""

import argparse
import json
import sys
from pathlib import Path

from merit_repro.utils import cli

from .corpora import C4_VAL_TOKENS
from .tokens import __doc__ as DOC
from .tokens import prepare, verify


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.data", description=DOC,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="tokenize a corpus into DIR/{train,val}.bin + meta.json")
    p.add_argument("--dataset", required=True, help="openwebtext | c4 | shakespeare | textfile:PATH | lambada[:PATH]")
    p.add_argument("--tokenizer", required=True, help="gpt2 | bytes | t5")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--tokenizer-file", default=None, help="gpt2: local gpt2.tiktoken (else $MERIT_GPT2_TIKTOKEN); "
                   "t5: a tokenizer.json or a folder holding one (else a t5-base snapshot in the HuggingFace cache)")
    p.add_argument("--max-train-tokens", type=int, default=None,
                   help="cap on training tokens: the first documents up to exactly this many (required for c4)")
    p.add_argument("--max-val-tokens", type=int, default=None, help=f"cap on validation tokens, the same way "
                   f"(default: none; c4: {C4_VAL_TOKENS:,})")
    p.add_argument("--val-fraction", type=float, default=0.1, help="validation share of documents (not openwebtext)")
    p.add_argument("--seed", type=int, default=2357, help="split seed (not openwebtext: nanoGPT's 2357 is fixed)")
    p.add_argument("--num-proc", type=int, default=None, help="tokenizer threads / loader processes (default: all cores)")
    p.add_argument("--hf-path", default=None, help="HuggingFace path, or local folder, of OpenWebText or C4 "
                   "(default 'Skylion007/openwebtext', 'allenai/c4')")
    p.add_argument("--revision", default=None, help="HuggingFace dataset revision (a commit) to pin the data to")
    p.add_argument("--no-token-check", action="store_true",
                   help="keep an OpenWebText preparation whose token counts differ from nanoGPT's")
    p.add_argument("--force", action="store_true", help="overwrite a different or damaged preparation in --out")
    v = sub.add_parser("verify", help="check sizes and checksums (every byte) of a prepared corpus")
    v.add_argument("data_dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        prepare(args.dataset, args.tokenizer, args.out, tokenizer_file=args.tokenizer_file,
                max_train_tokens=args.max_train_tokens, max_val_tokens=args.max_val_tokens,
                val_fraction=args.val_fraction, seed=args.seed, num_proc=args.num_proc, hf_path=args.hf_path,
                revision=args.revision, force=args.force, token_check=not args.no_token_check)
    else:
        meta = verify(args.data_dir, trust_marker=False)
        print(f"[data] {args.data_dir}: OK ({json.dumps({k: v.get('tokens') for k, v in meta.get('splits', {}).items()})})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
