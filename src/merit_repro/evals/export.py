"""Export a finished run as a HuggingFace ``transformers`` GPT-2 (``GPT2LMHeadModel``), for ``from_pretrained``
and ``lm_eval --model hf``, e.g. for the perplexity and generation tasks that ``merit-run`` (merit_repro.evals.harness)
refuses:

    python -m merit_repro.evals.export --run results/runs/<cell> --out results/hf/<cell> [--dtype bfloat16] [--force]
    lm_eval --model hf --model_args pretrained=results/hf/<cell> --tasks wikitext

HF_DIR gets config.json and model.safetensors (save_pretrained), merit_repro.json (the run directory, the commit
of the code that trained it, its cell and model config) and the run's tokenizer, built offline:
  - gpt2: tokenizer.json from tiktoken's ranks file (its vocabulary and merges, GPT-2's pre-tokenizer regex), which
    gives the ids of tiktoken's encode_ordinary; eos and bos are <|endoftext|> (50256).
  - bytes: tokenizer.json whose ids are a text's UTF-8 bytes; eos and bos are byte 0 (NUL, the run's document
    separator).
  - any other (t5): no tokenizer is written; TOKENIZER.md says to pass one, `--model_args
    pretrained=HF_DIR,tokenizer=PATH_OR_HUB_NAME` (e.g. the run's tokenizer.json folder, or google-t5/t5-base).
With the tokenizer in HF_DIR, lm_eval --model hf needs no internet (set HF_HUB_OFFLINE=1 to be sure).

The model is ours exactly: the vocabulary cut to the tokenizer's (the padding rows dropped), the positions to the
context the run trained with (n_positions), exact GELU, LayerNorm eps 1e-5, zero biases where ours have none, the
lm_head tied to the token embedding. QK-norm models and Llama-family runs are refused: GPT-2 has no LayerNorm on
q and k, and exporting to LlamaForCausalLM is not implemented; so is a summary whose model shape is not that of
the tensors in model.pt. merit_repro.json lists the files the export wrote with their sizes and sha256: --force
replaces an existing HF_DIR only when it is such an export, unchanged and holding nothing else, and deletes only
those files, and none whose name an export does not write, whatever merit_repro.json lists. The export is written
beside it (.HF_DIR.tmp-PID) and renamed into place, so a killed export or a full disk leaves no half-written HF_DIR
(a killed one, only that folder, to delete).
"""

import argparse
import json
import os
import pickle
import re
import shutil
import sys
from pathlib import Path

import torch

from merit_repro.models import config_from_dict
from merit_repro.plan.records import WEIGHTS, check_weights, kind_problems, read_summary
from merit_repro.utils import UserError, cli, current_umask, git_commit, read_json, sha256_file

