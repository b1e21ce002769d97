/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fldispatch verify [OP...] [--device D] [--dtype T] [--quick] [--json]
 * [--seed N]: every registered implementation of each op against the
 * reference implementation (reference.c) on generated inputs.
 *
 * The steps, one function each:
 *   plan     one row per (op, dtype, impl) that declares the device and
 *            dtype; rows that cannot run (unavailable, dropped by the
 *            policy, device without memory hooks) are "skipped" with why;
 *   run      per family, dtype and case (verify_cases.c): generate the
 *            inputs once, run reference.c on a copy, then every row's impl
 *            on a fresh copy, each pinned alone with a strict scoped per-op
 *            order "impl:<id>" (as tests/test_kernels.c pins); on a device
 *            other than the CPU the fresh copy is copied to device memory
 *            (device_tensors.c), the impl runs there, and every tensor comes
 *            back for the comparison;
 *   compare  outputs element-wise against the reference (max abs and rel
 *            error, allclose), and bytes outside them (row padding, the
 *            rotary tail past rot_dim, read-only inputs) against the input;
 *            on the CPU, the guard bytes after every tensor's storage
 *            (tensors.h TOOL_GUARD_BYTES) must be intact: a kernel that
 *            wrote past the end fails its row, named, and the run goes on;
 *   report   a table, or JSON.
 *
 * Devices other than cpu: the inputs are generated in CPU memory as for
 * the CPU and reference.c computes the expected outputs from a CPU copy. Each
 * implementation then gets device buffers of the CPU tensors' byte size,
 * padding included, with guard regions on both sides (DEV_GUARD_BYTES), the
 * inputs copied to the device, DLTensors of the same shape, strides and
 * byte_offset on {device, 0}; after the call and fld_device_synchronize()
 * every tensor is copied back and checked as on the CPU, and the guards must
 * be intact. The device memory comes from fld_device_alloc() and friends,
 * that is from the hooks of the device's plugin; without a provider the
 * rows are skipped with its reason and verify exits 3. Rotary positions are
 * not range-checked by the host on devices; the cases keep them in range.
 *
 * The four steps above pass one row record between them; the cases and the
 * device copies live in verify_cases.c and device_tensors.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <fldispatch/half.h>

#include "catalog.h"
#include "cli.h"
#include "device_tensors.h"
#include "json.h"
#include "options.h"
#include "suggest.h"
#include "verify.h"

#define REFERENCE_ID "reference.c"
#define DEFAULT_SEED 1u

/* A printf format: its conversions are the op list and the device list. */
static const char verify_usage[] =
    "Usage: fldispatch verify [--device D] [--dtype T] [--quick] [--json] [--seed N]\n"
    "                         [--] [OP...]\n"
    "\n"
    "Runs every registered implementation of each OP against the reference\n"
    "implementation reference.c on generated inputs at vLLM's kernel test shapes\n"
    "(odd sizes, strided rows, in place, residual, key absent, rot_dim < head_size).\n"
    "Each implementation runs alone (pinned by a strict per-op order 'impl:<id>')\n"
    "on its own copy of the inputs. Its outputs must satisfy\n"
    "|got - want| <= atol + rtol * |want| element-wise, and nothing else may change:\n"
    "row padding, rotary elements past rot_dim, read-only inputs, the guard bytes\n"
    "after every tensor (a write past the end fails the row). An implementation\n"
    "may decline a call (counted as 'declined') if it leaves its outputs untouched.\n"
    "reference.c's own row shows that it accepted every case and wrote nothing\n"
    "but its outputs; its errors are 0 by definition.\n"
    "\n"
    "  OP           %s\n"
    "  --device D   %s: the implementations for that\n"
    "               device run on device copies of the inputs (memory from the\n"
    "               device plugin's hooks, guard bytes around every tensor that\n"
    "               must stay intact); reference.c runs on the CPU. Without a\n"
    "               plugin providing that device's memory: exit status 3\n"
    "  --dtype T    f32, f16, bf16 or a comma-separated list; unlike the other\n"
    "               commands, verify runs all three unless told\n"
    "  --quick      a few cases per op covering each kind (what make check runs)\n"
    "  --json       {\"schema\", \"device\", \"provider\" (null for cpu), \"quick\",\n"
    "               \"seed\", \"results\": [{\"op\", \"dtype\", \"impl_id\", \"cases\",\n"
    "               \"passed\", \"declined\", \"failed\", \"max_abs_err\", \"max_rel_err\",\n"
    "               \"atol\", \"rtol\", \"status\", \"reason\", \"first_failure\"}], \"ok\"}\n"
    "               (docs/schemas/verify.schema.json)\n"
    "  --seed N     seed of the generated inputs (default 1)\n"
    "\n"
    "The full set trims vLLM's cartesian products to stay within about a minute\n"
    "per dtype on two cores: 4096-token norms only at H 768 and 5125, 1024-token\n"
    "rotary only at head 64 and 256, odd activation widths only at 7 and 83 tokens.\n"
    "\n"
    "Exit status: 0 every implementation passed or declined, 1 a check failed,\n"
    "2 usage or configuration error, 3 nothing could be verified.\n";

/* ------------------------------------------------------------------------ */
/* Ops and options                                                          */
/* ------------------------------------------------------------------------ */

/* The ops verify runs: the catalog's ops with tensors (catalog.h), each with its family. */
static struct verify_op {
    const char *name;
    enum tool_family family;
} verify_ops[TOOL_MAX_OPS];
static size_t n_ops;

/* The inputs of an op follow from its family in the catalog table (catalog.h). */
static void load_ops(void)
{
    struct tool_op ops[TOOL_MAX_OPS];
    size_t n = tool_tensor_ops(ops);
    n_ops = 0;
    for (size_t i = 0; i < n; i++)
        verify_ops[n_ops++] = (struct verify_op){ops[i].name, tool_op_family(&ops[i])};
}
#define N_DTYPES 3 /* TOOL_F32, TOOL_F16, TOOL_BF16 */

