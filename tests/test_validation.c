/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Argument validation of every catalog op: each bad argument returns
 * FLD_EINVAL with a message that names the op and the offending tensor or
 * argument, without touching tensor memory.
 *
 * Most cases point every tensor at PROT_NONE memory (an mprotect'ed
 * mapping), so any read or write by the host or a kernel kills the test with
 * SIGSEGV. Rotary positions are the exception: the host reads them to check
 * their range, so they live in ordinary memory. A second set of cases uses
 * real, sentinel-guarded buffers (tests/util/cpu_tensor.h) and asserts that
 * nothing changed, values or padding.
 *
 * Each family has a fixture of valid arguments and a numbered list of
 * mutations (one rule each); a test walks the list.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <fldispatch/plugin.h>

#include "util/cpu_tensor.h"
#include "util/harness.h"

/* ------------------------------------------------------------------------ */
/* No-access memory and tensor descriptors                                  */
/* ------------------------------------------------------------------------ */

#define NOACCESS_BYTES (64u << 20)
static char *noaccess; /* PROT_NONE: touching it is SIGSEGV */

static void noaccess_setup(void)
{
    void *p = mmap(NULL, NOACCESS_BYTES, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    ck_assert(p != MAP_FAILED);
    ck_assert_int_eq(mprotect(p, NOACCESS_BYTES, PROT_NONE), 0);
    noaccess = p;
}

static void noaccess_teardown(void)
{
    munmap(noaccess, NOACCESS_BYTES);
    noaccess = NULL;
}

/* A DLTensor with its own shape and strides; use in place (it points into itself). */
struct td {
    DLTensor t;
    int64_t shape[6];
    int64_t strides[6];
};

/* Sets d to a CPU tensor on `data` (NULL strides unless given). */
static void td_set(struct td *d, void *data, DLDataType dt, int ndim, const int64_t *shape,
                   const int64_t *strides)
{
    memset(d, 0, sizeof *d);
    for (int i = 0; i < ndim; i++) {
        d->shape[i] = shape[i];
        if (strides)
            d->strides[i] = strides[i];
    }
    d->t.data = data;
    d->t.device = (DLDevice){kDLCPU, 0};
    d->t.ndim = ndim;
    d->t.dtype = dt;
    d->t.shape = d->shape;
    d->t.strides = strides ? d->strides : NULL;
}

/* Gives d explicit strides. */
static void td_strides(struct td *d, const int64_t *strides)
{
    for (int i = 0; i < d->t.ndim; i++)
        d->strides[i] = strides[i];
    d->t.strides = d->strides;
}

/*
 * The caller's arrays as an application allocates them: shape and strides
 * of exactly ndim entries (none for a rank <= 0), each ending where a
 * PROT_NONE page starts. A validator that reads one entry past them
 * (shape[1] of a rank-1 tensor, shape[0] of a rank-0 one) gets SIGSEGV in
 * every build, not only under AddressSanitizer. The calls below pass their
 * fixture tensors through tight().
 */
#define TIGHT_MAX 16
static struct {
    void *map[TIGHT_MAX];
    size_t n;
} tight_maps;

static int64_t *tight_array(const int64_t *src, int ndim)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    const size_t n = ndim > 0 ? (size_t)ndim : 0;
    ck_assert(n * sizeof(int64_t) <= page && tight_maps.n < TIGHT_MAX);
    char *m = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(m != MAP_FAILED);
    ck_assert_int_eq(mprotect(m + page, page, PROT_NONE), 0);
    tight_maps.map[tight_maps.n++] = m;
    int64_t *a = (int64_t *)(void *)(m + page) - n;
    for (size_t i = 0; i < n; i++)
        a[i] = i < 6 ? src[i] : 1; /* a fixture holds 6 entries */
    return a;
}

/* A copy of d whose shape and strides (where set) are tight arrays. */
static DLTensor *tight(DLTensor *copy, const struct td *d)
{
    *copy = d->t;
    if (d->t.shape)
        copy->shape = tight_array(d->t.shape, d->t.ndim);
    if (d->t.strides)
        copy->strides = tight_array(d->t.strides, d->t.ndim);
    return copy;
}

/* Unmaps the arrays of the call that just returned. */
static void tight_release(void)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    for (size_t i = 0; i < tight_maps.n; i++)
        munmap(tight_maps.map[i], 2 * page);
    tight_maps.n = 0;
}

/* A distinct no-access address for the k-th tensor of a call. */
static void *na(int k)
{
    return noaccess + (size_t)k * (8u << 20);
}

#define END_OF_CASES NULL

/* Asserts rc is FLD_EINVAL and the message holds every substring of subs. */
static void expect_einval(const char *what, int rc, const char *const *subs)
{
    const char *msg = fld_last_error();
    ck_assert_msg(rc == FLD_EINVAL, "%s: status %d (%s), want FLD_EINVAL; message: %s", what, rc,
                  fld_strerror(rc), msg);
    for (int i = 0; subs[i]; i++)
        ck_assert_msg(strstr(msg, subs[i]) != NULL, "%s: message \"%s\" lacks \"%s\"", what, msg,
                      subs[i]);
}

static const char *const act_ops[4] = {FLD_OP_SILU_AND_MUL, FLD_OP_MUL_AND_SILU,
                                       FLD_OP_GELU_AND_MUL, FLD_OP_GELU_TANH_AND_MUL};

static int call_act(int op, DLTensor *out, const DLTensor *x)
{
    switch (op) {
    case 0:
        return fld_silu_and_mul(out, x);
    case 1:
        return fld_mul_and_silu(out, x);
    case 2:
        return fld_gelu_and_mul(out, x);
    default:
        return fld_gelu_tanh_and_mul(out, x);
    }
}