from .runmodel import load_run

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
PROVENANCE = "merit_repro.json"
EXPORTED_BY = "merit_repro.evals.export"
# What --force reads of an earlier export's PROVENANCE (merit_repro.plan.records.kind_problems' specs).
PROVENANCE_TYPES = {"written_by": str, "files": {str: {"size": int, "sha256": str}}}
TOKENIZER_NOTE = "TOKENIZER.md"
# Every name an export writes (save_pretrained's, for the model in one file and a fast tokenizer, on transformers 4
# and 5): write_export writes no other, and --force deletes no other, whatever a PROVENANCE lists.
EXPORT_NAMES = frozenset({"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                          "tokenizer_config.json", "special_tokens_map.json", TOKENIZER_NOTE, PROVENANCE})
LAYER_KEY = re.compile(r"transformer\.h\.([0-9]+)\.")


def check_exportable(model_config):
    """A UserError unless the model is a GPT-2 that GPT2LMHeadModel computes exactly."""
    if model_config.family == "llama":
        raise UserError("the run is a Llama-family model: exporting to LlamaForCausalLM is not implemented "
                        "(only GPT-2 runs export, to GPT2LMHeadModel)")
    if model_config.family != "gpt2":
        raise UserError(f"the run's model family {model_config.family!r} has no HuggingFace export")
    if model_config.qk_norm:
        raise UserError("the run's model has QK-LayerNorm (qk_norm: true), which GPT-2's architecture lacks "
                        "(no LayerNorm on q and k): GPT2LMHeadModel would compute another function")


def model_config_of(run_dir, summary):
    """The model config the run's summary.json gives, or a UserError naming it."""
    try:
        return config_from_dict(summary["model_config"])
    except (TypeError, ValueError, ZeroDivisionError) as err:
        raise UserError(f"{run_dir / 'summary.json'}: its model_config is not a model's ({err}); retrain the cell, "
                        "or copy its own summary.json back") from None


def gpt2_shape(state, weights):
    """The shape (model_config's keys) of the GPT-2 whose state dict is state."""
    wte, wpe = state.get("transformer.wte.weight"), state.get("transformer.wpe.weight")
    if wte is None or wpe is None or wte.dim() != 2 or wpe.dim() != 2:
        raise UserError(f"{weights} holds no GPT-2 embeddings (transformer.wte, transformer.wpe): it is not a GPT-2 "
                        "run's weights; retrain the cell with save_model")
    layers = {int(m[1]) for name in state if (m := LAYER_KEY.match(name))}
    return {"n_layer": len(layers), "vocab_size": wte.shape[0], "n_embd": wte.shape[1], "block_size": wpe.shape[0]}


def check_shape(run_dir, summary):
    """A UserError unless the summary's model shape is that of the tensors in model.pt, compared before the model is
    built: a summary edited to a larger model (n_layer: 200000) would otherwise allocate it first. The state dict is
    memory-mapped, so no tensor's data is read."""
    weights, model_config = run_dir / WEIGHTS, summary["model_config"]
    if not weights.is_file():
        return   # load_run says how to get them
    try:
        state = torch.load(weights, map_location="cpu", weights_only=True, mmap=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as err:
        check_weights(run_dir, summary)   # a truncated or another run's copy: named as such
        raise UserError(f"{weights} cannot be loaded as this run's weights ({str(err).splitlines()[0][:160]}); "
                        "retrain the cell with save_model") from None
    if not isinstance(state, dict):
        raise UserError(f"{weights} holds a {type(state).__name__}, not a state dict; retrain the cell with save_model")
    found = gpt2_shape(state, weights)
    differ = [f"{key} {model_config.get(key)} (model.pt: {value})" for key, value in found.items()
              if model_config.get(key) != value]
    if differ:
        raise UserError(f"{run_dir / 'summary.json'} gives another model shape than its {WEIGHTS}: "
                        f"{', '.join(differ)}; it was edited or is another run's: copy the run's own summary.json "
                        "back, or retrain the cell")


def earlier_export(out):
    """The names of the files an earlier export wrote to out (its PROVENANCE among them), once its PROVENANCE is
    export's, every file it lists is there with the size and sha256 it records, and out holds nothing else; else a
    UserError naming what is not so, and nothing is deleted."""
    def refuse(why):
        return UserError(f"{out} is not an earlier export that --force may replace ({why}), so nothing in it is "
                         "deleted: move it away or choose another --out")
    try:
        provenance = json.loads((out / PROVENANCE).read_text())
    except (OSError, ValueError, RecursionError) as err:
        raise refuse(f"its {PROVENANCE} cannot be read: {str(err)[:80]}") from None
    if kind_problems(provenance, PROVENANCE_TYPES) or provenance["written_by"] != EXPORTED_BY:
        raise refuse(f"its {PROVENANCE} is not one {EXPORTED_BY} wrote, listing its files")
    listed, present = provenance["files"], {p.name for p in out.iterdir()}
    foreign = sorted(set(listed) - EXPORT_NAMES)
    if foreign:
        raise refuse(f"its {PROVENANCE} lists {foreign[0]}, which no export writes")
    unexpected = sorted(present - set(listed) - {PROVENANCE})
    if unexpected:
        raise refuse(f"{out / unexpected[0]} is not a file the export wrote")
    for name, want in sorted(listed.items()):
        path = out / name
        if name not in present or path.is_symlink() or not path.is_file():
            raise refuse(f"{name}, which its {PROVENANCE} lists, is not a file there")
        if path.stat().st_size != want["size"] or sha256_file(path) != want["sha256"]:
            raise refuse(f"{path} was changed since the export wrote it")
    return sorted({*listed, PROVENANCE})


def check_out(out, run_dir, force):
    """--out must lie outside the run, under folders (not files), and be new or empty; --force replaces only an
    earlier export (earlier_export), never a run's files or an unrelated folder. The names of the earlier export's
    files that --force replaces (none when out is new or empty)."""
    where, run = out.resolve(), run_dir.resolve()
    if where == run or run in where.parents or where in run.parents:
        raise UserError(f"--out {out} is the run directory, lies inside it or holds it: choose a folder outside "
                        "the run")
    blocked = next((p for p in where.parents if p.exists() and not p.is_dir()), None)
    if blocked:
        raise UserError(f"--out {out} lies under {blocked}, which is a file, not a folder: choose another --out")
    if not out.exists() and not out.is_symlink() or (out.is_dir() and not any(out.iterdir())):
        return []
    if not force:
        raise UserError(f"{out} already exists and is not empty; pass --force to replace an earlier export there, or "
                        "choose another --out")
    if out.is_symlink() or not out.is_dir() or not (out / PROVENANCE).is_file():
        raise UserError(f"{out} is not an earlier export (no {PROVENANCE} in it), so --force does not replace it: "
                        "choose another --out")
    return earlier_export(out)


def hf_config(run):
    from transformers import GPT2Config

    cfg = run.model.config
    return GPT2Config(vocab_size=run.vocab_size, n_positions=run.block_size, n_embd=cfg.n_embd, n_layer=cfg.n_layer,
                      n_head=cfg.n_head, n_inner=4 * cfg.n_embd, activation_function="gelu",
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                      scale_attn_weights=True, scale_attn_by_inverse_layer_idx=False, reorder_and_upcast_attn=False,
                      tie_word_embeddings=True, use_cache=True, bos_token_id=run.tokenizer.eot,
                      eos_token_id=run.tokenizer.eot, architectures=["GPT2LMHeadModel"])


def _bias(module, size):
    return module.bias.detach() if module.bias is not None else torch.zeros(size)


def hf_state_dict(run):
    """Our weights under GPT2LMHeadModel's names; its Conv1D weights are (in, out), our Linear's (out, in)."""
    t = run.model.transformer
    wte = t.wte.weight.detach()[:run.vocab_size]
    state = {"transformer.wte.weight": wte, "transformer.wpe.weight": t.wpe.weight.detach()[:run.block_size],
             "lm_head.weight": wte}
    norms = {"ln_f": t.ln_f}
    linears = {}
    for i, block in enumerate(t.h):
        norms.update({f"h.{i}.ln_1": block.ln_1, f"h.{i}.ln_2": block.ln_2})
        linears.update({f"h.{i}.attn.c_attn": block.attn.c_attn, f"h.{i}.attn.c_proj": block.attn.c_proj,
                        f"h.{i}.mlp.c_fc": block.mlp.c_fc, f"h.{i}.mlp.c_proj": block.mlp.c_proj})
    for name, ln in norms.items():
        state[f"transformer.{name}.weight"] = ln.weight.detach()
        state[f"transformer.{name}.bias"] = _bias(ln, ln.weight.numel())
    for name, lin in linears.items():
        state[f"transformer.{name}.weight"] = lin.weight.detach().t()
        state[f"transformer.{name}.bias"] = _bias(lin, lin.out_features)
    return {k: v.contiguous().clone() for k, v in state.items()}


def hf_model(run, dtype=torch.float32):
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel(hf_config(run))
    missing, unexpected = model.load_state_dict(hf_state_dict(run), strict=False)
    if missing or unexpected:   # a transformers whose GPT-2 has other parameters: never save a half-copied model
        raise RuntimeError(f"GPT2LMHeadModel's parameters do not match ours: missing {missing}, unexpected "
                           f"{unexpected}")
    model.tie_weights()
    return model.to(dtype).eval()


# ---------------------------------------------------------------- tokenizers


def gpt2_tokenizer(tokenizer):
    """tiktoken's GPT-2 BPE as a ``tokenizers`` BPE. The byte-level vocabulary maps each token's bytes through
    GPT-2's bytes_to_unicode; every split of a token into two tokens is a merge, ranked by the merged token, so
    that BPE merges the pair whose result ranks lowest, as tiktoken does (ignore_merges: a pre-token that is
    itself a token stays whole, also as tiktoken does)."""
    from tiktoken_ext.openai_public import r50k_pat_str
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    ranks = {tokenizer.encoding.decode_single_token_bytes(i): i for i in range(tokenizer.eot)}
    chars = bytes_to_unicode()

    def text(b):
        return "".join(chars[c] for c in b)

    merges = sorted((rank, ranks[token[:i]], text(token[:i]), text(token[i:]))
                    for token, rank in ranks.items() for i in range(1, len(token))
                    if token[:i] in ranks and token[i:] in ranks)
    bpe = Tokenizer(BPE({text(t): r for t, r in ranks.items()}, [(a, b) for *_, a, b in merges], fuse_unk=False,
                        ignore_merges=True))
    bpe.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(r50k_pat_str), behavior="isolated"),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.decoder = decoders.ByteLevel()
    bpe.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    return bpe, "<|endoftext|>"


def bytes_tokenizer(tokenizer):
    """UTF-8 bytes: BPE without merges whose vocabulary is byte fallback's <0x01>..<0xFF>, and NUL itself as
    token 0, so that it can be the special eos token while a NUL in a text is still byte 0."""
    from tokenizers import AddedToken, Tokenizer, decoders
    from tokenizers.models import BPE

    vocab = {"\x00": 0, **{f"<0x{b:02X}>": b for b in range(1, 256)}}
    bpe = Tokenizer(BPE(vocab, [], byte_fallback=True, fuse_unk=False))
    bpe.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Fuse()])
    bpe.add_special_tokens([AddedToken("\x00", special=True, normalized=False)])
    return bpe, "\x00"


