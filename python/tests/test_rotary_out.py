# SPDX-License-Identifier: Apache-2.0
"""rotary_embedding_out, the out-of-place rotary: fldispatch.rotary_embedding_out()
and torch.ops.fldispatch.rotary_embedding_out give rotary_embedding's in-place
result bit for bit, on every dtype and both pair layouts, reading the inputs
where they lie (column slices of one qkv tensor included) and leaving them
untouched; a refused call writes nothing and names the tensor at fault."""

import pytest
import torch

import fldispatch
import fldispatch.torch  # noqa: F401  (defines torch.ops.fldispatch)

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HEAD = 64
MAX_POS = 64


def _cache(rot, dtype):
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
    freqs = torch.arange(MAX_POS, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(dtype)


def _qkv(tokens, hq, hk, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(tokens, (hq + 2 * hk) * HEAD, generator=g).to(dtype)
    q, k, _ = qkv.split([hq * HEAD, hk * HEAD, hk * HEAD], dim=-1)
    return qkv, q, k


def _positions(tokens, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, MAX_POS, (tokens,), generator=g, dtype=dtype)


def _in_place(positions, q, k, rot_cache, neox):
    qi = q.clone()
    ki = k.clone() if k is not None else None
    fldispatch.rotary_embedding(positions, qi, ki, HEAD, rot_cache, neox)
    return qi, ki


CALLS = {
    "fldispatch": lambda *a: fldispatch.rotary_embedding_out(*a),
    "torch.ops": lambda *a: torch.ops.fldispatch.rotary_embedding_out(*a),
}


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("rot", [HEAD, 32], ids=["rot=head", "rot<head"])
@pytest.mark.parametrize("with_key", [True, False], ids=["key", "no-key"])
@pytest.mark.parametrize("pos_dtype", [torch.int64, torch.int32], ids=["i64", "i32"])
def test_out_of_place_equals_in_place(call, dtype, neox, rot, with_key, pos_dtype):
    qkv, q, k = _qkv(9, 4, 2, dtype, seed=rot + neox)
    if not with_key:
        k = None
    positions = _positions(9, pos_dtype, seed=3)
    cache = _cache(rot, dtype)
    want_q, want_k = _in_place(positions, q, k, cache, neox)
    before = qkv.clone()
    q_out = torch.empty(q.shape, dtype=dtype)
    k_out = torch.empty(k.shape, dtype=dtype) if k is not None else None
    with torch.no_grad():
        CALLS[call](positions, q, k, HEAD, cache, neox, q_out, k_out)
    assert torch.equal(q_out, want_q)
    if k is not None:
        assert torch.equal(k_out, want_k)
    assert torch.equal(qkv, before)  # query and key are only read


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_calls_split_over_torch_threads_give_the_same(dtype):
    """Prefill sizes (over 512 KiB) go through the native kernel's token
    ranges when torch has two threads or more: the same bits."""
    qkv, q, k = _qkv(1500, 8, 2, dtype, seed=11)
    positions = _positions(1500, torch.int64, seed=12)
    cache = _cache(32, torch.float32)
    want_q, want_k = _in_place(positions, q, k, cache, True)
    q_out, k_out = torch.empty(q.shape, dtype=dtype), torch.empty(k.shape, dtype=dtype)
    threads = torch.get_num_threads()
    torch.set_num_threads(max(2, threads))
    try:
        torch.ops.fldispatch.rotary_embedding_out(positions, q, k, HEAD, cache, True, q_out, k_out)
    finally:
        torch.set_num_threads(threads)
    assert torch.equal(q_out, want_q) and torch.equal(k_out, want_k)


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_bad_position_writes_nothing_and_names_positions(call):
    qkv, q, k = _qkv(2000, 4, 2, torch.float32, seed=5)
    positions = _positions(2000, torch.int64, seed=6)
    positions[1700] = MAX_POS  # past the cache, in a late token range
    cache = _cache(HEAD, torch.float32)
    q_out, k_out = torch.full(q.shape, 7.0), torch.full(k.shape, 7.0)
    with pytest.raises(fldispatch.InvalidArgumentError,
                       match="rotary_embedding_out: tensor 'positions' has value 64 at index 1700"):
        CALLS[call](positions, q, k, HEAD, cache, True, q_out, k_out)
    assert bool((q_out == 7.0).all()) and bool((k_out == 7.0).all())


@pytest.mark.parametrize("call", sorted(CALLS))
@pytest.mark.parametrize("case", ["key_out missing", "key_out shape", "query_out dtype",
                                  "query_out is query", "key_out overlaps query_out"])
def test_bad_outputs_are_refused_naming_them(call, case):
    qkv, q, k = _qkv(5, 4, 2, torch.float32, seed=7)
    positions = _positions(5, torch.int64, seed=8)
    cache = _cache(HEAD, torch.float32)
    q_out, k_out = torch.full(q.shape, 3.0), torch.full(k.shape, 3.0)
    want = {
        "key_out missing": "tensor 'key_out' is NULL but 'key' is not",
        "key_out shape": "tensor 'key_out' has shape [5, 64] but 'key' has [5, 128]",
        "query_out dtype": "tensor 'query_out' has dtype float16 but 'query' has float32",
        "query_out is query": "tensor 'query_out'",
        "key_out overlaps query_out": "tensor 'key_out'",
    }[case]
    if case == "key_out missing":
        k_out = None
    elif case == "key_out shape":
        k_out = torch.full((5, 64), 3.0)
    elif case == "query_out dtype":
        q_out = torch.full(q.shape, 3.0, dtype=torch.float16)
    elif case == "query_out is query":
        q_out = q
    else:
        k_out = q_out[:, :2 * HEAD]
    before = qkv.clone()
    outs = [t.clone() for t in (q_out, k_out) if t is not None]
    with pytest.raises(fldispatch.InvalidArgumentError, match="rotary_embedding_out: ") as err:
        CALLS[call](positions, q, k, HEAD, cache, True, q_out, k_out)
    assert want in str(err.value)
    if case in ("query_out is query", "key_out overlaps query_out"):
        assert "overlaps" in str(err.value)
    assert torch.equal(qkv, before)
    for t, was in zip([t for t in (q_out, k_out) if t is not None], outs):
        assert torch.equal(t, was)


def test_schema_mutates_only_the_outputs():
    schema = torch.ops.fldispatch.rotary_embedding_out.default._schema
    written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
    assert written == ["query_out", "key_out"]


def test_compiled_call_copies_nothing():
    """Under torch.compile the op reads q and k views of qkv and writes new
    tensors: Inductor's graph holds no copy of q, k or qkv, and the result
    is the eager one."""
    from torch._functorch.aot_autograd import aot_module_simplified

    cache = _cache(32, torch.float32)
    graphs = []

    def fn(qkv, positions):
        q, k, v = qkv.split([4 * HEAD, 2 * HEAD, 2 * HEAD], dim=-1)
        qo, ko = torch.empty(q.shape), torch.empty(k.shape)
        torch.ops.fldispatch.rotary_embedding_out(positions, q, k, HEAD, cache, True, qo, ko)
        return qo * 2, ko * 2, v * 2

    def backend(gm, example_inputs):
        def capture(g, inputs):
            graphs.append(g)
            return g.forward

        return aot_module_simplified(gm, example_inputs, fw_compiler=capture)

    qkv, _, _ = _qkv(6, 4, 2, torch.float32, seed=9)
    positions = _positions(6, torch.int64, seed=10)
    torch._dynamo.reset()
    with torch._inductor.config.patch(enable_auto_functionalized_v2=False), torch.no_grad():
        got = torch.compile(fn, backend=backend, fullgraph=True)(qkv, positions)
    torch._dynamo.reset()
    targets = [str(n.target) for g in graphs for n in g.graph.nodes if n.op == "call_function"]
    assert not [t for t in targets if "copy" in t or "clone" in t or "scatter" in t], targets
    for a, b in zip(got, fn(qkv, positions)):
        assert torch.equal(a, b)
