"""When a training run has diverged, and how often its loss spiked.

A run has diverged when

- its training loss is not finite (NaN or inf), or
- its training loss stays above ``factor`` x its first loss (the untrained model's loss) for
  ``window`` x the planned steps in a row (at least one step), or
- it ends with a validation loss that is not finite or above ``factor`` x the untrained model's.

A spike that comes back below the threshold within the window is not divergence: it is counted as
a metric (``loss_spikes``: the number of times the loss rose above ``spike_factor`` x the lowest loss
so far) and the run goes on. The state is plain data, kept in the checkpoint, so a resumed run
judges divergence exactly as an uninterrupted one.
"""

import math


def new_state():
    return {"first_loss": None, "min_loss": math.inf, "steps_above": 0, "loss_spikes": 0, "in_spike": False}


class DivergenceRule:
    def __init__(self, factor, window, spike_factor, planned_steps):
        self.factor = factor
        self.spike_factor = spike_factor
        self.patience = max(1, math.ceil(window * planned_steps))

    def update(self, state, loss):
        """Record one step's training loss; returns the reason it diverged, or None."""
        if not math.isfinite(loss):
            return f"training loss is {loss}"
        if state["first_loss"] is None:
            state["first_loss"] = loss
        spiking = loss > self.spike_factor * state["min_loss"]
        if spiking and not state["in_spike"]:
            state["loss_spikes"] += 1
        state["in_spike"] = spiking
        state["min_loss"] = min(state["min_loss"], loss)
        threshold = self.factor * state["first_loss"]
        state["steps_above"] = state["steps_above"] + 1 if loss > threshold else 0
        if state["steps_above"] >= self.patience:
            return (f"training loss above {self.factor:g} x its first loss ({threshold:.4f}) for "
                    f"{state['steps_above']} steps in a row")
        return None

    def final(self, initial_val_loss, final_val_loss):
        """The end-of-run check on validation loss; returns the reason it diverged, or None."""
        if final_val_loss is None or not math.isfinite(final_val_loss):
            return f"final validation loss is {final_val_loss}"
        if initial_val_loss is not None and final_val_loss > self.factor * initial_val_loss:
            return (f"final validation loss {final_val_loss:.4f} is above {self.factor:g} x the untrained model's "
                    f"({initial_val_loss:.4f})")
        return None
