"""paper_figures/README.md and paper_figures/claims.csv: every artifact, the paper's statements it tests,
one row per comparison with both sides' mean, sd and n, the margin and its basis, and the verdict."""

import json
from pathlib import Path

import pandas as pd

from merit_repro.config.configfiles import with_defaults
from merit_repro.plan.grid import looks, second_look_seeds
from merit_repro.report.claims import PAPER
from merit_repro.report.stats import Stats, benjamini_hochberg
from merit_repro.report.tables import to_markdown

from .looks import by_statement
from .paper import budget_only, stands_in

CLAIM_COLUMNS = ["artifact", "experiment", "claim", "model", "batch", "subject", "reference", "subject_mean",
                 "subject_sd", "subject_n", "reference_mean", "reference_sd", "reference_n", "difference", "margin",
                 "basis", "verdict", "why", "kind", "test", "p_value", "ci_low", "ci_high", "correlation", "subject_lr",
                 "reference_lr", "se", "df", "tolerance", "tests", "about", "lr_choice", "bh", "reason", "origin", "look"]


def claims_table(verdicts, dropped=frozenset()):
    """One row per comparison; bh: whether the Benjamini–Hochberg family of its statement's verdict keeps it (decided
    statements only; dropped: not_kept's)."""
    rows = []
    for v in verdicts:
        for s, found in by_statement(v):
            bh = "" if s["result"] not in P_OF else (
                "not kept" if (v.get("experiment"), s.get("test_key")) in dropped else "kept")
            rows += [{"artifact": v["artifact"], "experiment": v["experiment"], **row, "bh": bh} for row in found]
    return pd.DataFrame(rows).reindex(columns=CLAIM_COLUMNS)


def stats_of(config, look=2):
    """The stats a look's verdicts are tested at (the report's alpha with one look)."""
    return Stats.from_report(with_defaults(config, "report"), looks(config), look)


def report_alpha(config):
    """The report's alpha: a verdict's level over the looks, and the false-discovery rate of its BH lines."""
    return float(with_defaults(config, "report")["alpha"])


def looks_text(config, stats):
    """The second look at the claim seeds, in words (empty with one look)."""
    if stats.looks == 1:
        return ""
    first, alpha = stats_of(config, look=1).alpha, report_alpha(config)
    return (f" Two looks at the claim seeds (`second_look_seeds` {', '.join(map(str, second_look_seeds(config)))}): "
            f"every statement is judged first on the claim seeds, at alpha {first:g} of the report's {alpha:g} "
            "(`report.first_look_share`); the groups behind a statement left inconclusive for want of seeds (too "
            "few seeds, within margin, not after Holm's correction, a close call tested at every rival LR) are trained "
            "at the second-look seeds too, at the "
            "same chosen LR and its rivals, and that statement is judged again on all of them at alpha "
            f"{stats.alpha:g}; every "
            "other keeps its first verdict (`look` 1), and a comparison it settled is printed with its seeds wherever it "
            f"is stated again. A verdict is then false with probability at most {first:g} + {stats.alpha:g} = "
            f"{alpha:g} at either look, whatever they share; the zero-shot statements are judged once, on the claim "
            f"seeds their scores cover, at the full alpha {alpha:g}.")


