"""Reference for the model parity tests: builds a tiny random model with transformers,
saves it with save_pretrained, runs one forward + backward in float32 (eager attention),
and dumps the inputs, logits, loss and every parameter's gradient to ref.safetensors.

Qwen3.5 cases run the forward + backward in float64 instead: the Gated DeltaNet's
gradients (A_log, dt_bias, and through them the layers below) are sensitive enough that
transformers' own float32 run is off by up to ~5e-5 from float64, too close to the 1e-4
bound to judge lazytrain's float32 against. transformers' Qwen3.5 code casts to float32
itself (.float(), .to(torch.float32)); for the reference run the modeling module's
`torch` is a view in which float32 is float64, and Tensor.float casts to float64, both
restored right after. The weights saved are the float32 ones both sides start from.

For those cases the script also runs transformers as users run it, on a copy of the same
float32 model and inputs, in float32, and saves its gradients as f32grad.<name> (and its
logits as f32logits); and it measures how far transformers' bf16-autocast gradients land
from float64 over a few draws of the weights, saved as bf16err.<name> (see
bf16_error_scale). These distances measure how well conditioned each gradient of the
random model is at that precision (A_log and dt_bias are sums over every token of terms
that largely cancel); the test scales its bounds by them (see model_parity_test.cpp).

usage: model_parity.py CASE OUT_DIR
"""
import contextlib
import copy
import sys
import tempfile
import types

import torch
from safetensors.torch import save_file
from safetensors.torch import load_file
from transformers import (AutoModelForCausalLM, Gemma3TextConfig, LlamaConfig, MistralConfig, MixtralConfig,
                          Qwen2Config, Qwen3_5MoeTextConfig, Qwen3_5TextConfig, Qwen3Config, Qwen3MoeConfig)

COMMON = dict(hidden_size=64, num_hidden_layers=2, intermediate_size=96, vocab_size=101,
              max_position_embeddings=128, rms_norm_eps=1e-5, initializer_range=0.2)

