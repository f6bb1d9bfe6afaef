"""The gated delta rule of GatedDeltaNet linear attention (Qwen3.5, Qwen3-Next), chunked, without the `fla` package.

Per head, with a state S [K, V], decay a_t = exp(g_t) and write strength beta_t, token by token:
    S_t = a_t S_{t-1} + k_t (beta_t (v_t - (a_t S_{t-1})^T k_t))^T,      o_t = S_t^T q_t
`recurrent_gated_delta_rule_reference` runs exactly that loop (the test oracle). `chunk_gated_delta_rule` computes the
same thing per chunk of C tokens: inside a chunk the updates collapse into a triangular solve (the WY/UT transform of
DeltaNet), so all intra-chunk work is batched matmuls; only a short scan over chunks stays sequential. That scan is
one autograd Function with a hand-written backward that re-reads the chunk-start states instead of keeping the
autograd graph of every chunk, in torch or as one Triton kernel each way.

Argument names and shapes follow transformers' `torch_chunk_gated_delta_rule` (and fla's): q, k [B, T, Hk, K],
v [B, T, Hv, V], g and beta [B, T, Hv]; Hv may be a multiple of Hk (grouped heads). With `cu_seqlens` (packed
sequences, B == 1) the state restarts at every sequence start, and `initial_state` / the final state have one entry
per sequence. `causal_conv1d_segments` is the short convolution in front of the rule, restarting at the same
sequence starts, so that a packed batch trains exactly like its sequences one by one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.runtime import BackendChoice, resolve_backend


def _l2norm(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    # the same formula as transformers (and fla): x * rsqrt(sum(x^2) + eps)
    return x * torch.rsqrt((x * x).sum(dim=-1, keepdim=True) + eps)


def _heads_first(query, key, value, g, beta, use_qk_l2norm: bool):
    """fp32 [B, H, T, *] tensors, keys repeated for grouped value heads, queries scaled by 1/sqrt(K)."""
    num_k_heads, num_v_heads = key.shape[2], value.shape[2]
    if num_k_heads != num_v_heads:
        query = query.repeat_interleave(num_v_heads // num_k_heads, dim=2)
        key = key.repeat_interleave(num_v_heads // num_k_heads, dim=2)
    query, key, value, g, beta = (x.transpose(1, 2).float() for x in (query, key, value, g, beta))
    if use_qk_l2norm:
        query, key = _l2norm(query), _l2norm(key)
    return query * query.shape[-1] ** -0.5, key, value, g, beta


def recurrent_gated_delta_rule_reference(query, key, value, g, beta, initial_state=None,
                                         output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False):
    """The token-by-token recurrence, differentiable by autograd: (out [B, T, Hv, V], final state or None)."""
    q, k, v, g, beta = _heads_first(query, key, value, g, beta, use_qk_l2norm_in_kernel)
    batch, heads, length, k_dim = k.shape
    state = q.new_zeros(batch, heads, k_dim, v.shape[-1]) if initial_state is None else initial_state.float()
    outputs = []
    for t in range(length):
        state = state * g[:, :, t].exp()[..., None, None]
        predicted = (state * k[:, :, t, :, None]).sum(dim=-2)
        delta = (v[:, :, t] - predicted) * beta[:, :, t, None]
        state = state + k[:, :, t, :, None] * delta[:, :, None, :]
        outputs.append((state * q[:, :, t, :, None]).sum(dim=-2))
    out = torch.stack(outputs, dim=2).transpose(1, 2).to(query.dtype)
    return out, state if output_final_state else None


def _prepare_chunks(q, k, v, g, beta, chunk: int):
    """The per-chunk matrices of the scan (autograd flows through them normally). All [B, H, NC, C, ...]."""
    pad = (-q.shape[2]) % chunk
    # padded steps have g = 0 (no decay), beta = 0 and k = 0 (no write), so they leave the state untouched
    q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
    g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    q, k, v = (x.reshape(x.shape[0], x.shape[1], -1, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = (x.reshape(x.shape[0], x.shape[1], -1, chunk) for x in (g, beta))
    cum = g.cumsum(dim=-1)
    causal = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    # mask before exp: above the diagonal cum_i - cum_j >= 0 can overflow, and its gradient must stay 0
    decay = torch.where(causal, cum[..., :, None] - cum[..., None, :], float("-inf")).exp()
    k_beta, v_beta = k * beta[..., None], v * beta[..., None]
    system = (k_beta @ k.transpose(-1, -2)) * decay  # only its strictly lower part is read (unit diagonal)
    u = torch.linalg.solve_triangular(system, v_beta, upper=False, unitriangular=True)
    w = torch.linalg.solve_triangular(system, k_beta * cum.exp()[..., None], upper=False, unitriangular=True)
    attn = (q @ k.transpose(-1, -2)) * decay
    qd = q * cum.exp()[..., None]
    kd = k * (cum[..., -1:] - cum).exp()[..., None]
    gamma = cum[..., -1].exp()
    return qd, kd, w, u, attn, gamma


def _scan_forward_torch(qd, kd, w, u, attn, gamma, initial_state):
    n_bh, n_chunks, _, k_dim = qd.shape
    state = u.new_zeros(n_bh, k_dim, u.shape[-1]) if initial_state is None else initial_state
    states = u.new_empty(n_bh, n_chunks, k_dim, u.shape[-1])
    out, v_new = torch.empty_like(u), torch.empty_like(u)
    for c in range(n_chunks):
        states[:, c] = state
        v_new[:, c] = u[:, c] - w[:, c] @ state
        out[:, c] = qd[:, c] @ state + attn[:, c] @ v_new[:, c]
        state = state * gamma[:, c, None, None] + kd[:, c].transpose(-1, -2) @ v_new[:, c]
    return out, v_new, states, state


def _scan_backward_torch(qd, kd, w, attn, gamma, v_new, states, d_out, d_final):
    d_state = torch.zeros_like(states[:, 0]) if d_final is None else d_final
    d_qd, d_kd, d_w, d_u = (torch.empty_like(x) for x in (qd, kd, w, v_new))
    d_attn, d_gamma = torch.empty_like(attn), torch.empty_like(gamma)
    for c in reversed(range(qd.shape[1])):
        state, d_o = states[:, c], d_out[:, c]
        d_v_new = attn[:, c].transpose(-1, -2) @ d_o + kd[:, c] @ d_state
        d_u[:, c] = d_v_new
        d_attn[:, c] = d_o @ v_new[:, c].transpose(-1, -2)
        d_qd[:, c] = d_o @ state.transpose(-1, -2)
        d_kd[:, c] = v_new[:, c] @ d_state.transpose(-1, -2)
        d_w[:, c] = -d_v_new @ state.transpose(-1, -2)
        d_gamma[:, c] = (d_state * state).sum(dim=(-2, -1))
        d_state = qd[:, c].transpose(-1, -2) @ d_o + gamma[:, c, None, None] * d_state \
            - w[:, c].transpose(-1, -2) @ d_v_new
    return d_qd, d_kd, d_w, d_u, d_attn, d_gamma, d_state


class _ChunkScan(torch.autograd.Function):
    """(out, final state) of the scan over chunks; inputs flattened to [B*H, NC, C, ...], contiguous fp32."""

    @staticmethod
    def forward(ctx, qd, kd, w, u, attn, gamma, initial_state, use_triton: bool):
        if use_triton:
            from engine.kernels.triton_kernels.gated_delta_rule import scan_forward
        else:
            scan_forward = _scan_forward_torch
        out, v_new, states, final = scan_forward(qd, kd, w, u, attn, gamma, initial_state)
        ctx.save_for_backward(qd, kd, w, attn, gamma, v_new, states)
        ctx.use_triton, ctx.has_initial_state = use_triton, initial_state is not None
        return out, final

    @staticmethod
    def backward(ctx, d_out, d_final):
        if ctx.use_triton:
            from engine.kernels.triton_kernels.gated_delta_rule import scan_backward
        else:
            scan_backward = _scan_backward_torch
        qd, kd, w, attn, gamma, v_new, states = ctx.saved_tensors
        d_final = None if d_final is None else d_final.contiguous()
        grads = scan_backward(qd, kd, w, attn, gamma, v_new, states, d_out.contiguous(), d_final)
        d_qd, d_kd, d_w, d_u, d_attn, d_gamma, d_s0 = grads
        return d_qd, d_kd, d_w, d_u, d_attn, d_gamma, d_s0 if ctx.has_initial_state else None, None


def _flat(x: torch.Tensor) -> torch.Tensor:
    return x.reshape(-1, *x.shape[2:]).contiguous()


def _chunk_one(query, key, value, g, beta, chunk_size, initial_state, use_qk_l2norm, use_triton):
    """One batch of unpacked sequences: (out [B, T, Hv, V] in query's dtype, final state fp32)."""
    q, k, v, g, beta = _heads_first(query, key, value, g, beta, use_qk_l2norm)
    batch, heads, length, k_dim = k.shape
    qd, kd, w, u, attn, gamma = _prepare_chunks(q, k, v, g, beta, chunk_size)
    s0 = None if initial_state is None else initial_state.float().reshape(batch * heads, k_dim, -1).contiguous()
    out, final = _ChunkScan.apply(_flat(qd), _flat(kd), _flat(w), _flat(u), _flat(attn), _flat(gamma), s0,
                                  use_triton)
    out = out.reshape(batch, heads, -1, out.shape[-1])[:, :, :length]
    return out.transpose(1, 2).to(query.dtype), final.reshape(batch, heads, k_dim, -1)


def _check_triton_chunk(chunk_size: int) -> None:
    if chunk_size < 16 or chunk_size & (chunk_size - 1):
        raise ValueError(f"the Triton scan needs a power-of-two chunk_size >= 16, got {chunk_size}")


def chunk_gated_delta_rule(query, key, value, g, beta, chunk_size: int = 64, initial_state=None,
                           output_final_state: bool = False, use_qk_l2norm_in_kernel: bool = False,
                           cu_seqlens: torch.Tensor | None = None, *, backend: BackendChoice = "auto", **_: object):
    """Chunked gated delta rule: (out [B, T, Hv, V], final state [B or N, Hv, K, V] or None).

    Extra keyword arguments from the calling model are accepted and ignored, as transformers' own fallback does.
    """
    use_triton = resolve_backend("gated_delta_rule", query.device, backend) == "triton"
    if use_triton:
        _check_triton_chunk(chunk_size)
    if cu_seqlens is None:
        out, final = _chunk_one(query, key, value, g, beta, chunk_size, initial_state, use_qk_l2norm_in_kernel,
                                use_triton)
        return out, final if output_final_state else None
    if query.shape[0] != 1:
        raise ValueError(f"packed sequences (cu_seqlens) need batch size 1, got {query.shape[0]}")
    bounds = cu_seqlens.tolist()
    outs, finals = [], []
    for i, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        s0 = None if initial_state is None else initial_state[i : i + 1]
        piece = [x[:, start:end] for x in (query, key, value, g, beta)]
        out, final = _chunk_one(*piece, chunk_size, s0, use_qk_l2norm_in_kernel, use_triton)
        outs.append(out)
        finals.append(final)
    return torch.cat(outs, dim=1), torch.cat(finals, dim=0) if output_final_state else None


def causal_conv1d_segments(hidden_states: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                           activation: str | None = None, cu_seq_lens_q: torch.Tensor | None = None,
                           **_: object) -> torch.Tensor:
    """GatedDeltaNet's depthwise causal convolution ([B, C, T], weight [C, W]), restarted at each packed sequence.

    Without `cu_seq_lens_q` it is transformers' torch `causal_conv1d_fn`; with it (B == 1), no token sees the
    last W - 1 tokens of the previous sequence, which the stock fallback would mix in.
    """
    if activation not in (None, "silu", "swish"):
        raise ValueError(f"causal_conv1d_segments supports silu or no activation, got {activation!r}")
    length, width = hidden_states.shape[-1], weight.shape[-1]
    bounds = [0, length] if cu_seq_lens_q is None else cu_seq_lens_q.tolist()
    x = hidden_states.to(weight.dtype)
    pieces = [F.conv1d(x[..., start:end], weight.unsqueeze(1), bias, padding=width - 1,
                       groups=x.shape[1])[..., : end - start] for start, end in zip(bounds[:-1], bounds[1:])]
    out = torch.cat(pieces, dim=-1)
    return (F.silu(out) if activation else out).to(hidden_states.dtype)