def protocol(config):
    """How a verdict is reached, said once: in the index, beside every table and in the README."""
    stats, noise = stats_of(config), with_defaults(config, "tuning")["lr_choice_noise"]
    tolerances = ", ".join(f"{k} {v:g}" for k, v in stats.tolerances.items())
    return (f"Each LR is chosen once, on the grid seeds ({', '.join(map(str, config.get('seeds', [0])))}), and "
            "reported over other seeds, the claim seeds, trained at that first choice afterwards: no seed both chooses "
            "and reports, and the choice is never revised on the seeds that report (a claim seed that diverges is "
            "counted as a divergence of that LR, not replaced). Values derived from a pilot (Figure 1's targets) come "
            "from pilot seeds that neither choose nor report. "
            "What is compared (the estimand): each optimizer at its best LR on its grid (the config's `lr_grid`, "
            "extended off its edges), not at its optimum between grid points. The grid seeds' choice has noise of its "
            f"own: where another LR's grid-seed loss is within {noise:g} sd of a difference of grid-seed means of the "
            "chosen one's (the sd: the group's own claim-seed spread; its normal level as a t quantile at the "
            "spread's df), the "
            "choice was a close call, the claim seeds train at that rival LR too, and a verdict must hold at every "
            "rival LR of the terms that could overturn it as at the choice (an intersection–union test: each at "
            "alpha, no correction; `lr_choice`, and each group's grid with its standard errors in `best_lr.csv`). A "
            "verdict that holds at the choice but not at a rival, or a rival without claim seeds, is **inconclusive** "
            "(LR choice a close call), the chosen-LR result a note. "
            "A statement compares a subject with a reference, lower is better, in each of its settings: where every "
            "term has the same claim seeds (a seed's runs are one independent draw, within a model and batch or "
            "across them) by a paired t test on the per-seed contrasts, otherwise by Welch's t with Hsu's degrees of "
            "freedom (the smallest side's n - 1, which keeps the level at unequal spreads). Each verdict is false on "
            f"one side of the tolerance only, so each is a one-sided test at alpha {stats.alpha:g}, and the interval "
            f"printed (`ci_low`, `ci_high`) is the {1 - 2 * stats.alpha:.0%} one whose ends they read. A difference "
            f"counts beyond a tolerance fixed before the runs (relative: {tolerances}; otherwise {stats.tolerance:g}; "
            "perplexity and MAL on the log scale). **held** means lower: in every setting the interval lies below 0 "
            "(each at alpha: an intersection–union test needs no correction), and, so that a difference too small to "
            "matter is never reported as held, its point estimate is beyond the tolerance; **did not hold**: a setting is confidently on the other side after Holm's correction over "
            "the statement's settings; **equivalent**: in every setting the interval lies within ± the tolerance "
            "(two one-sided tests); held in some settings and equivalent in others is inconclusive (lower is not shown "
            "where a setting is only shown within the tolerance); a paper gap "
            "below the tolerance is tested as **non-inferiority** (held: the interval lies below + the tolerance); "
            "**inconclusive**, with `why`: too few seeds (beyond the tolerance, but the noise covers it, or no spread "
            "to test against), within margin (inside the tolerance, not confidently), not after Holm's correction, "
            "settings disagree, LR choice a close call, tuning failure: grid edge (a best LR on its grid's edge after the extensions: for "
            "the validation loss only where more tuning could overturn the verdict, since tuning minimises it; for "
            "every other metric always, since it can move either way with the LR), tuning failure: diverged (every "
            "LR, or claim seeds at the chosen one, with counts), missing, non-finite value; **not tested at this "
            "scale**: the setting cannot test it (the reason is given); **descriptive**: an ordering the paper "
            "prints but does not claim (smaller batches' single runs), computed, not judged. Verdicts use the final "
            "validation loss; the paper's tables report the best loss reached, tabled as `best-reached`."
            + looks_text(config, stats))


def protocol_summary(config):
    """The protocol in one line, for each table's footer (the whole of it is ``protocol``)."""
    stats = stats_of(config)
    return (f"Verdicts: paired t where every term has the same claim seeds, else Welch with Hsu's df; each verdict a "
            f"one-sided test at alpha {stats.alpha:g} in every setting ({1 - 2 * stats.alpha:.0%} intervals); "
            "did-not-hold Holm-corrected over a statement's settings; a tolerance per metric fixed before the runs; "
            "each LR the grid's first choice on the grid seeds, reported on the claim seeds"
            + (f"; two looks at the claim seeds, at alpha {stats_of(config, look=1).alpha:g} then {stats.alpha:g}."
               if stats.looks > 1 else "."))