# Each case covers a feature the issue names: tied/untied embeddings, GQA ratios 2-4,
# qwen2 q/k/v bias, qwen3 q/k norm with head_dim != hidden/heads, llama3 rope scaling,
# llama attention and mlp biases.
CASES = {
    "llama3_scaled_untied": lambda: LlamaConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32},
        rope_theta=500000.0),
    "llama_bias_tied": lambda: LlamaConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=4, tie_word_embeddings=True,
        attention_bias=True, mlp_bias=True),
    "mistral_gqa4_tied": lambda: MistralConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=1, tie_word_embeddings=True,
        sliding_window=None),
    # Mistral with a window shorter than SEQ: real sliding-window attention on every layer.
    "mistral_window_untied": lambda: MistralConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False,
        sliding_window=4),
    "qwen2_bias_gqa3": lambda: Qwen2Config(
        **{**COMMON, "hidden_size": 96}, num_attention_heads=6, num_key_value_heads=2,
        tie_word_embeddings=True),
    "qwen3_qknorm_untied": lambda: Qwen3Config(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=24,
        tie_word_embeddings=False),
    # Gemma 3: sliding and global layers (window 4 < SEQ), each with its own RoPE (linear
    # scaling on the global ones), query_pre_attn_scalar != head_dim, tied embeddings, a
    # padding token in the batch (its embedding row gets no gradient from the lookup).
    "gemma3_sliding_tied": lambda: Gemma3TextConfig(
        **{**COMMON, "num_hidden_layers": 3}, num_attention_heads=4, num_key_value_heads=2,
        head_dim=24, query_pre_attn_scalar=20, sliding_window=4,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"],
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 1000000.0}},
        tie_word_embeddings=True),
    # Gemma 3 through the legacy fields: sliding_window_pattern 2, rope_local_base_freq,
    # an untied head, GQA 4, and MHA-sized heads; window 6 < SEQ.
    "gemma3_pattern_untied": lambda: Gemma3TextConfig(
        **{**COMMON, "num_hidden_layers": 4}, num_attention_heads=4, num_key_value_heads=1,
        head_dim=16, query_pre_attn_scalar=16, sliding_window=6, sliding_window_pattern=2,
        rope_local_base_freq=500.0, rope_theta=20000.0, tie_word_embeddings=False),
    # Qwen3.5: Gated DeltaNet and gated full-attention layers (layer_types), 2 key heads
    # serving 4 value heads, partial RoPE (a quarter of head_dim 16), (1 + w) norms, a
    # padding token in the batch; 70 tokens so that the delta rule runs two chunks (64 + 6).
    "qwen3_5_hybrid_untied": lambda: Qwen3_5TextConfig(
        **{**COMMON, "num_hidden_layers": 4}, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12,
        linear_conv_kernel_dim=4, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                   "partial_rotary_factor": 0.25},
        tie_word_embeddings=False, pad_token_id=3),
    # Qwen3.5 through full_attention_interval, tied, equal key and value heads, 11 tokens.
    "qwen3_5_interval_tied": lambda: Qwen3_5TextConfig(
        **{**COMMON, "num_hidden_layers": 3}, num_attention_heads=2, num_key_value_heads=1, head_dim=32,
        full_attention_interval=2, linear_num_key_heads=2, linear_num_value_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=8, linear_conv_kernel_dim=3, tie_word_embeddings=True),
    # qwen3_moe: 4 experts, top 2 without renormalization, layer 1 dense (mlp_only_layers)
    # with its own intermediate_size, an untied head.
    "qwen3_moe_mixed_untied": lambda: Qwen3MoeConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4,
        num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=False, mlp_only_layers=[1],
        tie_word_embeddings=False),
    # qwen3_moe: every layer sparse, 6 experts, top 3 renormalized, tied.
    "qwen3_moe_normtopk_tied": lambda: Qwen3MoeConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=6,
        num_experts_per_tok=3, moe_intermediate_size=24, norm_topk_prob=True, tie_word_embeddings=True),
    # qwen3_moe with the routers' load-balancing loss in the loss (output_router_logits),
    # its weight raised from 0.001 so that its share of the gradients is not lost in the
    # cross-entropy's; the dense layer in between does not count in it.
    "qwen3_moe_routerloss_tied": lambda: Qwen3MoeConfig(
        **{**COMMON, "num_hidden_layers": 3}, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=False, mlp_only_layers=[1],
        output_router_logits=True, router_aux_loss_coef=0.5, tie_word_embeddings=True),
    # Mixtral: 4 experts of intermediate_size, top 2 (always renormalized), GQA 2, untied.
    "mixtral_untied": lambda: MixtralConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=None, tie_word_embeddings=False),
    # Qwen3.5 MoE: the hybrid layers with a mixture of 4 experts (top 2, renormalized) and
    # the gated shared expert on every layer, the routers' loss in the loss; the experts run
    # the modeling file's own loop (eager), which float64 can run. No padding token: its
    # embedding row starts at zero, the first Gated DeltaNet layer's output for it is zero
    # too (its gate is), so its router logits tie exactly, and among ties torch.topk's
    # choice is unspecified (it took experts 2 and 3, ours takes 0 and 1): the block's output
    # is zero either way, but the routers' loss counts the choice.
    "qwen3_5_moe_hybrid_untied": lambda: Qwen3_5MoeTextConfig(
        hidden_size=64, num_hidden_layers=3, vocab_size=101, max_position_embeddings=128, rms_norm_eps=1e-5,
        initializer_range=0.2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        layer_types=["linear_attention", "full_attention", "linear_attention"],
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12,
        linear_conv_kernel_dim=4, rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                   "partial_rotary_factor": 0.25},
        num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, shared_expert_intermediate_size=48,
        output_router_logits=True, router_aux_loss_coef=0.1, tie_word_embeddings=False),
    # Mixtral with its routers' loss (Mixtral-8x7B's own weight, 0.02).
    "mixtral_routerloss_untied": lambda: MixtralConfig(
        **COMMON, num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
        sliding_window=None, output_router_logits=True, router_aux_loss_coef=0.02, tie_word_embeddings=False),
}

BATCH, SEQ = 2, 11


def checkpoint_named_grads(model):
    """Every gradient under the name save_pretrained writes its parameter as. transformers
    fuses a MoE layer's experts in memory (mlp.experts.gate_up_proj [E, 2I, C]) and splits
    them per expert on save; its own save does that mapping for the gradients here."""
    holder = copy.deepcopy(model)
    with torch.no_grad():
        for p, q in zip(model.parameters(), holder.parameters()):
            q.copy_(p.grad)
    with tempfile.TemporaryDirectory() as d:
        holder.save_pretrained(d, safe_serialization=True)
        grads = load_file(f"{d}/model.safetensors")
    return {"grad." + name: g.float().contiguous() for name, g in grads.items()}


def named_grads(model):
    """Every gradient, keyed grad.<the checkpoint's name for its parameter>."""
    if model.config.model_type in ("qwen3_moe", "mixtral", "qwen3_5_moe_text"):
        return checkpoint_named_grads(model)
    return {"grad." + name: p.grad.detach().float().contiguous() for name, p in model.named_parameters()}


class _Float64Torch(types.ModuleType):
    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name):
        return torch.float64 if name in ("float32", "float") else getattr(torch, name)


