"""Convert Llama-3 weights between titankit checkpoints and Hugging Face's safetensors layout.

    # a titankit step folder -> a folder LlamaForCausalLM.from_pretrained (or vLLM) loads
    python scripts/convert_checkpoint.py to-hf outputs/llama3_8b/checkpoint/step-1000 /data/my-8b-hf
    # a run's checkpoint/ folder: its newest complete step (as checkpoint.initial_load_path reads it)
    python scripts/convert_checkpoint.py to-hf outputs/llama3_8b/checkpoint /data/my-8b-hf
    # Hugging Face Llama-3 weights -> a step folder to start a run from (model weights only)
    python scripts/convert_checkpoint.py from-hf /data/Meta-Llama-3.1-8B /data/llama31-8b-titankit \
        --config configs/llama3_8b.toml
    # then train with: --checkpoint.initial_load_path=/data/llama31-8b-titankit

to-hf reads the resolved config of the launch that saved the step unless --config is given: the run
folder (two levels above the step folder) keeps config.toml and a config_NNNN.toml per relaunch that
changed it, and the checkpoint records which one it was saved under. A checkpoint saved before that
record gets the newest of those files modified before its .metadata: a copy of the run folder that
did not keep modification times (cp -r rather than cp -a or rsync -a) can change that choice, which
is printed. It loads one safetensors shard's worth of tensors at a time (so the host needs about
--shard-gb of memory, not the whole model), and writes bf16 by default. from-hf
checks config.json and every tensor's shape against the titankit model of --config (plus any
--section.key=value overrides) and stores the weights in their own dtype; the trainer's load
converts them to its fp32 parameters. Only the weights cross over, and for to-hf the run's tokenizer:
no optimizer state or data position. A tokenizer.json (data.tokenizer) is copied with the
tokenizer_config.json and special_tokens_map.json beside it; titankit's byte tokenizer ("bytes") has
no Hugging Face counterpart. config.json (and generation_config.json, which `generate` reads) get
the bos_token_id / eos_token_id of the run's tokenizer when it is the one the checkpoint recorded
(--bos-token-id / --eos-token-id set them otherwise); the summary says which ids were written or why
none. The output folder must not exist yet; it appears only once complete. from-hf records the
CRC32 checksums a run's saves record (.checksums/), so a load verifies the folder; to-hf reads only
the weights and does not verify the step (`python -m trainer.checkpoint_verify STEP` does).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DTYPES = {"bfloat16", "float32", "float16"}


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    sub = p.add_subparsers(dest="direction", required=True)
    to = sub.add_parser("to-hf", help="a titankit step folder -> Hugging Face safetensors + config.json")
    to.add_argument("step", help="a complete checkpoint folder, e.g. <run>/checkpoint/step-1000, or a "
                    "run's checkpoint/ folder (then its newest complete step-N, which is named)")
    to.add_argument("out", help="the folder to create")
    to.add_argument("--config", default="", help="the run's TOML (default: the file of the step's run "
                    "folder, config.toml or config_NNNN.toml, that the checkpoint records it was saved "
                    "under; for a checkpoint without that record, the newest of them modified before "
                    "its .metadata, a choice that a copy without modification times (cp -r, not "
                    "cp -a) can change)")
    to.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES), help="dtype of the written weights")
    to.add_argument("--shard-gb", type=float, default=5.0, help="largest safetensors file, GB")
    for which in ("bos", "eos"):
        to.add_argument(f"--{which}-token-id", type=int, default=None, metavar="ID",
                        help=f"{which}_token_id of config.json and generation_config.json (default: the run's "
                        "tokenizer's, when it can be read here and is the one the checkpoint was trained with)")
    back = sub.add_parser("from-hf", help="Hugging Face Llama weights -> a titankit step folder (weights only)")
    back.add_argument("hf", help="a folder with config.json and model*.safetensors")
    back.add_argument("out", help="the folder to create; then set checkpoint.initial_load_path to it")
    back.add_argument("--config", required=True, help="the TOML of the runs that will start from these weights")
    opts, rest = p.parse_known_args(argv)
    bad = [a for a in rest if not a.startswith("--")]
    if bad:
        raise ValueError(f"unexpected argument {bad[0]!r}: config overrides are --section.key=value")
    if opts.direction == "to-hf" and opts.shard_gb <= 0:
        raise ValueError("--shard-gb must be > 0")
    return opts, rest


def launch_config_of(step: Path, recorded: str | None = None) -> Path:
    """The resolved config of the launch that saved `step`: the run folder keeps one per launch that
    changed it (config.toml, config_0002.toml, ...; trainer/trainer.py keep_launch_config).
    `recorded`: the file name the checkpoint records (saved_launch_config), used when that file is
    there. Else (a checkpoint from before the record) each file was written as its launch started,
    so it is the newest one modified before the step's .metadata: a rule a copy that did not keep
    modification times (cp -r) can break, so the choice is printed when there are several."""
    run_dir = step.resolve().parent.parent
    launches = [p for p in run_dir.glob("config*.toml") if re.fullmatch(r"config(_\d+)?\.toml", p.name)]
    if recorded is not None and (run_dir / recorded).is_file():
        if len(launches) > 1:
            print(f"{run_dir} has {len(launches)} launch configs; {step.name} was saved under "
                  f"{recorded} (recorded in the checkpoint; pass --config to choose another)",
                  file=sys.stderr)
        return run_dir / recorded
    why = (f"the checkpoint names {recorded}, which is not there; " if recorded is not None else
           "the checkpoint does not record which (saved by an older titankit); ")
    if not launches:  # a copy of the checkpoint without its run folder's configs
        raise ValueError(f"{run_dir}: no launch config (config.toml) in the run folder of {step.name}"
                         f"{' (the checkpoint names ' + recorded + ')' if recorded else ''}; pass --config FILE, "
                         "the TOML the run was trained with")
    if len(launches) == 1:
        if recorded is not None:
            print(f"{run_dir}: {why}using {launches[0].name}, the only launch config there (pass --config "
                  "FILE to choose another)", file=sys.stderr)
        return launches[0]
    saved = (step / ".metadata").stat().st_mtime
    before = [p for p in launches if p.stat().st_mtime <= saved]
    chosen = max(before or launches, key=lambda p: p.stat().st_mtime)
    print(f"{run_dir} has {len(launches)} launch configs; {why}{step.name} was saved under "
          f"{chosen.name}, the newest modified before its .metadata (a copy of the run folder that "
          "did not keep modification times can change this; pass --config to choose another)",
          file=sys.stderr)
    return chosen


def resolve_step(path: Path) -> Path:
    """The step folder to export: `path` itself, or, when `path` is a folder of step-N folders (a
    run's checkpoint/), its newest complete one, named on stderr with the newer incomplete ones it
    skipped: checkpoint.initial_load_path's reading of a path (checkpoint_folders.resolve_checkpoint)."""
    from trainer.checkpoint_folders import STEP_RE, incomplete_reason, list_step_folders, resolve_checkpoint

    if path.is_file():  # resolve_checkpoint would say "no such folder" of a file that exists
        raise ValueError(f"{path}: is a file; pass a step folder (<run>/checkpoint/step-N) or a run's "
                         "checkpoint/ folder")
    chosen = resolve_checkpoint(path, str(path), warn=False)
    if chosen != path:
        step = int(STEP_RE.match(chosen.name).group(1))
        newer = [f"{p.name}: {incomplete_reason(p)}" for s, p in list_step_folders(path) if s > step]
        print(f"{path} is a folder of checkpoints: exporting its newest complete one, {chosen.name} "
              "(pass a step folder to export another)"
              + "".join(f"\n  skipped the newer {n}" for n in newer), file=sys.stderr)
    return chosen


def load_run_config(config: str, overrides: list[str]) -> tuple[Any, Any]:
    """(job config, Llama args) of a titankit config with overrides; ValueError for another model family."""
    from trainer.config import load_config, resolve_model_args

    with warnings.catch_warnings():  # its warnings are about training settings, not the model
        warnings.simplefilter("ignore", UserWarning)
        cfg = load_config(["--config", config, *overrides])
    if cfg.model.name != "llama3":
        raise ValueError(f"{config}: model.name = {cfg.model.name!r}; only llama3 (dense) converts to "
                         "and from Hugging Face's LlamaForCausalLM")
    return cfg, resolve_model_args(cfg)


# Written beside a tokenizer.json by Hugging Face's save_pretrained; copied along when present.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def copy_tokenizer(tokenizer: str, out: Path) -> str:
    """Copy the run's tokenizer.json (and the files Hugging Face keeps beside it) into the export;
    returns what was done, for the summary line."""
    if tokenizer == "bytes":
        return ("no tokenizer: the run used titankit's byte tokenizer (data.tokenizer = 'bytes'), "
                "which has no Hugging Face counterpart")
    src = Path(tokenizer).expanduser()
    if not src.is_file():
        return f"no tokenizer: data.tokenizer = {tokenizer!r} is not a file here"
    copied = []
    for name in TOKENIZER_FILES:
        path = src if name == "tokenizer.json" else src.parent / name
        if path.is_file():
            shutil.copyfile(path, out / name)
            copied.append(name)
    return f"tokenizer copied from {src.parent}: {', '.join(copied)}"


def _saved_item(step: Path, metadata: Any, section: str, key: str) -> Any:
    """One bytes item the trainer records in the checkpoint (section.key), or None when it has none."""
    import torch.distributed.checkpoint as dcp

    if f"{section}.{key}" not in metadata.state_dict_metadata:
        return None
    state: dict[str, Any] = {section: {key: None}}  # a bytes item: DCP fills in the object
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(state, checkpoint_id=str(step), no_dist=True)
    return state[section][key]


def saved_tokenizer(step: Path, metadata: Any) -> str | None:
    """The tokenizer fingerprint the checkpoint's data-stream identity records (trainer/data/identity.py);
    None for a weights-only step (from-hf) or one saved before identities existed."""
    from trainer.data import identity

    text = _saved_item(step, metadata, "data", "identity")
    return None if text is None else identity.loads(text, f"checkpoint {step}").get("tokenizer")


def saved_launch_config(step: Path, metadata: Any) -> str | None:
    """The run folder's config file the checkpoint was saved under (config.toml, config_0002.toml,
    ...); None for a weights-only step or one saved before the record existed."""
    name = _saved_item(step, metadata, "train", "launch_config")
    return None if name is None else str(name)


def _shard_eos(dataset: str, fingerprint: str) -> int | None:
    """The EOS id a shard header of `dataset` records, if the folder is here and was made by the
    tokenizer `fingerprint` (every header of a folder has the same; TokenSource checks that)."""
    from trainer.data.shards import read_header

    folder = Path(dataset).expanduser()
    if dataset == "embedded" or not folder.is_dir():
        return None
    for header in sorted(folder.glob("*.json")):
        try:
            return int(read_header(header.with_suffix(".bin"), fingerprint)["eos_id"])
        except ValueError:
            continue  # COMPLETE.json, or a shard of another tokenizer: not evidence
    return None


def special_token_ids(cfg: Any, saved_fp: str | None, vocab_size: int, given: dict[str, int | None]
                      ) -> tuple[dict[str, int | None], str]:
    """({"bos_token_id": id or None, "eos_token_id": ...}, what the summary says about them).

    Without them transformers' LlamaConfig falls back to Llama-2's ids (bos 1, eos 2) or, in older
    versions, to none, and `generate` never stops at the end of a document. The run's data.tokenizer
    knows them (the byte tokenizer: BOS 256, EOS 257) once it is checked to be the tokenizer the
    checkpoint was trained with; if it cannot be read here, the shard headers of data.dataset
    record the EOS id. --bos-token-id / --eos-token-id win over both."""
    from trainer.data.tokenizer import ByteTokenizer, build_tokenizer

    for key, value in given.items():
        if value is not None and not 0 <= value < vocab_size:
            raise ValueError(f"--{key.replace('_', '-')} {value} is not a token of the model (0..{vocab_size - 1})")
    spec = cfg.data.tokenizer
    found: dict[str, int] = {}
    why = ""
    try:
        tok = build_tokenizer(spec)
    except ValueError as exc:
        tok, why = None, str(exc)  # names data.tokenizer and the path it looked at
    if tok is not None and saved_fp is not None and tok.fingerprint != saved_fp:
        tok, why = None, (f"data.tokenizer = {spec!r} is tokenizer {tok.fingerprint!r} here, but the checkpoint "
                          f"was trained with {saved_fp!r}")
    if tok is not None:
        found = {"bos_token_id": tok.bos_id, "eos_token_id": tok.eos_id}
        source = ("titankit's byte tokenizer" if isinstance(tok, ByteTokenizer) else f"data.tokenizer {spec}")
        source += "" if saved_fp else ", unchecked: the checkpoint records no data identity"
    elif saved_fp is not None and (eos := _shard_eos(cfg.data.dataset, saved_fp)) is not None:
        found, source = {"eos_token_id": eos}, f"the shard headers of data.dataset {cfg.data.dataset}"
    ids = {key: given[key] if given[key] is not None else found.get(key) for key in given}
    parts = []
    from_run = [f"{k} {v}" for k, v in ids.items() if v is not None and given[k] is None]
    if from_run:
        parts.append(f"{', '.join(from_run)} (from {source})")
    explicit = [f"{k} {v} (given)" for k, v in ids.items() if given[k] is not None]
    parts += explicit
    unknown = [k for k, v in ids.items() if v is None]
    if unknown:
        flags = " / ".join(f"--{k.replace('_', '-')}" for k in unknown)
        reason = why or "the run's tokenizer has none"
        parts.append(f"no {' or '.join(unknown)}: {reason}; pass {flags}")
    return ids, "; ".join(parts)


def expected_shapes(args: Any) -> dict[str, tuple[int, ...]]:
    """titankit parameter name -> shape, from a model built on the meta device."""
    import torch

    from trainer.models.llama import Llama

    with torch.device("meta"):
        model = Llama(args)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def refuse_existing(out: Path) -> None:
    """Checked first, before any tensor is read: the output must be a new folder."""
    if out.exists():
        raise ValueError(f"{out} already exists; give a new folder (nothing was written)")


def fresh_output(out: Path) -> Path:
    """A temporary folder beside `out` to write into; `out` itself must not exist."""
    refuse_existing(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))


