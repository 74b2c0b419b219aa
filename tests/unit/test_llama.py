"""Llama-3 model: equals an independent reference Llama-3, published parameter counts, init, FLOPs."""

import math

import pytest
import torch

from trainer.models import FAMILIES, ModelFamily
from trainer.models.llama import Llama, num_params
from trainer.models.llama_args import LlamaArgs
from trainer.models.rope import rope_table

# A tiny model whose head dim (16) puts RoPE frequencies in all three Llama-3.1 scaling bands
# (wavelengths below 2048, between 2048 and 8192, above 8192) and whose FFN width exercises
# ffn_dim_multiplier + multiple_of (int(2*256/3 * 1.3) = 221 -> 224).
TINY = dict(
    dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=300, multiple_of=32,
    ffn_dim_multiplier=1.3, norm_eps=1e-5, rope_theta=500000.0, rope_scaling=True, max_seq_len=8192,
)


# ---------------------------------------------------------------- reference Llama-3 (float64)
def ref_rope_freqs(head_dim, theta, factor=8.0, low=1.0, high=4.0, old_len=8192):
    """Meta's llama3 `apply_scaling`, frequency by frequency."""
    base = [1.0 / theta ** (i / head_dim) for i in range(0, head_dim, 2)]
    out = []
    for f in base:
        wavelen = 2 * math.pi / f
        if wavelen < old_len / high:
            out.append(f)
        elif wavelen > old_len / low:
            out.append(f / factor)
        else:
            smooth = (old_len / wavelen - low) / (high - low)
            out.append((1 - smooth) * f / factor + smooth * f)
    return torch.tensor(out, dtype=torch.float64)


def ref_rotate(x, pos, freqs):
    """x (B, S, H, D), pos (B, S): complex rotation of adjacent pairs, like Meta's apply_rotary_emb."""
    angles = pos.double()[..., None] * freqs  # (B, S, D/2)
    cis = torch.polar(torch.ones_like(angles), angles)[:, :, None, :]
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(xc * cis).flatten(3)


def ref_rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def ref_attention(q, k, v, doc_ids):
    """Explicit softmax attention; GQA by repeating each K/V head for its group of query heads."""
    b, s, hq, d = q.shape
    rep = hq // k.shape[2]
    k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d)
    allowed = torch.ones(s, s, dtype=torch.bool).tril()[None, None]
    if doc_ids is not None:
        allowed = allowed & (doc_ids[:, :, None] == doc_ids[:, None, :])[:, None]
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", probs, v)


def ref_forward(w, a, tokens, positions=None, doc_ids=None):
    """Llama-3 forward from a dict of weights named as in Meta's checkpoints."""
    b, s = tokens.shape
    hd = a["dim"] // a["n_heads"]
    pos = torch.arange(s).expand(b, s) if positions is None else positions.expand(b, s)
    freqs = ref_rope_freqs(hd, a["rope_theta"])
    h = w["tok_embeddings.weight"][tokens]
    for i in range(a["n_layers"]):
        p = f"layers.{i}."
        x = ref_rmsnorm(h, w[p + "attention_norm.weight"], a["norm_eps"])
        q = (x @ w[p + "attention.wq.weight"].T).view(b, s, -1, hd)
        k = (x @ w[p + "attention.wk.weight"].T).view(b, s, -1, hd)
        v = (x @ w[p + "attention.wv.weight"].T).view(b, s, -1, hd)
        q, k = ref_rotate(q, pos, freqs), ref_rotate(k, pos, freqs)
        h = h + ref_attention(q, k, v, doc_ids).reshape(b, s, -1) @ w[p + "attention.wo.weight"].T
        x = ref_rmsnorm(h, w[p + "ffn_norm.weight"], a["norm_eps"])
        gate = torch.nn.functional.silu(x @ w[p + "feed_forward.w1.weight"].T)
        h = h + (gate * (x @ w[p + "feed_forward.w3.weight"].T)) @ w[p + "feed_forward.w2.weight"].T
    return ref_rmsnorm(h, w["norm.weight"], a["norm_eps"]) @ w["output.weight"].T


def _tiny_model(attention: str) -> Llama:
    torch.manual_seed(0)
    model = Llama(LlamaArgs(**TINY, attention=attention))
    model.init_weights()
    with torch.no_grad():
        # Sharper attention than the 0.02 init and non-trivial norm weights, so that every part
        # of the computation moves the logits.
        for name, p in model.named_parameters():
            if name.endswith(("wq.weight", "wk.weight")):
                p.mul_(10.0)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * torch.randn_like(p))
    return model


def _doc_ids(b, s, gen):
    starts = (torch.rand(b, s, generator=gen) < 0.2).int()
    starts[:, 0] = 0
    return starts.cumsum(dim=1).to(torch.int32)