/* call_act() on fixture tensors (NULL: absent), passed with tight arrays. */
static int call_act_tight(int op, const struct td *out, const struct td *x)
{
    DLTensor o, i;
    int rc = call_act(op, out ? tight(&o, out) : NULL, x ? tight(&i, x) : NULL);
    tight_release();
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Activations                                                              */
/* ------------------------------------------------------------------------ */

struct act_fx {
    struct td x, out;
    bool out_null, x_null;
};

static void act_fx_init(struct act_fx *f)
{
    memset(f, 0, sizeof *f);
    td_set(&f->x, na(0), FLD_DTYPE_F32, 2, (int64_t[]){4, 16}, NULL);
    td_set(&f->out, na(1), FLD_DTYPE_F32, 2, (int64_t[]){4, 8}, NULL);
}

/*
 * Applies mutation i to a valid fixture; fills the expected message
 * substrings (after the op name). Returns the description, or NULL past the
 * last case. Rules shared by all tensors (dtype, device, strides, size) are
 * exercised here on 'x' and 'out'; the other families repeat a few on their
 * own tensors.
 */
static const char *act_case(int i, struct act_fx *f, const char **e)
{
    switch (i) {
    case 0:
        f->out_null = true;
        e[0] = "tensor 'out' is NULL";
        return "out NULL";
    case 1:
        f->x_null = true;
        e[0] = "tensor 'x' is NULL";
        return "x NULL";
    case 2:
        f->x.t.ndim = 0;
        e[0] = "'x'", e[1] = "ndim 0";
        return "x rank 0";
    case 3:
        f->x.t.shape = NULL;
        e[0] = "'x'", e[1] = "NULL shape";
        return "x shape NULL";
    case 4:
        f->x.shape[0] = -4;
        e[0] = "'x'", e[1] = "negative", e[2] = "[-4, 16]";
        return "negative dim";
    case 5:
        f->out.shape[1] = -8;
        e[0] = "'out'", e[1] = "negative";
        return "negative dim on out";
    case 6:
        f->x.t.dtype = (DLDataType){kDLFloat, 64, 1};
        e[0] = "'x'", e[1] = "float64";
        return "x float64";
    case 7:
        f->x.t.dtype = (DLDataType){kDLFloat, 32, 4};
        f->out.t.dtype = (DLDataType){kDLFloat, 32, 4};
        e[0] = "'x'", e[1] = "dtype";
        return "vector lanes";
    case 8:
        f->out.t.dtype = (DLDataType){kDLInt, 32, 1};
        e[0] = "'out'", e[1] = "int32";
        return "out int32";
    case 9:
        f->out.t.dtype = FLD_DTYPE_F16;
        e[0] = "'out' has dtype float16 but 'x' has float32";
        return "dtype mismatch";
    case 10:
        f->x.t.dtype = FLD_DTYPE_BF16;
        e[0] = "'out' has dtype float32 but 'x' has bfloat16";
        return "dtype mismatch bf16";
    case 11:
        f->x.t.device = (DLDevice){kDLOpenCL, 0};
        f->out.t.device = (DLDevice){kDLOpenCL, 0};
        e[0] = "'x'", e[1] = "device type 4";
        return "unsupported device";
    case 12:
        f->out.t.device = (DLDevice){kDLCUDA, 0};
        e[0] = "'out' is on cuda:0 but 'x' is on cpu:0";
        return "device type mismatch";
    case 13:
        f->out.t.device = (DLDevice){kDLCPU, 1};
        e[0] = "'out' is on cpu:1 but 'x' is on cpu:0";
        return "device id mismatch";
    case 14:
        f->x.t.device = (DLDevice){kDLCUDA, 0};
        f->out.t.device = (DLDevice){kDLCUDA, 1};
        e[0] = "'out' is on cuda:1 but 'x' is on cuda:0";
        return "device id mismatch on cuda";
    case 15:
        td_strides(&f->x, (int64_t[]){32, 2});
        e[0] = "'x'", e[1] = "stride 2", e[2] = "last dimension";
        return "non-unit last stride";
    case 16:
        td_strides(&f->x, (int64_t[]){8, 1});
        e[0] = "'x'", e[1] = "row stride is smaller than the row width";
        return "overlapping rows";
    case 17:
        td_strides(&f->x, (int64_t[]){-16, 1});
        e[0] = "'x'", e[1] = "negative row stride";
        return "negative row stride";
    case 18:
        td_set(&f->x, na(0), FLD_DTYPE_F32, 3, (int64_t[]){2, 3, 16}, (int64_t[]){100, 16, 1});
        td_set(&f->out, na(1), FLD_DTYPE_F32, 3, (int64_t[]){2, 3, 8}, NULL);
        e[0] = "'x'", e[1] = "do not collapse", e[2] = "[100, 16, 1]";
        return "leading dims not collapsible";
    case 19:
        td_strides(&f->out, (int64_t[]){8, 1});
        f->out.strides[1] = 3;
        e[0] = "'out'", e[1] = "stride 3";
        return "non-unit last stride on out";
    case 20:
        f->x.shape[1] = 15;
        e[0] = "'x'", e[1] = "odd";
        return "odd last dim";
    case 21:
        f->out.shape[1] = 7;
        e[0] = "'out' has shape [4, 7] but 'x' has [4, 16]", e[1] = "expected out [4, 8]";
        return "out width";
    case 22:
        f->out.shape[0] = 5;
        e[0] = "'out' has shape [5, 8] but 'x' has [4, 16]", e[1] = "expected out [4, 8]";
        return "leading shape";
    case 23:
        td_set(&f->out, na(1), FLD_DTYPE_F32, 3, (int64_t[]){4, 1, 8}, NULL);
        e[0] = "'out' has shape [4, 1, 8]", e[1] = "expected out [4, 8]";
        return "rank mismatch";
    case 24:
        f->x.shape[0] = (int64_t)1 << 40;
        f->x.shape[1] = (int64_t)1 << 40;
        f->out.shape[0] = (int64_t)1 << 40;
        f->out.shape[1] = (int64_t)1 << 39;
        e[0] = "'x'", e[1] = "too large";
        return "numel overflow";
    case 25:
        f->x.shape[0] = (int64_t)1 << 62;
        f->out.shape[0] = (int64_t)1 << 62;
        e[0] = "'x'", e[1] = "too large";
        return "bytes overflow";
    case 26:
        td_strides(&f->x, (int64_t[]){INT64_MAX / 2, 1});
        e[0] = "'x'", e[1] = "too large";
        return "stride overflow";
    case 27:
        f->x.t.byte_offset = UINT64_MAX - 8;
        e[0] = "'x'", e[1] = "too large";
        return "byte_offset overflow";
    case 28:
        f->x.t.data = (void *)(UINTPTR_MAX - 64);
        e[0] = "'x'", e[1] = "too large";
        return "address wrap";
    case 29:
        f->x.t.data = NULL;
        e[0] = "'x'", e[1] = "NULL data";
        return "x data NULL";
    case 30:
        f->out.t.data = NULL;
        e[0] = "'out'", e[1] = "NULL data";
        return "out data NULL";
    case 31:
        f->x.t.byte_offset = 2;
        e[0] = "'x'", e[1] = "aligned";
        return "misaligned";
    case 32:
        f->x.shape[0] = 0;
        e[0] = "'out' has shape [4, 8] but 'x' has [0, 16]";
        return "empty x, non-empty out";
    case 33:
        td_strides(&f->x, (int64_t[]){16, 1});
        f->x.shape[0] = 2;
        f->x.strides[1] = 0;
        e[0] = "'x'", e[1] = "stride 0";
        return "broadcast last dim";
    case 34:
        f->x.t.data = (void *)(UINTPTR_MAX - 15);
        f->x.t.byte_offset = 32; /* data + byte_offset itself wraps */
        e[0] = "'x'", e[1] = "too large";
        return "byte_offset wraps the address";
    /* Row strides at the far end of int64: no arithmetic on them may overflow. */
    case 35:
        td_strides(&f->x, (int64_t[]){INT64_MIN, 1});
        e[0] = "'x'", e[1] = "negative row stride";
        return "x row stride INT64_MIN";
    case 36:
        td_strides(&f->out, (int64_t[]){INT64_MIN, 1});
        e[0] = "'out'", e[1] = "negative row stride";
        return "out row stride INT64_MIN";
    case 37:
        td_strides(&f->out, (int64_t[]){INT64_MAX, 1});
        e[0] = "'out'", e[1] = "too large";
        return "out row stride INT64_MAX";
    case 38:
        td_set(&f->out, na(1), FLD_DTYPE_F32, 1, (int64_t[]){8}, NULL);
        e[0] = "'out' has shape [8] but 'x' has [4, 16]";
        return "out rank 1";
    case 39:
        td_set(&f->out, na(1), FLD_DTYPE_F32, 0, (int64_t[]){0}, NULL);
        e[0] = "'out'", e[1] = "ndim 0";
        return "out rank 0";
    case 40:
        td_set(&f->x, na(0), FLD_DTYPE_F32, 1, (int64_t[]){16}, NULL);
        e[0] = "'out' has shape [4, 8] but 'x' has [16]";
        return "x rank 1";
    default:
        return END_OF_CASES;
    }
}

/* _i: op index */
START_TEST(test_activation_rules)
{
    int n = 0;
    for (int i = 0;; i++, n++) {
        struct act_fx f;
        const char *e[8] = {0};
        act_fx_init(&f);
        const char *what = act_case(i, &f, e);
        if (!what)
            break;
        char label[128];
        snprintf(label, sizeof label, "%s case %d (%s)", act_ops[_i], i, what);
        int rc = call_act_tight(_i, f.out_null ? NULL : &f.out, f.x_null ? NULL : &f.x);
        const char *subs[9] = {act_ops[_i]};
        memcpy(subs + 1, e, sizeof e);
        expect_einval(label, rc, subs);
    }
    ck_assert_int_ge(n, 30);
}
END_TEST

/* Valid layouts on no-access memory that must not run anything: empty tensors. */
START_TEST(test_activation_empty)
{
    static const int64_t shapes[][2] = {{0, 16}, {4, 0}, {0, 0}};
    for (int s = 0; s < 3; s++) {
        struct act_fx f;
        act_fx_init(&f);
        f.x.shape[0] = f.out.shape[0] = shapes[s][0];
        f.x.shape[1] = shapes[s][1];
        f.out.shape[1] = shapes[s][1] / 2;
        int rc = call_act(_i, &f.out.t, &f.x.t);
        ck_assert_msg(rc == FLD_OK, "%s %lldx%lld: %d %s", act_ops[_i], (long long)shapes[s][0],
                      (long long)shapes[s][1], rc, fld_last_error());
        /* empty tensors need no data and no sane strides */
        f.x.t.data = f.out.t.data = NULL;
        td_strides(&f.x, (int64_t[]){-5, 7});
        ck_assert_int_eq(call_act(_i, &f.out.t, &f.x.t), FLD_OK);
    }
}
END_TEST

/* Failed calls on real, guarded tensors write nothing. */
START_TEST(test_activation_guarded)
{
    tt_tensor *x = tt_new_strided(FLD_DTYPE_BF16, 2, (int64_t[]){4, 16}, (int64_t[]){20, 1});
    tt_tensor *out = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 7});
    tt_fill_normal(x, 1, 0, 1);
    tt_fill_normal(out, 2, 0, 1);
    double xv[64], ov[28], now[64];
    tt_to_double(x, xv);
    tt_to_double(out, ov);
    int rc = call_act(_i, &out->t, &x->t);
    expect_einval("guarded", rc, (const char *[]){"'out'", "[4, 7]", NULL});
    tt_to_double(x, now);
    ck_assert(memcmp(now, xv, sizeof xv) == 0);
    tt_to_double(out, now);
    ck_assert(memcmp(now, ov, sizeof ov) == 0);
    ck_assert(tt_padding_intact(x) && tt_padding_intact(out));

    /* the same tensors with a matching out are accepted and computed */
    tt_tensor *good = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 8});
    ck_assert_int_eq(call_act(_i, &good->t, &x->t), FLD_OK);
    ck_assert(tt_get(good, 0) != 0.0 || tt_get(good, 1) != 0.0);
    tt_free(good);
    tt_free(x);
    tt_free(out);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* rms_norm and gemma_rms_norm                                              */
/* ------------------------------------------------------------------------ */

struct rms_fx {
    struct td x, out, weight, residual;
    bool x_null, out_null, no_weight, no_residual;
    float eps;
};

static void rms_fx_init(struct rms_fx *f)
{
    memset(f, 0, sizeof *f);
    td_set(&f->x, na(0), FLD_DTYPE_F32, 2, (int64_t[]){7, 769}, NULL);
    td_set(&f->out, na(1), FLD_DTYPE_F32, 2, (int64_t[]){7, 769}, NULL);
    td_set(&f->weight, na(2), FLD_DTYPE_F32, 1, (int64_t[]){769}, NULL);
    td_set(&f->residual, na(3), FLD_DTYPE_F32, 2, (int64_t[]){7, 769}, NULL);
    f->eps = 1e-6f;
}

/* The fixture's call, every tensor with tight arrays. */
static int call_rms(bool gemma, struct rms_fx *f)
{
    DLTensor to, tx, tw, tr;
    DLTensor *out = f->out_null ? NULL : tight(&to, &f->out);
    const DLTensor *x = f->x_null ? NULL : tight(&tx, &f->x);
    const DLTensor *w = f->no_weight ? NULL : tight(&tw, &f->weight);
    DLTensor *r = f->no_residual ? NULL : tight(&tr, &f->residual);
    int rc = gemma ? fld_gemma_rms_norm(out, x, w, r, f->eps) : fld_rms_norm(out, x, w, r, f->eps);
    tight_release();
    return rc;
}

