"""A tiny decoder written the way a vendor ships one, for the tests of dump_vendor_reference.py: its own
tensor names, its config in a sibling file imported relatively, its decoder layers in a list named
`blocks`, no transformers. Not a real architecture: just enough that every layer and position matters."""
import torch
from torch import nn

from .toy_config import ToyConfig


class ToyBlock(nn.Module):
    def __init__(self, config: ToyConfig):
        super().__init__()
        self.norm = nn.RMSNorm(config.dim, eps=1e-6)
        self.mix = nn.Linear(config.dim, config.dim, bias=False)

    def forward(self, x):  # x: [B, T, dim] -> [B, T, dim]
        h = self.mix(self.norm(x))
        # A causal running mean, so that each position depends on the ones before it.
        counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)
        return x + torch.tanh(h.cumsum(dim=1) / counts)


class ToyLM(nn.Module):
    config_class = ToyConfig

    def __init__(self, config: ToyConfig):
        super().__init__()
        self.embed = nn.Embedding(config.vocab_size, config.dim)
        self.blocks = nn.ModuleList([ToyBlock(config) for _ in range(config.n_layers)])
        self.norm = nn.RMSNorm(config.dim, eps=1e-6)
        self.head = nn.Linear(config.dim, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.head.weight = self.embed.weight

    def forward(self, tokens):  # tokens: [B, T] -> logits [B, T, vocab]
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))
