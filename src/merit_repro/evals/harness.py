"""Our runs as lm-evaluation-harness models: ``RunLM`` scores continuations with a run's own model and tokenizer.

    import lm_eval, merit_repro.evals.harness
    lm_eval.simple_evaluate(model="merit-run", model_args={"run": "results/runs/<cell>"}, tasks=["arc_easy"])

Table 1's tasks are multiple-choice, so ``loglikelihood`` is what they use: a context is truncated on the left
to the context the run trained with, and a continuation's log-probability is summed over the log-softmax of the
tokenizer's real vocabulary (GPT-2's 50,257 tokens, not the model's 50,304 padded rows); a continuation longer than
that context is refused, as lm-eval's hf model does. Requests are batched,
longest first, on the GPU when there is one. Rolling log-likelihoods and generation are refused.
"""

import torch
import torch.nn.functional as F
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from tqdm import tqdm

from .runmodel import load_run

MODEL_NAME = "merit-run"


@register_model(MODEL_NAME)
class RunLM(TemplateLM):
    def __init__(self, run, device=None, batch_size=32, **unused):
        super().__init__()
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.loaded = run if hasattr(run, "model") else load_run(run, device)
        self.loaded.model.to(device)
        self._device = torch.device(device)
        self.batch_size = int(batch_size)

    @property
    def device(self):
        return self._device

    @property
    def eot_token_id(self):
        return self.loaded.tokenizer.eot

    def tok_encode(self, string, add_special_tokens=None, **kwargs):
        return self.loaded.tokenizer.encode_ordinary(string)

    @torch.no_grad()
    def _loglikelihood_tokens(self, requests, disable_tqdm=False, **kwargs):
        """[(log P(continuation | context), continuation is the greedy one)] in the order of requests."""
        block = self.loaded.block_size
        windows = []   # (request index, input ids, continuation ids)
        for i, (_, context, continuation) in enumerate(requests):
            if len(continuation) > block:   # as lm-eval's hf model: a cut choice would not compare with the others
                raise ValueError(f"a continuation of {len(continuation)} tokens is longer than the {block} tokens "
                                 f"{self.loaded.run_dir} was trained with; this task does not fit the model")
            whole = (list(context) + list(continuation))[-(block + 1):]
            windows.append((i, whole[:-1], whole[len(whole) - len(continuation):]))
        windows.sort(key=lambda w: -len(w[1]))
        results = [None] * len(requests)
        for start in tqdm(range(0, len(windows), self.batch_size), disable=disable_tqdm, desc="loglikelihood",
                          unit="batch"):
            batch = windows[start:start + self.batch_size]
            width = len(batch[0][1])
            x = torch.zeros(len(batch), width, dtype=torch.long)
            for row, (_, ids, _) in enumerate(batch):
                x[row, :len(ids)] = torch.tensor(ids)   # padded on the right: causal, so no earlier position sees it
            logits, _ = self.loaded.model(x.to(self._device))
            logprobs = F.log_softmax(logits[..., :self.loaded.vocab_size].float(), dim=-1)
            for row, (index, ids, target) in enumerate(batch):
                span = logprobs[row, len(ids) - len(target):len(ids)]
                target = torch.tensor(target, device=span.device)
                total = span.gather(-1, target[:, None]).sum().item()
                results[index] = (total, bool(torch.equal(span.argmax(-1), target)))
        return results

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError(f"{MODEL_NAME} scores multiple-choice tasks only (Table 1's); for perplexity "
                                  "tasks export the run (python -m merit_repro.evals.export) and use lm_eval --model hf")

    def generate_until(self, requests, disable_tqdm=False):
        raise NotImplementedError(f"{MODEL_NAME} scores multiple-choice tasks only (Table 1's); for generation "
                                  "tasks export the run (python -m merit_repro.evals.export) and use lm_eval --model hf")