static const char *rms_case(int i, struct rms_fx *f, const char **e)
{
    switch (i) {
    case 0:
        f->x_null = true;
        e[0] = "tensor 'x' is NULL";
        return "x NULL";
    case 1:
        f->out_null = true;
        e[0] = "tensor 'out' is NULL";
        return "out NULL";
    case 2:
        f->residual.shape[1] = 768;
        e[0] = "tensor 'residual' has shape [7, 768] but 'x' has [7, 769]";
        return "residual shape";
    case 3:
        td_set(&f->residual, na(3), FLD_DTYPE_F32, 3, (int64_t[]){7, 1, 769}, NULL);
        e[0] = "'residual' has shape [7, 1, 769]";
        return "residual rank";
    case 4:
        f->residual.t.dtype = FLD_DTYPE_BF16;
        e[0] = "'residual' has dtype bfloat16 but 'x' has float32";
        return "residual dtype";
    case 5:
        f->residual.t.device = (DLDevice){kDLCPU, 3};
        e[0] = "'residual' is on cpu:3";
        return "residual device id";
    case 6:
        td_strides(&f->residual, (int64_t[]){769, 2});
        e[0] = "'residual'", e[1] = "stride 2";
        return "residual last stride";
    case 7:
        f->residual.t.data = NULL;
        e[0] = "'residual'", e[1] = "NULL data";
        return "residual data NULL";
    case 8:
        f->weight.shape[0] = 768;
        e[0] = "'weight' has shape [768]", e[1] = "[769]";
        return "weight length";
    case 9:
        td_set(&f->weight, na(2), FLD_DTYPE_F32, 2, (int64_t[]){1, 769}, NULL);
        e[0] = "'weight' has shape [1, 769]";
        return "weight rank";
    case 10:
        td_strides(&f->weight, (int64_t[]){2});
        e[0] = "'weight'", e[1] = "stride 2";
        return "weight not contiguous";
    case 11:
        f->weight.t.dtype = FLD_DTYPE_F16;
        e[0] = "'weight' has dtype float16 but 'x' has float32";
        return "weight dtype";
    case 12:
        f->weight.t.device = (DLDevice){kDLCUDA, 0};
        e[0] = "'weight' is on cuda:0 but 'x' is on cpu:0";
        return "weight device";
    case 13:
        f->weight.shape[0] = -769;
        e[0] = "'weight'", e[1] = "negative";
        return "weight negative";
    case 14:
        f->out.shape[0] = 8;
        e[0] = "'out' has shape [8, 769] but 'x' has [7, 769]";
        return "out shape";
    case 15:
        f->out.t.dtype = FLD_DTYPE_BF16;
        e[0] = "'out' has dtype bfloat16";
        return "out dtype";
    case 16:
        f->out.t.device = (DLDevice){kDLCPU, 1};
        e[0] = "'out' is on cpu:1";
        return "out device id";
    case 17:
        f->eps = NAN;
        e[0] = "'eps'", e[1] = "nan";
        return "eps NaN";
    case 18:
        f->eps = -1e-6f;
        e[0] = "'eps'", e[1] = "-1e-06";
        return "eps negative";
    case 19:
        f->eps = INFINITY;
        e[0] = "'eps'", e[1] = "inf";
        return "eps infinite";
    case 20:
        td_strides(&f->x, (int64_t[]){700, 1});
        e[0] = "'x'", e[1] = "row stride";
        return "x rows overlap";
    case 21:
        f->x.shape[0] = INT64_MAX / 769 + 1;
        f->out.shape[0] = f->residual.shape[0] = f->x.shape[0];
        e[0] = "'x'", e[1] = "too large";
        return "x size overflow";
    case 22:
        f->x.t.dtype = (DLDataType){kDLInt, 64, 1};
        e[0] = "'x'", e[1] = "int64";
        return "x int64";
    case 23:
        f->x.t.device = (DLDevice){99, 0};
        e[0] = "'x'", e[1] = "device type 99";
        return "x unknown device";
    case 24:
        f->no_weight = true;
        f->residual.shape[0] = 0;
        e[0] = "'residual' has shape [0, 769] but 'x' has [7, 769]";
        return "empty residual with non-empty x";
    /* Mixed dtypes: only float32 may join a 16-bit x (weight, residual), never out. */
    case 25:
        f->x.t.dtype = f->out.t.dtype = FLD_DTYPE_BF16;
        f->weight.t.dtype = FLD_DTYPE_F16;
        e[0] = "'weight' has dtype float16 but 'x' has bfloat16; expected bfloat16 or float32";
        return "weight of another 16-bit dtype";
    case 26:
        f->x.t.dtype = f->out.t.dtype = f->weight.t.dtype = FLD_DTYPE_F16;
        f->residual.t.dtype = FLD_DTYPE_BF16;
        e[0] = "'residual' has dtype bfloat16 but 'x' has float16; expected float16 or float32";
        return "residual of another 16-bit dtype";
    case 27:
        f->x.t.dtype = FLD_DTYPE_F16;
        f->weight.t.dtype = f->residual.t.dtype = FLD_DTYPE_F32; /* both fine */
        e[0] = "'out' has dtype float32 but 'x' has float16";
        return "out must have x's dtype";
    case 28:
        f->x.t.dtype = f->out.t.dtype = FLD_DTYPE_BF16;
        f->weight.t.dtype = (DLDataType){kDLFloat, 64, 1};
        e[0] = "'weight'", e[1] = "float64";
        return "weight float64";
    /* Operands of every rank around the expected one (each shape array is
     * exactly its rank long: nothing may read past it). */
    case 29:
        td_set(&f->residual, na(3), FLD_DTYPE_F32, 1, (int64_t[]){769}, NULL);
        e[0] = "'residual' has shape [769] but 'x' has [7, 769]";
        return "residual rank 1";
    case 30:
        td_set(&f->residual, na(3), FLD_DTYPE_F32, 0, (int64_t[]){0}, NULL);
        e[0] = "'residual'", e[1] = "ndim 0";
        return "residual rank 0";
    case 31:
        td_set(&f->weight, na(2), FLD_DTYPE_F32, 0, (int64_t[]){0}, NULL);
        e[0] = "'weight'", e[1] = "ndim 0";
        return "weight rank 0";
    case 32:
        td_set(&f->weight, na(2), FLD_DTYPE_F32, 2, (int64_t[]){1, 769}, NULL);
        e[0] = "'weight' has shape [1, 769]", e[1] = "expected [769]";
        return "weight rank 2";
    case 33:
        td_set(&f->out, na(1), FLD_DTYPE_F32, 1, (int64_t[]){769}, NULL);
        e[0] = "'out' has shape [769] but 'x' has [7, 769]";
        return "out rank 1";
    case 34:
        td_set(&f->x, na(0), FLD_DTYPE_F32, 1, (int64_t[]){769}, NULL);
        e[0] = "'out' has shape [7, 769] but 'x' has [769]";
        return "x rank 1";
    case 35:
        f->x.t.dtype = f->out.t.dtype = FLD_DTYPE_F16;
        td_set(&f->residual, na(3), FLD_DTYPE_F32, 1, (int64_t[]){769}, NULL);
        e[0] = "'residual' has shape [769]";
        return "float32 residual of rank 1 with a 16-bit x";
    case 36:
        f->x.t.dtype = f->out.t.dtype = FLD_DTYPE_BF16;
        td_set(&f->weight, na(2), FLD_DTYPE_F32, 0, (int64_t[]){0}, NULL);
        e[0] = "'weight'", e[1] = "ndim 0";
        return "float32 weight of rank 0 with a 16-bit x";
    case 37:
        td_strides(&f->residual, (int64_t[]){INT64_MIN, 1});
        e[0] = "'residual'", e[1] = "negative row stride";
        return "residual row stride INT64_MIN";
    default:
        return END_OF_CASES;
    }
}

/* _i: 0 rms_norm, 1 gemma_rms_norm */
START_TEST(test_rms_norm_rules)
{
    const char *op = _i ? FLD_OP_GEMMA_RMS_NORM : FLD_OP_RMS_NORM;
    int n = 0;
    for (int i = 0;; i++, n++) {
        struct rms_fx f;
        const char *e[8] = {0};
        rms_fx_init(&f);
        const char *what = rms_case(i, &f, e);
        if (!what)
            break;
        char label[128];
        snprintf(label, sizeof label, "%s case %d (%s)", op, i, what);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%s: ", op);
        const char *subs[9] = {prefix};
        memcpy(subs + 1, e, sizeof e);
        expect_einval(label, call_rms(_i, &f), subs);
    }
    ck_assert_int_ge(n, 20);
}
END_TEST

START_TEST(test_rms_norm_empty)
{
    struct rms_fx f;
    rms_fx_init(&f);
    f.x.shape[0] = f.out.shape[0] = f.residual.shape[0] = 0;
    ck_assert_msg(call_rms(_i, &f) == FLD_OK, "%s", fld_last_error());
    f.no_weight = f.no_residual = true;
    f.eps = 0.0f;
    ck_assert_msg(call_rms(_i, &f) == FLD_OK, "%s", fld_last_error());
    rms_fx_init(&f);
    f.x.shape[1] = f.out.shape[1] = f.residual.shape[1] = f.weight.shape[0] = 0;
    ck_assert_msg(call_rms(_i, &f) == FLD_OK, "%s", fld_last_error());
    /* An empty weight's data and byte_offset are never validated: nothing may
     * add them up (a pointer overflow, which UBSan reports). */
    f.weight.t.data = (void *)(UINTPTR_MAX - 15);
    f.weight.t.byte_offset = UINT64_MAX - 7;
    ck_assert_msg(call_rms(_i, &f) == FLD_OK, "%s", fld_last_error());
    f.weight.t.data = NULL;
    ck_assert_msg(call_rms(_i, &f) == FLD_OK, "%s", fld_last_error());
}
END_TEST

/* Layouts that are valid: explicit strides equal to NULL ones, strided rows, size-1 dims. */
START_TEST(test_rms_norm_layouts)
{
    const int64_t H = 16;
    tt_tensor *a = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){3, H});
    tt_tensor *b = tt_new_strided(FLD_DTYPE_F32, 2, (int64_t[]){3, H}, (int64_t[]){H, 1});
    tt_tensor *c = tt_new_strided(FLD_DTYPE_F32, 2, (int64_t[]){3, H}, (int64_t[]){H + 5, 1});
    tt_tensor *d = tt_new_strided(FLD_DTYPE_F32, 3, (int64_t[]){3, 1, H}, (int64_t[]){H + 5, 0, 1});
    tt_tensor *w = tt_new(FLD_DTYPE_F32, 1, &H);
    tt_fill_normal(a, 3, 0, 1);
    tt_fill_normal(w, 4, 1, 0.1);
    double v[48];
    tt_to_double(a, v);
    tt_from_double(b, v);
    tt_from_double(c, v);
    tt_from_double(d, v);
    tt_tensor *oa = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){3, H});
    tt_tensor *ob = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){3, H});
    tt_tensor *oc = tt_new_strided(FLD_DTYPE_F32, 2, (int64_t[]){3, H}, (int64_t[]){2 * H, 1});
    tt_tensor *od = tt_new(FLD_DTYPE_F32, 3, (int64_t[]){3, 1, H});
    ck_assert_int_eq(fld_rms_norm(&oa->t, &a->t, &w->t, NULL, 1e-6f), FLD_OK);
    ck_assert_int_eq(fld_rms_norm(&ob->t, &b->t, &w->t, NULL, 1e-6f), FLD_OK);
    ck_assert_int_eq(fld_rms_norm(&oc->t, &c->t, &w->t, NULL, 1e-6f), FLD_OK);
    ck_assert_msg(fld_rms_norm(&od->t, &d->t, &w->t, NULL, 1e-6f) == FLD_OK, "%s",
                  fld_last_error());
    double ra[48], rb[48], rc_[48], rd[48];
    tt_to_double(oa, ra);
    tt_to_double(ob, rb);
    tt_to_double(oc, rc_);
    tt_to_double(od, rd);
    ck_assert(memcmp(ra, rb, sizeof ra) == 0);
    ck_assert(memcmp(ra, rc_, sizeof ra) == 0);
    ck_assert(memcmp(ra, rd, sizeof ra) == 0);
    ck_assert(tt_padding_intact(oc));
    /* in place: out is x */
    ck_assert_int_eq(fld_rms_norm(&c->t, &c->t, &w->t, NULL, 1e-6f), FLD_OK);
    tt_to_double(c, rc_);
    ck_assert(memcmp(ra, rc_, sizeof ra) == 0);
    tt_tensor *all[] = {a, b, c, d, w, oa, ob, oc, od};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tt_free(all[i]);
}
END_TEST

