# SPDX-License-Identifier: Apache-2.0
"""vLLM's kernel-test grids (tests/kernels/core/test_layernorm.py,
test_activation.py, test_pos_encoding.py), in our own words, against
PyTorch formulas with vLLM's tolerances, under the default policy
(vendor.cpu) and prefer=reference (reference.c).

Trimmed for a 2-core machine: vLLM's largest token counts (4096 for
layernorm, 2048 for activations, 8192 for rotary) appear in one case each
instead of crossing every other axis, and the rotary layouts and the absent
key are crossed with two (head size, rot_dim) pairs rather than all ten. The
seed is vLLM's (0).
"""

import math
import zlib

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import fldispatch

DTYPES = [torch.float16, torch.bfloat16, torch.float32]

# tests/kernels/allclose_default.py: atol, rtol per dtype.
DEFAULT_TOL = {torch.float16: (1e-3, 1e-3), torch.bfloat16: (1e-3, 1.6e-2),
               torch.float32: (1e-5, 1.3e-6)}


def seeded(*key):
    """A generator seeded from vLLM's seed (0) and the case, the same in
    every run."""
    return torch.Generator().manual_seed(zlib.crc32(repr((0,) + key).encode()))


# ---- rms_norm (test_layernorm.py) -----------------------------------------------------


def reference_rms_norm(x, weight, eps, residual=None, gemma=False):
    """vLLM's native rms_norm: variance in float32; the normalised value is
    rounded to the dtype and then multiplied by the weight in the dtype
    (Gemma: multiplied by 1 + w in float32, then rounded). With a residual the
    sum is formed in float32, rounded into the residual, and normalised."""
    xf = x.float()
    new_residual = None
    if residual is not None:
        xf = xf + residual.float()
        new_residual = xf.to(x.dtype)
    normed = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    if gemma:
        out = (normed * (1.0 + weight.float())).to(x.dtype)
    elif weight is not None:
        out = normed.to(x.dtype) * weight
    else:
        out = normed.to(x.dtype)
    return out, new_residual


LN_TOKENS = [7, 83]
LN_HIDDEN = [8, 768, 769, 5120, 5125, 8192]


def layernorm_case(tokens, hidden, dtype, strided, key):
    g = seeded("ln", tokens, hidden, dtype, strided, *key)
    scale = 1.0 / (2 * hidden)
    if strided:  # rows of a wider tensor: row stride 2 * hidden
        x = torch.randn(tokens, 2 * hidden, generator=g).to(dtype)[:, :hidden]
        x.mul_(scale)
    else:
        x = (torch.randn(tokens, hidden, generator=g) * scale).to(dtype)
    weight = (torch.randn(hidden, generator=g) * 0.1 + 1.0).to(dtype)
    residual = (torch.randn(tokens, hidden, generator=g) * scale).to(dtype)
    return x, weight, residual


