"""The toy vendor model's config: a plain dataclass, as vendor repositories often have."""
from dataclasses import dataclass


@dataclass
class ToyConfig:
    vocab_size: int = 32
    dim: int = 8
    n_layers: int = 2
    tie_embeddings: bool = False