/*
 * float32 weight and residual with a 16-bit x are valid (vLLM's
 * GemmaRMSNorm), each on its own or together, strided or in place.
 */
START_TEST(test_rms_norm_mixed_dtypes)
{
    const DLDataType xdt = _i / 2 ? FLD_DTYPE_BF16 : FLD_DTYPE_F16;
    const bool gemma = _i % 2;
    const int64_t H = 40;
    for (int which = 0; which < 3; which++) {
        const DLDataType wdt = which != 1 ? FLD_DTYPE_F32 : xdt;
        const DLDataType rdt = which != 0 ? FLD_DTYPE_F32 : xdt;
        tt_tensor *x = tt_new_strided(xdt, 2, (int64_t[]){5, H}, (int64_t[]){H + 3, 1});
        tt_tensor *w = tt_new(wdt, 1, &H), *r = tt_new(rdt, 2, (int64_t[]){5, H});
        tt_fill_normal(x, 1, 0, 1), tt_fill_normal(w, 2, 0.5, 0.1), tt_fill_normal(r, 3, 0, 1);
        int rc = gemma ? fld_gemma_rms_norm(&x->t, &x->t, &w->t, &r->t, 1e-6f)
                       : fld_rms_norm(&x->t, &x->t, &w->t, &r->t, 1e-6f);
        ck_assert_msg(rc == FLD_OK, "x %s weight %s residual %s: %s", fld_dtype_name(xdt),
                      fld_dtype_name(wdt), fld_dtype_name(rdt), fld_last_error());
        ck_assert(tt_padding_intact(x) && tt_padding_intact(r));
        tt_free(x), tt_free(w), tt_free(r);
    }
    /* float32 x keeps one dtype: a 16-bit weight is refused as before. */
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){5, H}), *w = tt_new(xdt, 1, &H);
    tt_fill_normal(x, 4, 0, 1), tt_fill_normal(w, 5, 1, 0.1);
    expect_einval("16-bit weight with float32 x", fld_rms_norm(&x->t, &x->t, &w->t, NULL, 1e-6f),
                  (const char *[]){"'weight' has dtype", "but 'x' has float32", NULL});
    tt_free(x), tt_free(w);
}
END_TEST