def write_index(verdict_paths, out, config, claims_csv=None):
    out = Path(out)
    verdicts = [json.loads(Path(p).read_text()) for p in sorted(map(str, verdict_paths))]
    alpha = report_alpha(config)
    dropped = not_kept(verdicts, alpha)
    table = claims_table(verdicts, dropped)
    table.to_csv(claims_csv or out.with_name("claims.csv"), index=False)
    stand_ins = {k: v for k, v in config["models"].items() if stands_in(config, k)}
    budgets = [k for k in config["models"] if any(k in e["models"] and budget_only(config, k, e)
                                                  for e in config["experiments"].values())]
    lines = ["# The paper's artifacts, regenerated", "",
             "Generated by the workflow (`snakemake`); do not edit. Each artifact is a table (`.csv`, `.md`, `.tex`) "
             "and a figure (`.png`, `.pdf`) named `<artifact>/<experiment>`; every comparison is a row of "
             "[claims.csv](claims.csv). Our numbers are the mean ± standard deviation over the claim seeds at each "
             "best learning rate; columns marked `(paper)` hold the paper's number where our model, batch size and "
             "LR are the paper's (`–` where it prints none).", "",
             "Models: " + ", ".join(f"{k} = {v['model']}" + (f" (stands for {v.get('paper_model')})" if k in stand_ins
                                                              else "") for k, v in config["models"].items()) + "."]
    if budgets:
        lines.append(f"{', '.join(budgets)} {'is' if len(budgets) == 1 else 'are'} the paper's own model"
                     f"{'' if len(budgets) == 1 else 's'} trained on another token budget than the paper's (the "
                     "experiment's `paper.tokens`): the numbers compare with the paper's in direction, not in value, "
                     "so the paper's numbers are drawn in their own panels and table rows (`paper: ...`).")
    if stand_ins:
        lines.append(f"{', '.join(stand_ins)} {'is a' if len(stand_ins) == 1 else 'are'} smaller stand-in"
                     f"{'' if len(stand_ins) == 1 else 's'} for the paper's models, trained on other data for far "
                     "fewer tokens: their numbers are not comparable with the paper's in value, only in direction, so "
                     "the paper's numbers for them are drawn in their own panels and table rows (`paper: ...`).")
    lines += ["", f"How a verdict is reached (`merit_repro.report.claims`): {protocol(config)}", "",
              "| artifact | experiment | statement | setting | verdict |", "|---|---|---|---|---|"]
    for v in verdicts:
        link = f"[{v['artifact']}]({v['artifact']}/{v['experiment']}.md)"
        if not v["statements"]:
            lines.append(f"| {link} | {v['experiment']} | {v.get('claim', 'descriptive')} | – | descriptive |")
        for s in v["statements"]:
            mark = f" ({NOT_KEPT})" if (v.get("experiment"), s.get("test_key")) in dropped else ""
            lines.append(f"| {link} | {v['experiment']} | {s['claim']} | {s['where']} | **{s['result']}**{mark} |")
    recaps = [line for v in verdicts if v.get("recap") for line in ("", f"**{v['recap']}**")]
    lines += ["", *summary(verdicts, alpha), *recaps, "",
              "## Every comparison", "", to_markdown(_compact(table)).rstrip()]
    for v in verdicts:
        stem = f"{v['artifact']}/{v['experiment']}"
        lines += ["", f"## {v['artifact']} — {v['experiment']}", "", f"Reproduces: {v['reproduces']}."]
        if v.get("recap"):
            lines += ["", f"**{v['recap']}**"]
        for s in v["statements"]:
            mark = f" ({NOT_KEPT})" if (v.get("experiment"), s.get("test_key")) in dropped else ""
            lines += ["", f"{s['claim']}: **{s['result']}**{mark}.", ""] + [f"- {reason}" for reason in s["reasons"]]
        if v.get("notes"):
            lines += [""] + [f"Note: {note}." for note in v["notes"]]
        if v.get("differences"):
            lines += ["", "Where this differs from the paper: " + "; ".join(v["differences"]) + "."]
        lines += ["", f"![{stem}]({stem}.png)", "", (out.parent / f"{stem}.md").read_text().rstrip()]
    if not config.get("lambada"):
        lines += ["", "LAMBADA perplexity tables are not produced: `lambada` is null in the config "
                  "(LAMBADA needs GPT-2 BPE and a download; see config/README.md)."]
    out.write_text("\n".join(lines) + "\n")


# Each decided verdict's p-value, by verdict: the p of its own test (for a statement over settings, held and
# equivalent the largest of the settings', did not hold the smallest Holm-adjusted one).
P_OF = {"held": "p_value", "did not hold": "p_against", "equivalent": "p_equivalent"}
NOT_KEPT = "not kept by Benjamini–Hochberg over the report"


def distinct_tests(statements):
    """{test: statement} of the statements a verdict was tested for, each distinct test once (the same comparisons of
    the same groups' seeds on the same metric, whichever artifact states them), and how many repeated one."""
    tested = [s for s in statements if s["result"] not in ("descriptive", "not tested at this scale")]
    found = {s["test"]: s for s in tested}
    return found, len(tested) - len(found)


def bh_families(statements, alpha):
    """{verdict: (the p-values of every distinct test, how many BH keeps, the tests it keeps)}: one Benjamini–Hochberg
    family per decided verdict, over the p of that verdict's own test in every distinct tested statement (1 where it
    cannot be reached), so that a report's refutations and equivalences are read with their multiplicity as its
    held ones are."""
    tested, _ = distinct_tests(statements)
    out = {}
    for verdict, key in P_OF.items():
        ps = {t: (1.0 if s.get(key) is None else float(s[key])) for t, s in tested.items()}
        kept = benjamini_hochberg(list(ps.values()), alpha) if ps else 0
        threshold = sorted(ps.values())[kept - 1] if kept else -1.0
        out[verdict] = (list(ps.values()), kept, {t for t, p in ps.items() if p <= threshold})
    return out


