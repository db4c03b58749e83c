"""Check a GPU machine before spending GPU-hours on the paper's grid (scripts/gpu_check.sh).

    python -m merit_repro.gpu_check [--parts 1,2,3] [--quick] [--out gpu_check.json] [--device cpu] [--keep]

What breaks first at paper scale, in eight parts, each timed as it goes; one table at the end, and exit
1 on any FAIL (a part that raises is a FAIL row; the others still run). Under 7 minutes on one H200,
torch.compile included; estimated, the training FLOPs being seconds: part 1 ~70 s (process and CUDA start-up of
4 cells), part 2 ~50 s (compiling GPT-2 Small), part 3 ~35 s (3 torchruns), part 6 ~25 s, part 8 ~100 s (a
compiled trainer cell and its plain loop), the others ~5-15 s. scripts/gpu_check.sh sets a bare GPU machine up first.
One module per part, each with its part_* function and the judge_* helpers that turn results into rows:

1. ``workflow``: the trainer through the workflow: ``snakemake --cores 4 --resources gpu=1`` on
   config/gpu_check.yaml (4 tiny cells with ``gpus: 1``) into a temporary folder: exit 0, every run's
   summary.json on CUDA.
2. ``parity``: bf16 and torch.compile parity: GPT-2 Small (1024 tokens) trained 6 AdamW steps on one fixed
   batch from the same weights: bf16 compiled vs bf16 eager within COMPILE_TOLERANCE, bf16 vs fp32 within
   BF16_TOLERANCE, at every step, and the loss falls.
3. ``ddp``: DDP through ``merit_repro.launch.torchrun`` on every visible GPU (NCCL): a tiny cell runs to the
   end; the same cell stopped at once (``--stop-at`` now) exits 75 through torchrun with ckpt.pt, and its rerun
   resumes and completes (exit 0) at the uninterrupted run's loss. With one GPU two ranks share it over gloo
   ($MERIT_DDP_BACKEND: NCCL refuses two ranks on one device), and NCCL between GPUs is reported skipped.
4. ``host_syncs``: host synchronisations: ``torch.cuda.set_sync_debug_mode("error")`` around MERIT's and
   LAMB's multi-tensor steps (diagnostics on and off) and the trainer's gradient clipping, on GPT-2 Small's
   parameters; MERIT's and LAMB's step times against fused AdamW (reported), and with compile on,
   ``torch.compile(opt.step)`` of each: its time against AdamW's and its drift from the eager step after 3 steps.
5. ``memory``: ``merit_repro.train.memory.fit_micro_batch`` for GPT-2 Small at 240 sequences per GPU (the
   paper's 480 on 2 GPUs, DDP buckets counted), then 3 MERIT steps at the fitted micro-batch with gradient
   accumulation: no OOM, peak memory (plus the DDP buckets this DDP-free step lacks) within the fit's limit.
6. ``speed``: tokens/s, MFU (``merit_repro.train.hardware``) and peak memory of GPT-2 Small, Medium and
   Large, 7 bf16 AdamW steps of 8 x 1024 tokens each, eager; Small also compiled (the shapes of part 2, so
   its compilation comes from the cache; Medium's and Large's would take minutes of the budget).
7. ``reference``: the optimizers on the device against the float64 reference (``optim_reference``: both
   code paths, bf16 parameters), and the MAL probe on GPT-2 Small (finite, one value per layer and head).

8. ``tier``: config/gpu1.yaml's cost from a measurement: a cell of its model (GPT-2 Small, context 1024, 128
   sequences, GPT-2 BPE on Shakespeare) trains 12 steps through ``python -m merit_repro.launch`` with
   ``compile: true``; its tokens/s (compilation excluded) go to ``merit_repro.plan.cost --tokens-per-s-per-gpu``,
   and the config's GPU-hours, tuning's bound included, must be at most 24. Beside it, ``plain_loop``: the same
   cell's model, micro-batch, optimizer, autocast, compile and clipping in a bare loop (no probes, evaluation or
   logging), timed the same way: the trainer's tokens/s over the plain loop's must be at least 0.97 on a GPU.

``common`` holds the sizes of every part (``Plan``) and the helpers the parts share; ``__main__`` runs the
parts and prints the table.

``--device cpu`` runs every part at small sizes (the tests use it): part 1 with ``gpus: 0``, part 3 with
2 gloo processes, host transfers counted by ``merit_repro.optim.dispatch_count`` instead of CUDA's sync
check, part 8 with a demo-sized cell on Shakespeare bytes (its GPU-hours reported, not judged), and no
torch.compile. Without a GPU it says so and exits 0; with a GPU that torch cannot use (a
CPU-only build of torch, a driver too old) it says so in one line and exits 1.
"""
