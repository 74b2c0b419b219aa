"""The one check every parallel layout must pass: same losses and step-1 gradients as one rank."""

import torch


def assert_matches_single_rank(layout: str, got: dict, reference: dict,
                               loss_rtol: float = 1e-5, grad_rtol: float = 1e-4) -> None:
    """`got`/`reference`: {"losses": [float], "grads": {fqn: full tensor}} of the layout and 1 rank.

    Losses: max relative difference over the steps. Gradients: per parameter, max abs difference
    relative to the parameter's largest reference gradient entry.
    """
    ref_losses = torch.tensor(reference["losses"], dtype=torch.float64)
    losses = torch.tensor(got["losses"], dtype=torch.float64)
    rel = ((losses - ref_losses).abs() / ref_losses.abs()).max().item()
    assert rel <= loss_rtol, f"{layout}: losses {got['losses']} vs 1-rank {reference['losses']} (rel {rel:.2e})"
    assert ref_losses[-1] < ref_losses[0], "the reference run does not learn; the check is vacuous"
    assert got["grads"].keys() == reference["grads"].keys()
    for fqn, want in reference["grads"].items():
        g = got["grads"][fqn]
        assert g.shape == want.shape, f"{layout} {fqn}: grad shape {tuple(g.shape)} vs {tuple(want.shape)}"
        err = (g - want).abs().max().item() / want.abs().max().item()
        assert err <= grad_rtol, f"{layout} {fqn}: step-1 gradient differs by {err:.2e} relative"


def full_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter's whole gradient (DTensor shards gathered), keyed by the wrapper-free name."""
    from torch.distributed.tensor import DTensor

    from trainer.models.llama import canonical_fqn

    out = {}
    for name, p in model.named_parameters():
        g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
        out[canonical_fqn(name)] = g.detach().clone()
    return out