struct verify_opts {
    bool op_selected[TOOL_MAX_OPS];
    bool dtype_selected[N_DTYPES];
    int device;
    const char *device_name;
    bool quick, json;
    uint64_t seed;
    /* devices other than the CPU: the plugin serving its memory, or why none does */
    char provider[128];
    char no_memory[600];
};

static void print_usage(void)
{
    const char *names[TOOL_MAX_OPS + 1];
    for (size_t i = 0; i < n_ops; i++)
        names[i] = verify_ops[i].name;
    names[n_ops] = NULL;
    char tail[96];
    snprintf(tail, sizeof tail, " (default: all %zu; ops without tensors are skipped)", n_ops);
    printf(verify_usage, tool_wrap_names(names, ", ", 15, 79, tail),
           cli_device_list(CLI_DEVICES_DEFAULT));
    /* from the one tolerance table, so the help cannot drift from it */
    static const char *const family_names[] = {
        [TOOL_FAMILY_ACTIVATION] = "activations", [TOOL_FAMILY_ELEMENTWISE] = "elementwise",
        [TOOL_FAMILY_NORM] = "rms_norm family",   [TOOL_FAMILY_ROTARY] = "rotary",
        [TOOL_FAMILY_ROTARY_OUT] = "rotary out",
    };
    printf("\nTolerances (atol/rtol):\n");
    for (int f = TOOL_FAMILY_ACTIVATION; f < TOOL_FAMILY_NONE; f++) {
        char line[160];
        int n = snprintf(line, sizeof line, "  %-16s", family_names[f]);
        for (int dt = 0; dt < N_DTYPES && n > 0 && (size_t)n < sizeof line; dt++) {
            double atol, rtol;
            char pair[32];
            verify_tolerance((enum tool_family)f, dt, &atol, &rtol);
            snprintf(pair, sizeof pair, "%g/%g", atol, rtol);
            n += snprintf(line + n, sizeof line - (size_t)n, "  %-4s %-*s", tool_dtype_name(dt),
                          dt + 1 < N_DTYPES ? 14 : 0, pair);
        }
        printf("%s\n", line);
    }
}

static int find_op(const char *name)
{
    for (size_t i = 0; i < n_ops; i++)
        if (strcmp(verify_ops[i].name, name) == 0)
            return (int)i;
    return -1;
}

static int tool_dtype_of(const char *name)
{
    DLDataType dt;
    if (fld_dtype_from_name(name, &dt) != FLD_OK)
        return -1;
    return fld_dtype_index(dt);
}

/* "f32,bf16" into opts->dtype_selected. */
static int parse_dtypes(struct verify_opts *o, const char *list)
{
    char buf[128];
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    int n = 0;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++) {
        int dt = tool_dtype_of(tok);
        if (dt < 0)
            return cli_usage_error("verify", "unknown dtype '%s' (f32, f16, bf16)", tok);
        o->dtype_selected[dt] = true;
    }
    if (n == 0)
        return cli_usage_error("verify", "empty --dtype (f32, f16, bf16)");
    return CLI_EXIT_OK;
}

static int parse_seed(struct verify_opts *o, const char *text)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno || end == text || *end || text[0] == '-')
        return cli_usage_error("verify", "--seed wants a non-negative integer, not '%s'", text);
    o->seed = v;
    return CLI_EXIT_OK;
}

