"""Triton scan over chunks for the chunked gated delta rule (forward and backward).

The chunked algorithm (see `engine.kernels.ops.gated_delta_rule`) turns the token recurrence into per-chunk
matrices computed with batched matmuls, plus a short sequential scan over chunks that carries the state
S [K, V]. Eager torch runs that scan as a Python loop of tiny matmuls (launch-bound on a GPU); here one program per
(batch x head, block of V columns) keeps its slice of S in registers for the whole sequence:

    v_new = u - w @ S;   o = qd @ S + attn @ v_new;   S <- gamma * S + kd^T @ v_new

The backward walks the chunks in reverse with dS in registers, re-reading the states saved by the forward. Gradients
that sum over V (dqd, dkd, dw, dattn, dgamma) are written per V block and summed by the caller.
All inputs are contiguous fp32: qd/kd/w [BH, NC, C, K], u [BH, NC, C, V], attn [BH, NC, C, C], gamma [BH, NC].
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from engine.kernels.runtime import next_power_of_2

# dots in full fp32: TF32 would put ~1e-3 relative error into a recurrence that compounds it over chunks
_PRECISION = tl.constexpr("ieee")


@triton.jit
def _scan_fwd(QD, KD, W, U, ATTN, GAMMA, S0, OUT, VNEW, STATES, S_FINAL, n_chunks, K, V,
              HAS_S0: tl.constexpr, C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    rows = tl.arange(0, C)
    ks = tl.arange(0, BK)
    vs = tl.program_id(1) * BV + tl.arange(0, BV)
    ck_mask = (rows[:, None] < C) & (ks[None, :] < K)
    cv_mask = (rows[:, None] < C) & (vs[None, :] < V)
    kv_mask = (ks[:, None] < K) & (vs[None, :] < V)
    kv_offs = ks[:, None] * V + vs[None, :]
    if HAS_S0:
        state = tl.load(S0 + bh * K * V + kv_offs, mask=kv_mask, other=0.0)
    else:
        state = tl.zeros([BK, BV], dtype=tl.float32)
    for c in range(0, n_chunks):
        chunk = bh * n_chunks + c
        tl.store(STATES + chunk * K * V + kv_offs, state, mask=kv_mask)
        ck_offs = chunk * C * K + rows[:, None] * K + ks[None, :]
        cv_offs = chunk * C * V + rows[:, None] * V + vs[None, :]
        w = tl.load(W + ck_offs, mask=ck_mask, other=0.0)
        qd = tl.load(QD + ck_offs, mask=ck_mask, other=0.0)
        kd = tl.load(KD + ck_offs, mask=ck_mask, other=0.0)
        u = tl.load(U + cv_offs, mask=cv_mask, other=0.0)
        attn = tl.load(ATTN + chunk * C * C + rows[:, None] * C + rows[None, :])
        gamma = tl.load(GAMMA + chunk)
        v_new = u - tl.dot(w, state, input_precision=_PRECISION)
        out = tl.dot(qd, state, input_precision=_PRECISION) + tl.dot(attn, v_new, input_precision=_PRECISION)
        state = state * gamma + tl.dot(tl.trans(kd), v_new, input_precision=_PRECISION)
        tl.store(OUT + cv_offs, out, mask=cv_mask)
        tl.store(VNEW + cv_offs, v_new, mask=cv_mask)
    tl.store(S_FINAL + bh * K * V + kv_offs, state, mask=kv_mask)


@triton.jit
def _scan_bwd(QD, KD, W, ATTN, GAMMA, VNEW, STATES, DOUT, DS_FINAL, DU, DQD, DKD, DW, DATTN, DGAMMA, DS0,
              n_bh, n_chunks, K, V, HAS_DS_FINAL: tl.constexpr, C: tl.constexpr, BK: tl.constexpr,
              BV: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    iv = tl.program_id(1).to(tl.int64)
    rows = tl.arange(0, C)
    ks = tl.arange(0, BK)
    vs = iv * BV + tl.arange(0, BV)
    ck_mask = (rows[:, None] < C) & (ks[None, :] < K)
    cv_mask = (rows[:, None] < C) & (vs[None, :] < V)
    kv_mask = (ks[:, None] < K) & (vs[None, :] < V)
    kv_offs = ks[:, None] * V + vs[None, :]
    if HAS_DS_FINAL:
        d_state = tl.load(DS_FINAL + bh * K * V + kv_offs, mask=kv_mask, other=0.0)
    else:
        d_state = tl.zeros([BK, BV], dtype=tl.float32)
    for i in range(0, n_chunks):
        chunk = bh * n_chunks + (n_chunks - 1 - i)
        partial = iv * n_bh * n_chunks + chunk  # index of this chunk in the per-V-block partial buffers
        ck_offs = rows[:, None] * K + ks[None, :]
        cv_offs = chunk * C * V + rows[:, None] * V + vs[None, :]
        cc_offs = rows[:, None] * C + rows[None, :]
        state = tl.load(STATES + chunk * K * V + kv_offs, mask=kv_mask, other=0.0)
        v_new = tl.load(VNEW + cv_offs, mask=cv_mask, other=0.0)
        d_out = tl.load(DOUT + cv_offs, mask=cv_mask, other=0.0)
        attn = tl.load(ATTN + chunk * C * C + cc_offs)
        qd = tl.load(QD + chunk * C * K + ck_offs, mask=ck_mask, other=0.0)
        kd = tl.load(KD + chunk * C * K + ck_offs, mask=ck_mask, other=0.0)
        w = tl.load(W + chunk * C * K + ck_offs, mask=ck_mask, other=0.0)
        gamma = tl.load(GAMMA + chunk)
        d_v_new = tl.dot(tl.trans(attn), d_out, input_precision=_PRECISION) + \
            tl.dot(kd, d_state, input_precision=_PRECISION)
        tl.store(DU + cv_offs, d_v_new, mask=cv_mask)
        tl.store(DATTN + partial * C * C + cc_offs, tl.dot(d_out, tl.trans(v_new), input_precision=_PRECISION))
        tl.store(DQD + partial * C * K + ck_offs, tl.dot(d_out, tl.trans(state), input_precision=_PRECISION),
                 mask=ck_mask)
        tl.store(DKD + partial * C * K + ck_offs, tl.dot(v_new, tl.trans(d_state), input_precision=_PRECISION),
                 mask=ck_mask)
        tl.store(DW + partial * C * K + ck_offs, -tl.dot(d_v_new, tl.trans(state), input_precision=_PRECISION),
                 mask=ck_mask)
        tl.store(DGAMMA + partial, tl.sum(tl.sum(d_state * state, axis=1), axis=0))
        d_state = tl.dot(tl.trans(qd), d_out, input_precision=_PRECISION) + gamma * d_state - \
            tl.dot(tl.trans(w), d_v_new, input_precision=_PRECISION)
    tl.store(DS0 + bh * K * V + kv_offs, d_state, mask=kv_mask)


def _blocks(k_dim: int, v_dim: int) -> tuple[int, int]:
    # tl.dot needs every dimension >= 16; 64 V columns keep a [K, BV] fp32 state within a program's registers
    return max(16, next_power_of_2(k_dim)), min(64, max(16, next_power_of_2(v_dim)))


def scan_forward(qd, kd, w, u, attn, gamma, initial_state):
    """(out [BH,NC,C,V], v_new like out, states [BH,NC,K,V] at each chunk start, final state [BH,K,V])."""
    n_bh, n_chunks, chunk, k_dim = qd.shape
    v_dim = u.shape[-1]
    block_k, block_v = _blocks(k_dim, v_dim)
    out, v_new = torch.empty_like(u), torch.empty_like(u)
    states = torch.empty((n_bh, n_chunks, k_dim, v_dim), dtype=u.dtype, device=u.device)
    final = torch.empty((n_bh, k_dim, v_dim), dtype=u.dtype, device=u.device)
    s0 = initial_state if initial_state is not None else final  # unread when HAS_S0 is False
    grid = (n_bh, triton.cdiv(v_dim, block_v))
    _scan_fwd[grid](qd, kd, w, u, attn, gamma, s0, out, v_new, states, final, n_chunks, k_dim, v_dim,
                    HAS_S0=initial_state is not None, C=chunk, BK=block_k, BV=block_v)
    return out, v_new, states, final


def scan_backward(qd, kd, w, attn, gamma, v_new, states, d_out, d_final):
    """Gradients of the scan's inputs: (dqd, dkd, dw, du, dattn, dgamma, d_initial_state)."""
    n_bh, n_chunks, chunk, k_dim = qd.shape
    v_dim = v_new.shape[-1]
    block_k, block_v = _blocks(k_dim, v_dim)
    n_v_blocks = triton.cdiv(v_dim, block_v)
    new = dict(dtype=qd.dtype, device=qd.device)
    d_u = torch.empty_like(v_new)
    d_qd, d_kd, d_w = (torch.empty((n_v_blocks, *qd.shape), **new) for _ in range(3))
    d_attn = torch.empty((n_v_blocks, *attn.shape), **new)
    d_gamma = torch.empty((n_v_blocks, *gamma.shape), **new)
    d_s0 = torch.empty((n_bh, k_dim, v_dim), **new)
    _scan_bwd[(n_bh, n_v_blocks)](
        qd, kd, w, attn, gamma, v_new, states, d_out, d_final if d_final is not None else d_s0, d_u,
        d_qd, d_kd, d_w, d_attn, d_gamma, d_s0, n_bh, n_chunks, k_dim, v_dim,
        HAS_DS_FINAL=d_final is not None, C=chunk, BK=block_k, BV=block_v)
    return d_qd.sum(0), d_kd.sum(0), d_w.sum(0), d_u, d_attn.sum(0), d_gamma.sum(0), d_s0
