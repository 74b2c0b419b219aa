"""trainer.train with deterministic mode's NaN fill of torch.empty on (FILL=1, torch's default) or
off (FILL=0), for the whole process. Used to time what `run.deterministic` pays for the fill.
Usage: FILL=0|1 python3 train_fill.py --config ... [overrides]  (one process, one GPU)."""
import os
import sys

import torch

torch.utils.deterministic.fill_uninitialized_memory = os.environ["FILL"] == "1"

from trainer.train import main  # noqa: E402

sys.exit(main(sys.argv[1:]))