/* Returns CLI_EXIT_OK, or the exit status to stop with (help printed: -1). */
static int parse_options(struct verify_opts *o, int argc, char **argv)
{
    memset(o, 0, sizeof *o);
    o->device_name = "cpu";
    o->seed = DEFAULT_SEED;
    const char *dtypes = NULL;
    bool any_op = false, skipped_attention = false;
    enum { OPT_JSON, OPT_QUICK, OPT_DEVICE, OPT_DTYPE, OPT_SEED };
    static const struct cli_option options[] = {
        [OPT_JSON] = {"--json", false},    [OPT_QUICK] = {"--quick", false},
        [OPT_DEVICE] = {"--device", true}, [OPT_DTYPE] = {"--dtype", true},
        [OPT_SEED] = {"--seed", true},     {NULL, false},
    };
    struct cli_args a;
    cli_args_init(&a, "verify", options, argc, argv);
    const char *value;
    for (int k; (k = cli_args_next(&a, &value)) != CLI_ARG_END;) {
        switch (k) {
        case CLI_ARG_HELP:
            print_usage();
            return -1;
        case CLI_ARG_ERROR:
            return CLI_EXIT_USAGE;
        case CLI_ARG_OPERAND:
            if (strcmp(value, FLD_OP_ATTENTION_BACKEND) == 0) {
                skipped_attention = true;
            } else {
                int op = find_op(value);
                if (op < 0) {
                    const char *names[TOOL_MAX_OPS];
                    for (size_t i = 0; i < n_ops; i++)
                        names[i] = verify_ops[i].name;
                    char hint[128], known[512] = "";
                    cli_did_you_mean(value, names, n_ops, hint, sizeof hint);
                    for (size_t i = 0, used = 0; i < n_ops && used < sizeof known; i++)
                        used += (size_t)snprintf(known + used, sizeof known - used, "%s%s",
                                                 i ? ", " : "", names[i]);
                    return cli_usage_error("verify", "unknown op '%s'%s (%s)", value, hint, known);
                }
                o->op_selected[op] = any_op = true;
            }
            break;
        case OPT_JSON:
            o->json = true;
            break;
        case OPT_QUICK:
            o->quick = true;
            break;
        case OPT_DEVICE:
            o->device_name = value;
            break;
        case OPT_DTYPE:
            dtypes = value;
            break;
        case OPT_SEED:
            if (parse_seed(o, value) != CLI_EXIT_OK)
                return CLI_EXIT_USAGE;
            break;
        }
    }
    if (skipped_attention) {
        if (!any_op)
            return cli_usage_error("verify", "attention_backend has no tensors: nothing to "
                                             "verify (see 'fldispatch resolve attention_backend')");
        fprintf(stderr, "fldispatch verify: attention_backend has no tensors; skipped\n");
    }
    if (!any_op)
        for (size_t i = 0; i < n_ops; i++)
            o->op_selected[i] = true;
    if (dtypes) {
        if (parse_dtypes(o, dtypes) != CLI_EXIT_OK)
            return CLI_EXIT_USAGE;
    } else {
        for (int dt = 0; dt < N_DTYPES; dt++)
            o->dtype_selected[dt] = true;
    }
    if (fld_device_from_name(o->device_name, &o->device) != FLD_OK)
        return cli_usage_error("verify", "unknown device '%s' (%s)", o->device_name,
                               cli_device_list(CLI_DEVICES));
    o->device_name = fld_device_name(o->device);
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------ */
/* Devices                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * The plugin that serves the device's memory, into o->provider; when none
 * does, the library's reason into o->no_memory. The CPU is served by the
 * library and keeps the generated CPU tensors.
 */
static void find_provider(struct verify_opts *o)
{
    if (o->device == FLD_DEVICE_CPU)
        return;
    const char *plugin = dev_provider(o->device);
    if (plugin)
        snprintf(o->provider, sizeof o->provider, "%s", plugin);
    else
        snprintf(o->no_memory, sizeof o->no_memory, "%s", fld_last_error());
}

/* ------------------------------------------------------------------------ */
/* Plan: one row per (op, dtype, impl)                                      */
/* ------------------------------------------------------------------------ */

struct row {
    int op; /* index into verify_ops */
    int dtype;
    char impl[96];  /* "" when the op has no implementation for the device and dtype */
    char skip[320]; /* why the row does not run; "" when it does */
    int cases, passed, declined, failed;
    int compared; /* cases whose outputs were compared (max_abs and max_rel mean something) */
    double max_abs, max_rel, atol, rtol;
    char first_failure[640];
};

struct plan {
    struct row *rows;
    size_t n, cap;
};

static struct row *add_row(struct plan *p, int op, int dtype, const char *impl)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        struct row *rows = realloc(p->rows, cap * sizeof *rows);
        if (!rows)
            return NULL;
        p->rows = rows;
        p->cap = cap;
    }
    struct row *r = &p->rows[p->n++];
    memset(r, 0, sizeof *r);
    r->op = op;
    r->dtype = dtype;
    snprintf(r->impl, sizeof r->impl, "%s", impl);
    verify_tolerance(verify_ops[op].family, dtype, &r->atol, &r->rtol);
    return r;
}

/* Pins impl as the only candidate of op on this thread, strictly; undo with unpin(). */
static int pin(const char *op, const char *impl)
{
    char spec[256];
    snprintf(spec, sizeof spec, "%s=impl:%s", op, impl);
    int rc = fld_policy_push_per_op(spec);
    if (rc != FLD_OK)
        return rc;
    rc = fld_policy_push_strict(true);
    if (rc != FLD_OK)
        fld_policy_pop();
    return rc;
}

static void unpin(void)
{
    fld_policy_pop();
    fld_policy_pop();
}

/*
 * Whether the pinned impl is what a call would run. When the policy drops
 * it (denied vendor, out-of-tree plugins disabled, ...) the reason from
 * fld_explain() goes to why.
 */
static bool pinnable(const char *op, int device, int dtype, const char *impl, char *why,
                     size_t size)
{
    if (pin(op, impl) != FLD_OK) {
        snprintf(why, size, "cannot pin it: %s", fld_last_error());
        return false;
    }
    const DLDataType dt = tool_dlpack_dtype(dtype);
    const char *selected = NULL;
    bool ok =
        fld_resolve(op, device, dt, &selected) == FLD_OK && selected && strcmp(selected, impl) == 0;
    if (!ok) {
        snprintf(why, size, "dropped by the policy");
        fld_resolution *res = NULL;
        if (fld_explain(op, device, dt, &res) == FLD_OK && res) {
            for (size_t i = 0; i < res->n_rejected; i++)
                if (strcmp(res->rejected[i].impl_id, impl) == 0)
                    snprintf(why, size, "%s", res->rejected[i].reason);
            fld_resolution_free(res);
        }
    }
    unpin();
    return ok;
}

struct impl_walk {
    const struct verify_opts *o;
    struct plan *plan;
    int op, dtype;
    int found;
    bool oom;
};

static int plan_impl(const fld_impl_info *info, void *user)
{
    struct impl_walk *w = user;
    const uint32_t dev_bit = cli_device_mask(w->o->device);
    if (strcmp(info->op, verify_ops[w->op].name) != 0 || !(info->devices & dev_bit) ||
        !(info->dtypes & (1u << w->dtype)))
        return 0;
    struct row *r = add_row(w->plan, w->op, w->dtype, info->impl_id);
    if (!r) {
        w->oom = true;
        return 1;
    }
    w->found++;
    if (!info->available)
        snprintf(r->skip, sizeof r->skip, "unavailable: %s", info->unavailable_reason);
    else if (w->o->no_memory[0])
        snprintf(r->skip, sizeof r->skip, "no device memory for %s: %s", w->o->device_name,
                 w->o->no_memory);
    return 0;
}

