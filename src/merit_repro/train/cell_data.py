"""A cell's corpora as its training loop reads them: verified before anything is built, the fixed MAL probe batch,
and the windows of one micro-batch of the train split."""

from merit_repro.data import batches, tokens
from merit_repro.plan import records


class CellData:
    def __init__(self, cfg):
        self.cfg = cfg
        self.meta = tokens.verify(cfg.data_dir, tokenizer=cfg.tokenizer)   # fails before any training
        self.fingerprints = {"data": records.fingerprint(self.meta)}
        if cfg.lambada_dir:
            self.fingerprints["lambada"] = records.fingerprint(tokens.verify(cfg.lambada_dir, tokenizer=cfg.tokenizer))
        self.check_block_size()
        val = tokens.open_tokens(cfg.data_dir, "val", self.meta)
        offsets = batches.validation_offsets(len(val), cfg.block_size, cfg.mal_batch * cfg.block_size)
        self.probe_batch = batches.windows(val, offsets[:cfg.mal_batch], cfg.block_size)[0]
        # The train split's memmap, opened by the first batch after a log point and dropped at it (release): opening
        # it per batch cost more host time than the windows read from it, and dropping it unmaps the pages it read,
        # so that they do not pile up in the process's RSS over a large corpus (why nanoGPT reopens it per batch)
        self.train_split = tokens.HeldSplit(cfg.data_dir, "train", self.meta)
        self.train_tokens = None

    def check_block_size(self):
        for split in tokens.SPLITS:
            n = self.meta["splits"][split]["tokens"]
            if n < self.cfg.block_size + 2:
                raise ValueError(f"block_size={self.cfg.block_size} is larger than the {split} split of "
                                 f"{self.cfg.data_dir} ({n} tokens); use a smaller block_size or more data")

    def windows(self, step, rows):
        """(x, y) on the CPU: the rows (a slice of the global batch) of the step's batch, the same on any devices."""
        cfg = self.cfg
        if self.train_tokens is None:
            self.train_tokens = self.train_split.open()
        offsets = batches.batch_offsets(len(self.train_tokens), cfg.block_size, cfg.batch_size, cfg.seed, step)
        return batches.windows(self.train_tokens, offsets[rows], cfg.block_size)

    def release(self):
        self.train_tokens = None

    @property
    def val_tokens(self):
        """The validation tokens an evaluation reads: the same fixed windows in every cell of a block size."""
        cfg = self.cfg
        return len(batches.validation_offsets(self.meta["splits"]["val"]["tokens"], cfg.block_size,
                                              cfg.eval_tokens)) * cfg.block_size
