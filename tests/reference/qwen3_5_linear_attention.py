"""Reference for the Gated DeltaNet token mixer test (tests/layers/linear_attention_mixer_test.cpp):
transformers' own Qwen3_5GatedDeltaNet (models/qwen3_5/modeling_qwen3_5.py), built from a
Qwen3_5TextConfig, loaded with the test's fp32 weights, run forward and backward with
autograd in float64 (no cache, no padding mask: the torch-only chunked path).

Float64: the layer's forward and every function of modeling_qwen3_5.py it calls
(causal_conv1d_fn, torch_chunk_gated_delta_rule, Qwen3_5RMSNormGated.forward, ...) run as
copies over the module's globals in which `torch.float32` is float64
(transformers_torch_path.py, as gated_deltanet_ops.py does). The forward also calls
`.float()` on A_log and a, which would round them to fp32; for the duration of the call
Tensor.float keeps float64 tensors float64. The script checks that the output is float64;
each function it runs is found behind transformers' hub-kernel wrappers by its code in
modeling_qwen3_5.py, or the script fails naming the transformers version.

Inputs (raw little-endian float32, lazytrain's layouts): h.bin, dout.bin [B,S,C];
in_proj_qkv [2*Hk*dk + Hv*dv, C], in_proj_z [Hv*dv, C], in_proj_b, in_proj_a [Hv, C],
conv1d [conv_dim, K], dt_bias, A_log [Hv], norm [dv], out_proj [C, Hv*dv].
Outputs (raw float64): out [B,S,C], dh [B,S,C] and d_<name> for every weight above
(for L = sum dout . out).

With a last argument "fp32", the layer also runs as transformers runs it in fp32 (no
float64 patching) on the same inputs, and its results are saved as f32_out, f32_dh and
f32_d_<name> (float64 files holding the fp32 values): the tests print that error beside
ours, for scale.

usage: qwen3_5_linear_attention.py DIR B S C Hk Hv dk dv K EPS [fp32]
"""
import sys
import types

import numpy as np
import torch

from transformers import Qwen3_5TextConfig
from transformers.models.qwen3_5 import modeling_qwen3_5 as m
from transformers_torch_path import float_keeps_float64, method, module_namespace

d = sys.argv[1]
B, S, C, Hk, Hv, dk, dv, K = map(int, sys.argv[2:10])
eps = float(sys.argv[10])
also_fp32 = len(sys.argv) > 11 and sys.argv[11] == "fp32"
conv_dim = 2 * Hk * dk + Hv * dv


def load(name, *shape):
    x = np.fromfile(f"{d}/{name}.bin", dtype=np.float32)
    assert x.size == int(np.prod(shape)), f"{name}.bin has {x.size} floats, want {shape}"
    return torch.from_numpy(x.reshape(*shape)).double()


def save(name, t):
    t.detach().contiguous().numpy().astype(np.float64).tofile(f"{d}/{name}.bin")


config = Qwen3_5TextConfig(hidden_size=C, num_hidden_layers=1, layer_types=["linear_attention"],
                           linear_num_key_heads=Hk, linear_num_value_heads=Hv, linear_key_head_dim=dk,
                           linear_value_head_dim=dv, linear_conv_kernel_dim=K, rms_norm_eps=eps,
                           hidden_act="silu")
layer = m.Qwen3_5GatedDeltaNet(config, 0).double()
assert layer.activation == "silu" and layer.layer_norm_epsilon == eps

params = {
    "in_proj_qkv": (layer.in_proj_qkv.weight, (conv_dim, C)),
    "in_proj_z": (layer.in_proj_z.weight, (Hv * dv, C)),
    "in_proj_b": (layer.in_proj_b.weight, (Hv, C)),
    "in_proj_a": (layer.in_proj_a.weight, (Hv, C)),
    "conv1d": (layer.conv1d.weight, (conv_dim, 1, K)),
    "dt_bias": (layer.dt_bias, (Hv,)),
    "A_log": (layer.A_log, (Hv,)),
    "norm": (layer.norm.weight, (dv,)),
    "out_proj": (layer.out_proj.weight, (C, Hv * dv)),
}
with torch.no_grad():
    for name, (p, shape) in params.items():
        assert tuple(p.shape) == shape, f"{name}: transformers has {tuple(p.shape)}, the test {shape}"
        p.copy_(load(name, *shape))

h = load("h", B, S, C).requires_grad_()
dout = load("dout", B, S, C)

f64 = module_namespace(m, float64=True)
layer.norm.forward = types.MethodType(method(f64, m, m.Qwen3_5RMSNormGated, "forward"), layer.norm)
forward = method(f64, m, m.Qwen3_5GatedDeltaNet, "forward")
with float_keeps_float64():
    out = forward(layer, h)
assert out.dtype == torch.float64 and tuple(out.shape) == (B, S, C)
(out * dout).sum().backward()

save("out", out)
save("dh", h.grad)
for name, (p, _) in params.items():
    save("d_" + name, p.grad)

if also_fp32:  # transformers' own fp32 run of the same layer, for scale
    layer32 = m.Qwen3_5GatedDeltaNet(config, 0)
    params32 = {
        "in_proj_qkv": layer32.in_proj_qkv.weight, "in_proj_z": layer32.in_proj_z.weight,
        "in_proj_b": layer32.in_proj_b.weight, "in_proj_a": layer32.in_proj_a.weight,
        "conv1d": layer32.conv1d.weight, "dt_bias": layer32.dt_bias, "A_log": layer32.A_log,
        "norm": layer32.norm.weight, "out_proj": layer32.out_proj.weight,
    }
    with torch.no_grad():
        for name, (_, shape) in params.items():
            params32[name].copy_(load(name, *shape).float())
    f32 = module_namespace(m, float64=False)  # the same torch paths, as transformers runs them
    layer32.norm.forward = types.MethodType(method(f32, m, m.Qwen3_5RMSNormGated, "forward"), layer32.norm)
    h32 = load("h", B, S, C).float().requires_grad_()
    forward32 = method(f32, m, m.Qwen3_5GatedDeltaNet, "forward")
    out32 = forward32(layer32, h32)
    assert out32.dtype == torch.float32
    (out32 * dout.float()).sum().backward()
    save("f32_out", out32)
    save("f32_dh", h32.grad)
    for name, p in params32.items():
        save("f32_d_" + name, p.grad)
