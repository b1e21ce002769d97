/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer target: the op-signature parser (core/ops/signature.c), which reads
 * the schemas that plugins declare (fld_declare_op(), a plugin's
 * declarations) and the catalog's own.
 *
 * The first byte chooses the form (bit 0: the catalog's, which may return a
 * value; else a declaration's, returning "()"); the rest, cut at its first
 * NUL, is the text. Properties: a rejected text gives FLD_EINVAL (or
 * FLD_ENOMEM) and a message naming the op; an accepted one gives a
 * canonical schema that parses again to itself with the same arguments
 * (names, kinds, flags, defaults), every argument named, and the return
 * type of the form's rule. No library state is needed: the parser keeps
 * none.
 */
#include <math.h>

#include "fuzz_common.h"
#include "signature.h"

#define TEXT_MAX 8192

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fuzz_setup_environment();
    return 0;
}

static bool same_default(const fld_arg_decl *a, const fld_arg_decl *b)
{
    if ((a->flags & FLD_ARG_HAS_DEFAULT) == 0)
        return true;
    switch (a->kind) {
    case FLD_ARG_INT:
        return a->default_value.i == b->default_value.i;
    case FLD_ARG_FLOAT:
        return (isnan(a->default_value.f) && isnan(b->default_value.f)) ||
               a->default_value.f == b->default_value.f;
    case FLD_ARG_BOOL:
        return a->default_value.b == b->default_value.b;
    case FLD_ARG_STR:
        return (!a->default_value.s && !b->default_value.s) ||
               (a->default_value.s && b->default_value.s &&
                strcmp(a->default_value.s, b->default_value.s) == 0);
    default:
        return a->default_value.tensor == b->default_value.tensor;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    bool allow_returns = data[0] & 1;
    size_t n = size - 1 < TEXT_MAX ? size - 1 : TEXT_MAX;
    char *text = malloc(n + 1);
    if (!text)
        return 0;
    memcpy(text, data + 1, n);
    text[n] = '\0';

    struct fld_sig *s = NULL;
    char err[1024] = "";
    int rc = fld__sig_parse("fuzz_op", text, allow_returns, "the fuzzer", &s, err, sizeof err);
    FUZZ_CHECK(rc == FLD_OK || rc == FLD_EINVAL || rc == FLD_ENOMEM, "fld__sig_parse returned %d",
               rc);
    if (rc != FLD_OK) {
        FUZZ_CHECK(s == NULL, "a failed parse handed out a signature");
        FUZZ_CHECK(strstr(err, "fuzz_op") != NULL, "message without the op: '%s'", err);
        free(text);
        return 0;
    }
    const fld_signature_info *info = &s->info;
    FUZZ_CHECK(info->schema && info->schema[0] == '(', "schema '%s'",
               info->schema ? info->schema : "(null)");
    FUZZ_CHECK(info->op && strcmp(info->op, "fuzz_op") == 0, "op '%s'", info->op);
    FUZZ_CHECK(info->returns && (allow_returns || info->returns[0] == '\0'),
               "a declaration returns '%s'", info->returns ? info->returns : "(null)");
    for (size_t i = 0; i < info->n_args; i++)
        FUZZ_CHECK(info->args[i].name && info->args[i].name[0], "argument %zu has no name", i);

    /* The canonical text is a fixed point. */
    struct fld_sig *again = NULL;
    char err2[1024] = "";
    rc = fld__sig_parse("fuzz_op", info->schema, allow_returns, "the fuzzer", &again, err2,
                        sizeof err2);
    FUZZ_CHECK(rc == FLD_OK || rc == FLD_ENOMEM, "canonical '%s' of '%s' is refused: %s",
               info->schema, text, err2);
    if (rc == FLD_OK) {
        const fld_signature_info *b = &again->info;
        FUZZ_CHECK(strcmp(b->schema, info->schema) == 0, "'%s' becomes '%s'", info->schema,
                   b->schema);
        FUZZ_CHECK(b->n_args == info->n_args, "'%s': %zu arguments, then %zu", info->schema,
                   info->n_args, b->n_args);
        FUZZ_CHECK(strcmp(b->returns, info->returns) == 0, "'%s': returns '%s', then '%s'",
                   info->schema, info->returns, b->returns);
        for (size_t i = 0; i < info->n_args; i++) {
            const fld_arg_decl *x = &info->args[i], *y = &b->args[i];
            FUZZ_CHECK(strcmp(x->name, y->name) == 0 && x->kind == y->kind &&
                           x->flags == y->flags && same_default(x, y),
                       "'%s': argument %zu '%s' differs once re-read", info->schema, i, x->name);
        }
        fld__sig_free(again);
    }
    fld__sig_free(s);
    free(text);
    return 0;
}