/* A failed in-place call leaves x and residual as they were. */
START_TEST(test_rms_norm_guarded)
{
    tt_tensor *x = tt_new_strided(FLD_DTYPE_F16, 2, (int64_t[]){7, 64}, (int64_t[]){128, 1});
    tt_tensor *res = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){7, 64});
    tt_tensor *w = tt_new(FLD_DTYPE_F16, 1, (int64_t[]){64});
    tt_fill_normal(x, 1, 0, 1);
    tt_fill_normal(res, 2, 0, 1);
    tt_fill_normal(w, 3, 1, 0.1);
    tt_tensor *x0 = tt_clone(x), *r0 = tt_clone(res);
    const float bad_eps[] = {NAN, -1.0f};
    for (int i = 0; i < 2; i++) {
        int rc = _i ? fld_gemma_rms_norm(&x->t, &x->t, &w->t, &res->t, bad_eps[i])
                    : fld_rms_norm(&x->t, &x->t, &w->t, &res->t, bad_eps[i]);
        expect_einval("guarded eps", rc, (const char *[]){"'eps'", NULL});
    }
    w->shape[0] = 63; /* weight shorter than H */
    int rc = _i ? fld_gemma_rms_norm(&x->t, &x->t, &w->t, &res->t, 1e-6f)
                : fld_rms_norm(&x->t, &x->t, &w->t, &res->t, 1e-6f);
    expect_einval("guarded weight", rc, (const char *[]){"'weight'", NULL});
    ck_assert(memcmp(x->buf, x0->buf, x->buf_bytes) == 0);
    ck_assert(memcmp(res->buf, r0->buf, res->buf_bytes) == 0);
    w->shape[0] = 64;
    rc = _i ? fld_gemma_rms_norm(&x->t, &x->t, &w->t, &res->t, 1e-6f)
            : fld_rms_norm(&x->t, &x->t, &w->t, &res->t, 1e-6f);
    ck_assert_int_eq(rc, FLD_OK);
    ck_assert(memcmp(res->buf, r0->buf, res->buf_bytes) != 0); /* the valid call did run */
    ck_assert(tt_padding_intact(x));
    tt_free(x);
    tt_free(res);
    tt_free(w);
    tt_free(x0);
    tt_free(r0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* rotary_embedding                                                         */
/* ------------------------------------------------------------------------ */

#define ROPE_T       6
#define ROPE_HEADS   4
#define ROPE_HEAD    64
#define ROPE_MAX_POS 32

struct rope_fx {
    tt_tensor *pos; /* readable: the host reads positions */
    struct td positions, query, key, cache;
    bool pos_null, query_null, key_null, cache_null;
    int64_t head_size;
    bool neox;
};

static void rope_fx_init(struct rope_fx *f)
{
    memset(f, 0, sizeof *f);
    f->pos = tt_new(TT_INT64, 1, (int64_t[]){ROPE_T});
    for (int t = 0; t < ROPE_T; t++)
        tt_set(f->pos, t, (t * 5) % ROPE_MAX_POS);
    td_set(&f->positions, (char *)f->pos->t.data + f->pos->t.byte_offset, TT_INT64, 1,
           (int64_t[]){ROPE_T}, NULL);
    td_set(&f->query, na(0), FLD_DTYPE_BF16, 2, (int64_t[]){ROPE_T, ROPE_HEADS * ROPE_HEAD}, NULL);
    td_set(&f->key, na(1), FLD_DTYPE_BF16, 3, (int64_t[]){ROPE_T, 2, ROPE_HEAD}, NULL);
    td_set(&f->cache, na(2), FLD_DTYPE_F32, 2, (int64_t[]){ROPE_MAX_POS, ROPE_HEAD}, NULL);
    f->head_size = ROPE_HEAD;
    f->neox = true;
}

static void rope_fx_free(struct rope_fx *f)
{
    tt_free(f->pos);
}

/* The fixture's call, every tensor with tight arrays. */
static int call_rope(struct rope_fx *f)
{
    DLTensor tp, tq, tk, tc;
    int rc = fld_rotary_embedding(f->pos_null ? NULL : tight(&tp, &f->positions),
                                  f->query_null ? NULL : tight(&tq, &f->query),
                                  f->key_null ? NULL : tight(&tk, &f->key), f->head_size,
                                  f->cache_null ? NULL : tight(&tc, &f->cache), f->neox);
    tight_release();
    return rc;
}

static void set_pos(struct rope_fx *f, int idx, int64_t v)
{
    tt_set(f->pos, idx, (double)v);
}

/* Positions as int32 (a fresh readable buffer). */
static void pos_int32(struct rope_fx *f, int64_t bad_value)
{
    tt_free(f->pos);
    f->pos = tt_new(TT_INT32, 1, (int64_t[]){ROPE_T});
    for (int t = 0; t < ROPE_T; t++)
        tt_set(f->pos, t, t);
    tt_set(f->pos, ROPE_T - 1, (double)bad_value);
    td_set(&f->positions, (char *)f->pos->t.data + f->pos->t.byte_offset, TT_INT32, 1,
           (int64_t[]){ROPE_T}, NULL);
}

static const char *rope_case(int i, struct rope_fx *f, const char **e)
{
    switch (i) {
    case 0:
        f->pos_null = true;
        e[0] = "tensor 'positions' is NULL";
        return "positions NULL";
    case 1:
        f->query_null = true;
        e[0] = "tensor 'query' is NULL";
        return "query NULL";
    case 2:
        f->cache_null = true;
        e[0] = "tensor 'cos_sin_cache' is NULL";
        return "cache NULL";
    case 3:
        f->positions.t.ndim = 3;
        f->positions.shape[1] = f->positions.shape[2] = 1;
        e[0] = "'positions'", e[1] = "ndim 3";
        return "positions rank 3";
    case 4:
        f->positions.t.dtype = FLD_DTYPE_F32;
        e[0] = "'positions'", e[1] = "float32", e[2] = "int64 or int32";
        return "positions float";
    case 5:
        f->positions.t.dtype = (DLDataType){kDLInt, 16, 1};
        e[0] = "'positions'", e[1] = "dtype";
        return "positions int16";
    case 6:
        f->positions.shape[0] = ROPE_T / 2;
        td_strides(&f->positions, (int64_t[]){2});
        e[0] = "'positions'", e[1] = "stride 2";
        return "positions strided";
    case 7:
        /* [2, 3] positions with padded rows: not contiguous */
        f->positions.t.ndim = 2;
        f->positions.shape[0] = 2;
        f->positions.shape[1] = 2;
        td_strides(&f->positions, (int64_t[]){3, 1});
        td_set(&f->query, na(0), FLD_DTYPE_BF16, 3, (int64_t[]){2, 2, ROPE_HEADS * ROPE_HEAD},
               NULL);
        f->key_null = true;
        e[0] = "'positions'", e[1] = "contiguous";
        return "positions padded rows";
    case 8:
        f->query.shape[0] = ROPE_T + 1;
        e[0] = "'query' has shape [7, 256] but 'positions' has [6]";
        return "query tokens";
    case 9:
        td_set(&f->query, na(0), FLD_DTYPE_BF16, 4, (int64_t[]){ROPE_T, ROPE_HEADS, ROPE_HEAD, 1},
               NULL);
        e[0] = "'query'", e[1] = "'positions' has [6]";
        return "query rank";
    case 10:
        f->head_size = 0;
        e[0] = "'head_size' is 0";
        return "head_size 0";
    case 11:
        f->head_size = -64;
        e[0] = "'head_size' is -64";
        return "head_size negative";
    case 12:
        f->head_size = 96;
        e[0] = "'query' has last dimension 256, not a multiple of head_size 96";
        return "query width";
    case 13:
        td_set(&f->query, na(0), FLD_DTYPE_BF16, 3, (int64_t[]){ROPE_T, ROPE_HEADS, 2 * ROPE_HEAD},
               NULL);
        e[0] = "'query'", e[1] = "head_size is 64";
        return "split query head width";
    case 14:
        td_set(&f->query, na(0), FLD_DTYPE_BF16, 3, (int64_t[]){ROPE_T, ROPE_HEADS, ROPE_HEAD},
               (int64_t[]){ROPE_HEADS * 96, 32, 1});
        e[0] = "'query'", e[1] = "head stride";
        return "overlapping heads";
    case 15:
        td_set(&f->query, na(0), FLD_DTYPE_BF16, 3, (int64_t[]){ROPE_T, ROPE_HEADS, ROPE_HEAD},
               (int64_t[]){200, 64, 1});
        e[0] = "'query'", e[1] = "row stride";
        return "overlapping tokens";
    case 16:
        f->query.t.dtype = FLD_DTYPE_F16;
        f->key.t.dtype = FLD_DTYPE_F16;
        f->cache.t.dtype = FLD_DTYPE_BF16;
        e[0] = "'cos_sin_cache' has dtype bfloat16; expected float16";
        return "cache dtype";
    case 17:
        f->cache.t.ndim = 1;
        e[0] = "'cos_sin_cache'", e[1] = "ndim 1";
        return "cache rank";
    case 18:
        f->cache.shape[1] = 63;
        e[0] = "rot_dim", e[1] = "63";
        return "odd rot_dim";
    case 19:
        f->cache.shape[1] = 128;
        e[0] = "rot_dim", e[1] = "128", e[2] = "head_size 64";
        return "rot_dim > head_size";
    case 20:
        f->cache.shape[1] = 0;
        e[0] = "rot_dim", e[1] = "0";
        return "rot_dim 0";
    case 21:
        f->cache.t.device = (DLDevice){kDLCPU, 2};
        e[0] = "'cos_sin_cache' is on cpu:2";
        return "cache device id";
    case 22:
        td_strides(&f->cache, (int64_t[]){ROPE_HEAD, 2});
        e[0] = "'cos_sin_cache'", e[1] = "stride 2";
        return "cache last stride";
    case 23:
        f->key.t.dtype = FLD_DTYPE_F16;
        e[0] = "'key' has dtype float16 but 'query' has bfloat16";
        return "key dtype";
    case 24:
        f->key.shape[0] = ROPE_T - 1;
        e[0] = "'key' has shape [5, 2, 64] but 'positions' has [6]";
        return "key tokens";
    case 25:
        f->key.shape[2] = 32;
        e[0] = "'key'", e[1] = "head_size is 64";
        return "key head width";
    case 26:
        f->key.t.device = (DLDevice){kDLCUDA, 0};
        e[0] = "'key' is on cuda:0 but 'query' is on cpu:0";
        return "key device";
    case 27:
        f->key.t.data = NULL;
        e[0] = "'key'", e[1] = "NULL data";
        return "key data NULL";
    case 28:
        f->positions.t.device = (DLDevice){kDLCPU, 1};
        e[0] = "'positions' is on cpu:1 but 'query' is on cpu:0";
        return "positions device id";
    case 29:
        set_pos(f, 3, ROPE_MAX_POS);
        e[0] = "'positions' has value 32 at index 3", e[1] = "[0, 32)";
        return "position == max_pos";
    case 30:
        set_pos(f, 5, -1);
        e[0] = "'positions' has value -1 at index 5";
        return "negative position";
    case 31:
        set_pos(f, 0, INT64_MIN);
        e[0] = "'positions'", e[1] = "at index 0";
        return "INT64_MIN position";
    case 32:
        set_pos(f, 2, INT64_MAX);
        e[0] = "'positions'", e[1] = "at index 2";
        return "INT64_MAX position";
    case 33:
        pos_int32(f, ROPE_MAX_POS + 7);
        e[0] = "'positions' has value 39 at index 5";
        return "int32 position out of range";
    case 34:
        pos_int32(f, -3);
        e[0] = "'positions' has value -3 at index 5";
        return "int32 negative position";
    case 35:
        f->cache.shape[0] = 0;
        e[0] = "'positions' has value", e[1] = "[0, 0)";
        return "empty cache with tokens";
    case 36:
        f->query.shape[1] = (int64_t)1 << 61;
        f->head_size = 64;
        e[0] = "'query'", e[1] = "too large";
        return "query size overflow";
    case 37:
        f->query.t.device = f->key.t.device = f->cache.t.device = (DLDevice){kDLMetal, 0};
        e[0] = "'query'", e[1] = "device type 8";
        return "unsupported device";
    /* Every tensor at the ranks around its own (shape arrays exactly that long). */
    case 38:
        td_set(&f->key, na(1), FLD_DTYPE_BF16, 1, (int64_t[]){ROPE_T}, NULL);
        e[0] = "'key' has shape [6] but 'positions' has [6]";
        return "key rank 1";
    case 39:
        td_set(&f->key, na(1), FLD_DTYPE_BF16, 0, (int64_t[]){0}, NULL);
        e[0] = "'key'", e[1] = "'positions' has [6]";
        return "key rank 0";
    case 40:
        td_set(&f->key, na(1), FLD_DTYPE_BF16, 2, (int64_t[]){ROPE_T, 2 * ROPE_HEAD}, NULL);
        td_set(&f->cache, na(2), FLD_DTYPE_F32, 1, (int64_t[]){ROPE_MAX_POS}, NULL);
        e[0] = "'cos_sin_cache'", e[1] = "ndim 1";
        return "cache rank 1 with a rank-2 key";
    case 41:
        td_set(&f->cache, na(2), FLD_DTYPE_F32, 0, (int64_t[]){0}, NULL);
        e[0] = "'cos_sin_cache'", e[1] = "ndim 0";
        return "cache rank 0";
    case 42:
        td_set(&f->cache, na(2), FLD_DTYPE_F32, 3, (int64_t[]){ROPE_MAX_POS, 1, ROPE_HEAD}, NULL);
        e[0] = "'cos_sin_cache'", e[1] = "ndim 3";
        return "cache rank 3";
    case 43:
        td_set(&f->query, na(0), FLD_DTYPE_BF16, 1, (int64_t[]){ROPE_T}, NULL);
        e[0] = "'query' has shape [6] but 'positions' has [6]";
        return "query rank 1";
    case 44:
        f->key_null = true; /* so that only the positions keep the shortcut from its answer */
        f->positions.t.ndim = 0;
        e[0] = "'positions'", e[1] = "ndim 0";
        return "positions rank 0";
    case 45:
        td_set(&f->key, na(1), FLD_DTYPE_BF16, 2, (int64_t[]){ROPE_T, 2 * ROPE_HEAD},
               (int64_t[]){INT64_MIN, 1});
        e[0] = "'key'", e[1] = "negative row stride";
        return "key row stride INT64_MIN";
    case 46:
        td_strides(&f->cache, (int64_t[]){INT64_MIN, 1});
        e[0] = "'cos_sin_cache'", e[1] = "negative row stride";
        return "cache row stride INT64_MIN";
    default:
        return END_OF_CASES;
    }
}

START_TEST(test_rotary_rules)
{
    int n = 0;
    for (int i = 0;; i++, n++) {
        struct rope_fx f;
        const char *e[8] = {0};
        rope_fx_init(&f);
        const char *what = rope_case(i, &f, e);
        if (!what) {
            rope_fx_free(&f);
            break;
        }
        char label[128];
        snprintf(label, sizeof label, "rotary case %d (%s)", i, what);
        const char *subs[9] = {"rotary_embedding: "};
        memcpy(subs + 1, e, sizeof e);
        expect_einval(label, call_rope(&f), subs);
        rope_fx_free(&f);
    }
    ck_assert_int_ge(n, 35);
}
END_TEST

/*
 * Tensors on a device: the host cannot read the positions, so it skips
 * their range check (the device kernel owns it) and must not touch them.
 * With no device implementation here the call is unavailable, not invalid.
 */
START_TEST(test_rotary_device_positions_not_read)
{
    static const int devices[] = {FLD_DEVICE_CUDA, FLD_DEVICE_ROCM, FLD_DEVICE_ASCEND};
    for (int d = 0; d < 3; d++) {
        struct rope_fx f;
        rope_fx_init(&f);
        set_pos(&f, 0, 1 << 30); /* out of range, but unreadable below */
        f.positions.t.data = na(3);
        DLDevice dev = {(DLDeviceType)devices[d], 0};
        f.positions.t.device = f.query.t.device = f.key.t.device = f.cache.t.device = dev;
        int rc = call_rope(&f);
        ck_assert_msg(rc != FLD_EINVAL && rc != FLD_OK, "device %d: status %d: %s", devices[d], rc,
                      fld_last_error());
        /* the other rules still hold on devices */
        f.cache.shape[1] = 65;
        expect_einval("device rot_dim", call_rope(&f), (const char *[]){"rot_dim", NULL});
        rope_fx_free(&f);
    }
}
END_TEST

START_TEST(test_rotary_empty)
{
    struct rope_fx f;
    rope_fx_init(&f);
    f.positions.shape[0] = 0;
    f.positions.t.data = na(3); /* nothing to read */
    f.query.shape[0] = 0;
    f.key.shape[0] = 0;
    ck_assert_msg(call_rope(&f) == FLD_OK, "%s", fld_last_error());
    f.key_null = true;
    f.positions.t.data = f.query.t.data = NULL;
    ck_assert_msg(call_rope(&f) == FLD_OK, "%s", fld_last_error());
    rope_fx_free(&f);
}
END_TEST

/*
 * A query with no heads is zero-size too: positions are still checked, but
 * nothing is rotated, so nothing else -- the cos/sin cache included -- may
 * be read.
 */
START_TEST(test_rotary_no_heads)
{
    struct rope_fx f;
    rope_fx_init(&f);
    td_set(&f.query, na(0), FLD_DTYPE_BF16, 3, (int64_t[]){ROPE_T, 0, ROPE_HEAD}, NULL);
    f.key_null = true;
    ck_assert_msg(call_rope(&f) == FLD_OK, "%s", fld_last_error());
    set_pos(&f, 1, ROPE_MAX_POS);
    expect_einval("no heads, bad position", call_rope(&f),
                  (const char *[]){"'positions' has value 32", NULL});
    rope_fx_free(&f);
}
END_TEST

/* Valid variants: [B, S] positions, int32 positions, cache of the query dtype, padded heads. */
START_TEST(test_rotary_valid_layouts)
{
    tt_tensor *pos = tt_new(TT_INT32, 2, (int64_t[]){2, 3});
    for (int t = 0; t < 6; t++)
        tt_set(pos, t, t);
    tt_tensor *q = tt_new_strided(FLD_DTYPE_F16, 4, (int64_t[]){2, 3, 2, 32},
                                  (int64_t[]){3 * 2 * 40, 2 * 40, 40, 1});
    tt_tensor *k = tt_new(FLD_DTYPE_F16, 3, (int64_t[]){2, 3, 64});
    tt_tensor *cache = tt_new(FLD_DTYPE_F16, 2, (int64_t[]){8, 16});
    tt_fill_normal(q, 1, 0, 1);
    tt_fill_normal(k, 2, 0, 1);
    tt_fill_normal(cache, 3, 0, 1);
    ck_assert_msg(fld_rotary_embedding(&pos->t, &q->t, &k->t, 32, &cache->t, false) == FLD_OK, "%s",
                  fld_last_error());
    ck_assert(tt_padding_intact(q) && tt_padding_intact(k));
    tt_free(pos);
    tt_free(q);
    tt_free(k);
    tt_free(cache);
}
END_TEST

/* A failed call leaves query and key as they were. */
START_TEST(test_rotary_guarded)
{
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){4});
    tt_tensor *q = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 128});
    tt_tensor *k = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){16, 64});
    tt_fill_normal(q, 1, 0, 1);
    tt_fill_normal(k, 2, 0, 1);
    tt_fill_normal(cache, 3, 0, 1);
    tt_tensor *q0 = tt_clone(q), *k0 = tt_clone(k);
    for (int t = 0; t < 4; t++)
        tt_set(pos, t, t * 3);
    tt_set(pos, 3, 16); /* == max_pos */
    int rc = fld_rotary_embedding(&pos->t, &q->t, &k->t, 64, &cache->t, true);
    expect_einval("guarded", rc, (const char *[]){"'positions' has value 16 at index 3", NULL});
    ck_assert(memcmp(q->buf, q0->buf, q->buf_bytes) == 0);
    ck_assert(memcmp(k->buf, k0->buf, k->buf_bytes) == 0);
    tt_set(pos, 3, 15);
    ck_assert_int_eq(fld_rotary_embedding(&pos->t, &q->t, &k->t, 64, &cache->t, true), FLD_OK);
    ck_assert(memcmp(q->buf, q0->buf, q->buf_bytes) != 0);
    tt_free(pos);
    tt_free(q);
    tt_free(k);
    tt_free(cache);
    tt_free(q0);
    tt_free(k0);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* rotary_embedding_out                                                     */
