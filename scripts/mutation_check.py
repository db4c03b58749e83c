"""Mutation check of the code that decides results: does the test suite fail when the science breaks?

    python scripts/mutation_check.py                 # every mutation (about 40 minutes on 2 cores)
    python scripts/mutation_check.py --only causal,clip --out mutations.md

Each mutation below is one deliberate bug, applied alone to a fresh copy of the repository; the tests
most likely to notice it run there (fail-fast), and a mutation is *killed* when they fail and
*survives* when they pass. The table printed at the end (and written with --out) is the evidence.

Why a curated list and not mutmut: mutmut mutates every operator and literal of a module, thousands of
mutants on these files, most in messages and formatting, each needing minutes of tests; a run would
take days on this machine and its survivors would bury the few that matter. The mutations here are the
ways a reproduction silently goes wrong, named in words: the optimizers' formulas, the model and its
probe, the schedule, the training loop, evaluation, best-LR selection and the verdicts. A mutant judged
equivalent (it cannot change any result) says why and is not counted against the score.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COPY = ["src", "tests", "workflow", "config", "profiles", "Snakefile", "pyproject.toml"]
UNIT = ["tests/test_optim.py", "tests/test_model.py", "tests/test_tuning.py", "tests/test_claims.py",
        "tests/test_report.py", "tests/test_data.py"]
TRAIN = UNIT + ["tests/test_train.py"]
ALL = TRAIN + ["tests/test_bad_input.py", "tests/test_workflow.py"]
INTEGRITY = ["tests/test_run_records.py", "tests/test_error_lines.py", "tests/test_config_checks.py"]
BUNDLE = ["tests/test_bundle.py"]
LLAMA = ["tests/test_llama.py"]
ZEROSHOT = ["tests/test_zeroshot.py", "tests/test_export.py"]
LOOKS = ["tests/test_second_look.py"]
LR_CHOICE = ["tests/test_lr_choice.py", "tests/test_tuning.py", "tests/test_claims.py"]


@dataclass
class Mutation:
    name: str
    description: str
    path: str
    edits: list                      # (old text, new text), each old text found exactly once
    tests: list = field(default_factory=lambda: list(TRAIN))
    equivalent: str | None = None    # why it cannot change a result, when so


M = Mutation
MUTATIONS = [
    # -- the model and the MAL probe
    M("causal", "attention made non-causal", "src/merit_repro/models/gpt.py",
      [("is_causal=True", "is_causal=False")]),
    M("probe_mask", "MAL probe without its causal mask", "src/merit_repro/models/base.py",
      [("return logits.masked_fill(~causal, -math.inf).amax(dim=(-2, -1))", "return logits.amax(dim=(-2, -1))")]),
    M("probe_scale", "MAL probe without the 1/sqrt(d_head) scale", "src/merit_repro/models/base.py",
      [("logits = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))", "logits = q @ k.transpose(-2, -1)")]),
    M("probe_layer", "MAL rows labelled with 0-based layers", "src/merit_repro/train/loop.py",
      [('self.probes[step] = [{"step": step, "layer": layer + 1,', 'self.probes[step] = [{"step": step, "layer": layer,')], ALL),
    # -- the optimizers
    M("merit_clip", "MERIT's element-wise clip dropped", "src/merit_repro/optim/trust_ratio.py",
      [("    if opts.clip:\n        update.clamp_(-1.0, 1.0)", "    pass"),
       ("    if opts.clip:\n        torch._foreach_clamp_min_", "    if False:\n        torch._foreach_clamp_min_")], UNIT),
    M("merit_floor", "MERIT's weight-wise floor dropped", "src/merit_repro/optim/trust_ratio.py",
      [("        if self.weight_floor:  # max(max(r, c), b) == max(max(r, b), c)", "        if False:")], UNIT),
    M("row_col", "rows and columns swapped in MERIT's ratios", "src/merit_repro/optim/trust_ratio.py",
      [("            return (1,), (0,)", "            return (0,), (1,)")],
      UNIT),
    M("zero_guard", "zero guard gives ratio 0 instead of 1", "src/merit_repro/optim/trust_ratio.py",
      [("return x.nan_to_num_(nan=1.0, posinf=math.inf, neginf=-math.inf)", "return x.nan_to_num_(nan=0.0, posinf=math.inf, neginf=-math.inf)")],
      UNIT),
    M("lamb_cap", "LAMB's ||w|| cap ignored", "src/merit_repro/optim/trust_ratio.py",
      [("        if self.max_weight_norm is not None:\n            w_norm = w_norm.clamp(max=self.max_weight_norm)", "        pass")],
      UNIT),
    M("beta1", "first moment mixes with beta1 instead of 1 - beta1", "src/merit_repro/optim/trust_ratio.py",
      [("    exp_avg.lerp_(grad, 1 - opts.beta1)", "    exp_avg.lerp_(grad, opts.beta1)")], UNIT),
    M("decay_inside", "weight decay left out of MERIT's direction", "src/merit_repro/optim/trust_ratio.py",
      [("    if opts.weight_decay != 0 and not opts.decoupled_weight_decay:\n        out.add_(param, alpha=opts.weight_decay)",
        "    pass")], UNIT),
    # -- schedule and training loop
    M("lr_not_set", "the scheduled LR never written into the optimizer", "src/merit_repro/train/loop.py",
      [('            group["lr"] = self.cfg.lr_at(step)', "            pass")]),
    M("warmup_zero", "warmup_frac 0 still gives a warmup step", "src/merit_repro/plan/cell.py",
      [("return max(1, round(self.warmup_frac * self.steps)) if self.warmup_frac > 0 else 0",
        "return max(1, round(self.warmup_frac * self.steps))")]),
    M("cosine_floor", "cosine decays to 0 instead of min_lr_frac x peak", "src/merit_repro/plan/cell.py",
      [("        min_lr = self.min_lr_frac * self.lr\n", "        min_lr = 0.0\n")]),
    M("no_clip", "gradient clipping switched off", "src/merit_repro/train/loop.py",
      [("max_norm = self.cfg.grad_clip if self.cfg.grad_clip > 0 else math.inf", "max_norm = math.inf")]),
    M("accumulation", "micro-batch losses not divided by the accumulation steps", "src/merit_repro/train/loop.py",
      [("(loss / self.accum).backward()", "loss.backward()")]),
    M("divergence_ignored", "the divergence rule ignored during training", "src/merit_repro/train/loop.py",
      [('reason = self.divergence.update(self.state.divergence, losses[i])',
        'self.divergence.update(self.state.divergence, losses[i])\n            reason = None')]),
    M("nan_not_divergence", "a non-finite loss not counted as divergence", "src/merit_repro/train/divergence.py",
      [("        if not math.isfinite(loss):\n            return f\"training loss is {loss}\"", "")]),
    M("resume_loop", "resume does not restore the loop state", "src/merit_repro/train/loop.py",
      [('            self.state = LoopState.from_checkpoint(ckpt["loop"])\n', '')]),
    M("stop_no_barrier", "a stopped DDP cell's ranks exit without waiting for rank 0's checkpoint",
      "src/merit_repro/train/loop.py", [("        self.stops.wait_for_save()\n", "")], ["tests/test_train.py"]),
    M("probe_at_log_point", "MAL probes taken at the next log point, labelled with their own step",
      "src/merit_repro/train/loop.py", [("            if self.master and done in self.probe_steps:\n"
                                    "                self.clock.window_start += self.probe(done)",
                                    "            if self.master and done in self.probe_steps:\n"
                                    "                self.late_probes = [*getattr(self, 'late_probes', []), done]\n"
                                    "            if self.master and done % cfg.log_every == 0:\n"
                                    "                for late in getattr(self, 'late_probes', []):\n"
                                    "                    self.clock.window_start += self.probe(late)\n"
                                    "                self.late_probes = []")], ["tests/test_train.py"]),
    M("resume_optimizer", "resume does not restore the optimizer state", "src/merit_repro/train/loop.py",
      [('        self.optimizer.load_state_dict(ckpt["optimizer"])\n', "")]),
    M("resume_rng", "resume does not restore the RNG states", "src/merit_repro/train/loop.py",
      [('        checkpoint.set_rng_state(ckpt["rng"], self.device)\n', "")],
      equivalent="nothing draws random numbers after the model is built: dropout is 0 and batches are a "
                 "function of (seed, step); the states are saved so that this stays true if that changes"),
    M("batch_seed", "batches ignore the cell's seed", "src/merit_repro/data/batches.py",
      [("np.random.SeedSequence([seed, step])", "np.random.SeedSequence([0, step])")], ALL),
    # -- evaluation
    M("val_count", "validation loss halved (its token count doubled)", "src/merit_repro/train/evaluate.py",
      [("        count += y.numel()", "        count += 2 * y.numel()")]),
    M("val_split", "validation measured on the training split", "src/merit_repro/train/evaluate.py",
      [('tokens = open_tokens(data_dir, "val", meta)', 'tokens = open_tokens(data_dir, "train", meta)')]),
    M("lambada_shift", "LAMBADA targets shifted by one token", "src/merit_repro/train/evaluate.py",
      [("logits, y = logits[0, -n_target:].float(), y[0, -n_target:]",
        "logits, y = logits[0, -n_target - 1:-1].float(), y[0, -n_target:]")]),
    # -- best-LR selection and tuning
    M("best_is_worst", "best LR chosen as the largest loss", "src/merit_repro/plan/tuning.py",
      [('return min(candidates, key=lambda r: (r["selection_loss"], lr_key(r["lr"])))["lr"]',
        'return max(candidates, key=lambda r: (r["selection_loss"], lr_key(r["lr"])))["lr"]')], ALL),
    M("survivor_wins", "an LR with diverged seeds competes on its survivors", "src/merit_repro/plan/tuning.py",
      [("        grid = [seeds[s] for s in grid_seeds if s in seeds]\n",
        "        grid = [seeds[s] for s in grid_seeds if s in seeds and seeds[s] is not None]\n"),
       ("selection = statistics.fmean(grid) if complete and not grid_diverged else None",
        "selection = statistics.fmean(grid) if grid else None"),
       ('    candidates = [r for r in rows if r["selection_loss"] is not None]',
        '    candidates = [r for r in rows if r["selection_loss"] is not None]\n    rows = rows')]),
    M("no_extension", "grids never extended", "src/merit_repro/plan/tuning.py",
      [('if (best is None or at_edge) and len(extensions) < spec["max_extensions"]:', "if False:")], ALL),
    M("extension_direction", "an edge extended on the wrong side", "src/merit_repro/plan/tuning.py",
      [('new = next_point(lrs, +1 if best == lrs[-1] else -1, spec["extension_factor"])',
        'new = next_point(lrs, -1 if best == lrs[-1] else +1, spec["extension_factor"])')], ALL),
    M("no_claim_seeds", "claim seeds never added", "src/merit_repro/plan/tuning.py",
      [("    missing = [s for s in claim_seeds if best is not None and (best, s) not in results]", "    missing = []")],
      ALL),
    M("rivals_untrained", "close calls of the LR choice never get claim seeds", "src/merit_repro/plan/tuning.py",
      [("        if wanted:\n", "        if False:\n")], LR_CHOICE),
    M("rivals_untested", "a verdict is read at the chosen LRs alone, whatever the close calls",
      "src/merit_repro/report/claims.py", [("        for a2, b2 in at_rivals(a, b, varied):", "        for a2, b2 in ():")],
      LR_CHOICE),
    M("rivals_by_pool", "close calls judged by the experiment's pooled spread, not the group's own",
      "src/merit_repro/report/artifacts/context.py",
      [("        sd, df = (float(own), int(own_df)) if own is not None and pd.notna(own) and pd.notna(own_df) else pooled",
        "        sd, df = pooled")], LR_CHOICE),
    M("aggregate_seed0", "best-LR rows keep one seed's metrics only", "src/merit_repro/report/tables.py",
      [("& (runs.lr == d[\"best_lr\"]) & runs.seed.isin(seeds)]", "& (runs.lr == d[\"best_lr\"]) & (runs.seed == seeds[0])]")],
      UNIT),
    M("report_grid_seed", "the grid seed that chose the LR is reported with the claim seeds", "src/merit_repro/report/tables.py",
      [('if c["lr"] == d["best_lr"] and c["seed_origin"] in REPORTING]', 'if c["lr"] == d["best_lr"]]')], UNIT),
    M("peak_is_min", "peak MAL taken as the minimum", "src/merit_repro/report/mal.py",
      [('peak = values.loc[values["mal"].idxmax()]', 'peak = values.loc[values["mal"].idxmin()]'),
       ('    return mal.groupby("layer")["mal"].max()', '    return mal.groupby("layer")["mal"].min()')], UNIT),
    # -- verdicts
    M("verdict_inverted", "every verdict inverted", "src/merit_repro/report/claims.py",
      [("    return c.p_below(0.0), c.p_above(0.0), c.rises, c.falls, d < -tol, d > tol",
        "    return c.p_above(0.0), c.p_below(0.0), c.rises, c.falls, d > tol, d < -tol")], ALL),
    M("no_tolerance", "differences compared without the tolerance", "src/merit_repro/report/stats.py",
      [("    tolerance = floor if floor is not None else stats.tolerance * _scale(b)", "    tolerance = 0.0")], UNIT),
    M("normal_not_t", "the normal critical value instead of Student's t", "src/merit_repro/report/stats.py",
      [("    return float(stdtrit(df, 1.0 - alpha))", "    return 1.645"),
       ("    return float(stdtr(df, t))", "    return 0.5 * math.erfc(-t / math.sqrt(2))")], UNIT),
    M("welch_ignores_pairing", "runs that share their seeds tested as independent groups", "src/merit_repro/report/stats.py",
      [("    contrasts = paired_contrast(leaves)\n", "    contrasts = None\n")], UNIT),
    M("satterthwaite_df", "Welch's df that exceeds alpha at unequal spreads", "src/merit_repro/report/stats.py",
      [("    df = min((d for v, d in terms if v > 0), default=math.inf)",
        "    df = total ** 2 / sum(v * v / d for v, d in terms if v > 0) if total else math.inf")], UNIT),
    M("no_holm", "did-not-hold tested at alpha in every setting", "src/merit_repro/report/stats.py",
      [("        if ps[i] > alpha / (len(ps) - step):", "        if ps[i] > alpha:")], UNIT),
    M("zero_spread_decides", "seeds that agree exactly decide without a test", "src/merit_repro/report/stats.py",
      [("    elif se <= ZERO_SPREAD * max(_scale(a), _scale(b), abs(d), 1e-12):", "    elif se < 0:")], UNIT),
    M("pooled_ignored", "a one-seed side counts as noiseless", "src/merit_repro/report/stats.py",
      [("            if pooled is None:\n                return None, None,", "            if True:\n                continue\n                return None, None,")], UNIT),
    M("edge_ignored", "a best LR on its grid edge does not matter", "src/merit_repro/report/claims.py",
      [("    if blockers:\n", "    if False:\n")], UNIT),
    M("diverged_wins", "an optimizer diverged everywhere counts as a result", "src/merit_repro/report/stats.py",
      [("    failed = [e for _, e in leaves if e.diverged]", "    failed = []")], UNIT),
    M("combine_any", "a statement over several settings holds when any setting holds", "src/merit_repro/report/claims.py",
      [("    if set(tested) in ({HELD}, {EQUIVALENT}):\n        return tested[0]", "    if HELD in tested:\n        return HELD")],
      UNIT),
    M("combine_mixed_equivalent", "held in some settings and equivalent in others combined as equivalent",
      "src/merit_repro/report/claims.py",
      [("    if set(tested) in ({HELD}, {EQUIVALENT}):\n        return tested[0]",
        "    if set(tested) <= {HELD, EQUIVALENT}:\n        return HELD if set(tested) == {HELD} else EQUIVALENT")], UNIT),
    M("edge_by_sign", "an edge moves every metric one way, as it moves the validation loss", "src/merit_repro/report/stats.py",
      [("            if e.metric == SELECTION_METRIC:", "            if True:")], UNIT),
    M("two_sided", "each verdict tested two-sided (alpha / 2 a side)", "src/merit_repro/report/stats.py",
      [("        return t_cdf((self.difference - x) / self.se, self.df)",
        "        return 2 * t_cdf((self.difference - x) / self.se, self.df)")], UNIT),
    M("looks_full_alpha", "two looks at the claim seeds, each at the whole alpha", "src/merit_repro/report/stats.py",
      [('        return cls(float(report["alpha"]) * (share if look == 1 else 1.0 - share if looks > 1 else 1.0),',
        '        return cls(float(report["alpha"]),')], LOOKS),
    M("settled_judged_again", "the second look judges again what the first decided", "src/merit_repro/report/artifacts/looks.py",
      [('        if b["statement"]["needs_seeds"]:', "        if True:")], LOOKS),
    M("second_look_part_of_a_statement", "a second look trains only the groups of the undecided settings",
      "src/merit_repro/report/claims.py",
      [("        judged = [r for r in self.rows if r.verdict not in (NOT_TESTED, DESCRIPTIVE)]\n        return sorted(",
        "        judged = [r for r in self.rows if r.why in SEED_LIMITED]\n        return sorted(")], LOOKS),
    M("target_ignored", "Figure 1 counts a run as reaching the target whatever its loss", "src/merit_repro/report/artifacts/steps_to_target.py",
      [("pair = (est, line) if opt == \"merit\" else (line, est)", "pair = (line, est) if opt == \"merit\" else (est, line)")],
      UNIT),
    M("headline_same_batch", "the headline compares MERIT with AdamW at the large batch", "src/merit_repro/report/artifacts/headline.py",
      [("small, large = batches[0], batches[-1]", "small, large = batches[-1], batches[-1]")], UNIT),
    M("ablation_half", "the ablation verdicts leave out maxLAMB vs LAMB", "src/merit_repro/report/artifacts/ablation.py",
      [('    if "maxlamb" in opts and "lamb" in opts:', "    if False:")], UNIT),
    M("paper_direction_ignored", "per-batch statements ignore the direction the paper prints", "src/merit_repro/report/artifacts/context.py",
      [("        return (b, a) if pa is not None and pb is not None and pb < pa else (a, b)", "        return (a, b)")], UNIT),
    # -- integrity: the report's numbers are the configured cells' complete runs on their data
    M("files_unchecked", "the collect step trusts run files whatever their rows and checksums", "src/merit_repro/report/integrity.py",
      [("    return problems + file_problems(run_dir, summary)", "    return problems")], INTEGRITY),
    M("settings_unchecked", "the collect step takes a run of other settings", "src/merit_repro/report/integrity.py",
      [("    if changed:\n        problems.append(", "    if False:\n        problems.append(")], INTEGRITY),
    M("corpus_ignored_when_complete", "a finished run counts as complete on another corpus", "src/merit_repro/train/loop.py",
      [("    if then != now:\n        raise UserError(f\"{out_dir} was trained on corpora",
        "    if False:\n        raise UserError(f\"{out_dir} was trained on corpora")], INTEGRITY),
    M("verify_trusts_marker", "data verify trusts its size+mtime marker", "src/merit_repro/data/__main__.py",
      [("        meta = verify(args.data_dir, trust_marker=False)", "        meta = verify(args.data_dir)")], INTEGRITY),
    M("umask_ignored", "result files written 0600 whatever the umask", "src/merit_repro/utils.py",
      [("        os.fchmod(fd, 0o666 & ~current_umask())\n", "")], INTEGRITY),
    M("warm_limits_ignored", "the warm trainer keeps the server's umask and limits", "src/merit_repro/launch/warmstart.py",
      [("    declined = adopt_limits(request)", "    declined = None")], INTEGRITY),
    # -- the Llama family
    M("mal_before_rope", "Llama's MAL probe reads q and k before the rotation", "src/merit_repro/models/llama.py",
      [("        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)\n        if mal is not None:   # after RoPE: the probe sees the logits the softmax sees\n            mal.append(max_attention_logit(q, k))\n",
        "        if mal is not None:\n            mal.append(max_attention_logit(q, k))\n        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)\n")],
      LLAMA),
    M("rope_sign", "RoPE rotates the wrong way (rotate_half's sign flipped)", "src/merit_repro/models/llama.py",
      [("    return torch.cat((-x2, x1), dim=-1)", "    return torch.cat((x2, -x1), dim=-1)")], LLAMA),
    # -- Table 1: zero-shot scoring and the HuggingFace export
    M("zeroshot_padded_vocab", "continuations scored over the padded vocabulary rows too",
      "src/merit_repro/evals/harness.py",
      [("logits[..., :self.loaded.vocab_size].float()", "logits.float()")], ZEROSHOT),
    M("zeroshot_right_cut", "a long context cut on the right instead of the left", "src/merit_repro/evals/harness.py",
      [("whole = (list(context) + list(continuation))[-(block + 1):]",
        "whole = (list(context) + list(continuation))[:block + 1]")], ZEROSHOT),
    M("zeroshot_distractor_same_play", "next-line distractors drawn from the passage's own play",
      "src/merit_repro/evals/tasks.py", [("if e != d and line != answer", "if line != answer")], ZEROSHOT),
    M("export_square_untransposed", "the export leaves square projections (c_proj) untransposed",
      "src/merit_repro/evals/export.py",
      [("state[f\"transformer.{name}.weight\"] = lin.weight.detach().t()",
        "state[f\"transformer.{name}.weight\"] = lin.weight.detach() if lin.in_features == lin.out_features "
        "else lin.weight.detach().t()")], ZEROSHOT),
    M("export_tanh_gelu", "the export declares GPT-2's tanh GELU where ours is exact", "src/merit_repro/evals/export.py",
      [('activation_function="gelu"', 'activation_function="gelu_new"')], ZEROSHOT),
    # -- results bundles: what a rebuilt report is made from
    M("bundle_no_hash", "a bundle's files not checked against their manifest", "src/merit_repro/bundle/safetar.py",
      [("        if sha256_bytes(got) != want[\"sha256\"]:", "        if False:")],
      BUNDLE),
    M("bundle_overwrites", "unpacking overwrites a local file with other content", "src/merit_repro/bundle/rebuild.py",
      [("    if clashes:\n", "    if False:\n")], BUNDLE),
    M("bundle_config_ignored", "a bundle made with another config rebuilds the report",
      "src/merit_repro/bundle/rebuild.py",
      [("    if differences:\n", "    if False:\n")], BUNDLE),
]


def copy_repo(dest):
    for name in COPY:
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, dest / name,
                                                            **({"ignore": shutil.ignore_patterns("__pycache__")}
                                                               if src.is_dir() else {}))


def apply(root, mutation):
    path = root / mutation.path
    text = path.read_text()
    for old, new in mutation.edits:
        if text.count(old) != 1:
            raise SystemExit(f"error: mutation {mutation.name!r} no longer applies: {old!r} is found "
                             f"{text.count(old)} times in {mutation.path}; update the list in {__file__}")
        text = text.replace(old, new)
    path.write_text(text)


def run_tests(root, tests, timeout):
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    env = {**os.environ, "PYTHONPATH": str(root / "src")}
    try:
        r = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "timeout", ""
    lines = [line for line in r.stdout.splitlines() if line.strip()]
    failed = next((line.split(" ", 1)[1].split(" - ")[0] for line in lines if line.startswith("FAILED")), "")
    return ("passed" if r.returncode == 0 else "failed"), failed or (lines[-1] if lines else "")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default=None, help="comma-separated mutation names")
    parser.add_argument("--out", type=Path, default=None, help="also write the table (Markdown) here")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per mutation")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    args = parser.parse_args(argv)
    chosen = [m for m in MUTATIONS if not args.only or m.name in args.only.split(",")]
    if args.list:
        for m in MUTATIONS:
            print(f"{m.name:<22} {m.path:<38} {m.description}")
        return 0
    rows = ["| mutation | file | killed by | result |", "|---|---|---|---|"]
    killed = counted = 0
    with tempfile.TemporaryDirectory() as tmp:
        baseline = Path(tmp) / "baseline"
        baseline.mkdir()
        copy_repo(baseline)
        state, detail = run_tests(baseline, UNIT, args.timeout)
        if state != "passed":
            raise SystemExit(f"error: the unmutated unit tests do not pass ({detail}); fix them first")
        for i, m in enumerate(chosen, 1):
            root = Path(tmp) / m.name
            root.mkdir()
            copy_repo(root)
            apply(root, m)
            start = time.perf_counter()
            state, detail = run_tests(root, m.tests, args.timeout)
            shutil.rmtree(root, ignore_errors=True)
            if m.equivalent:
                result = f"survived, equivalent: {m.equivalent}" if state == "passed" else "killed"
            else:
                result = "killed" if state != "passed" else "**survived**"
                counted += 1
            killed += result == "killed" and not m.equivalent
            rows.append(f"| {m.description} | {m.path} | {detail if state != 'passed' else '–'} | {result} |")
            print(f"[{i}/{len(chosen)}] {m.name}: {result} ({time.perf_counter() - start:.0f} s) {detail}", flush=True)
    table = "\n".join(rows + ["", f"Mutation score: {killed}/{counted} killed (equivalent mutants not counted)."])
    print("\n" + table)
    if args.out:
        args.out.write_text(table + "\n")
    return 0 if killed == counted else 1


if __name__ == "__main__":
    sys.exit(main())