@pytest.mark.parametrize("strided", [False, True])
@pytest.mark.parametrize("add_residual", [False, True])
@pytest.mark.parametrize("hidden", LN_HIDDEN)
@pytest.mark.parametrize("tokens", LN_TOKENS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rms_norm_grid(policy, dtype, tokens, hidden, add_residual, strided):
    x, weight, residual = layernorm_case(tokens, hidden, dtype, strided, ("rms",))
    check_rms_norm(x, weight, residual if add_residual else None, gemma=False)


@pytest.mark.parametrize("add_residual", [False, True])
@pytest.mark.parametrize("hidden", [8, 769, 5120])
@pytest.mark.parametrize("tokens", LN_TOKENS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemma_rms_norm_grid(policy, dtype, tokens, hidden, add_residual):
    x, weight, residual = layernorm_case(tokens, hidden, dtype, False, ("gemma",))
    weight = (weight.float() - 1.0).to(dtype)  # Gemma weights sit around 0
    check_rms_norm(x, weight, residual if add_residual else None, gemma=True)


def test_rms_norm_4096_tokens(policy):
    x, weight, residual = layernorm_case(4096, 768, torch.bfloat16, True, ("big",))
    check_rms_norm(x, weight, residual, gemma=False)


def check_rms_norm(x, weight, residual, gemma):
    eps = 1e-6
    want, want_residual = reference_rms_norm(x, weight, eps, residual, gemma)
    op = fldispatch.gemma_rms_norm if gemma else fldispatch.rms_norm
    out = torch.empty(x.shape, dtype=x.dtype)
    res = residual.clone() if residual is not None else None
    op(out, x, weight, res, eps)
    torch.testing.assert_close(out, want, atol=1e-2, rtol=1e-2)
    if residual is not None:
        torch.testing.assert_close(res, want_residual, atol=1e-2, rtol=1e-2)
        # vLLM's in-place form: out is x itself.
        x2, res2 = x.clone(), residual.clone()
        op(x2, x2, weight, res2, eps)
        torch.testing.assert_close(x2, want, atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(res2, want_residual, atol=1e-2, rtol=1e-2)


def test_rms_norm_without_weight(policy):
    x, _, _ = layernorm_case(7, 768, torch.float32, False, ("noweight",))
    out = torch.empty_like(x)
    fldispatch.rms_norm(out, x, None, None, 1e-6)
    torch.testing.assert_close(out, reference_rms_norm(x, None, 1e-6)[0], atol=1e-5,
                               rtol=1.3e-6)


# ---- activations (test_activation.py) -------------------------------------------------------


def reference_activation(name, x):
    """vLLM's forward_native: the activation in the dtype (PyTorch computes it
    in float32 and rounds), then the product in the dtype."""
    d = x.shape[-1] // 2
    first, second = x[..., :d], x[..., d:]
    if name == "silu_and_mul":
        return F.silu(first) * second
    if name == "mul_and_silu":
        return first * F.silu(second)
    if name == "gelu_and_mul":
        return F.gelu(first, approximate="none") * second
    return F.gelu(first, approximate="tanh") * second


ACTIVATIONS = ["silu_and_mul", "mul_and_silu", "gelu_and_mul", "gelu_tanh_and_mul"]


@pytest.mark.parametrize("d", [512, 13824])
@pytest.mark.parametrize("tokens", [7, 83])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_grid(policy, name, dtype, tokens, d):
    check_activation(name, dtype, tokens, d)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_2048_tokens(policy, name):
    check_activation(name, torch.bfloat16, 2048, 512)


def check_activation(name, dtype, tokens, d):
    g = seeded("act", name, dtype, tokens, d)
    x = torch.randn(tokens, 2 * d, generator=g).to(dtype)
    out = torch.empty(tokens, d, dtype=dtype)
    getattr(fldispatch, name)(out, x)
    atol, rtol = DEFAULT_TOL[dtype]
    torch.testing.assert_close(out, reference_activation(name, x), atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", ["silu_and_mul", "mul_and_silu"])
def test_silu_family_is_vllm_bit_for_bit(policy, name, dtype):
    """vLLM's test_act_and_mul compares with atol=0, rtol=0: the activation
    rounded to the dtype, then the product rounded (the gelu family differs
    from PyTorch's CPU GELU, whose erf is an approximation, not from vLLM)."""
    g = seeded("exact", name, dtype)
    x = torch.randn(83, 2 * 1024, generator=g).to(dtype)
    out = torch.empty(83, 1024, dtype=dtype)
    getattr(fldispatch, name)(out, x)
    assert torch.equal(out, reference_activation(name, x))


# ---- elementwise activations (test_activation.py's gelu_quick) ---------------------------------


def reference_elementwise(name, x):
    """vLLM's CUDA kernel: the activation in float32, rounded once to the dtype."""
    xf = x.float()
    if name == "gelu_quick":
        return (xf * torch.sigmoid(1.702 * xf)).to(x.dtype)
    c = math.sqrt(2.0 / math.pi)
    if name == "gelu_new":
        return (0.5 * xf * (1.0 + torch.tanh(c * (xf + 0.044715 * xf.pow(3))))).to(x.dtype)
    assert name == "gelu_fast"
    return (0.5 * xf * (1.0 + torch.tanh(c * xf * (1.0 + 0.044715 * xf * xf)))).to(x.dtype)


ELEMENTWISE = ["gelu_quick", "gelu_new", "gelu_fast"]


@pytest.mark.parametrize("d", [1, 17, 512, 13824])
@pytest.mark.parametrize("tokens", [7, 83])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_activation_grid(policy, name, dtype, tokens, d):
    g = seeded("elementwise", name, dtype, tokens, d)
    x = torch.randn(tokens, d, generator=g).to(dtype)
    out = torch.empty(tokens, d, dtype=dtype)
    getattr(fldispatch, name)(out, x)
    atol, rtol = DEFAULT_TOL[dtype]
    torch.testing.assert_close(out, reference_elementwise(name, x), atol=atol, rtol=rtol)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_activation_strided_rows_and_tails(policy, name):
    """Rows of a wider tensor, and the tails: large |x| (sigmoid saturates to
    0 and 1), inf and NaN as PyTorch's formula gives them."""
    g = seeded("elementwise-strided", name)
    x = (torch.randn(9, 64, generator=g) * 20.0)[:, :40]
    x[0, :3] = torch.tensor([float("inf"), float("-inf"), float("nan")])
    out = torch.empty(9, 40)
    getattr(fldispatch, name)(out, x)
    torch.testing.assert_close(out, reference_elementwise(name, x), atol=1e-5, rtol=1.3e-6,
                               equal_nan=True)


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_activation_refuses_a_gated_out(policy, name):
    """out must be x's shape (a gated activation's [T, d] out of [T, 2d] is refused)."""
    x = torch.randn(3, 8)
    out = torch.empty(3, 4)
    with pytest.raises(ValueError, match=name + ": tensor 'out' has shape"):
        getattr(fldispatch, name)(out, x)


# ---- rotary_embedding (test_pos_encoding.py) -------------------------------------------------


def rope_cache(rot_dim, max_pos, base, dtype):
    inv_freq = 1.0 / (base ** (torch.arange(0, rot_dim, 2, dtype=torch.float) / rot_dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype)


def reference_rotary(positions, x, head_size, cache, is_neox, compute_dtype):
    """Rotates the first rot_dim elements of each head: neox pairs i with
    i + rot_dim/2, gptj pairs 2i with 2i+1, both with frequency i. The
    products and sums are taken in compute_dtype (vLLM's forward_native uses
    the tensor's dtype; float32 gives the exactly rounded result)."""
    rot_dim = cache.shape[-1]
    cos_sin = cache[positions.flatten().long()].to(compute_dtype)
    cos, sin = cos_sin[:, None, : rot_dim // 2], cos_sin[:, None, rot_dim // 2:]
    heads = x.reshape(positions.numel(), -1, head_size).to(compute_dtype)
    rot, rest = heads[..., :rot_dim], heads[..., rot_dim:]
    if is_neox:
        a, b = rot[..., : rot_dim // 2], rot[..., rot_dim // 2:]
    else:
        a, b = rot[..., 0::2], rot[..., 1::2]
    ra = a * cos - b * sin
    rb = b * cos + a * sin
    if is_neox:
        rotated = torch.cat((ra, rb), dim=-1)
    else:
        rotated = torch.stack((ra, rb), dim=-1).flatten(-2)
    return torch.cat((rotated, rest), dim=-1).to(x.dtype).reshape(x.shape)


def assert_rotary_close(got, positions, x, head_size, cache, is_neox):
    """Within vLLM's tolerance of vLLM's forward_native: the cache cast to the
    query's dtype, each product and sum rounded to it (float32: float32)."""
    atol, rtol = DEFAULT_TOL[x.dtype]
    want = reference_rotary(positions, x, head_size, cache.to(x.dtype), is_neox, x.dtype)
    torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


ROPE_HEADS, ROPE_BATCH, ROPE_MAX_POS, ROPE_BASE = 17, 5, 8192, 10000.0


def rotary_case(dtype, head_size, rot_dim, seq_len, layout, use_key, pos_dtype, key):
    g = seeded("rope", dtype, head_size, rot_dim, seq_len, layout, use_key, pos_dtype, *key)
    positions = torch.randint(0, ROPE_MAX_POS, (ROPE_BATCH, seq_len), generator=g).to(pos_dtype)
    shape = (ROPE_BATCH, seq_len, ROPE_HEADS, head_size)
    if layout == "padded":  # [B, S, H, D] views of heads padded by 64
        q = torch.randn(ROPE_BATCH, seq_len, ROPE_HEADS, head_size + 64,
                        generator=g).to(dtype)[..., :head_size]
        k = torch.randn(ROPE_BATCH, seq_len, ROPE_HEADS, head_size + 64,
                        generator=g).to(dtype)[..., :head_size]
    else:
        q = torch.randn(shape, generator=g).to(dtype)
        k = torch.randn(shape, generator=g).to(dtype)
        if layout == "flat":  # [B, S, H * D]
            q = q.reshape(ROPE_BATCH, seq_len, -1)
            k = k.reshape(ROPE_BATCH, seq_len, -1)
    cache = rope_cache(rot_dim, ROPE_MAX_POS, ROPE_BASE, dtype)
    return positions, q, (k if use_key else None), cache


@pytest.mark.parametrize("rot_dim", ["head", 32])
@pytest.mark.parametrize("head_size", [64, 80, 112, 120, 256])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_grid(policy, dtype, is_neox, head_size, rot_dim):
    rot = head_size if rot_dim == "head" else rot_dim
    check_rotary(dtype, is_neox, head_size, rot, 11, "flat", True, torch.int64)


@pytest.mark.parametrize("use_key", [True, False])
@pytest.mark.parametrize("layout", ["heads", "flat", "padded"])
@pytest.mark.parametrize("head_rot", [(80, 80), (120, 32)])
@pytest.mark.parametrize("is_neox", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotary_layouts(policy, dtype, is_neox, head_rot, layout, use_key):
    check_rotary(dtype, is_neox, head_rot[0], head_rot[1], 11, layout, use_key, torch.int64)


@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("is_neox", [True, False])
def test_rotary_position_dtypes(policy, pos_dtype, is_neox):
    check_rotary(torch.bfloat16, is_neox, 128, 32, 11, "flat", True, pos_dtype)


def test_rotary_8192_tokens(policy):
    check_rotary(torch.float16, True, 64, 64, 1638, "flat", True, torch.int64)


def check_rotary(dtype, is_neox, head_size, rot_dim, seq_len, layout, use_key, pos_dtype):
    positions, q, k, cache = rotary_case(dtype, head_size, rot_dim, seq_len, layout, use_key,
                                         pos_dtype, ())
    q0 = q.clone()
    k0 = k.clone() if k is not None else None
    fldispatch.rotary_embedding(positions, q, k, head_size, cache, is_neox)
    assert_rotary_close(q, positions, q0, head_size, cache, is_neox)
    if k is not None:
        assert_rotary_close(k, positions, k0, head_size, cache, is_neox)
    if rot_dim < head_size:  # the rest of each head is untouched, bit for bit
        def tail(t):
            return t.reshape(positions.numel(), -1, head_size)[..., rot_dim:]

        assert torch.equal(tail(q), tail(q0))
        if k is not None:
            assert torch.equal(tail(k), tail(k0))


def test_rotary_float32_cache_with_16bit_query(policy):
    positions, q, k, cache = rotary_case(torch.bfloat16, 64, 64, 11, "flat", True,
                                         torch.int64, ("f32cache",))
    cache32 = rope_cache(64, ROPE_MAX_POS, ROPE_BASE, torch.float32)
    q0 = q.clone()
    fldispatch.rotary_embedding(positions, q, k, 64, cache32, True)
    # vLLM casts the cache to the query's dtype, then rounds every step: bit for bit.
    want = reference_rotary(positions, q0, 64, cache32.to(torch.bfloat16), True, torch.bfloat16)
    assert torch.equal(q, want)


def test_rotary_position_out_of_range_is_refused():
    positions, q, k, cache = rotary_case(torch.float32, 64, 64, 3, "flat", True, torch.int64,
                                         ("range",))
    positions[0, 1] = ROPE_MAX_POS
    q0 = q.clone()
    with pytest.raises(fldispatch.InvalidArgumentError, match="position"):
        fldispatch.rotary_embedding(positions, q, k, 64, cache, True)
    assert torch.equal(q, q0)


# ---- the same ops from NumPy -------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_numpy_grid(policy, dtype):
    """Every tensor op with NumPy arrays in and out, checked against the
    PyTorch formulas on the same values."""
    rng = np.random.default_rng(0)
    tdtype = torch.from_numpy(np.zeros(1, dtype)).dtype
    atol, rtol = DEFAULT_TOL[tdtype]
    x = rng.standard_normal((7, 1024)).astype(dtype)
    for name in ACTIVATIONS:
        out = np.zeros((7, 512), dtype)
        getattr(fldispatch, name)(out, x)
        want = reference_activation(name, torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(out, want, atol=atol, rtol=rtol)
    hidden = x[:, :768] / 100
    weight = (rng.standard_normal(768) * 0.1 + 1).astype(dtype)
    residual = (rng.standard_normal((7, 768)) / 100).astype(dtype)
    for gemma in (False, True):
        out = np.zeros((7, 768), dtype)
        res = residual.copy()
        (fldispatch.gemma_rms_norm if gemma else fldispatch.rms_norm)(out, hidden, weight, res)
        want, want_res = reference_rms_norm(torch.from_numpy(hidden), torch.from_numpy(weight),
                                            1e-6, torch.from_numpy(residual), gemma)
        np.testing.assert_allclose(out, want.numpy(), atol=1e-2, rtol=1e-2)
        np.testing.assert_allclose(res, want_res.numpy(), atol=1e-2, rtol=1e-2)
    positions = rng.integers(0, 100, 7).astype(np.int64)
    q = rng.standard_normal((7, 4 * 64)).astype(dtype)
    cache = rope_cache(32, 100, ROPE_BASE, tdtype).numpy()
    q0 = torch.from_numpy(q.copy())
    fldispatch.rotary_embedding(positions, q, None, 64, cache, False)
    assert_rotary_close(torch.from_numpy(q), torch.from_numpy(positions), q0, 64,
                        torch.from_numpy(cache), False)