/* ------------------------------------------------------------------------ */

/* The fixture's call out of place: query_out and key_out (unless NULL) as given. */
static int call_rope_out(struct rope_fx *f, const struct td *qo, const struct td *ko)
{
    DLTensor tp, tq, tk, tc, tqo, tko;
    int rc = fld_rotary_embedding_out(f->pos_null ? NULL : tight(&tp, &f->positions),
                                      f->query_null ? NULL : tight(&tq, &f->query),
                                      f->key_null ? NULL : tight(&tk, &f->key), f->head_size,
                                      f->cache_null ? NULL : tight(&tc, &f->cache), f->neox,
                                      qo ? tight(&tqo, qo) : NULL, ko ? tight(&tko, ko) : NULL);
    tight_release();
    return rc;
}

/* A contiguous output of t's shape and dtype at data (what a caller allocates). */
static void td_output(struct td *out, const struct td *t, void *data)
{
    td_set(out, data, t->t.dtype, t->t.ndim, t->shape, NULL);
    out->t.device = t->t.device;
}

/* The inputs follow rotary_embedding's rules, with the same messages. */
START_TEST(test_rotary_out_input_rules)
{
    int n = 0;
    for (int i = 0;; i++, n++) {
        struct rope_fx f;
        const char *e[8] = {0};
        rope_fx_init(&f);
        const char *what = rope_case(i, &f, e);
        if (!what) {
            rope_fx_free(&f);
            break;
        }
        struct td qo, ko;
        td_output(&qo, &f.query, na(3));
        td_output(&ko, &f.key, na(4));
        char label[128];
        snprintf(label, sizeof label, "rotary_out case %d (%s)", i, what);
        const char *subs[9] = {"rotary_embedding_out: "};
        memcpy(subs + 1, e, sizeof e);
        expect_einval(label, call_rope_out(&f, &qo, f.key_null ? NULL : &ko), subs);
        rope_fx_free(&f);
    }
    ck_assert_int_ge(n, 35);
}
END_TEST

/* The outputs' own rules: shape, dtype and device of their input, both or neither key, no
 * overlap with any other tensor of the call. */
static const char *rope_out_case(int i, struct rope_fx *f, struct td *qo, struct td *ko,
                                 bool *ko_null, const char **e)
{
    switch (i) {
    case 0: /* the caller passes NULL */
        e[0] = "tensor 'query_out' is NULL";
        return "query_out NULL";
    case 1:
        qo->shape[1] = 128;
        e[0] = "tensor 'query_out' has shape [6, 128] but 'query' has [6, 256]";
        return "query_out shape";
    case 2:
        qo->t.dtype = FLD_DTYPE_F16;
        e[0] = "tensor 'query_out' has dtype float16 but 'query' has bfloat16";
        return "query_out dtype";
    case 3:
        qo->t.device = (DLDevice){kDLCPU, 1};
        e[0] = "tensor 'query_out' is on cpu:1 but 'query' is on cpu:0";
        return "query_out device";
    case 4:
        td_strides(qo, (int64_t[]){ROPE_HEADS * ROPE_HEAD * 2, 2});
        e[0] = "'query_out'", e[1] = "stride 2";
        return "query_out last stride";
    case 5:
        *ko_null = true;
        e[0] = "tensor 'key_out' is NULL but 'key' is not";
        return "key without key_out";
    case 6:
        f->key_null = true;
        e[0] = "tensor 'key' is NULL but 'key_out' is not";
        return "key_out without key";
    case 7:
        td_set(ko, na(4), FLD_DTYPE_BF16, 2, (int64_t[]){ROPE_T, 2 * ROPE_HEAD}, NULL);
        e[0] = "tensor 'key_out' has shape [6, 128] but 'key' has [6, 2, 64]";
        return "key_out rank";
    case 8:
        ko->shape[1] = 4;
        e[0] = "tensor 'key_out' has shape [6, 4, 64] but 'key' has [6, 2, 64]";
        return "key_out heads";
    case 9:
        qo->t.data = f->query.t.data;
        e[0] = "tensor 'query_out'", e[1] = "overlaps tensor 'query'";
        return "query_out is query";
    case 10:
        ko->t.data = (char *)f->query.t.data + 64;
        e[0] = "tensor 'key_out'", e[1] = "overlaps tensor 'query'";
        return "key_out inside query";
    case 11:
        ko->t.data = qo->t.data;
        e[0] = "tensor 'key_out'", e[1] = "overlaps tensor 'query_out'";
        return "key_out is query_out";
    case 12:
        qo->t.data = f->cache.t.data;
        e[0] = "tensor 'query_out'", e[1] = "overlaps tensor 'cos_sin_cache'";
        return "query_out over the cache";
    case 13:
        ko->t.data = f->key.t.data;
        e[0] = "tensor 'key_out'", e[1] = "overlaps tensor 'key'";
        return "key_out is key";
    case 14:
        qo->t.dtype = (DLDataType){kDLInt, 64, 1};
        e[0] = "'query_out' has dtype int64", e[1] = "float32, float16 or bfloat16";
        return "query_out int64";
    default:
        return END_OF_CASES;
    }
}

START_TEST(test_rotary_out_output_rules)
{
    int n = 0;
    for (int i = 0;; i++, n++) {
        struct rope_fx f;
        struct td qo, ko;
        bool ko_null = false;
        const char *e[8] = {0};
        rope_fx_init(&f);
        td_output(&qo, &f.query, na(3));
        td_output(&ko, &f.key, na(4));
        const char *what = rope_out_case(i, &f, &qo, &ko, &ko_null, e);
        if (!what) {
            rope_fx_free(&f);
            break;
        }
        char label[128];
        snprintf(label, sizeof label, "rotary_out output case %d (%s)", i, what);
        const char *subs[9] = {"rotary_embedding_out: "};
        memcpy(subs + 1, e, sizeof e);
        expect_einval(label, call_rope_out(&f, i == 0 ? NULL : &qo, ko_null ? NULL : &ko), subs);
        rope_fx_free(&f);
    }
    ck_assert_int_ge(n, 15);
}
END_TEST

/* A refused call writes nothing: outputs and inputs keep their bytes; the message names the tensor.
 */
START_TEST(test_rotary_out_guarded)
{
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){4});
    tt_tensor *q = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 128});
    tt_tensor *k = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *qo = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 128});
    tt_tensor *ko = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 64});
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){16, 64});
    tt_fill_normal(q, 1, 0, 1);
    tt_fill_normal(k, 2, 0, 1);
    tt_fill_normal(qo, 4, 0, 1);
    tt_fill_normal(ko, 5, 0, 1);
    tt_fill_normal(cache, 3, 0, 1);
    tt_tensor *q0 = tt_clone(q), *k0 = tt_clone(k), *qo0 = tt_clone(qo), *ko0 = tt_clone(ko);
    for (int t = 0; t < 4; t++)
        tt_set(pos, t, t * 3);
    tt_set(pos, 3, 16); /* == max_pos */
    int rc = fld_rotary_embedding_out(&pos->t, &q->t, &k->t, 64, &cache->t, true, &qo->t, &ko->t);
    expect_einval(
        "guarded out", rc,
        (const char *[]){"rotary_embedding_out: ", "'positions' has value 16 at index 3", NULL});
    tt_set(pos, 3, 15);
    ck_assert_int_eq(
        fld_rotary_embedding_out(&pos->t, &q->t, &k->t, 64, &cache->t, true, &qo->t, NULL),
        FLD_EINVAL);
    ck_assert_str_eq(fld_last_error(),
                     "rotary_embedding_out: tensor 'key_out' is NULL but 'key' is not; key and "
                     "key_out are both NULL or both set");
    ck_assert(memcmp(q->buf, q0->buf, q->buf_bytes) == 0);
    ck_assert(memcmp(k->buf, k0->buf, k->buf_bytes) == 0);
    ck_assert(memcmp(qo->buf, qo0->buf, qo->buf_bytes) == 0);
    ck_assert(memcmp(ko->buf, ko0->buf, ko->buf_bytes) == 0);
    ck_assert_int_eq(
        fld_rotary_embedding_out(&pos->t, &q->t, &k->t, 64, &cache->t, true, &qo->t, &ko->t),
        FLD_OK);
    ck_assert(memcmp(q->buf, q0->buf, q->buf_bytes) == 0); /* only read */
    ck_assert(memcmp(k->buf, k0->buf, k->buf_bytes) == 0);
    ck_assert(memcmp(qo->buf, qo0->buf, qo->buf_bytes) != 0);
    ck_assert(memcmp(ko->buf, ko0->buf, ko->buf_bytes) != 0);
    tt_free(pos);
    tt_free(q);
    tt_free(k);
    tt_free(qo);
    tt_free(ko);
    tt_free(cache);
    tt_free(q0);
    tt_free(k0);
    tt_free(qo0);
    tt_free(ko0);
}
END_TEST