BUILDERS = {"gpt2": gpt2_tokenizer, "bytes": bytes_tokenizer}


def hf_tokenizer(run):
    """The run's tokenizer as a transformers tokenizer, or None where there is no offline one."""
    from transformers import PreTrainedTokenizerFast

    builder = BUILDERS.get(run.tokenizer.name)
    if builder is None:
        return None
    bpe, eot = builder(run.tokenizer)
    if bpe.token_to_id(eot) != run.tokenizer.eot or bpe.get_vocab_size() != run.vocab_size:
        raise RuntimeError(f"the {run.tokenizer.name} tokenizer built for HuggingFace does not match the run's")
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=eot, bos_token=eot,
                                   model_max_length=run.block_size)


def tokenizer_note(run):
    name = run.tokenizer.name
    source = getattr(run.tokenizer, "source", None)
    where = f" (this run's: {Path(source).parent})" if source else ""
    return (f"# No tokenizer here\n\nThe run was trained with the `{name}` tokenizer, which merit_repro.evals.export does "
            f"not write for HuggingFace. Pass one to lm_eval, a folder with its tokenizer.json{where} or a hub name "
            f"in a HuggingFace cache:\n\n    lm_eval --model hf --model_args pretrained=HF_DIR,tokenizer=PATH ...\n\n"
            f"Its end-of-text token must be id {run.tokenizer.eot}.\n")


