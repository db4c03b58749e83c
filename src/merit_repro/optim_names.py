"""The optimizers' names, torch-free: the workflow's wildcards and the config checks read them without
importing torch (which the config check then needs only for optimizer settings it has not built before,
see grid.optimizer_problems). ``merit_repro.optim.OPTIMIZERS`` maps each name to its class."""

OPTIMIZER_NAMES = ("adamw", "lamb", "merit", "maxlamb", "merit_noclip", "merit_nofloor", "merit_noelementwise")