/* Read-only inputs may share memory (query and key as the same view); no prepared form. */
START_TEST(test_rotary_out_inputs_may_meet)
{
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){3});
    tt_tensor *q = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){3, 64});
    tt_tensor *qo = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){3, 64});
    tt_tensor *ko = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){3, 64});
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 32});
    tt_fill_normal(q, 1, 0, 1);
    tt_fill_normal(cache, 3, 0, 1);
    for (int t = 0; t < 3; t++)
        tt_set(pos, t, t);
    ck_assert_msg(fld_rotary_embedding_out(&pos->t, &q->t, &q->t, 64, &cache->t, false, &qo->t,
                                           &ko->t) == FLD_OK,
                  "%s", fld_last_error());
    ck_assert(memcmp(qo->buf, ko->buf, qo->buf_bytes) == 0);
    fld_rotary_embedding_out_args a = {&pos->t, &q->t, &q->t, 64, &cache->t, false, &qo->t, &ko->t};
    fld_prepared *p = (fld_prepared *)&a;
    ck_assert_int_eq(fld_prepare(FLD_OP_ROTARY_EMBEDDING_OUT, &a, &p), FLD_EINVAL);
    ck_assert_ptr_null(p);
    ck_assert_str_eq(
        fld_last_error(),
        "fld_prepare: op 'rotary_embedding_out' has no prepared form; call it directly");
    tt_free(pos);
    tt_free(q);
    tt_free(qo);
    tt_free(ko);
    tt_free(cache);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Aliasing: a written tensor shares no memory with another of the call    */
/* ------------------------------------------------------------------------ */

#define AT     4  /* rows */
#define AH     16 /* hidden size */
#define F32(k) ((char *)na(0) + (size_t)(k)*4)

/* A refused call: no-access memory, so touching any tensor would be SIGSEGV. */
static const char *alias_case(int i, int *rc, const char **e)
{
    struct td x, out, w, r, q, k, cache;
    static int64_t pos_values[AT];
    struct td pos;
    for (int t = 0; t < AT; t++)
        pos_values[t] = t;
    td_set(&pos, pos_values, TT_INT64, 1, (int64_t[]){AT}, NULL);
    switch (i) {
    case 0: /* the outside test's case: out one element past x */
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&out, F32(1), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        *rc = fld_rms_norm(&out.t, &x.t, NULL, NULL, 1e-6f);
        e[0] = "rms_norm: tensor 'out'", e[1] = "overlaps tensor 'x'", e[2] = "only exactly";
        return "rms_norm out = x + 1";
    case 1: /* same start, another row stride: rows 1.. differ */
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&out, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, (int64_t[]){2 * AH, 1});
        *rc = fld_gemma_rms_norm(&out.t, &x.t, NULL, NULL, 1e-6f);
        e[0] = "gemma_rms_norm: tensor 'out'", e[1] = "'x'";
        return "gemma out = x with another stride";
    case 2:
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&out, F32(1000), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&w, F32(1000 + 3), FLD_DTYPE_F32, 1, (int64_t[]){AH}, NULL);
        *rc = fld_rms_norm(&out.t, &x.t, &w.t, NULL, 1e-6f);
        e[0] = "'out'", e[1] = "'weight'";
        return "weight inside out";
    case 3:
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&out, F32(1000), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        *rc = fld_rms_norm(&out.t, &x.t, NULL, &out.t, 1e-6f);
        e[0] = "'out'", e[1] = "'residual'";
        return "residual is out";
    case 4:
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&out, F32(1000), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        *rc = fld_rms_norm(&out.t, &x.t, NULL, &x.t, 1e-6f);
        e[0] = "'residual'", e[1] = "'x'";
        return "residual is x";
    case 5:
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&out, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&r, F32(1000), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        td_set(&w, F32(1000 + AT * AH - 1), FLD_DTYPE_F32, 1, (int64_t[]){AH}, NULL);
        *rc = fld_rms_norm(&out.t, &x.t, &w.t, &r.t, 1e-6f);
        e[0] = "'residual'", e[1] = "'weight'";
        return "weight starts at residual's last element";
    case 6:
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, 2 * AH}, NULL);
        td_set(&out, F32(1), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
        *rc = fld_silu_and_mul(&out.t, &x.t);
        e[0] = "silu_and_mul: tensor 'out'", e[1] = "overlaps tensor 'x'";
        return "activation out one element past x";
    case 7: /* out is x's second half, column by column */
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, 2 * AH}, NULL);
        td_set(&out, F32(AH), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, (int64_t[]){2 * AH, 1});
        *rc = fld_gelu_and_mul(&out.t, &x.t);
        e[0] = "'out'", e[1] = "'x'";
        return "activation out = x[..., d:]";
    case 8: /* same start: in place is not allowed for activations */
        td_set(&x, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, 2 * AH}, NULL);
        td_set(&out, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, (int64_t[]){2 * AH, 1});
        *rc = fld_mul_and_silu(&out.t, &x.t);
        e[0] = "'out'", e[1] = "'x'";
        return "activation out = x[..., :d]";
    case 9:
        td_set(&q, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, 2 * 8}, NULL);
        td_set(&cache, F32(4096), FLD_DTYPE_F32, 2, (int64_t[]){AT, 8}, NULL);
        *rc = fld_rotary_embedding(&pos.t, &q.t, &q.t, 8, &cache.t, true);
        e[0] = "rotary_embedding: tensor 'key'", e[1] = "'query'";
        return "key is query";
    case 10:
        td_set(&q, F32(0), FLD_DTYPE_F32, 2, (int64_t[]){AT, 2 * 8}, NULL);
        td_set(&k, F32(AT * 16 - 1), FLD_DTYPE_F32, 2, (int64_t[]){AT, 8}, NULL);
        td_set(&cache, F32(4096), FLD_DTYPE_F32, 2, (int64_t[]){AT, 8}, NULL);
        *rc = fld_rotary_embedding(&pos.t, &q.t, &k.t, 8, &cache.t, false);
        e[0] = "'key'", e[1] = "'query'";
        return "key starts at query's last element";
    case 11:
        td_set(&q, F32(0), FLD_DTYPE_F32, 3, (int64_t[]){AT, 2, 8}, NULL);
        td_set(&cache, F32(8), FLD_DTYPE_F32, 2, (int64_t[]){AT, 8}, NULL);
        *rc = fld_rotary_embedding(&pos.t, &q.t, NULL, 8, &cache.t, true);
        e[0] = "'query'", e[1] = "'cos_sin_cache'";
        return "cache inside query";
    default:
        return NULL;
    }
}

START_TEST(test_aliasing_refused)
{
    for (int i = 0;; i++) {
        const char *e[4] = {NULL};
        int rc = FLD_OK;
        const char *what = alias_case(i, &rc, e);
        if (!what)
            break;
        expect_einval(what, rc, e);
    }
}
END_TEST

/* Allowed aliasing gives the same results as separate tensors. */
START_TEST(test_aliasing_allowed)
{
    const float eps = 1e-6f;
    double want[AT * AH], got[AT * AH];
    /* x and out as column slices of one [AT, 2AH] buffer: same stride, disjoint columns. */
    tt_tensor *buf = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){AT, 2 * AH});
    tt_fill_normal(buf, 5, 0, 1);
    tt_tensor *x = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){AT, AH});
    tt_tensor *ref = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){AT, AH});
    for (int t = 0; t < AT; t++)
        for (int h = 0; h < AH; h++)
            tt_set(x, t * AH + h, tt_get(buf, t * 2 * AH + h));
    /* weight is x's first row: both only read. */
    struct td w;
    td_set(&w, (char *)x->t.data, FLD_DTYPE_F32, 1, (int64_t[]){AH}, NULL);
    w.t.byte_offset = x->t.byte_offset;
    ck_assert_msg(fld_rms_norm(&ref->t, &x->t, &w.t, NULL, eps) == FLD_OK, "%s", fld_last_error());
    tt_to_double(ref, want);

    struct td xs, os, ws;
    char *base = (char *)buf->t.data + buf->t.byte_offset;
    td_set(&xs, base, FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, (int64_t[]){2 * AH, 1});
    td_set(&os, base + AH * 4, FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, (int64_t[]){2 * AH, 1});
    td_set(&ws, base, FLD_DTYPE_F32, 1, (int64_t[]){AH}, NULL);
    ck_assert_msg(fld_rms_norm(&os.t, &xs.t, &ws.t, NULL, eps) == FLD_OK, "%s", fld_last_error());
    for (int t = 0; t < AT; t++)
        for (int h = 0; h < AH; h++)
            got[t * AH + h] = tt_get(buf, t * 2 * AH + AH + h);
    ck_assert(memcmp(want, got, sizeof want) == 0);

    /* query and key as column slices of a fused qkv buffer, as vLLM passes them. */
    enum { HQ = 2, HK = 1, D = 8 };
    tt_tensor *pos = tt_new(TT_INT64, 1, (int64_t[]){AT});
    for (int t = 0; t < AT; t++)
        tt_set(pos, t, t);
    tt_tensor *cache = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){AT, D});
    tt_fill_normal(cache, 6, 0, 1);
    tt_tensor *qkv = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){AT, (HQ + 2 * HK) * D});
    tt_fill_normal(qkv, 7, 0, 1);
    tt_tensor *q = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){AT, HQ * D});
    tt_tensor *k = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){AT, HK * D});
    const int row = (HQ + 2 * HK) * D;
    for (int t = 0; t < AT; t++) {
        for (int j = 0; j < HQ * D; j++)
            tt_set(q, t * HQ * D + j, tt_get(qkv, t * row + j));
        for (int j = 0; j < HK * D; j++)
            tt_set(k, t * HK * D + j, tt_get(qkv, t * row + HQ * D + j));
    }
    ck_assert_msg(fld_rotary_embedding(&pos->t, &q->t, &k->t, D, &cache->t, true) == FLD_OK, "%s",
                  fld_last_error());
    struct td qs, ks;
    char *qbase = (char *)qkv->t.data + qkv->t.byte_offset;
    td_set(&qs, qbase, FLD_DTYPE_F32, 2, (int64_t[]){AT, HQ * D}, (int64_t[]){row, 1});
    td_set(&ks, qbase + HQ * D * 4, FLD_DTYPE_F32, 2, (int64_t[]){AT, HK * D}, (int64_t[]){row, 1});
    ck_assert_msg(fld_rotary_embedding(&pos->t, &qs.t, &ks.t, D, &cache->t, true) == FLD_OK, "%s",
                  fld_last_error());
    for (int t = 0; t < AT; t++) {
        for (int j = 0; j < HQ * D; j++)
            ck_assert(tt_get(qkv, t * row + j) == tt_get(q, t * HQ * D + j));
        for (int j = 0; j < HK * D; j++)
            ck_assert(tt_get(qkv, t * row + HQ * D + j) == tt_get(k, t * HK * D + j));
    }
    /* An activation's out right after x: touching, not overlapping. */
    tt_tensor *both = tt_new(FLD_DTYPE_F32, 1, (int64_t[]){AT * 3 * AH});
    char *b0 = (char *)both->t.data + both->t.byte_offset;
    struct td ax, ao;
    td_set(&ax, b0, FLD_DTYPE_F32, 2, (int64_t[]){AT, 2 * AH}, NULL);
    td_set(&ao, b0 + AT * 2 * AH * 4, FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
    ck_assert_msg(fld_silu_and_mul(&ao.t, &ax.t) == FLD_OK, "%s", fld_last_error());
    tt_tensor *all[] = {buf, x, ref, pos, cache, qkv, q, k, both};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        tt_free(all[i]);
}
END_TEST

