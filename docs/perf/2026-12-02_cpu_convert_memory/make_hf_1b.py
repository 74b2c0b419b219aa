"""Write a Hugging Face Llama folder with random bf16 weights of titankit's 1B flavor (1.5B params).

    python docs/perf/2026-12-02_cpu_convert_memory/make_hf_1b.py /tmp/hf1b    # from the repo root
"""
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from safetensors.torch import save_file  # noqa: E402

from trainer.config import load_config, resolve_model_args  # noqa: E402
from trainer.models.hf_llama import hf_config, to_hf_name  # noqa: E402
from trainer.models.llama import Llama  # noqa: E402

args = resolve_model_args(load_config(["--config", "configs/debug.toml", "--model.flavor=1B"]))
with torch.device("meta"):
    shapes = {k: v.shape for k, v in Llama(args).state_dict().items()}
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
g = torch.Generator().manual_seed(0)
shard, weight_map, files = {}, {}, []
names = list(shapes)
for k in names:
    shard[to_hf_name(k)] = (torch.randn(shapes[k], generator=g) * 0.02).bfloat16()
    if sum(t.numel() for t in shard.values()) * 2 > 1e9 or k == names[-1]:  # ~1 GB files
        f = f"model-{len(files) + 1:05d}.safetensors"
        save_file(shard, f"{out}/{f}")
        files.append(f)
        weight_map.update({h: f for h in shard})
        shard = {}
json.dump({"weight_map": weight_map, "metadata": {}}, open(f"{out}/model.safetensors.index.json", "w"))
json.dump(hf_config(args, torch.bfloat16), open(f"{out}/config.json", "w"))
print(args.num_params(), files)
