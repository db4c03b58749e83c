"""Starting training jobs: the launcher a workflow job runs (python -m merit_repro.launch), torchrun with
its stop codes, GPU slots on a workstation, and the warm trainer that saves a demo cell its start-up."""
