/* SPDX-License-Identifier: Apache-2.0 */
/*
 * core/ops/catalog.c: the catalog table as fld_foreach_catalog_op() shows it.
 * The tool's op lists and the Makefile's `make run` derive from it (the
 * Makefile through the FLD_OP_* names of <fldispatch/catalog.def>), so:
 * every row of the public table, in its order, with its family's argument
 * struct; the table's FLD_OP_* lines are exactly the catalog; every typed
 * entry point the table declares is the op of its name; it works before
 * fld_init(), under a configuration fld_init() refuses and after
 * fld_shutdown(); the callback may call back into the library; a non-zero
 * return stops the walk.
 *
 * Each test runs in its own process (CK_FORK).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "util/build.h"
#include "util/harness.h"

/* Each family's argument kind, as the header documents it. */
#define KIND_GATED       FLD_ARGS_ACTIVATION
#define KIND_ELEMENTWISE FLD_ARGS_ACTIVATION
#define KIND_NORM        FLD_ARGS_RMS_NORM
#define KIND_ROTARY      FLD_ARGS_ROTARY_EMBEDDING
#define KIND_ROTARY_OUT  FLD_ARGS_ROTARY_EMBEDDING_OUT
#define KIND_ATTENTION   FLD_ARGS_ATTENTION_BACKEND

/* The rows of the public table. */
static const char *const table_names[] = {
#define FLD_CATALOG_OP(id, name, family, doc) #name,
#include <fldispatch/catalog.def>
};
enum { N_TABLE = sizeof table_names / sizeof table_names[0] };

struct seen {
    const char *names[32];
    fld_args_kind args[32];
    size_t sizes[32];
    size_t n;
};

static int collect(const fld_catalog_op_info *op, void *user)
{
    struct seen *s = user;
    ck_assert_uint_lt(s->n, 32);
    s->names[s->n] = op->name;
    s->args[s->n] = op->args;
    s->sizes[s->n] = op->args_size;
    s->n++;
    return 0;
}

START_TEST(every_op_in_header_order_with_its_args)
{
    static const struct {
        const char *name;
        fld_args_kind args;
        size_t size;
    } want[] = {
#define FLD_CATALOG_OP(id, name, family, doc)                                                      \
    {FLD_OP_##id, KIND_##family, sizeof(fld_##name##_args)},
#include <fldispatch/catalog.def>
    };
    const size_t n_want = sizeof want / sizeof want[0];
    struct seen s = {0};
    ck_assert_int_eq(fld_foreach_catalog_op(collect, &s), FLD_OK);
    ck_assert_uint_eq(s.n, n_want);
    for (size_t i = 0; i < n_want; i++) {
        ck_assert_str_eq(s.names[i], want[i].name);
        ck_assert_msg(s.args[i] == want[i].args, "%s: args kind %d, expected %d", s.names[i],
                      (int)s.args[i], (int)want[i].args);
        ck_assert_uint_eq(s.sizes[i], want[i].size);
    }
    /* Each is an op the library knows, by the same name. */
    ck_assert_int_eq(fld_init(), FLD_OK);
    for (size_t i = 0; i < s.n; i++) {
        fld_op op = fld_op_lookup(s.names[i]);
        ck_assert_msg(op != NULL, "fld_op_lookup(%s): %s", s.names[i], fld_last_error());
        ck_assert_str_eq(fld_op_name(op), s.names[i]);
    }
    fld_shutdown();
}
END_TEST

/* The "name" of every `#define FLD_OP_<X> "name"` line of the public table, in order. */
static size_t header_op_names(char names[][64], size_t max)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/include/fldispatch/catalog.def", tt_src_dir());
    char *text = tt_read_file(path, NULL);
    size_t n = 0;
    for (char *line = text; line && *line;) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char macro[64], name[64];
        if (sscanf(line, "#define FLD_OP_%63[A-Z_] \"%63[a-z_]\"", macro, name) == 2) {
            ck_assert_uint_lt(n, max);
            snprintf(names[n++], 64, "%s", name);
        }
        line = next;
    }
    free(text);
    return n;
}

START_TEST(header_names_are_the_catalog)
{
    char names[32][64];
    size_t n = header_op_names(names, 32);
    struct seen s = {0};
    ck_assert_int_eq(fld_foreach_catalog_op(collect, &s), FLD_OK);
    ck_assert_msg(n == s.n, "the table defines %zu FLD_OP_* names, the catalog has %zu ops", n,
                  s.n);
    for (size_t i = 0; i < n; i++) {
        ck_assert_msg(strcmp(names[i], s.names[i]) == 0,
                      "FLD_OP_* name %zu is '%s' in the table, '%s' in the catalog", i, names[i],
                      s.names[i]);
        ck_assert_str_eq(names[i], table_names[i]); /* FLD_OP_<ID> is its row's name */
    }
}
END_TEST

