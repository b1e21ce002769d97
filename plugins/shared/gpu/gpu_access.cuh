/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How the GPU kernels read and write their operands (gpu_kernels.cuh): a
 * dtype's size, widening and rounding; a row's elements by groups of one
 * 16-byte access (group), or of another dtype beside x's (lanes), or of 4
 * or 8 bytes (narrow_group); the address of a row.
 */
#ifndef FLD_PLUGINS_GPU_ACCESS_CUH
#define FLD_PLUGINS_GPU_ACCESS_CUH

#include "gpu_api.h"
#include "gpu_compat.cuh"

namespace fld_gpu
{

/* dtype index (enum fld__gpu_dtype) -> bytes per element. */
template <int DT> struct dtype_size {
    static constexpr int value = DT == FLD_GPU_F32 ? 4 : 2;
};

template <int DT> FLD_GPU_DEV float load_elem(const void *row, int64_t i)
{
    if (DT == FLD_GPU_F32)
        return static_cast<const float *>(row)[i];
    const uint16_t h = static_cast<const uint16_t *>(row)[i];
    return DT == FLD_GPU_F16 ? fld__gpu_f16_to_f32(h) : fld__gpu_bf16_to_f32(h);
}

template <int DT> FLD_GPU_DEV uint16_t narrow(float v)
{
    return DT == FLD_GPU_F16 ? fld__gpu_f32_to_f16(v) : fld__gpu_f32_to_bf16(v);
}

template <int DT> FLD_GPU_DEV float widen(uint32_t h)
{
    return DT == FLD_GPU_F16 ? fld__gpu_f16_to_f32((uint16_t)h) : fld__gpu_bf16_to_f32((uint16_t)h);
}

template <int DT> FLD_GPU_DEV void store_elem(void *row, int64_t i, float v)
{
    if (DT == FLD_GPU_F32)
        static_cast<float *>(row)[i] = v;
    else
        static_cast<uint16_t *>(row)[i] = narrow<DT>(v);
}

/* v rounded to the dtype and back: what storing and re-loading gives. */
template <int DT> FLD_GPU_DEV float round_to(float v)
{
    return DT == FLD_GPU_F32 ? v : widen<DT>(narrow<DT>(v));
}

/* f[0..N) each rounded to DT and back (round_to); on CUDA two at a time
   (fld__gpu_round_pair: a NaN stays some NaN, for intermediate values). */
template <int DT, int N> FLD_GPU_DEV void round_all(float *f)
{
#if defined(FLD_GPU_TARGET_CUDA)
    constexpr bool PAIRS = DT != FLD_GPU_F32 && N % 2 == 0;
#else
    constexpr bool PAIRS = false;
#endif
    if constexpr (PAIRS) {
        for (int j = 0; j + 1 < N; j += 2)
            fld__gpu_round_pair<DT>(f[j], f[j + 1]);
    } else {
        for (int j = 0; j < N; j++)
            f[j] = round_to<DT>(f[j]);
    }
}

/* A group's bits as loaded: one 16-byte vector, or one element's bits. */
template <bool VEC> struct raw_bits {
    typedef fld__gpu_vec16 type;
};
template <> struct raw_bits<false> {
    typedef uint32_t type;
};

/*
 * Access to a row by groups of N elements: group k holds elements
 * [k N, k N + N). VEC: one 16-byte access per group (the row and k N
 * 16-byte aligned); otherwise N = 1, one scalar access.
 *
 * load() is fetch() then unpack(). A kernel that needs several operands
 * of a row fetches them all before it unpacks any: a load's registers are
 * waited for at their first use, so fetching the second operand after
 * unpacking the first costs a second trip to memory.
 */
template <int DT, bool VEC> struct group {
    static constexpr int N = VEC ? 16 / dtype_size<DT>::value : 1;
    typedef typename raw_bits<VEC>::type raw;

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, fld__gpu_vec16 &v)
    {
        v = fld__gpu_load16(static_cast<const char *>(row) + k * 16);
    }

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, uint32_t &bits)
    {
        bits = DT == FLD_GPU_F32 ? static_cast<const uint32_t *>(row)[k]
                                 : static_cast<const uint16_t *>(row)[k];
    }

    /* fetch() by a thread that drops what it read unless used: one past the
       row's end, which loads a group that its owner may be storing to at
       the same time (a residual rounded before the block's reduction). On
       a GPU that is the same load, and it reads either value; the emulator
       keeps such a load out of ThreadSanitizer's race check. */
    template <typename R>
    static FLD_GPU_DEV void fetch_maybe_dropped(const void *row, int64_t k, R &v, bool used)
    {
#if defined(FLD_GPU_TARGET_EMU)
        if (!used) {
            fld_emu::unchecked_reads(true);
            fetch(row, k, v);
            fld_emu::unchecked_reads(false);
            return;
        }
#else
        (void)used;
#endif
        fetch(row, k, v);
    }

    static FLD_GPU_DEV void unpack(const fld__gpu_vec16 &v, float *f)
    {
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        if (DT == FLD_GPU_F32) {
            for (int j = 0; j < N && j < 4; j++)
                f[j] = fld__gpu_float(w[j]);
        } else {
            for (int j = 0; j < 4 && 2 * j + 1 < N; j++) {
                f[2 * j] = widen<DT>(w[j] & 0xffffu);
                f[2 * j + 1] = widen<DT>(w[j] >> 16);
            }
        }
    }

    static FLD_GPU_DEV void unpack(uint32_t bits, float *f)
    {
        f[0] = DT == FLD_GPU_F32 ? fld__gpu_float(bits) : widen<DT>(bits);
    }

    /* The fetch stays above this point (fld__gpu_issued). */
    static FLD_GPU_DEV void issued(const fld__gpu_vec16 &v)
    {
        fld__gpu_issued(v.x);
        fld__gpu_issued(v.y);
        fld__gpu_issued(v.z);
        fld__gpu_issued(v.w);
    }

    static FLD_GPU_DEV void issued(uint32_t bits)
    {
        fld__gpu_issued(bits);
    }

    /* x's words tied to y's (fld__gpu_tied: zero is 0 at run time) */
    static FLD_GPU_DEV void tie(fld__gpu_vec16 &x, const fld__gpu_vec16 &y, uint32_t zero)
    {
        x.x = fld__gpu_tied(x.x, y.x, zero);
        x.y = fld__gpu_tied(x.y, y.y, zero);
        x.z = fld__gpu_tied(x.z, y.z, zero);
        x.w = fld__gpu_tied(x.w, y.w, zero);
    }

    static FLD_GPU_DEV void tie(uint32_t &x, uint32_t y, uint32_t zero)
    {
        x = fld__gpu_tied(x, y, zero);
    }

    static FLD_GPU_DEV void load(const void *row, int64_t k, float *f)
    {
        raw r;
        fetch(row, k, r);
        unpack(r, f);
    }

    /* PAIRED: 16-bit groups rounded two at a time (fld__gpu_pack_pairs): on an
       H200 bfloat16 rotary, gated activations and the norms' outputs ran
       4-13% faster so; the norms' residual and the elementwise activations
       ran slower (0.93x, 0.97x) and round one at a time. Same bits either way. */
    template <bool PAIRED = false> static FLD_GPU_DEV void store(void *row, int64_t k, const float *f)
    {
        if (!VEC) {
            store_elem<DT>(row, k, f[0]);
            return;
        }
        fld__gpu_vec16 v;
        if (DT == FLD_GPU_F32 || PAIRED) {
            pack(f, v);
        } else {
            uint32_t w[4];
            for (int j = 0; j < 4 && 2 * j + 1 < N; j++)
                w[j] = (uint32_t)narrow<DT>(f[2 * j]) | ((uint32_t)narrow<DT>(f[2 * j + 1]) << 16);
            v.x = w[0];
            v.y = w[1];
            v.z = w[2];
            v.w = w[3];
        }
        put(row, k, v);
    }

    /* f as the group's bits in DT (VEC 16-bit: rounded two at a time), which
       put() stores and unpack() reads back as the rounded values. */
    static FLD_GPU_DEV void pack(const float *f, uint32_t &bits)
    {
        bits = DT == FLD_GPU_F32 ? fld__gpu_bits(f[0]) : (uint32_t)narrow<DT>(f[0]);
    }

    static FLD_GPU_DEV void pack(const float *f, fld__gpu_vec16 &v)
    {
        pack_groups<1>(f, &v);
    }

    /* K groups' floats (f[i N + j]: group i's element j) as their bits, v[i]
       group i's, in one call: 16-bit groups rounded two at a time behind one
       NaN test for all of them (fld__gpu_pack_pairs), so that a thread's
       groups are rounded and stored without a branch between them; NAN_FREE:
       the caller knows that none is a NaN, and there is no test. */
    template <int K, bool NAN_FREE = false>
    static FLD_GPU_DEV void pack_groups(const float *f, fld__gpu_vec16 *v)
    {
        uint32_t w[4 * K];
        if (DT == FLD_GPU_F32) {
            for (int j = 0; j < K * N && j < 4 * K; j++)
                w[j] = fld__gpu_bits(f[j]);
        } else {
            fld__gpu_pack_pairs<DT, K * N, NAN_FREE>(f, w);
        }
        for (int i = 0; i < K; i++) {
            v[i].x = w[4 * i];
            v[i].y = w[4 * i + 1];
            v[i].z = w[4 * i + 2];
            v[i].w = w[4 * i + 3];
        }
    }

    static FLD_GPU_DEV void put(void *row, int64_t k, const fld__gpu_vec16 &v)
    {
        fld__gpu_store16(static_cast<char *>(row) + k * 16, v);
    }

    /* The group's bits as 32-bit words and back, and words stored as group k
       (VEC) */
    static FLD_GPU_DEV void words(const fld__gpu_vec16 &v, uint32_t *w)
    {
        w[0] = v.x;
        w[1] = v.y;
        w[2] = v.z;
        w[3] = v.w;
    }

    static FLD_GPU_DEV void from_words(const uint32_t *w, fld__gpu_vec16 &v)
    {
        v.x = w[0];
        v.y = w[1];
        v.z = w[2];
        v.w = w[3];
    }

    static FLD_GPU_DEV void put_words(void *row, int64_t k, const uint32_t *w)
    {
        fld__gpu_vec16 v;
        from_words(w, v);
        put(row, k, v);
    }

    static FLD_GPU_DEV void put(void *row, int64_t k, uint32_t bits)
    {
        if (DT == FLD_GPU_F32)
            static_cast<uint32_t *>(row)[k] = bits;
        else
            static_cast<uint16_t *>(row)[k] = (uint16_t)bits;
    }
};

