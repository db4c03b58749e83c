"""What a config asks to run: the results layout, the grid of cells and groups, each cell's settings, LR tuning
decisions, the config's checks, and what it costs. Never imports torch."""