@pytest.mark.parametrize("attention", ["reference", "sdpa"])
@pytest.mark.parametrize("case", ["plain", "positions", "positions_1d", "doc_ids"])
def test_matches_reference_llama3(attention, case):
    model = _tiny_model(attention)
    weights = {k: v.double() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(1)
    b, s = 2, 24
    tokens = torch.randint(0, TINY["vocab_size"], (b, s), generator=gen)
    kwargs = {}
    if case == "positions":
        # Per-row sorted positions spread over the whole table (all three RoPE scaling bands).
        kwargs["positions"] = torch.stack([torch.randperm(8192, generator=gen)[:s].sort().values for _ in range(b)])
    if case == "positions_1d":
        # Two chunks like a context-parallel rank holds: positions 0..11 and 100..111.
        kwargs["positions"] = torch.cat([torch.arange(12), torch.arange(100, 112)])
    if case == "doc_ids":
        kwargs["doc_ids"] = _doc_ids(b, s, gen)
        assert kwargs["doc_ids"].unique().numel() > 2
    logits = model(tokens, **kwargs)
    expected = ref_forward(weights, TINY, tokens, **kwargs)
    assert logits.shape == (b, s, TINY["vocab_size"]) and logits.dtype == torch.float32
    assert expected.std() > 0.5  # the logits are not trivially small
    torch.testing.assert_close(logits.double(), expected, rtol=1e-5, atol=1e-5)


def test_explicit_arange_positions_equal_default():
    model = _tiny_model("sdpa")
    tokens = torch.randint(0, TINY["vocab_size"], (2, 10), generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(model(tokens, positions=torch.arange(10).expand(2, 10)), model(tokens), rtol=0, atol=0)


def test_gradients_match_reference():
    model = _tiny_model("reference")
    weights = {k: v.double().requires_grad_(True) for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, TINY["vocab_size"], (2, 16), generator=gen)
    doc_ids = _doc_ids(2, 16, gen)
    probe = torch.randn(2, 16, TINY["vocab_size"], generator=gen)
    (model(tokens, doc_ids=doc_ids) * probe).sum().backward()
    (ref_forward(weights, TINY, tokens, doc_ids=doc_ids) * probe.double()).sum().backward()
    for name, p in model.named_parameters():
        ref = weights[name].grad
        assert ref.abs().max() > 0, name
        # fp32 gradients summed over 32 tokens vs float64: relative error well under 1e-4.
        torch.testing.assert_close(p.grad.double(), ref, rtol=1e-4, atol=1e-6 * ref.abs().max().item(), msg=name)


# ---------------------------------------------------------------- shapes and counts
@pytest.mark.parametrize(
    "flavor,expected", [("8B", 8_030_261_248), ("70B", 70_553_706_496), ("405B", None), ("1B", None), ("debug", None)]
)
def test_param_counts(flavor, expected):
    args = FAMILIES["llama3"].flavors[flavor]
    with torch.device("meta"):
        model = Llama(args)
    assert args.num_params() == num_params(model) == args.num_params(model)
    embedding = args.vocab_size * args.dim
    assert args.num_params(exclude_embedding=True) == num_params(model, exclude_embedding=True) == args.num_params() - embedding
    if expected is not None:
        assert args.num_params() == expected


def test_flavor_shapes():
    flavors = FAMILIES["llama3"].flavors
    assert {name: f.hidden_dim for name, f in flavors.items() if name != "debug"} == {
        "1B": 8192, "8B": 14336, "70B": 28672, "405B": 53248,
    }
    for name in ("1B", "8B", "70B", "405B"):
        f = flavors[name]
        assert (f.vocab_size, f.rope_theta, f.rope_scaling, f.kv_heads, f.head_dim) == (128256, 500000.0, True, 8, 64 if name == "1B" else 128)
    assert flavors["debug"].vocab_size >= 258  # byte tokenizer: 256 bytes + specials


def test_flops_per_token_8b():
    args = FAMILIES["llama3"].flavors["8B"]
    by_hand = 6 * (8_030_261_248 - 128256 * 4096) + 12 * 32 * 4096 * 8192
    assert args.flops_per_token(8192) == by_hand == 57_914_449_920
    assert round(args.flops_per_token(8192) / 1e10, 2) == 5.79  # ANCHORS.md


# ---------------------------------------------------------------- init
def _meta_then_init(seed, init_fn=None):
    args = FAMILIES["llama3"].flavors["debug"]
    with torch.device("meta"):
        model = Llama(args)
    model.to_empty(device="cpu")
    torch.manual_seed(seed)
    model.init_weights(init_fn=init_fn)
    return model


def test_init_weights_stds_and_determinism():
    model = _meta_then_init(seed=7)
    args = model.args
    trunc = 0.9866  # std of a normal truncated at +-3 std, relative to the untruncated std
    expected = {"tok_embeddings.weight": 1.0, "output.weight": args.dim**-0.5}
    for i in range(args.n_layers):
        for name in ("attention.wq", "attention.wk", "attention.wv", "feed_forward.w1"):
            expected[f"layers.{i}.{name}.weight"] = 0.02
        for name in ("attention.wo", "feed_forward.w2", "feed_forward.w3"):
            expected[f"layers.{i}.{name}.weight"] = 0.02 / math.sqrt(2 * (i + 1))
    for name, p in model.named_parameters():
        assert torch.isfinite(p).all(), name
        if name.endswith("norm.weight"):
            assert torch.equal(p, torch.ones_like(p)), name
            continue
        std = expected.pop(name)
        assert p.abs().max() <= 3 * std * (1 + 1e-6), name
        assert abs(p.std().item() / (trunc * std) - 1) < 0.05, (name, p.std().item(), std)
    assert not expected  # every weight was checked
    assert torch.equal(model.rope_cache, rope_table(args))
    same = _meta_then_init(seed=7)
    other = _meta_then_init(seed=8)
    for (name, p), q, r in zip(model.named_parameters(), same.parameters(), other.parameters()):
        assert torch.equal(p, q), name
        if not name.endswith("norm.weight"):
            assert not torch.equal(p, r), name


def test_init_fn_gets_canonical_fqns():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    args = LlamaArgs(**TINY)
    with torch.device("meta"):
        model = Llama(args)
    # Wrappers (activation checkpointing) insert segments into parameter names.
    model.layers["1"] = checkpoint_wrapper(model.layers["1"])
    model.to_empty(device="cpu")
    calls = {}

    def init_fn(fqn, tensor, std):
        calls[fqn] = std
        tensor.fill_(std)

    model.init_weights(init_fn=init_fn, buffer_device="cpu")
    assert "layers.1.attention.wo.weight" in calls
    assert calls["layers.1.attention.wo.weight"] == pytest.approx(0.02 / 2)
    assert calls["layers.0.feed_forward.w1.weight"] == 0.02
    assert set(calls) == {n.replace("_checkpoint_wrapped_module.", "") for n, _ in model.named_parameters() if not n.endswith("norm.weight")}
    assert torch.equal(model.layers["1"].attention.wq.weight, torch.full_like(model.layers["1"].attention.wq.weight, 0.02))


# ---------------------------------------------------------------- user errors
def test_bad_args_and_inputs_raise_value_error():
    family: ModelFamily = FAMILIES["llama3"]
    with pytest.raises(ValueError, match="n_kv_heads"):
        LlamaArgs(**{**TINY, "n_kv_heads": 3})
    with pytest.raises(ValueError, match="attention"):
        LlamaArgs(**TINY, attention="flash9")
    with pytest.raises(ValueError, match="norm_backend"):
        LlamaArgs(**TINY, norm_backend="apex")
    with pytest.raises(ValueError, match="flavor 'tiny'.*debug"):
        family.make_args("tiny")
    with pytest.raises(ValueError, match="overrides.n_layer .*n_layers"):
        family.make_args("debug", {"n_layer": 2})
    with pytest.raises(ValueError, match="overrides.n_layers"):
        family.make_args("debug", {"n_layers": "two"})
    args = family.make_args("debug", {"n_layers": "2", "ffn_dim_multiplier": "1.5", "rope_scaling": "false", "max_seq_len": 64})
    assert (args.n_layers, args.ffn_dim_multiplier, args.rope_scaling) == (2, 1.5, False)
    assert family.flavors["debug"].n_layers == 4  # the preset itself is untouched
    model = Llama(args)
    model.init_weights()
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, 65, dtype=torch.long))
    with pytest.raises(ValueError, match="tokens"):
        model(torch.zeros(8, dtype=torch.long))
    with pytest.raises(ValueError, match="positions"):
        model(torch.zeros(2, 8, dtype=torch.long), positions=torch.arange(7))


