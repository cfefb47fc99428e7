"""Reference for the MoE MLP test (tests/layers/moe_mlp_test.cpp): transformers' own
Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock (eager experts) and load_balancing_loss_func,
run with autograd in float64 on the test's fp32 inputs.

The routers compute their softmax in float32 on purpose (qwen3_moe: softmax(dtype=torch.float),
mixtral: logits.float()), and load_balancing_loss_func sums in float32 (torch.float32 zeros,
.float()). To run them in float64, the modeling module's global `torch` is a view of torch in
which torch.float / torch.float32 are float64, and Tensor.float returns float64 for this
process; nothing else in the code changes. The script checks that the routing weights, the
output and the loss really are float64, and fails otherwise.

Inputs (raw little-endian float32): x.bin, x2.bin, dy.bin [T,C]; router.bin [E,C];
gate_up.bin [E,2I,C]; down.bin [E,C,I]; mask.bin [T].
Outputs (raw float64): for L = sum(dy * block(x)) + LAMBDA * aux(router logits of x):
  y [T,C], dx [T,C], drouter [E,C], dgate_up [E,2I,C], ddown [E,C,I], experts [T,k] (the
  chosen expert ids, as float64), aux1 [1] (aux of that one layer);
and for two layers (the router logits of x and of x2) with the attention mask:
  aux2 [1], daux_l1, daux_l2 [T,E] (d aux2 / d logits of each layer).

usage: moe_block.py DIR FAMILY(qwen3_moe|mixtral) NORM_TOPK(0|1) T C E K I LAMBDA
"""
import sys
import types

import numpy as np
import torch

d, family = sys.argv[1], sys.argv[2]
norm_topk = sys.argv[3] == "1"
T, C, E, K, I = map(int, sys.argv[4:9])
lam = float(sys.argv[9])

if family == "qwen3_moe":
    from transformers.models.qwen3_moe import modeling_qwen3_moe as m
    from transformers import Qwen3MoeConfig as Config

    config = Config(hidden_size=C, num_experts=E, num_experts_per_tok=K, moe_intermediate_size=I,
                    norm_topk_prob=norm_topk, hidden_act="silu")
    Block = m.Qwen3MoeSparseMoeBlock
elif family == "mixtral":
    from transformers.models.mixtral import modeling_mixtral as m
    from transformers import MixtralConfig as Config

    assert norm_topk, "mixtral always renormalizes the top-k weights"
    config = Config(hidden_size=C, num_local_experts=E, num_experts_per_tok=K, intermediate_size=I,
                    hidden_act="silu", router_jitter_noise=0.0)
    Block = m.MixtralSparseMoeBlock
else:
    sys.exit(f"unknown family {family}")
config._experts_implementation = "eager"  # the per-expert loop in the modeling file
from transformers.integrations.moe import ALL_EXPERTS_FUNCTIONS  # noqa: E402

_probe = object()
assert ALL_EXPERTS_FUNCTIONS.get_interface(config._experts_implementation, _probe) is _probe, \
    "experts_implementation 'eager' no longer selects the modeling file's own forward"


class _Float64Torch(types.ModuleType):
    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return torch.float64 if name in ("float", "float32") else getattr(torch, name)


m.torch = _Float64Torch()
torch.Tensor.float = lambda self, *args, **kwargs: self.to(torch.float64)


def load(name, *shape):
    return torch.from_numpy(np.fromfile(f"{d}/{name}.bin", dtype=np.float32).reshape(*shape)).double()


def save(name, t):
    t.detach().contiguous().numpy().astype(np.float64).tofile(f"{d}/{name}.bin")


block = Block(config).double()
with torch.no_grad():
    block.gate.weight.copy_(load("router", E, C))
    block.experts.gate_up_proj.copy_(load("gate_up", E, 2 * I, C))
    block.experts.down_proj.copy_(load("down", E, C, I))
assert block.experts.gate_up_proj.shape == (E, 2 * I, C) and block.experts.down_proj.shape == (E, C, I)

logits = []
block.gate.register_forward_hook(lambda mod, inp, out: logits.append(out[0]))

x = load("x", T, C).requires_grad_()
dy = load("dy", T, C)
y = block(x.view(1, T, C)).view(T, C)
l1 = logits[-1]
l1.retain_grad()
_, scores, experts = block.gate(x.detach())
logits.pop()
assert y.dtype == torch.float64 and scores.dtype == torch.float64, (y.dtype, scores.dtype)

# mixtral (and qwen3_moe with norm_topk_prob): the top-k of the softmax renormalized is the
# softmax over the k chosen logits.
if norm_topk:
    direct = torch.softmax(torch.gather(l1.detach(), 1, experts), dim=-1)
    err = (direct - scores).abs().max().item()
    assert err < 1e-14, f"renormalized top-k differs from the top-k softmax by {err}"

aux1 = m.load_balancing_loss_func((l1,), E, K)
assert aux1.dtype == torch.float64, aux1.dtype
loss = (dy * y).sum() + lam * aux1
loss.backward()
save("y", y)
save("dx", x.grad)
save("drouter", block.gate.weight.grad)
save("dgate_up", block.experts.gate_up_proj.grad)
save("ddown", block.experts.down_proj.grad)
save("experts", experts.double())
save("aux1", aux1.reshape(1))

# Two layers and an attention mask: the logits of x and of x2 through the same router.
mask = load("mask", T)
la = torch.nn.functional.linear(x.detach(), block.gate.weight.detach()).requires_grad_()
lb = torch.nn.functional.linear(load("x2", T, C), block.gate.weight.detach()).requires_grad_()
aux2 = m.load_balancing_loss_func((la, lb), E, K, mask.view(1, T))
assert aux2.dtype == torch.float64, aux2.dtype
aux2.backward()
save("aux2", aux2.detach().reshape(1))
save("daux_l1", la.grad)
save("daux_l2", lb.grad)
print(f"{family} norm_topk_prob={norm_topk}: aux1={aux1.item():.6f} aux2={aux2.item():.6f}")