/*
 * Every typed entry point the table declares calls its own op: a call with
 * arguments every family refuses fails with FLD_EINVAL and a message that
 * starts with the op's name.
 */
static float dummy[4];
static int64_t dummy_shape[2] = {1, 3}; /* odd and unequal widths: every tensor family refuses */

START_TEST(typed_entry_points_call_their_op)
{
    DLTensor t = {.data = dummy,
                  .device = {kDLCPU, 0},
                  .ndim = 2,
                  .dtype = {kDLFloat, 32, 1},
                  .shape = dummy_shape};
    DLTensor o = t;
    int64_t oshape[2] = {1, 2};
    o.shape = oshape;
    const char *name = NULL;
    size_t n = 0;
    (void)name;
#define CALL_GATED(fn)       fn(&o, &t)
#define CALL_ELEMENTWISE(fn) fn(&o, &t)
#define CALL_NORM(fn)        fn(&o, &t, NULL, NULL, 1e-6f)
#define CALL_ROTARY(fn)      fn(&t, &o, NULL, 8, &t, true)
#define CALL_ROTARY_OUT(fn)  fn(&t, &o, NULL, 8, &t, true, &o, NULL)
#define CALL_ATTENTION(fn)   fn(-1, false, false, &name)
#define FLD_CATALOG_OP(id, op, family, doc)                                                        \
    do {                                                                                           \
        int rc = CALL_##family(fld_##op);                                                          \
        ck_assert_msg(rc == FLD_EINVAL, "fld_" #op ": %s", fld_strerror(rc));                      \
        ck_assert_msg(strncmp(fld_last_error(), #op ": ", strlen(#op ": ")) == 0,                  \
                      "fld_" #op "'s error names another op: %s", fld_last_error());               \
        n++;                                                                                       \
    } while (0);
#include <fldispatch/catalog.def>
    ck_assert_uint_eq(n, N_TABLE);
    fld_shutdown();
}
END_TEST

START_TEST(needs_no_initialisation)
{
    /* fld_init() refuses this configuration; the catalog is still listed. */
    ck_assert_int_eq(setenv("VLLM_FL_PREFER", "fastest", 1), 0);
    struct seen s = {0};
    ck_assert_int_eq(fld_foreach_catalog_op(collect, &s), FLD_OK);
    ck_assert_uint_eq(s.n, N_TABLE);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    s.n = 0;
    ck_assert_int_eq(fld_foreach_catalog_op(collect, &s), FLD_OK);
    ck_assert_uint_eq(s.n, N_TABLE);
    unsetenv("VLLM_FL_PREFER");
    ck_assert_int_eq(fld_reload(), FLD_OK);
    ck_assert_int_eq(fld_shutdown(), FLD_OK);
    s.n = 0;
    ck_assert_int_eq(fld_foreach_catalog_op(collect, &s), FLD_OK);
    ck_assert_uint_eq(s.n, N_TABLE);
}
END_TEST

/* Resolves each op on the CPU from inside the callback; stops at rotary_embedding. */
static int resolve_until_rotary(const fld_catalog_op_info *op, void *user)
{
    int *resolved = user;
    if (strcmp(op->name, FLD_OP_ROTARY_EMBEDDING) == 0)
        return 42;
    const char *impl = NULL;
    DLDataType dtype = op->args == FLD_ARGS_ATTENTION_BACKEND ? FLD_DTYPE_ANY : FLD_DTYPE_F32;
    int rc = fld_resolve(op->name, FLD_DEVICE_CPU, dtype, &impl);
    ck_assert_msg(rc == FLD_OK, "fld_resolve(%s) in the callback: %s", op->name, fld_last_error());
    ++*resolved;
    return 0;
}

START_TEST(callback_may_call_the_library_and_stop_the_walk)
{
    int resolved = 0;
    ck_assert_int_eq(fld_foreach_catalog_op(resolve_until_rotary, &resolved), 42);
    int before = 0; /* the ops before rotary_embedding */
    while (strcmp(table_names[before], FLD_OP_ROTARY_EMBEDDING) != 0)
        before++;
    ck_assert_int_eq(resolved, before);
    fld_shutdown();
}
END_TEST

static Suite *catalog_suite(void)
{
    Suite *s = suite_create("catalog");
    TCase *tc = tcase_create("foreach_catalog_op");
    tcase_add_test(tc, every_op_in_header_order_with_its_args);
    tcase_add_test(tc, header_names_are_the_catalog);
    tcase_add_test(tc, typed_entry_points_call_their_op);
    tcase_add_test(tc, needs_no_initialisation);
    tcase_add_test(tc, callback_may_call_the_library_and_stop_the_walk);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite_without_plugins("test_catalog", catalog_suite());
}
