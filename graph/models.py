"""Small PyTorch transformer blocks with random weights for tests and benchmarks:
a BERT encoder layer (post-LN, erf GELU), a ViT block (pre-LN) and a GPT-2 decoder
block (pre-LN, tanh GELU, causal mask).  torch is imported when one is built."""
from __future__ import annotations

import math


def _modules():
    import torch
    import torch.nn.functional as F
    from torch import nn

    class Attention(nn.Module):
        def __init__(self, hidden: int, heads: int, causal_max: int = 0):
            super().__init__()
            self.h, self.d = heads, hidden // heads
            self.q, self.k, self.v = (nn.Linear(hidden, hidden) for _ in range(3))
            self.o = nn.Linear(hidden, hidden)
            if causal_max:
                m = torch.full((causal_max, causal_max), -1e9).triu(1)
                self.register_buffer("mask", m)
            else:
                self.mask = None

        def forward(self, x):
            B, S = x.size(0), x.size(1)
            q = self.q(x).view(B, S, self.h, self.d).transpose(1, 2)
            k = self.k(x).view(B, S, self.h, self.d).transpose(1, 2)
            v = self.v(x).view(B, S, self.h, self.d).transpose(1, 2)
            att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.d)
            if self.mask is not None:
                att = att + torch.narrow(torch.narrow(self.mask, 0, 0, S), 1, 0, S)
            att = torch.softmax(att, dim=-1)
            ctx = torch.matmul(att, v).transpose(1, 2).reshape(B, S, self.h * self.d)
            return self.o(ctx)

    class BertLayer(nn.Module):
        def __init__(self, hidden=768, heads=12, ffn=3072):
            super().__init__()
            self.att = Attention(hidden, heads)
            self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-12), nn.LayerNorm(hidden, eps=1e-12)
            self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)

        def forward(self, x):
            x = self.ln1(x + self.att(x))
            return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))

    class PreLNBlock(nn.Module):
        def __init__(self, hidden=768, heads=12, ffn=3072, causal_max=0, approximate="none"):
            super().__init__()
            self.att = Attention(hidden, heads, causal_max)
            self.ln1, self.ln2 = nn.LayerNorm(hidden, eps=1e-6), nn.LayerNorm(hidden, eps=1e-6)
            self.ff1, self.ff2 = nn.Linear(hidden, ffn), nn.Linear(ffn, hidden)
            self.gelu = nn.GELU(approximate=approximate)

        def forward(self, x):
            x = x + self.att(self.ln1(x))
            return x + self.ff2(self.gelu(self.ff1(self.ln2(x))))
    return BertLayer, PreLNBlock


def bert_layer(hidden=768, heads=12, ffn=3072, seed=0):
    import torch
    torch.manual_seed(seed)
    return _modules()[0](hidden, heads, ffn).eval()


def vit_block(hidden=768, heads=12, ffn=3072, seed=0):
    import torch
    torch.manual_seed(seed)
    return _modules()[1](hidden, heads, ffn).eval()


def gpt2_block(hidden=768, heads=12, ffn=3072, max_seq=1024, seed=0):
    import torch
    torch.manual_seed(seed)
    return _modules()[1](hidden, heads, ffn, causal_max=max_seq, approximate="tanh").eval()


MODELS = {"bert": bert_layer, "vit": vit_block, "gpt2": gpt2_block}