# ---------------------------------------------------------------- writing


def provenance(run, dtype, files):
    """PROVENANCE: where the export comes from, and the files it wrote ({name: {size, sha256}}), which --force checks
    and deletes, and nothing else."""
    summary = run.summary
    return {"written_by": EXPORTED_BY, "run_dir": str(Path(run.run_dir).resolve()),
            "git_commit": summary.get("git_commit"), "exported_by": git_commit(), "dtype": dtype,
            "tokenizer": run.tokenizer.name, "vocab_size": run.vocab_size, "block_size": run.block_size,
            "config": summary["config"], "model_config": summary["model_config"], "files": files}


def write_export(run, tmp, dtype):
    """Everything into the folder tmp, PROVENANCE last; the names written."""
    hf_model(run, DTYPES[dtype]).save_pretrained(tmp, max_shard_size="1000GB")   # one model.safetensors, not shards
    tokenizer = hf_tokenizer(run)
    if tokenizer is None:
        (tmp / TOKENIZER_NOTE).write_text(tokenizer_note(run))
    else:
        tokenizer.save_pretrained(tmp)
    unnamed = sorted({p.name for p in tmp.iterdir()} - EXPORT_NAMES)
    if unnamed:   # another transformers: its exports would be ones --force refuses to replace
        raise RuntimeError(f"save_pretrained wrote {unnamed}, which EXPORT_NAMES lacks")
    files = {}
    for path in sorted(tmp.iterdir()):   # save_pretrained writes model.safetensors 0600: readable as the umask allows
        path.chmod(0o666 & ~current_umask())
        files[path.name] = {"size": path.stat().st_size, "sha256": sha256_file(path)}
    (tmp / PROVENANCE).write_text(json.dumps(provenance(run, dtype, files), indent=2) + "\n")
    return sorted([*files, PROVENANCE])