def finish(tmp: Path, out: Path) -> None:
    """Make the complete folder appear under its name in one step (a rename within one filesystem),
    with the permissions of a folder made normally (mkdtemp and some writers create private ones)."""
    umask = os.umask(0)
    os.umask(umask)
    for path in [tmp, *tmp.rglob("*")]:
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)
    os.replace(tmp, out)


def plan_shards(names: list[str], sizes: dict[str, int], limit: int) -> list[list[str]]:
    """Consecutive groups of names of at most `limit` bytes each (a larger tensor gets its own)."""
    shards: list[list[str]] = []
    used = 0
    for name in names:
        if not shards or (used + sizes[name] > limit and shards[-1]):
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += sizes[name]
    return shards


def to_hf(opts: argparse.Namespace, overrides: list[str]) -> tuple[Path, str]:
    """Writes the export; returns its folder and what happened to the tokenizer."""
    import torch
    import torch.distributed.checkpoint as dcp
    from safetensors.torch import save_file

    from trainer.checkpoint_folders import check_model_fits, read_metadata
    from trainer.models.hf_llama import hf_config, to_hf_name, to_hf_tensor

    out = Path(opts.out)
    refuse_existing(out)
    step = resolve_step(Path(opts.step))
    metadata = read_metadata(step)
    config = (Path(opts.config) if opts.config else
              launch_config_of(step, saved_launch_config(step, metadata)))
    if not config.is_file():
        raise ValueError(f"{config}: no such file; pass --config with the TOML the run was trained with")
    cfg, args = load_run_config(str(config), overrides)
    shapes = expected_shapes(args)
    template = {k: torch.empty(s, device="meta") for k, s in shapes.items()}
    check_model_fits(metadata, template, step)  # names the first key whose shape differs
    given = {"bos_token_id": opts.bos_token_id, "eos_token_id": opts.eos_token_id}
    special, special_note = special_token_ids(cfg, saved_tokenizer(step, metadata), args.vocab_size, given)
    dtype = getattr(torch, opts.dtype)
    sizes = {k: dtype.itemsize * math.prod(s) for k, s in shapes.items()}
    shards = plan_shards(list(shapes), sizes, int(opts.shard_gb * 1e9))
    tmp = fresh_output(out)
    try:
        weight_map: dict[str, str] = {}
        for i, names in enumerate(shards):
            part = {"model": {k: torch.empty(shapes[k], dtype=metadata.state_dict_metadata[f"model.{k}"]
                                             .properties.dtype) for k in names}}
            with warnings.catch_warnings():  # "assuming the intent is to load in a single process": yes
                warnings.simplefilter("ignore", UserWarning)
                dcp.load(part, checkpoint_id=str(step), no_dist=True)
            file = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            tensors = {to_hf_name(k): to_hf_tensor(k, v, args).to(dtype).contiguous()
                       for k, v in part["model"].items()}
            save_file(tensors, str(tmp / file), metadata={"format": "pt"})
            weight_map.update({name: file for name in tensors})
        index = {"metadata": {"total_size": sum(sizes.values())}, "weight_map": weight_map}
        (tmp / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
        # Unknown ids are written as null: a missing key would give transformers' defaults (1, 2).
        (tmp / "config.json").write_text(json.dumps({**hf_config(args, dtype), **special}, indent=2) + "\n")
        if any(v is not None for v in special.values()):
            # generate() reads its stopping id from here when the file exists.
            (tmp / "generation_config.json").write_text(json.dumps(special, indent=2) + "\n")
        tokenizer_note = copy_tokenizer(cfg.data.tokenizer, tmp)
        finish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out, f"{special_note}; {tokenizer_note}"


def read_hf_json(path: Path) -> dict:
    """A JSON object file of a Hugging Face folder; ValueError naming it when it is not one (json's
    message names no file, and an empty or cut file is what an interrupted download leaves)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}; an interrupted download?)") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: holds a JSON {type(data).__name__}, expected an object")
    return data


def open_safetensors(stack: contextlib.ExitStack, path: Path) -> Any:
    """safe_open(path) entered on `stack`; ValueError naming the file when it is cut short or not a
    safetensors file at all (safetensors' own error names no file)."""
    from safetensors import SafetensorError, safe_open

    try:
        return stack.enter_context(safe_open(str(path), framework="pt"))
    except SafetensorError as exc:
        raise ValueError(f"{path}: not a complete safetensors file (an interrupted download?): {exc}") from None


def hf_tensors(hf: Path) -> dict[str, Path]:
    """Hugging Face tensor name -> the safetensors file holding it."""
    index = hf / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_hf_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: no \"weight_map\" object (tensor name -> safetensors file)")
        where = {k: hf / v for k, v in weight_map.items()}
        missing = sorted({p.name for p in where.values() if not p.is_file()})
        if missing:
            raise ValueError(f"{index} lists {missing[:3]}, missing from {hf} ({len(missing)} file(s) in all)")
        return where
    single = hf / "model.safetensors"
    if not single.is_file():
        raise ValueError(f"{hf}: neither model.safetensors.index.json nor model.safetensors "
                         "(a folder as Hugging Face's save_pretrained writes it)")
    with contextlib.ExitStack() as stack:
        return {k: single for k in open_safetensors(stack, single).keys()}


def from_hf(opts: argparse.Namespace, overrides: list[str]) -> Path:
    import torch.distributed.checkpoint as dcp

    from trainer.checkpoint_checksums import record_rank
    from trainer.models.hf_llama import config_mismatches, from_hf_name, from_hf_tensor

    hf, out = Path(opts.hf), Path(opts.out)
    refuse_existing(out)
    cfg_file = hf / "config.json"
    if not cfg_file.is_file():
        raise ValueError(f"{cfg_file}: no such file (a Hugging Face model folder has one)")
    hf_cfg = read_hf_json(cfg_file)
    _, args = load_run_config(opts.config, overrides)
    wrong = config_mismatches(hf_cfg, args)
    if wrong:
        raise ValueError(f"{cfg_file} does not describe the model of {opts.config}:\n  " + "\n  ".join(wrong)
                         + "\nchoose the matching model.flavor or set model.overrides")
    shapes = expected_shapes(args)
    where = hf_tensors(hf)
    names: dict[str, str] = {}  # titankit name -> Hugging Face name
    for hf_name in where:
        if hf_name.endswith("rotary_emb.inv_freq"):
            continue  # a buffer some older exports saved; titankit computes its own table
        try:
            names[from_hf_name(hf_name)] = hf_name
        except KeyError as exc:
            raise ValueError(f"{hf}: tensor {hf_name!r} has no titankit counterpart ({exc.args[0]})") from None
    tied = "output.weight" not in names and hf_cfg.get("tie_word_embeddings", False)
    if tied:
        names["output.weight"] = names.get("tok_embeddings.weight", "model.embed_tokens.weight")
    extra = [k for k in names if k not in shapes]
    if extra:
        raise ValueError(f"{hf}: tensor {names[extra[0]]!r} ({extra[0]}) is not in the titankit model of "
                         f"{opts.config} (n_layers = {args.n_layers}); {len(extra)} such tensors")
    missing = [k for k in shapes if k not in names]
    if missing:
        raise ValueError(f"{hf}: no tensor for {missing[0]!r} (Hugging Face name {_hf_name_or(missing[0])}); "
                         f"{len(missing)} missing in all")
    state: dict[str, Any] = {}
    with contextlib.ExitStack() as stack:
        handles: dict[Path, Any] = {}
        for name, hf_name in names.items():
            path = where[hf_name]
            if path not in handles:
                handles[path] = open_safetensors(stack, path)
            w = from_hf_tensor(name, handles[path].get_tensor(hf_name), args)
            if tuple(w.shape) != shapes[name]:
                raise ValueError(f"{path}: {hf_name} has shape {tuple(w.shape)}, but the titankit model "
                                 f"expects {shapes[name]} for {name}")
            state[name] = w
    tmp = fresh_output(out)
    try:
        with warnings.catch_warnings():  # "assuming the intent is to save in a single process": yes
            warnings.simplefilter("ignore", UserWarning)
            dcp.save({"model": state}, checkpoint_id=str(tmp), no_dist=True)
        # The checksums a run's own saves record, so that a load can verify this folder too; one
        # process wrote every file, under rank 0's names.
        record_rank(tmp, 0)
        finish(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _hf_name_or(name: str) -> str:
    from trainer.models.hf_llama import to_hf_name

    try:
        return repr(to_hf_name(name))
    except KeyError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    from trainer.config import ConfigError

    try:
        opts, overrides = parse_args(sys.argv[1:] if argv is None else argv)
        if opts.direction == "to-hf":
            out, tokenizer_note = to_hf(opts, overrides)
            print(f"wrote {out}: config.json and safetensors ({opts.dtype}); load it with "
                  f"transformers.LlamaForCausalLM.from_pretrained; {tokenizer_note}")
        else:
            out = from_hf(opts, overrides)
            print(f"wrote {out} (model weights only); start a run from it with "
                  f"--checkpoint.initial_load_path={out}")
    except (ConfigError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