/*
 * Elements [k N, k N + N) of a row of dtype SDT, where N is the group size
 * of another dtype (x's): the weight or residual of a 16-bit x may be
 * float32. VEC: N / (16 / size) 16-byte accesses (SDT = float32 with N = 8
 * takes two); otherwise N = 1.
 */
template <int SDT, int N, bool VEC> struct lanes {
    static constexpr int PER = 16 / dtype_size<SDT>::value; /* elements per 16 bytes */
    static constexpr int ACCESSES = VEC ? N / PER : 1;
    static_assert(!VEC || (N % PER == 0 && ACCESSES <= 2), "x's group is 1 or 2 accesses of SDT");

    /* The group's bits as loaded (fetch(), then unpack(): see group). */
    struct raw {
        typename group<SDT, VEC>::raw part[ACCESSES];
    };

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, raw &r)
    {
        for (int i = 0; i < ACCESSES; i++)
            group<SDT, VEC>::fetch(row, k * ACCESSES + i, r.part[i]);
    }

    static FLD_GPU_DEV void unpack(const raw &r, float *f)
    {
        for (int i = 0; i < ACCESSES; i++)
            group<SDT, VEC>::unpack(r.part[i], f + i * PER);
    }

    static FLD_GPU_DEV void load(const void *row, int64_t k, float *f)
    {
        raw r;
        fetch(row, k, r);
        unpack(r, f);
    }

    static FLD_GPU_DEV void store(void *row, int64_t k, const float *f)
    {
        if (VEC) {
            group<SDT, true>::store(row, k * ACCESSES, f);
            if (ACCESSES == 2)
                group<SDT, true>::store(row, k * ACCESSES + 1, f + PER);
        } else {
            store_elem<SDT>(row, k, f[0]);
        }
    }
};

