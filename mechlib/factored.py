"""Low-rank products kept as their factors (Elhage et al. 2021 work with d_model × d_model and
vocab × vocab matrices of rank ≤ d_head; forming them is wasteful and, for the vocabulary, too big).

``FactoredMatrix(A, B)`` stands for A @ B with A: [..., m, k] and B: [..., k, n], k small. Norms,
singular values and non-zero eigenvalues come from k × k matrices; products stay factored; rows
and columns can be selected; ``dense()`` forms the product only when asked.
"""

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["FactoredMatrix"]


@dataclass(frozen=True)
class FactoredMatrix:
    A: Tensor  # [..., m, k]
    B: Tensor  # [..., k, n]

    def __post_init__(self) -> None:
        if self.A.shape[-1] != self.B.shape[-2]:
            raise ValueError(f"inner sizes differ: A is {list(self.A.shape)}, B is {list(self.B.shape)}")

    @property
    def shape(self) -> torch.Size:
        return torch.broadcast_shapes(self.A.shape[:-2], self.B.shape[:-2]) + (self.A.shape[-2], self.B.shape[-1])

    @property
    def rank_bound(self) -> int:
        return self.A.shape[-1]

    def dense(self) -> Tensor:
        """The product A @ B, formed: [..., m, n]."""
        return self.A @ self.B

    @property
    def T(self) -> "FactoredMatrix":
        return FactoredMatrix(self.B.transpose(-1, -2), self.A.transpose(-1, -2))

    def __matmul__(self, other: "FactoredMatrix | Tensor") -> "FactoredMatrix":
        """(A B) @ (C D) = A (B C D): still factored through A's inner size."""
        if isinstance(other, FactoredMatrix):
            return FactoredMatrix(self.A, (self.B @ other.A) @ other.B)
        return FactoredMatrix(self.A, self.B @ other)

    def __rmatmul__(self, other: Tensor) -> "FactoredMatrix":
        return FactoredMatrix(other @ self.A, self.B)

    def rows(self, index) -> "FactoredMatrix":
        return FactoredMatrix(self.A[..., index, :], self.B)

    def columns(self, index) -> "FactoredMatrix":
        return FactoredMatrix(self.A, self.B[..., :, index])

    def norm(self) -> Tensor:
        """Frobenius norm via k × k Gram matrices: ‖AB‖²_F = Σ (AᵀA) ⊙ (BBᵀ). Shape [...]."""
        gram_A = self.A.transpose(-1, -2) @ self.A                         # [..., k, k]
        gram_B = self.B @ self.B.transpose(-1, -2)                         # [..., k, k]
        return (gram_A * gram_B).sum((-1, -2)).clamp(min=0).sqrt()

    def svd(self) -> tuple[Tensor, Tensor, Tensor]:
        """U [..., m, k], S [..., k], V [..., n, k] with A B = U diag(S) Vᵀ, through a k × k SVD."""
        Q_A, R_A = torch.linalg.qr(self.A)                                 # A = Q_A R_A
        Q_B, R_B = torch.linalg.qr(self.B.transpose(-1, -2))               # Bᵀ = Q_B R_B
        U, S, Vh = torch.linalg.svd(R_A @ R_B.transpose(-1, -2))           # the k × k core
        return Q_A @ U, S, Q_B @ Vh.transpose(-1, -2)

    def eigenvalues(self) -> Tensor:
        """The (up to k) non-zero eigenvalues of a square A B: those of B A, k × k. Complex, [..., k]."""
        if self.A.shape[-2] != self.B.shape[-1]:
            raise ValueError(f"eigenvalues need a square matrix, this one is {list(self.shape[-2:])}")
        return torch.linalg.eigvals(self.B @ self.A)