@contextlib.contextmanager
def qwen3_5_in_float64(model):
    """Runs transformers' Qwen3.5 (or Qwen3.5 MoE) modeling code in float64 (see the module docstring)."""
    if model.config.model_type == "qwen3_5_moe_text":
        from transformers.models.qwen3_5_moe import modeling_qwen3_5_moe as m
    else:
        from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    saved_torch, saved_float = m.torch, torch.Tensor.float
    m.torch = _Float64Torch()
    torch.Tensor.float = lambda self, *a, **k: self.to(torch.float64)
    model.double()
    try:
        yield
    finally:
        m.torch, torch.Tensor.float = saved_torch, saved_float
SEQ_OF = {"qwen3_5_hybrid_untied": 70}

# The bf16 error scale's draws (see bf16_error_scale): the model as saved, then copies of it
# with every weight scaled by 1 + uniform(-2^-9, 2^-9), below bf16's resolution.
BF16_DRAWS, BF16_DRAW_NOISE = 8, 2.0 ** -9


def bf16_error_scale(model, ids, labels):
    """bf16err.<name>: the root mean square, over BF16_DRAWS draws of the weights, of the
    norm-wise relative error of transformers' bf16-autocast gradient against float64 on
    the same draw. For a gradient that is ill-conditioned at bf16 one run's error is a
    sample from a wide distribution (layer 0's dt_bias in qwen3_5_interval_tied: 0.06 on the
    saved weights, 0.08 to 3.5 on draws that differ from them below bf16's resolution), so
    one sample does not measure how far a bf16 implementation may land; the draws do."""
    squares = {}
    for draw in range(BF16_DRAWS):
        drawn = copy.deepcopy(model)
        if draw:
            noise = torch.Generator().manual_seed(draw)
            with torch.no_grad():
                for p in drawn.parameters():
                    p.mul_(1 + BF16_DRAW_NOISE * (2 * torch.rand(p.shape, generator=noise) - 1))
        exact = copy.deepcopy(drawn)
        with qwen3_5_in_float64(exact):
            exact(input_ids=ids, labels=labels).loss.backward()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = drawn(input_ids=ids, labels=labels).loss
        loss.backward()
        exact_grads = named_grads(exact)
        for key, g in named_grads(drawn).items():
            want = exact_grads[key].double()
            err = ((g.double() - want).norm() / want.norm()).item() if want.norm() > 0 else g.double().norm().item()
            squares[key] = squares.get(key, 0.0) + err * err
    return {"bf16err." + key[len("grad."):]: torch.tensor([(s / BF16_DRAWS) ** 0.5], dtype=torch.float32)
            for key, s in squares.items()}


def main():
    case, out_dir = sys.argv[1], sys.argv[2]
    torch.manual_seed(1234)
    config = CASES[case]()
    config._attn_implementation = "eager"
    if config.model_type == "qwen3_5_moe_text":
        config._experts_implementation = "eager"
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    # Norm weights start at 1 and biases at 0; perturb them so their gradients and
    # their effect on the forward pass are exercised.
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out_dir, safe_serialization=True)

    ids = torch.randint(0, config.vocab_size, (BATCH, SEQ_OF.get(case, SEQ)))
    labels = ids.clone()
    labels[0, :3] = -100  # ignored positions
    labels[1, 5] = -100
    if config.pad_token_id is not None:
        ids[1, 2] = config.pad_token_id
        labels[1, 2] = config.pad_token_id
    peer_grads = {}
    hybrid = config.model_type in ("qwen3_5_text", "qwen3_5_moe_text")
    if hybrid:  # transformers' own float32 run, and the scale of its bf16-autocast error
        peer = copy.deepcopy(model)
        peer_out = peer(input_ids=ids, labels=labels)
        peer_out.loss.backward()
        peer_grads["f32logits"] = peer_out.logits.detach().float().contiguous()
        for key, g in named_grads(peer).items():
            peer_grads["f32grad." + key[len("grad."):]] = g
        peer_grads.update(bf16_error_scale(model, ids, labels))
    f64 = qwen3_5_in_float64(model) if hybrid else contextlib.nullcontext()
    with f64:
        out = model(input_ids=ids, labels=labels)
        out.loss.backward()
    model.float()

    # Greedy continuation of a short prompt, for the generator's parity test.
    model.eval()
    with torch.no_grad():
        gen = model.generate(ids[:1, :5], attention_mask=torch.ones(1, 5, dtype=torch.long),
                             max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
    tensors = {
        "generated": gen[0, 5:].to(torch.int32).contiguous(),
        "input_ids": ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "logits": out.logits.detach().float().contiguous(),
        "loss": out.loss.detach().float().reshape(1),
    }
    tensors.update(named_grads(model))
    tensors.update(peer_grads)
    save_file(tensors, f"{out_dir}/ref.safetensors")
    print("cases:", case, "params:", sum(p.numel() for p in model.parameters()))


if __name__ == "__main__":
    main()