def replace_dir(tmp, out, earlier):
    """tmp renamed to out. An earlier export there is moved aside first (and put back if the rename fails); once tmp
    is in place only its files (earlier) are deleted, then its folder, which earlier_export found holding no other."""
    old = out.with_name(f".{out.name}.old-{os.getpid()}")
    if out.is_dir() and not out.is_symlink():
        out.rename(old)
    elif out.exists() or out.is_symlink():
        out.unlink()
    try:
        tmp.rename(out)
    except OSError:
        if old.is_dir():
            old.rename(out)
        raise
    try:
        for name in earlier:
            (old / name).unlink()
        if old.is_dir():
            old.rmdir()
    except OSError as err:   # not a failed export: out holds the new one
        raise UserError(f"{out} holds the new export, but the earlier one, moved aside to {old}, could not be deleted "
                        f"({err.strerror or err}): delete it") from None


def write_in_place(run, out, dtype, earlier):
    """The export written beside out and renamed into place; a failed write (a full disk) leaves nothing beside out
    and out as it was."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        names = write_export(run, tmp, dtype)
        replace_dir(tmp, out, earlier)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return names


def export(run_dir, out, dtype="float32", force=False):
    """Export the run to out; the names written there."""
    out, run_dir = absolute(out), Path(run_dir)
    summary = read_summary(run_dir)
    check_exportable(model_config_of(run_dir, summary))
    earlier = check_out(out, run_dir, force)
    check_shape(run_dir, summary)
    run = load_run(run_dir, device="cpu")
    try:
        return write_in_place(run, out, dtype, earlier)
    except OSError as err:   # a full disk, a quota, a folder made read-only: the user's to fix
        raise UserError(f"cannot write the export to {out}: {err.strerror or err} (writing {err.filename or out}); "
                        f"free space there or choose another --out, and run again; nothing was left at {out}") from None


def absolute(path):
    """path made absolute: "." has no name to write beside (.NAME.tmp-PID), and once replaced names the old folder."""
    return Path(os.path.abspath(path))


@cli
def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m merit_repro.evals.export", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, type=Path, metavar="DIR",
                        help="a finished run directory with model.pt (trained with save_model: true)")
    parser.add_argument("--out", required=True, type=absolute, metavar="HF_DIR",
                        help="the HuggingFace model folder to write")
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32", help="of the saved weights")
    parser.add_argument("--force", action="store_true", help="replace an existing, non-empty HF_DIR")
    args = parser.parse_args(argv)
    names = export(args.run, args.out, args.dtype, args.force)
    config = read_json(args.out / "config.json")
    print(f"wrote {args.out}: GPT2LMHeadModel ({args.dtype}, vocabulary {config['vocab_size']}, context "
          f"{config['n_positions']}) from {args.run}: {', '.join(names)}")
    if TOKENIZER_NOTE in names:
        print(f"no tokenizer written: {args.out / TOKENIZER_NOTE} says which to pass to lm_eval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
