"""What a one-rank run of a config trains on at a given step: the first micro-batch of that step
from the config's own sample stream (data, tokenizer, seq_len, seed), decoded, with the Python
version whose standard library makes the embedded corpus.

  PYTHONPATH=$PWD python3 docs/perf/2026-12-04_h200_tk_bwd_small_kernels/sample_at_step.py configs/llama3_8b.toml 28
"""
import collections
import sys

from trainer.config import load_config
from trainer.data import SampleStream, build_dataset, build_tokenizer


def main():
    config, step = sys.argv[1], int(sys.argv[2])
    cfg = load_config(["--config", config])
    tok = build_tokenizer(cfg.data.tokenizer)
    stream = SampleStream(build_dataset(cfg.data, tok), cfg.training.seq_len, cfg.run.seed, 0, 1,
                          cfg.training.local_batch_size)
    t = cfg.training
    per_step = (t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size) // t.local_batch_size
    for _ in range((step - 1) * per_step + 1):  # the step's first micro-batch
        batch = stream.next_batch()
    ids = batch["tokens"][0].tolist()
    text = tok.decode(ids)
    print(f"Python {sys.version.split()[0]}, step {step}, sample {batch['indices'][0].item()}, "
          f"{len(ids)} tokens; most common characters: {collections.Counter(text).most_common(6)}")
    print(text[:700])


if __name__ == "__main__":
    main()
