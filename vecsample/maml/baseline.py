"""Linear value baseline on hand-made features (Duan et al. 2016, supplementary 2)."""

from __future__ import annotations

import torch
from torch import nn

from vecsample.maml.episodes import BatchEpisodes
from vecsample.maml.errors import BaselineFitError

#: How many times the ridge term is multiplied by 10 before the fit gives up.
FIT_ATTEMPTS = 5


def _solve(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor | None:
    """``lstsq(a, b)``, or None when LAPACK rejects the input or the solution is not finite."""
    try:
        solution = torch.linalg.lstsq(a, b).solution
    except RuntimeError:  # LAPACK reports NaN/inf input as an illegal argument
        return None
    return solution if bool(torch.isfinite(solution).all()) else None


class LinearFeatureBaseline(nn.Module):
    """``V(s_t) = w . [s, s^2, t/100, (t/100)^2, (t/100)^3, 1]``, refitted on every batch.

    ``fit`` solves the ridge-regularised normal equations with ``torch.linalg.lstsq`` on the
    batch's device, on the valid (unpadded) steps only; if the solution is not finite the ridge
    term grows tenfold, up to ``FIT_ATTEMPTS`` times. Observations of any shape are flattened, so
    ``input_size`` is the number of floats in one observation.

    The solve runs in float64. ``X^T X`` routinely has a condition number near 1e8 (the time
    features are nearly collinear), beyond float32's precision: there ``lstsq`` returns
    weights that change from one call to the next on identical input (seen on CPU with
    pytorch-maml-rl's float32 solve). In float64 the same equations are well within precision.
    """

    weight: nn.Parameter

    def __init__(self, input_size: int, reg_coeff: float = 1e-5) -> None:
        super().__init__()
        self.input_size = input_size
        self._reg_coeff = reg_coeff
        self.weight = nn.Parameter(torch.zeros(self.feature_size), requires_grad=False)

    @property
    def feature_size(self) -> int:
        return 2 * self.input_size + 4

    def _feature(self, episodes: BatchEpisodes) -> torch.Tensor:
        ones = episodes.mask.unsqueeze(2)
        observations = episodes.observations.reshape(len(episodes), episodes.batch_size, -1)
        steps = torch.arange(len(episodes), device=ones.device, dtype=torch.float32)
        time_step = steps.view(-1, 1, 1) * ones / 100.0
        features = [observations, observations**2, time_step, time_step**2, time_step**3, ones]
        return torch.cat(features, dim=2)

    @torch.no_grad()
    def fit(self, episodes: BatchEpisodes) -> None:
        valid = episodes.mask.flatten() > 0
        featmat = self._feature(episodes).view(-1, self.feature_size)[valid]
        returns = episodes.returns.reshape(-1, 1)[valid]
        featmat, returns = featmat.double(), returns.double()
        xt_y = featmat.t() @ returns
        xt_x = featmat.t() @ featmat
        eye = torch.eye(self.feature_size, dtype=xt_x.dtype, device=xt_x.device)
        reg_coeff = self._reg_coeff
        for _ in range(FIT_ATTEMPTS):
            coeffs = _solve(xt_x + reg_coeff * eye, xt_y)
            if coeffs is not None:
                self.weight.copy_(coeffs.flatten())  # copy_ casts back to float32
                return
            reg_coeff *= 10
        raise BaselineFitError(
            "The normal equations of LinearFeatureBaseline have no finite solution even with "
            f"ridge term {reg_coeff / 10:g}; expected finite observations and rewards, "
            "check the batch for NaN/inf or raise reg_coeff."
        )

    def forward(self, episodes: BatchEpisodes) -> torch.Tensor:
        features = self._feature(episodes)
        values = features.view(-1, self.feature_size) @ self.weight.to(features.device)
        return values.view(features.shape[:2])
