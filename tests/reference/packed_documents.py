"""Reference for the packed-documents parity test (tests/layers/document_mask_test.cpp):
a tiny random llama (GQA) saved with save_pretrained (fp32 weights), then one forward +
backward in float64 over rows of packed documents, given to transformers the way its
padding-free path takes them: position_ids restarting at 0 at each document and no
attention_mask, from which transformers builds the block-diagonal causal mask itself
(masking_utils.find_packed_sequence_indices). As a check of that path, the same
documents are also run one by one as rows of their own; the two must agree to float64
rounding, or the script fails. Dumps the inputs, position_ids, logits, loss and every
parameter's gradient to ref.safetensors.

usage: packed_documents.py OUT_DIR
"""
import sys

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, LlamaConfig

# Per row, document lengths summing to SEQ: one-token documents, documents ending on and
# off the kernels' 64-token tiles, one crossing a tile edge.
ROWS = [[17, 1, 40, 30, 12], [64, 35, 1]]
SEQ = 100


def main():
    out_dir = sys.argv[1]
    torch.manual_seed(4321)
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, intermediate_size=96, vocab_size=101,
                         max_position_embeddings=128, rms_norm_eps=1e-5, initializer_range=0.2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").float()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.add_(0.1 * torch.randn_like(p))
    model.save_pretrained(out_dir, safe_serialization=True)
    model = model.double()  # the saved fp32 weights, exactly, computed in float64
    # transformers computes the RoPE angles and their cos/sin in fp32 whatever the model's
    # dtype (a few ulp that also depend on how many positions one call computes: the
    # vector body or the tail of its cos); a float64 reference computes them in float64,
    # as lazytrain's tables do before rounding once to fp32.
    rot = model.model.rotary_emb
    head_dim = config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / (config.rope_parameters["rope_theta"] **
                      (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))

    def rotary_float64(x, position_ids):
        freqs = position_ids[:, :, None].double() * inv_freq[None, None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    rot.forward = rotary_float64
    # Its RMSNorm computes in fp32 too (hidden_states.to(torch.float32)), and its causal-LM
    # loss upcasts the logits to fp32; here RMSNorm runs in float64 and the loss below is
    # the same mean cross-entropy over the shifted labels in float64. (The eager attention
    # takes its softmax in fp32 as well: sdpa computes in the inputs' dtype.)
    for m in model.modules():
        if type(m).__name__.endswith("RMSNorm"):
            def rms_float64(h, m=m):
                return m.weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + m.variance_epsilon))
            m.forward = rms_float64

    def shifted_ce(logits, y, reduction):
        return torch.nn.functional.cross_entropy(logits[:-1], y[1:], ignore_index=-100, reduction=reduction)

    B = len(ROWS)
    ids = torch.randint(0, config.vocab_size, (B, SEQ))
    labels = ids.clone()
    pos = torch.zeros(B, SEQ, dtype=torch.long)
    for b, lengths in enumerate(ROWS):
        assert sum(lengths) == SEQ
        at = 0
        for n in lengths:
            pos[b, at:at + n] = torch.arange(n)
            labels[b, at] = -100  # nothing is predicted across a document boundary
            at += n
    labels[0, 5] = -100
    labels[1, 70] = -100

    out = model(input_ids=ids, position_ids=pos, use_cache=False)
    loss = torch.nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, config.vocab_size),
                                             labels[:, 1:].reshape(-1), ignore_index=-100)
    loss.backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    predicted = int((labels[:, 1:] != -100).sum())

    # The same documents one by one: a loss sum and gradients weighted by 1/predicted.
    model.zero_grad()
    logits_alone = torch.empty_like(out.logits)
    loss_sum = 0.0
    for b, lengths in enumerate(ROWS):
        at = 0
        for n in lengths:
            x, y = ids[b:b + 1, at:at + n], labels[b:b + 1, at:at + n]
            o = model(input_ids=x, use_cache=False)
            logits_alone[b, at:at + n] = o.logits[0].detach()
            if n > 1:
                ce = shifted_ce(o.logits[0], y[0], "sum")
                (ce / predicted).backward()
                loss_sum += float(ce.detach())
            at += n
    tol = 1e-10
    assert (out.logits.detach() - logits_alone).abs().max() < tol, "packed logits differ from per-document ones"
    assert abs(float(loss.detach()) - loss_sum / predicted) < tol, "packed loss differs from per-document one"
    for name, p in model.named_parameters():
        scale = grads[name].abs().max().item() + 1e-300
        assert (grads[name] - p.grad).abs().max().item() <= tol * max(scale, 1.0), f"gradient {name} differs"

    tensors = {
        "input_ids": ids.to(torch.int32).contiguous(),
        "labels": labels.to(torch.int32).contiguous(),
        "position_ids": pos.to(torch.int32).contiguous(),
        "logits": out.logits.detach().contiguous(),
        "loss": loss.detach().reshape(1),
    }
    for name, g in grads.items():
        tensors["grad." + name] = g.contiguous()
    save_file(tensors, f"{out_dir}/ref.safetensors")
    print("packed rows", ROWS, "loss", float(loss.detach()), "predicted", predicted)


if __name__ == "__main__":
    main()