/* The refused call changed nothing, even where memory is readable. */
START_TEST(test_aliasing_refused_untouched)
{
    tt_tensor *buf = tt_new(FLD_DTYPE_F32, 1, (int64_t[]){AT * AH + 1});
    tt_fill_normal(buf, 9, 0, 1);
    tt_tensor *before = tt_clone(buf);
    char *b0 = (char *)buf->t.data + buf->t.byte_offset;
    struct td x, out;
    td_set(&x, b0, FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
    td_set(&out, b0 + 4, FLD_DTYPE_F32, 2, (int64_t[]){AT, AH}, NULL);
    for (int prefer = 0; prefer < 2; prefer++) {
        /* Whatever the policy, the same refusal. */
        ck_assert_int_eq(fld_policy_push_preference(prefer ? "reference" : "vendor"), FLD_OK);
        expect_einval("out = x + 1", fld_rms_norm(&out.t, &x.t, NULL, NULL, 1e-6f),
                      (const char *[]){"'out'", "'x'", NULL});
        ck_assert_int_eq(fld_policy_pop(), FLD_OK);
    }
    ck_assert(memcmp(buf->buf, before->buf, buf->buf_bytes) == 0);
    tt_free(buf);
    tt_free(before);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* attention_backend and generic calls                                      */
/* ------------------------------------------------------------------------ */

START_TEST(test_attention_rules)
{
    const char *name = "untouched";
    expect_einval("name NULL", fld_attention_backend(FLD_DEVICE_CUDA, false, false, NULL),
                  (const char *[]){"attention_backend: ", "'name'", NULL});
    expect_einval("device 4", fld_attention_backend(4, false, false, &name),
                  (const char *[]){"attention_backend: ", "'device_type' is 4", NULL});
    expect_einval("device -1", fld_attention_backend(-1, false, false, &name),
                  (const char *[]){"'device_type' is -1", NULL});
    expect_einval("sparse without mla", fld_attention_backend(FLD_DEVICE_CUDA, false, true, &name),
                  (const char *[]){"attention_backend: ", "'use_sparse'", "'use_mla'", NULL});
    ck_assert_str_eq(name, "untouched");
    ck_assert_int_eq(fld_attention_backend(FLD_DEVICE_ASCEND_DL21, false, false, &name), FLD_OK);
    ck_assert_str_eq(name, "ASCEND");
}
END_TEST

/* The generic entry points validate the same way; a NULL args struct is invalid. */
START_TEST(test_generic_calls)
{
    static const char *const ops[] = {FLD_OP_SILU_AND_MUL,     FLD_OP_MUL_AND_SILU,
                                      FLD_OP_GELU_AND_MUL,     FLD_OP_GELU_TANH_AND_MUL,
                                      FLD_OP_RMS_NORM,         FLD_OP_GEMMA_RMS_NORM,
                                      FLD_OP_ROTARY_EMBEDDING, FLD_OP_ATTENTION_BACKEND};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        expect_einval(ops[i], fld_call_by_name(ops[i], NULL),
                      (const char *[]){ops[i], "args", NULL});
        fld_op op = fld_op_lookup(ops[i]);
        ck_assert_ptr_nonnull(op);
        expect_einval(ops[i], fld_call(op, NULL), (const char *[]){ops[i], NULL});
    }
    struct act_fx f;
    act_fx_init(&f);
    f.out.shape[1] = 9;
    fld_activation_args a = {&f.out.t, &f.x.t};
    expect_einval("fld_call", fld_call(fld_op_lookup(FLD_OP_GELU_AND_MUL), &a),
                  (const char *[]){"gelu_and_mul: ", "'out'", NULL});
    expect_einval("fld_call_by_name", fld_call_by_name(FLD_OP_SILU_AND_MUL, &a),
                  (const char *[]){"silu_and_mul: ", "'out'", NULL});
    fld_rms_norm_args r = {&f.out.t, &f.x.t, NULL, NULL, NAN};
    f.out.shape[1] = 16;
    expect_einval("fld_call_on",
                  fld_call_on(fld_op_lookup(FLD_OP_RMS_NORM), FLD_DEVICE_CPU, FLD_DTYPE_F32, &r),
                  (const char *[]){"rms_norm: ", "'eps'", NULL});
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Elementwise activations (gelu_quick): out of x's shape                   */
/* ------------------------------------------------------------------------ */

START_TEST(test_elementwise_rules)
{
    tt_tensor *x = tt_new_strided(FLD_DTYPE_BF16, 2, (int64_t[]){4, 16}, (int64_t[]){20, 1});
    tt_tensor *half = tt_new(FLD_DTYPE_BF16, 2, (int64_t[]){4, 8});
    tt_tensor *f32 = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){4, 16});
    tt_fill_normal(x, 1, 0, 1);
    tt_fill_normal(half, 2, 0, 1);
    double before[32], now[32];
    tt_to_double(half, before);
    /* A gated activation's out ([T, d] of [T, 2d]) is not an elementwise one's: untouched. */
    expect_einval("gated out", fld_gelu_quick(&half->t, &x->t),
                  (const char *[]){"gelu_quick: ", "'out' has shape [4, 8] but 'x' has [4, 16]",
                                   "expected out of x's shape", NULL});
    tt_to_double(half, now);
    ck_assert(memcmp(before, now, sizeof now) == 0);
    expect_einval("dtype", fld_gelu_quick(&f32->t, &x->t),
                  (const char *[]){"gelu_quick: ", "'out'", NULL});
    /* out may not be x (nor overlap it) */
    expect_einval("in place", fld_gelu_quick(&x->t, &x->t),
                  (const char *[]){"gelu_quick: ", "'out'", "'x'", NULL});
    expect_einval("NULL x", fld_gelu_quick(&f32->t, NULL),
                  (const char *[]){"gelu_quick: ", "'x'", NULL});
    tt_free(x);
    tt_free(half);
    tt_free(f32);
}
END_TEST

/* Empty tensors need no data; a valid call computes x * sigmoid(1.702 x) in float32. */
START_TEST(test_elementwise_runs)
{
    struct act_fx f;
    act_fx_init(&f);
    f.out.shape[1] = f.x.shape[1] = 16;
    f.x.shape[0] = f.out.shape[0] = 0;
    f.x.t.data = f.out.t.data = NULL;
    ck_assert_int_eq(fld_gelu_quick(&f.out.t, &f.x.t), FLD_OK);
    tt_tensor *x = tt_new_strided(FLD_DTYPE_F32, 2, (int64_t[]){3, 5}, (int64_t[]){9, 1});
    tt_tensor *out = tt_new(FLD_DTYPE_F32, 2, (int64_t[]){3, 5});
    tt_fill_normal(x, 3, 0, 3);
    ck_assert_int_eq(fld_gelu_quick(&out->t, &x->t), FLD_OK);
    for (int i = 0; i < 15; i++) {
        const float v = (float)tt_get(x, i), want = v / (1.0f + expf(-1.702f * v));
        ck_assert_msg(fabsf((float)tt_get(out, i) - want) <= 1e-6f * (1.0f + fabsf(want)),
                      "element %d: gelu_quick(%g) = %g, want %g", i, (double)v, tt_get(out, i),
                      (double)want);
    }
    tt_free(x);
    tt_free(out);
}
END_TEST

static Suite *validation_suite(void)
{
    Suite *s = suite_create("validation");
    TCase *tc = tcase_create("activation");
    tcase_add_checked_fixture(tc, noaccess_setup, noaccess_teardown);
    tcase_add_loop_test(tc, test_activation_rules, 0, 4);
    tcase_add_loop_test(tc, test_activation_empty, 0, 4);
    tcase_add_loop_test(tc, test_activation_guarded, 0, 4);
    suite_add_tcase(s, tc);

    tc = tcase_create("elementwise");
    tcase_add_checked_fixture(tc, noaccess_setup, noaccess_teardown);
    tcase_add_test(tc, test_elementwise_rules);
    tcase_add_test(tc, test_elementwise_runs);
    suite_add_tcase(s, tc);

    tc = tcase_create("rms_norm");
    tcase_add_checked_fixture(tc, noaccess_setup, noaccess_teardown);
    tcase_add_loop_test(tc, test_rms_norm_rules, 0, 2);
    tcase_add_loop_test(tc, test_rms_norm_empty, 0, 2);
    tcase_add_test(tc, test_rms_norm_layouts);
    tcase_add_loop_test(tc, test_rms_norm_mixed_dtypes, 0, 4);
    tcase_add_loop_test(tc, test_rms_norm_guarded, 0, 2);
    suite_add_tcase(s, tc);

    tc = tcase_create("rotary");
    tcase_add_checked_fixture(tc, noaccess_setup, noaccess_teardown);
    tcase_add_test(tc, test_rotary_rules);
    tcase_add_test(tc, test_rotary_device_positions_not_read);
    tcase_add_test(tc, test_rotary_empty);
    tcase_add_test(tc, test_rotary_no_heads);
    tcase_add_test(tc, test_rotary_valid_layouts);
    tcase_add_test(tc, test_rotary_guarded);
    tcase_add_test(tc, test_rotary_out_input_rules);
    tcase_add_test(tc, test_rotary_out_output_rules);
    tcase_add_test(tc, test_rotary_out_guarded);
    tcase_add_test(tc, test_rotary_out_inputs_may_meet);
    suite_add_tcase(s, tc);

    tc = tcase_create("aliasing");
    tcase_add_checked_fixture(tc, noaccess_setup, noaccess_teardown);
    tcase_add_test(tc, test_aliasing_refused);
    tcase_add_test(tc, test_aliasing_allowed);
    tcase_add_test(tc, test_aliasing_refused_untouched);
    suite_add_tcase(s, tc);

    tc = tcase_create("attention_backend");
    tcase_add_checked_fixture(tc, noaccess_setup, noaccess_teardown);
    tcase_add_test(tc, test_attention_rules);
    tcase_add_test(tc, test_generic_calls);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(validation_suite());
}
