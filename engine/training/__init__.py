"""Components the recipes share: loop pieces, loss, checkpoints, schedules, plots, set-up."""

import warnings

# peft still calls a transformers API renamed in 5.x; the warning says nothing the user can act on.
warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