/*
 * Access to a row by groups of BYTES = 8 or 4 bytes (N = BYTES / size
 * elements; the row and k N aligned to BYTES): what an activation thread
 * reads per step where gpu_launch.h spreads a row over more threads than
 * 16-byte groups give. The same conversions as group's.
 */
template <int DT, int BYTES> struct narrow_group {
    static_assert(BYTES == 8 || BYTES == 4, "8- or 4-byte groups; 16 is group's");
    static constexpr int N = BYTES / dtype_size<DT>::value;
    static constexpr int WORDS = BYTES / 4;

    /* The group's bits as loaded (fetch(), then unpack(): see group). */
    struct raw {
        uint32_t w[WORDS];
    };

    static FLD_GPU_DEV void fetch(const void *row, int64_t k, raw &r)
    {
        const char *p = static_cast<const char *>(row) + k * BYTES;
        if (WORDS == 2) {
            const uint64_t u = fld__gpu_load8(p);
            r.w[0] = (uint32_t)u;
            r.w[WORDS - 1] = (uint32_t)(u >> 32);
        } else {
            r.w[0] = fld__gpu_load4(p);
        }
    }

    static FLD_GPU_DEV void issued(const raw &r)
    {
        for (int i = 0; i < WORDS; i++)
            fld__gpu_issued(r.w[i]);
    }

    static FLD_GPU_DEV void tie(raw &x, const raw &y, uint32_t zero)
    {
        for (int i = 0; i < WORDS; i++)
            x.w[i] = fld__gpu_tied(x.w[i], y.w[i], zero);
    }

    static FLD_GPU_DEV void unpack(const raw &r, float *f)
    {
        const uint32_t *w = r.w;
        for (int i = 0; i < WORDS; i++) {
            if (DT == FLD_GPU_F32) {
                f[i] = fld__gpu_float(w[i]);
            } else {
                f[2 * i] = widen<DT>(w[i] & 0xffffu);
                f[2 * i + 1] = widen<DT>(w[i] >> 16);
            }
        }
    }

    static FLD_GPU_DEV void load(const void *row, int64_t k, float *f)
    {
        raw r;
        fetch(row, k, r);
        unpack(r, f);
    }

    /* The group's bits as 32-bit words, and words stored as group k */
    static FLD_GPU_DEV void words(const raw &r, uint32_t *w)
    {
        for (int i = 0; i < WORDS; i++)
            w[i] = r.w[i];
    }

    static FLD_GPU_DEV void put_words(void *row, int64_t k, const uint32_t *w)
    {
        char *p = static_cast<char *>(row) + k * BYTES;
        if (WORDS == 2)
            fld__gpu_store8(p, (uint64_t)w[0] | ((uint64_t)w[WORDS - 1] << 32));
        else
            fld__gpu_store4(p, w[0]);
    }

    template <bool PAIRED = false>
    static FLD_GPU_DEV void store(void *row, int64_t k, const float *f)
    {
        uint32_t w[WORDS];
        if (DT == FLD_GPU_F32) {
            for (int i = 0; i < WORDS; i++)
                w[i] = fld__gpu_bits(f[i]);
        } else if (PAIRED) {
            fld__gpu_pack_pairs<DT, N>(f, w);
        } else {
            for (int i = 0; i < WORDS; i++)
                w[i] = (uint32_t)narrow<DT>(f[2 * i]) | ((uint32_t)narrow<DT>(f[2 * i + 1]) << 16);
        }
        put_words(row, k, w);
    }
};

template <int DT> FLD_GPU_DEV const char *row_at(const void *base, int64_t r, int64_t stride)
{
    return static_cast<const char *>(base) + r * stride * dtype_size<DT>::value;
}

template <int DT> FLD_GPU_DEV char *row_at(void *base, int64_t r, int64_t stride)
{
    return static_cast<char *>(base) + r * stride * dtype_size<DT>::value;
}

} // namespace fld_gpu

#endif /* FLD_PLUGINS_GPU_ACCESS_CUH */