def not_kept(verdicts, alpha):
    """The (experiment, test key) of every decided statement that its verdict's Benjamini–Hochberg family does not
    keep (each family of origin apart: the paper's statements, the comparisons a config adds)."""
    dropped = set()
    for family in origins(verdicts):
        for verdict, (_, _, kept) in bh_families(family, alpha).items():
            dropped |= {s["test"] for s in family if s["result"] == verdict and s["test"] not in kept}
    return dropped


def origins(verdicts):
    """(the paper's statements, the comparisons a config adds), each keyed by its distinct test."""
    everything = [{**s, "test": (v.get("experiment"), s["test_key"]) if s.get("test_key") else id(s)}
                  for v in verdicts for s in v["statements"]]
    return ([s for s in everything if s.get("origin", PAPER) == PAPER],
            [s for s in everything if s.get("origin", PAPER) != PAPER])


def summary(verdicts, alpha):
    """The paper's statements' summary, then that of the comparisons the config adds (optimizers from outside),
    each its own family: adding an optimizer does not change what the report says of the paper's statements."""
    paper, added = origins(verdicts)
    if not added:
        return family_summary(paper, alpha)
    return ((family_summary(paper, alpha, scope="the paper's statements") if paper else [])
            + family_summary(added, alpha, "Comparisons the config adds (not the paper's)", "these comparisons"))


def family_summary(statements, alpha, title="Statements", scope="the whole report"):
    """The count by verdict, the inconclusive ones by why, and a Benjamini–Hochberg line per decided verdict over every
    distinct tested statement's p of that verdict's own test (held: the largest of its settings', the
    intersection–union p; did not hold: the smallest Holm-adjusted one; equivalent: the largest TOST p; 1 where it
    cannot be reached). A test that several artifacts state (the same comparisons of the same groups' seeds on the same
    metric in one experiment) counts once."""
    results = pd.Series([s["result"] for s in statements], dtype=str)
    counts = results.value_counts()
    why = pd.Series([w for s in statements if s["result"] == "inconclusive" for w in s["why"].split("; ") if w],
                    dtype=str).value_counts()
    lines = [f"{title}: " + ", ".join(f"{counts[k]} {k}" for k in counts.index) + "."]
    if len(why):
        lines[0] += " Inconclusive, by why: " + ", ".join(f"{why[k]} {k}" for k in why.index) + "."
    tested, repeats = distinct_tests(statements)
    if not tested:
        return lines
    again = f" ({repeats} more repeat one of these tests in another artifact, counted once)" if repeats else ""
    parts = []
    for verdict, (ps, kept, keep) in bh_families(statements, alpha).items():
        decided = [t for t, s in tested.items() if s["result"] == verdict]
        parts.append(f"{sum(t in keep for t in decided)} of the {len(decided)} {verdict}")
    lines.append(f"Across the {len(tested)} distinct tested statements{again}, Benjamini–Hochberg at a false-discovery "
                 f"rate of {alpha:g}, one family per verdict on the p-value of that verdict's own one-sided test in "
                 f"every statement, keeps {', '.join(parts)}: read together, the kept are the verdicts that survive "
                 f"the multiplicity of {scope}; each verdict alone is a test at alpha (the ones not kept are marked "
                 f"'{NOT_KEPT}').")
    return lines


def _compact(table):
    def side(mean, sd, n):
        if pd.isna(mean):
            return "–"
        spread = f" ± {sd:.3f}" if pd.notna(sd) else ""
        count = f" (n={int(n)})" if pd.notna(n) and n else ""
        return f"{mean:.3f}{spread}{count}"
    return pd.DataFrame({
        "artifact": table.artifact, "experiment": table.experiment, "claim": table.claim, "model": table.model,
        "batch": table.batch, "subject": [f"{s}: {side(m, d, n)}" for s, m, d, n in
                                          zip(table.subject, table.subject_mean, table.subject_sd, table.subject_n)],
        "reference": [f"{s}: {side(m, d, n)}" for s, m, d, n in
                      zip(table.reference, table.reference_mean, table.reference_sd, table.reference_n)],
        "difference": table.difference, "margin": table.margin, "verdict": table.verdict})