/* Rows of every selected op and dtype, in catalog then impl_id order. */
static int make_plan(const struct verify_opts *o, struct plan *plan)
{
    for (size_t op = 0; op < n_ops; op++) {
        if (!o->op_selected[op])
            continue;
        for (int dt = 0; dt < N_DTYPES; dt++) {
            if (!o->dtype_selected[dt])
                continue;
            struct impl_walk w = {.o = o, .plan = plan, .op = (int)op, .dtype = dt};
            int rc = fld_foreach_impl(plan_impl, &w);
            if (w.oom) {
                fprintf(stderr, "fldispatch verify: out of memory\n");
                return CLI_EXIT_CHECK_FAILED;
            }
            if (rc != 0) {
                fprintf(stderr, "fldispatch verify: %s\n",
                        *fld_last_error() ? fld_last_error() : fld_strerror(rc));
                return CLI_EXIT_CHECK_FAILED;
            }
            if (w.found == 0) {
                struct row *r = add_row(plan, (int)op, dt, "");
                if (!r)
                    return CLI_EXIT_CHECK_FAILED;
                snprintf(r->skip, sizeof r->skip, "no implementation registered for %s %s",
                         o->device_name, tool_dtype_name(dt));
            }
        }
    }
    /* What the policy would not let run; the reference must run for the others to be compared. */
    for (size_t i = 0; i < plan->n; i++) {
        struct row *r = &plan->rows[i];
        if (!r->skip[0])
            (void)pinnable(verify_ops[r->op].name, o->device, r->dtype, r->impl, r->skip,
                           sizeof r->skip);
    }
    for (size_t i = 0; i < plan->n; i++) {
        struct row *r = &plan->rows[i];
        if (r->skip[0] || strcmp(r->impl, REFERENCE_ID) == 0)
            continue;
        if (o->device != FLD_DEVICE_CPU) {
            /* the expected outputs come from reference.c on the CPU */
            char why[sizeof r->skip];
            if (!pinnable(verify_ops[r->op].name, FLD_DEVICE_CPU, r->dtype, REFERENCE_ID, why,
                          sizeof why))
                snprintf(r->skip, sizeof r->skip, "%s cannot run on the CPU: %.200s", REFERENCE_ID,
                         why);
            continue;
        }
        const struct row *ref = NULL;
        for (size_t j = 0; j < plan->n; j++)
            if (plan->rows[j].op == r->op && plan->rows[j].dtype == r->dtype &&
                strcmp(plan->rows[j].impl, REFERENCE_ID) == 0)
                ref = &plan->rows[j];
        if (!ref)
            snprintf(r->skip, sizeof r->skip, "no %s to compare with", REFERENCE_ID);
        else if (ref->skip[0])
            snprintf(r->skip, sizeof r->skip, "%s cannot run: %.200s", REFERENCE_ID, ref->skip);
    }
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------ */
/* Compare                                                                  */
/* ------------------------------------------------------------------------ */

/*
 * float16 to float32 through a table: comparing is a large share of a
 * verify run, and the branchy conversion of half.h dominated it.
 */
static float f16_table[65536];

static void init_f16_table(void)
{
    if (f16_table[0x3c00] == 1.0f)
        return;
    for (uint32_t h = 0; h < 65536; h++)
        f16_table[h] = fld_f16_to_f32((uint16_t)h);
}

/* Storage element off of a floating tensor as float32. */
static inline float load(const struct tool_tensor *tt, int64_t off)
{
    switch (tt->dtype) {
    case TOOL_F16:
        return f16_table[((const uint16_t *)tt->alloc)[off]];
    case TOOL_BF16:
        return fld_bf16_to_f32(((const uint16_t *)tt->alloc)[off]);
    default:
        return ((const float *)tt->alloc)[off];
    }
}

/* Rows of a tensor: logical elements are rows x width, rows step by stride. */
static void row_shape(const struct tool_tensor *tt, int64_t *rows, int64_t *width, int64_t *stride)
{
    const int last = tt->t.ndim - 1;
    *width = tt->shape[last];
    *stride = last ? tt->strides[last - 1] : *width;
    *rows = *width ? tool_tensor_numel(tt) / *width : 0;
}

/* The findings of one run of one case. */
struct outcome {
    double max_abs, max_rel;
    bool compared;
    bool bad;
    char what[560]; /* the first violation */
};

static void violation(struct outcome *oc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void violation(struct outcome *oc, const char *fmt, ...)
{
    if (oc->bad)
        return;
    oc->bad = true;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(oc->what, sizeof oc->what, fmt, ap);
    va_end(ap);
}

/* Elements [begin, end) of a row of got against want (allclose), feeding max_abs and max_rel. */
static void compare_span(struct outcome *oc, enum verify_slot s, const struct tool_tensor *got,
                         const struct tool_tensor *want, int64_t row, int64_t row_off,
                         int64_t width, int64_t begin, int64_t end, double atol, double rtol)
{
    for (int64_t j = begin; j < end; j++) {
        const double a = load(got, row_off + j), b = load(want, row_off + j);
        double err = fabs(a - b);
        const double mag = fabs(b);
        if (isnan(err))
            err = INFINITY;
        if (err > oc->max_abs)
            oc->max_abs = err;
        if (mag > atol && err > oc->max_rel * mag)
            oc->max_rel = err / mag;
        if (!(err <= atol + rtol * mag))
            violation(oc,
                      "'%s' element %" PRId64 " (row %" PRId64 ", col %" PRId64
                      "): got %.8g, expected %.8g (|err| %.3g > %.3g)",
                      verify_slot_name(s), row * width + j, row, j, a, b, err, atol + rtol * mag);
    }
}

/*
 * Output slot s of got against the reference want: allclose per element,
 * except the rotary tail (head column >= rot_dim), which must equal the
 * input bit for bit. want NULL (the reference's own run) checks the tail
 * only.
 */
static void compare_output(struct outcome *oc, enum verify_slot s, const struct tool_tensor *got,
                           const struct tool_tensor *want, const struct tool_tensor *input,
                           const struct verify_case *c, double atol, double rtol)
{
    int64_t rows, width, stride;
    row_shape(got, &rows, &width, &stride);
    /* a row is whole heads for rotary; the rest of the ops compare it all */
    const bool rotary = c->family == TOOL_FAMILY_ROTARY || c->family == TOOL_FAMILY_ROTARY_OUT;
    const int64_t seg = rotary ? c->head : width, cmp = rotary ? c->rot : width;
    const size_t esize = tool_dtype_size(got->dtype);
    for (int64_t r = 0; r < rows; r++) {
        const int64_t off = r * stride;
        for (int64_t h = 0; h < width; h += seg) {
            if (want)
                compare_span(oc, s, got, want, r, off, width, h, h + cmp, atol, rtol);
            if (cmp == seg)
                continue;
            const size_t tail = (size_t)(off + h + cmp) * esize, len = (size_t)(seg - cmp) * esize;
            if (memcmp((const char *)got->alloc + tail, (const char *)input->alloc + tail, len))
                violation(oc,
                          "'%s' row %" PRId64 ", head %" PRId64 ": elements past rot_dim %" PRId64
                          " changed",
                          verify_slot_name(s), r, h / seg, c->rot);
        }
    }
}

/* The first byte offset where a and b differ inside [from, to), or -1. */
static int64_t first_diff(const struct tool_tensor *a, const struct tool_tensor *b, size_t from,
                          size_t to)
{
    const unsigned char *pa = a->alloc, *pb = b->alloc;
    if (memcmp(pa + from, pb + from, to - from) == 0)
        return -1;
    for (size_t i = from; i < to; i++)
        if (pa[i] != pb[i])
            return (int64_t)i;
    return -1;
}

/* The row padding of got must still be what the input had. */
static void compare_padding(struct outcome *oc, enum verify_slot s, const struct tool_tensor *got,
                            const struct tool_tensor *input)
{
    int64_t rows, width, stride;
    row_shape(got, &rows, &width, &stride);
    if (stride == width)
        return;
    const size_t esize = tool_dtype_size(got->dtype);
    for (int64_t r = 0; r < rows; r++) {
        size_t from = (size_t)(r * stride + width) * esize;
        size_t to = (size_t)((r + 1) * stride) * esize;
        if (to > got->bytes)
            to = got->bytes;
        if (from < to && first_diff(got, input, from, to) >= 0) {
            violation(oc, "padding of '%s' after row %" PRId64 " was written", verify_slot_name(s),
                      r);
            return;
        }
    }
}

/* Every byte of a tensor the op does not write (or of an output after a decline). */
static bool unchanged(const struct tool_tensor *got, const struct tool_tensor *input)
{
    return got->bytes == input->bytes && memcmp(got->alloc, input->alloc, got->bytes) == 0;
}

/* The whole check of a run that returned FLD_OK; want NULL for the reference's own run. */
static void check_run(struct outcome *oc, struct verify_io *got, struct verify_io *want,
                      const struct verify_io *input, double atol, double rtol)
{
    for (int s = 0; s < VS_CACHE; s++) {
        struct tool_tensor *g = verify_slot(got, (enum verify_slot)s);
        const struct tool_tensor *in = &input->t[s];
        if (!g)
            continue;
        if (!verify_slot_written(got, (enum verify_slot)s)) {
            if (!unchanged(g, in))
                violation(oc, "read-only input '%s' was written", verify_slot_name(s));
            continue;
        }
        /* the tail past rot_dim equals the input read: an output's own input out of place */
        const struct tool_tensor *src = s == VS_QUERY_OUT ? &input->t[VS_QUERY]
                                        : s == VS_KEY_OUT ? &input->t[VS_KEY]
                                                          : in;
        compare_output(oc, (enum verify_slot)s, g,
                       want ? verify_slot(want, (enum verify_slot)s) : NULL, src, got->c, atol,
                       rtol);
        compare_padding(oc, (enum verify_slot)s, g, in);
    }
}

/* ------------------------------------------------------------------------ */
/* Run                                                                      */
/* ------------------------------------------------------------------------ */

/* Runs impl alone on io's CPU tensors. */
static int call_pinned(const char *op, const char *impl, struct verify_io *io)
{
    int rc = pin(op, impl);
    if (rc != FLD_OK)
        return rc;
    rc = verify_io_call(op, io);
    unpin();
    return rc;
}

/*
 * Runs impl alone on device copies of io's tensors (the cos/sin cache
 * included) and copies every one of them back into io, guards checked.
 * Returns the impl's status; *moved is false, after a violation in oc, when
 * the data could not be moved (then io says nothing about the impl).
 */
static int call_pinned_device(const char *op, const char *impl, struct verify_io *io, int device,
                              struct outcome *oc, bool *moved)
{
    const DLDevice dev = {(DLDeviceType)device, 0};
    struct dev_tensor d[VS_COUNT];
    DLTensor *views[VS_COUNT] = {NULL};
    memset(d, 0, sizeof d);
    int rc = FLD_OK;
    *moved = false;
    for (int s = 0; s < VS_COUNT; s++) {
        struct tool_tensor *tt = verify_slot(io, (enum verify_slot)s);
        if (!tt)
            continue;
        if (dev_tensor_upload(&d[s], dev, tt, DEV_GUARD_BYTES) != FLD_OK) {
            violation(oc, "copying '%s' to the device: %s", verify_slot_name((enum verify_slot)s),
                      fld_last_error());
            goto done;
        }
        views[s] = &d[s].t;
    }
    rc = pin(op, impl);
    if (rc == FLD_OK) {
        rc = verify_call(op, io->c, views);
        unpin();
    }
    /* the copies below reset fld_last_error(); the impl's message is what the report shows */
    char message[512];
    snprintf(message, sizeof message, "%s", fld_last_error());
    if (fld_device_synchronize(dev) != FLD_OK) {
        violation(oc, "synchronizing after the call (status %d): %s", rc, fld_last_error());
        goto done;
    }
    for (int s = 0; s < VS_COUNT; s++) {
        if (!views[s])
            continue;
        const char *name = verify_slot_name((enum verify_slot)s), *where;
        bool intact;
        if (dev_tensor_download(&d[s], verify_slot(io, (enum verify_slot)s)) != FLD_OK ||
            dev_tensor_check_guards(&d[s], &intact, &where) != FLD_OK) {
            violation(oc, "copying '%s' back from the device: %s", name, fld_last_error());
            goto done;
        }
        if (!intact) {
            /* reported as a failure of the impl, whatever its status */
            violation(oc, "wrote into the %d guard bytes %s the storage of '%s' (status %d)",
                      DEV_GUARD_BYTES, where, name, rc);
        }
    }
    *moved = true;
    fld_set_error("%s", message);
done:
    for (int s = 0; s < VS_COUNT; s++)
        dev_tensor_free(&d[s]);
    return rc;
}

static bool declined_status(int rc)
{
    return rc == FLD_EUNSUPPORTED || rc == FLD_EUNAVAILABLE;
}

/* A write to the shared cos/sin cache fails the run and is undone for the next. */
static void check_cache(struct outcome *oc, struct verify_io *io)
{
    if (io->cache && !unchanged(io->cache, io->cache_ro)) {
        violation(oc, "read-only input 'cos_sin_cache' was written");
        tool_tensor_copy(io->cache, io->cache_ro);
    }
}

static void record(struct row *r, const char *label, const struct outcome *oc)
{
    r->cases++;
    r->compared += oc->compared;
    if (oc->max_abs > r->max_abs)
        r->max_abs = oc->max_abs;
    if (oc->max_rel > r->max_rel)
        r->max_rel = oc->max_rel;
    if (!oc->bad) {
        r->passed++;
        return;
    }
    if (r->failed++ == 0)
        snprintf(r->first_failure, sizeof r->first_failure, "case %s: %s", label, oc->what);
}

/*
 * Runs row r's impl on a copy of the inputs and checks it against the
 * reference outputs want (NULL when the reference itself failed).
 */
static void run_row(struct row *r, int device, const struct verify_io *input,
                    struct verify_io *want, const char *label)
{
    const char *op = verify_ops[r->op].name;
    struct outcome oc = {0};
    struct verify_io io;
    if (!verify_io_clone(&io, input)) {
        violation(&oc, "out of memory copying the inputs");
        record(r, label, &oc);
        return;
    }
    int rc;
    if (device == FLD_DEVICE_CPU) {
        rc = call_pinned(op, r->impl, &io);
        for (int s = 0; s < VS_COUNT; s++) {
            struct tool_tensor *tt = verify_slot(&io, (enum verify_slot)s);
            if (!tt || tool_tensor_guard_intact(tt))
                continue;
            violation(&oc,
                      "wrote past the end of '%s' (into the %d guard bytes after its storage; "
                      "status %d)",
                      verify_slot_name((enum verify_slot)s), TOOL_GUARD_BYTES, rc);
            if (s == VS_CACHE) /* shared by the next runs */
                tool_tensor_guard_reset(tt);
        }
        if (oc.bad) {
            record(r, label, &oc);
            verify_io_free(&io);
            return;
        }
    } else {
        bool moved;
        rc = call_pinned_device(op, r->impl, &io, device, &oc, &moved);
        if (!moved || oc.bad) {
            /* the cache may be half copied back: the next run needs it pristine */
            if (io.cache)
                tool_tensor_copy(io.cache, io.cache_ro);
            record(r, label, &oc);
            verify_io_free(&io);
            return;
        }
    }
    if (declined_status(rc)) {
        bool untouched = true;
        for (int s = 0; s < VS_CACHE; s++)
            if (verify_slot(&io, (enum verify_slot)s) && !unchanged(&io.t[s], &input->t[s])) {
                violation(&oc, "declined the call but wrote '%s'",
                          verify_slot_name((enum verify_slot)s));
                untouched = false;
                break;
            }
        check_cache(&oc, &io);
        if (untouched && !oc.bad) {
            r->cases++;
            r->declined++;
        } else {
            record(r, label, &oc);
        }
    } else {
        if (rc != FLD_OK)
            violation(&oc, "status %d (%s): %s", rc, fld_strerror(rc), fld_last_error());
        else if (!want)
            violation(&oc, "%s failed on this case: nothing to compare with", REFERENCE_ID);
        else
            check_run(&oc, &io, want, input, r->atol, r->rtol);
        oc.compared = rc == FLD_OK && want;
        check_cache(&oc, &io);
        record(r, label, &oc);
    }
    verify_io_free(&io);
}

/*
 * The reference run of one op on one case, recorded in the reference's own
 * row: it must accept the case and write nothing but its outputs. Returns
 * whether want holds its outputs (freed by the caller).
 */
static bool run_reference(struct row *ref_row, const struct verify_io *input,
                          struct verify_io *want, const char *label)
{
    struct outcome oc = {0};
    if (!verify_io_clone(want, input)) {
        violation(&oc, "out of memory copying the inputs");
        record(ref_row, label, &oc);
        return false;
    }
    int rc = call_pinned(verify_ops[ref_row->op].name, REFERENCE_ID, want);
    if (rc != FLD_OK)
        violation(&oc, "status %d (%s): %s", rc, fld_strerror(rc), fld_last_error());
    else
        check_run(&oc, want, NULL, input, ref_row->atol, ref_row->rtol);
    oc.compared = rc == FLD_OK; /* against itself: errors 0 */
    check_cache(&oc, want);
    record(ref_row, label, &oc);
    if (oc.bad) {
        verify_io_free(want);
        return false;
    }
    verify_io_drop_inputs(want);
    return true;
}

/*
 * Every runnable row of (op, dtype) on one case: the reference first, then
 * the others. On other devices than the CPU, reference.c is not a row of the
 * plan: it runs on the CPU, recorded in a scratch row that is not reported
 * (a failure of it fails every row of the case, "nothing to compare with").
 */
static void run_op_case(struct plan *p, int device, int op, int dtype,
                        const struct verify_io *input, const char *label)
{
    struct row *ref_row = NULL, scratch;
    if (device == FLD_DEVICE_CPU) {
        for (size_t i = 0; i < p->n; i++)
            if (p->rows[i].op == op && p->rows[i].dtype == dtype && !p->rows[i].skip[0] &&
                strcmp(p->rows[i].impl, REFERENCE_ID) == 0)
                ref_row = &p->rows[i];
    } else {
        for (size_t i = 0; i < p->n && !ref_row; i++)
            if (p->rows[i].op == op && p->rows[i].dtype == dtype && !p->rows[i].skip[0]) {
                memset(&scratch, 0, sizeof scratch);
                scratch.op = op;
                scratch.dtype = dtype;
                verify_tolerance(verify_ops[op].family, dtype, &scratch.atol, &scratch.rtol);
                ref_row = &scratch;
            }
    }
    if (!ref_row)
        return; /* make_plan skipped every other row */
    struct verify_io want;
    const bool have_want = run_reference(ref_row, input, &want, label);
    for (size_t i = 0; i < p->n; i++) {
        struct row *r = &p->rows[i];
        if (r != ref_row && r->op == op && r->dtype == dtype && !r->skip[0])
            run_row(r, device, input, have_want ? &want : NULL, label);
    }
    if (have_want)
        verify_io_free(&want);
}

struct progress {
    bool on;
    size_t done, total;
};

static void show_progress(struct progress *pg, const char *family, int dtype, const char *label)
{
    pg->done++;
    if (pg->on)
        fprintf(stderr, "\r\033[K[%zu/%zu] %s %s %s", pg->done, pg->total, family,
                tool_dtype_name(dtype), label);
}

static bool rows_runnable(const struct plan *p, enum tool_family f, int dtype)
{
    for (size_t i = 0; i < p->n; i++)
        if (verify_ops[p->rows[i].op].family == f && p->rows[i].dtype == dtype &&
            !p->rows[i].skip[0])
            return true;
    return false;
}

/* Every case of every family and dtype with a runnable row. */
static int run_plan(const struct verify_opts *o, struct plan *p)
{
    static const char *const family_names[] = {
        [TOOL_FAMILY_ACTIVATION] = "activations",
        [TOOL_FAMILY_ELEMENTWISE] = "elementwise",
        [TOOL_FAMILY_NORM] = "norms",
        [TOOL_FAMILY_ROTARY] = "rotary",
        [TOOL_FAMILY_ROTARY_OUT] = "rotary out",
    };
    struct progress pg = {.on = !o->json && isatty(STDERR_FILENO)};
    for (int f = TOOL_FAMILY_ACTIVATION; f < TOOL_FAMILY_NONE; f++)
        for (int dt = 0; dt < N_DTYPES; dt++)
            if (rows_runnable(p, (enum tool_family)f, dt)) {
                size_t n;
                verify_cases((enum tool_family)f, o->quick, &n);
                pg.total += n;
            }

    for (int f = TOOL_FAMILY_ACTIVATION; f < TOOL_FAMILY_NONE; f++) {
        for (int dt = 0; dt < N_DTYPES; dt++) {
            if (!rows_runnable(p, (enum tool_family)f, dt))
                continue;
            size_t n_cases;
            const struct verify_case *cases = verify_cases((enum tool_family)f, o->quick, &n_cases);
            for (size_t ci = 0; ci < n_cases; ci++) {
                char label[160];
                verify_case_label(&cases[ci], label, sizeof label);
                show_progress(&pg, family_names[f], dt, label);
                /* the same inputs for a case whatever the other options */
                const uint64_t seed = o->seed * 0x100000001b3ull + (uint64_t)(f * 1000 + (int)ci);
                struct verify_io input;
                if (!verify_io_make(&input, &cases[ci], dt, seed)) {
                    fprintf(stderr, "\nfldispatch verify: out of memory for case %s\n", label);
                    return CLI_EXIT_CHECK_FAILED;
                }
                for (size_t op = 0; op < n_ops; op++)
                    if (verify_ops[op].family == (enum tool_family)f && o->op_selected[op])
                        run_op_case(p, o->device, (int)op, dt, &input, label);
                verify_io_free(&input);
            }
        }
    }
    if (pg.on)
        fprintf(stderr, "\r\033[K");
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------------------ */
/* Report                                                                   */
/* ------------------------------------------------------------------------ */

static const char *row_status(const struct row *r)
{
    if (r->skip[0])
        return "skipped";
    if (r->failed)
        return "fail";
    if (r->cases > 0 && r->declined == r->cases)
        return "declined";
    return "pass";
}

/* Whether any case of the row was compared (not all declined or skipped). */
static bool row_compared(const struct row *r)
{
    return !r->skip[0] && r->compared > 0;
}

static void report_text(const struct verify_opts *o, const struct plan *p)
{
    char dtypes[32] = "";
    for (int dt = 0; dt < N_DTYPES; dt++)
        if (o->dtype_selected[dt])
            snprintf(dtypes + strlen(dtypes), sizeof dtypes - strlen(dtypes), "%s%s",
                     dtypes[0] ? "," : "", tool_dtype_name(dt));
    printf("verify: device %s, dtypes %s, %s set, seed %" PRIu64 "; pass: |got - want| <= atol + "
           "rtol*|want|\n",
           o->device_name, dtypes, o->quick ? "quick" : "full", o->seed);
    if (o->provider[0])
        printf("device memory: plugin '%s'; expected outputs: %s on the CPU; %d guard bytes "
               "around every tensor\n",
               cli_text(o->provider), REFERENCE_ID, DEV_GUARD_BYTES);
    /* Columns as wide as their longest op name and impl_id (at least the usual 18 and 16). */
    int op_w = 18, impl_w = 16;
    for (size_t i = 0; i < p->n; i++) {
        int n = (int)strlen(verify_ops[p->rows[i].op].name);
        op_w = n > op_w ? n : op_w;
        n = (int)strlen(cli_text(p->rows[i].impl[0] ? p->rows[i].impl : "-"));
        impl_w = n > impl_w ? n : impl_w;
    }
    printf("%-*s %-5s %-*s %-9s %-10s %-10s %-8s %-8s %s\n", op_w, "OP", "DTYPE", impl_w, "IMPL",
           "CASES", "MAX_ABS", "MAX_REL", "ATOL", "RTOL", "VERDICT");
    int passed = 0, failed = 0, skipped = 0;
    for (size_t i = 0; i < p->n; i++) {
        const struct row *r = &p->rows[i];
        char cases[24], verdict[400];
        if (r->skip[0]) {
            skipped++;
            printf("%-*s %-5s %-*s %-9s %-10s %-10s %-8s %-8s skipped: %s\n", op_w,
                   verify_ops[r->op].name, tool_dtype_name(r->dtype), impl_w,
                   r->impl[0] ? cli_text(r->impl) : "-", "-", "-", "-", "-", "-",
                   cli_text(r->skip));
            continue;
        }
        snprintf(cases, sizeof cases, "%d/%d", r->passed, r->cases);
        if (r->failed) {
            failed++;
            snprintf(verdict, sizeof verdict, "FAIL (%d failed)", r->failed);
        } else if (r->declined == r->cases && r->cases) {
            passed++;
            snprintf(verdict, sizeof verdict, "declined %d", r->declined);
        } else {
            passed++;
            snprintf(verdict, sizeof verdict, r->declined ? "PASS, declined %d" : "PASS",
                     r->declined);
        }
        char abs_err[24] = "-", rel_err[24] = "-";
        if (row_compared(r)) {
            snprintf(abs_err, sizeof abs_err, "%.3g", r->max_abs);
            snprintf(rel_err, sizeof rel_err, "%.3g", r->max_rel);
        }
        printf("%-*s %-5s %-*s %-9s %-10s %-10s %-8.2g %-8.2g %s\n", op_w, verify_ops[r->op].name,
               tool_dtype_name(r->dtype), impl_w, cli_text(r->impl), cases, abs_err, rel_err,
               r->atol, r->rtol, verdict);
        if (r->failed)
            printf("    first failure: %s\n", cli_text(r->first_failure));
    }
    printf("%zu rows: %d passed, %d failed, %d skipped\n", p->n, passed, failed, skipped);
}

static void report_json(const struct verify_opts *o, const struct plan *p, bool ok)
{
    struct json_writer w;
    json_begin_document(&w, stdout);
    json_key(&w, "device");
    json_string(&w, o->device_name);
    json_key(&w, "provider");
    json_string(&w, o->device != FLD_DEVICE_CPU && o->provider[0] ? o->provider : NULL);
    json_key(&w, "quick");
    json_bool(&w, o->quick);
    json_key(&w, "seed");
    json_int(&w, (long long)o->seed);
    json_key(&w, "results");
    json_begin_array(&w);
    for (size_t i = 0; i < p->n; i++) {
        const struct row *r = &p->rows[i];
        json_begin_object(&w);
        json_key(&w, "op");
        json_string(&w, verify_ops[r->op].name);
        json_key(&w, "dtype");
        json_string(&w, tool_dtype_name(r->dtype));
        json_key(&w, "impl_id");
        json_string(&w, r->impl[0] ? r->impl : NULL);
        json_key(&w, "cases");
        json_int(&w, r->cases);
        json_key(&w, "passed");
        json_int(&w, r->passed);
        json_key(&w, "declined");
        json_int(&w, r->declined);
        json_key(&w, "failed");
        json_int(&w, r->failed);
        json_key(&w, "max_abs_err");
        json_double(&w, row_compared(r) ? r->max_abs : NAN, 12); /* NaN writes null */
        json_key(&w, "max_rel_err");
        json_double(&w, row_compared(r) ? r->max_rel : NAN, 12);
        json_key(&w, "atol");
        json_double(&w, r->atol, 9);
        json_key(&w, "rtol");
        json_double(&w, r->rtol, 9);
        json_key(&w, "status");
        json_string(&w, row_status(r));
        json_key(&w, "reason");
        json_text_or_null(&w, r->skip);
        json_key(&w, "first_failure");
        json_text_or_null(&w, r->failed ? r->first_failure : NULL);
        json_end_object(&w);
    }
    json_end_array(&w);
    json_key(&w, "ok");
    json_bool(&w, ok);
    json_end_object(&w);
    json_finish(&w);
}

/* ------------------------------------------------------------------------ */
/* The command                                                              */
/* ------------------------------------------------------------------------ */

int cmd_verify(int argc, char **argv)
{
    struct verify_opts o;
    load_ops();
    int rc = parse_options(&o, argc, argv);
    if (rc < 0)
        return CLI_EXIT_OK; /* --help */
    if (rc != CLI_EXIT_OK)
        return rc;
    if ((rc = cli_init()) != CLI_EXIT_OK)
        return rc;

    init_f16_table();
    find_provider(&o);
    struct plan plan = {0};
    rc = make_plan(&o, &plan);
    if (rc == CLI_EXIT_OK)
        rc = run_plan(&o, &plan);
    verify_caches_free();
    if (rc != CLI_EXIT_OK) {
        free(plan.rows);
        return rc;
    }

    bool any_failed = false, any_ran = false;
    for (size_t i = 0; i < plan.n; i++) {
        any_failed |= plan.rows[i].failed > 0;
        any_ran |= !plan.rows[i].skip[0];
    }
    if (o.json)
        report_json(&o, &plan, !any_failed && any_ran);
    else if (plan.n > 0)
        report_text(&o, &plan);
    free(plan.rows);

    if (any_failed)
        return CLI_EXIT_CHECK_FAILED;
    if (!any_ran) {
        if (o.no_memory[0])
            fprintf(stderr, "fldispatch verify: device %s: %s\n", o.device_name,
                    cli_text(o.no_memory));
        else
            fprintf(stderr, "fldispatch verify: no implementation available to verify\n");
        return CLI_EXIT_NONE;
    }
    return CLI_EXIT_OK;
}