@pytest.mark.parametrize("family, field", [("llama3", "norm_eps"), ("llama3", "rope_theta"),
                                           ("llama3", "ffn_dim_multiplier"), ("llama3", "rope_scale_factor"),
                                           ("moe", "route_scale"), ("moe", "aux_loss_coef")])
@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_float_args_are_refused_by_the_config(family, field, value):
    """Was: norm_eps = nan passed every range check (NaN compares false) and the run stopped at its
    first step with a non-finite loss and advice to lower the learning rate."""
    from trainer.config import ConfigError, load_config, resolve_model_args

    flavor = "debug" if family == "llama3" else "moe_debug"
    cfg = load_config([f"--model.name={family}", f"--model.flavor={flavor}",
                       f"--model.overrides.{field}={value}"])
    with pytest.raises(ConfigError, match=rf"^command line: .*{field} must be a finite number, got {value}"):
        resolve_model_args(cfg)


def test_compiles_without_graph_breaks():
    """fullgraph=True: the model code (RoPE lookup by positions, doc_ids) traces as one graph."""
    args = LlamaArgs(**{**TINY, "n_layers": 1})
    torch.manual_seed(0)
    model = Llama(args)
    model.init_weights()
    tokens = torch.randint(0, args.vocab_size, (2, 16), generator=torch.Generator().manual_seed(4))
    positions = torch.arange(16) + 1000
    compiled = torch.compile(model, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(compiled(tokens, positions=positions), model(tokens, positions=positions), rtol=0, atol=0)
