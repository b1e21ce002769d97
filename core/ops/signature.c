/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Op signatures: a small recursive-descent reader of the torch-schema-like
 * strings of fldispatch.h, the canonical text two declarations are compared
 * by (written tensors renamed Tensor(a!), Tensor(b!), ... in order; default
 * literals in one spelling), and the check of a declared op's call.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/plugin.h>

#include "devices.h"
#include "error.h"
#include "signature.h"

#define MAX_ARGS 64

struct reader {
    const char *op, *text, *p;
    char *err;
    size_t err_size;
};

static int bad(struct reader *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int bad(struct reader *r, const char *fmt, ...)
{
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(r->err, r->err_size, "op '%s': malformed signature at column %d: %s in '%s'", r->op,
             (int)(r->p - r->text) + 1, what, r->text);
    return FLD_EINVAL;
}

static void skip_ws(struct reader *r)
{
    while (*r->p == ' ' || *r->p == '\t' || *r->p == '\n')
        r->p++;
}

static bool ident_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static bool ident_char(char c)
{
    return ident_start(c) || (c >= '0' && c <= '9');
}

/*
 * Names no binding can take as an argument name: Python's keywords (a
 * Python caller could not pass it by name, and PyTorch's schema parser
 * refuses most of them: torch.ops.fldispatch.<op> could not be defined).
 * The Python package's tests check this list against keyword.kwlist.
 */
static const char *const reserved_names[] = {
    "False", "None",     "True",  "and",    "as",   "assert", "async",  "await",    "break",
    "class", "continue", "def",   "del",    "elif", "else",   "except", "finally",  "for",
    "from",  "global",   "if",    "import", "in",   "is",     "lambda", "nonlocal", "not",
    "or",    "pass",     "raise", "return", "try",  "while",  "with",   "yield",
};

static bool reserved_name(const char *name)
{
    for (size_t i = 0; i < sizeof reserved_names / sizeof reserved_names[0]; i++)
        if (strcmp(reserved_names[i], name) == 0)
            return true;
    return false;
}

/* The identifier at r->p (length in *n), or 0 length. */
static size_t ident(struct reader *r)
{
    size_t n = 0;
    if (ident_start(r->p[0]))
        while (ident_char(r->p[n]))
            n++;
    return n;
}

/* What the reader found, for messages: the next token or "the end". */
static const char *found(const struct reader *r, char *buf, size_t size)
{
    if (!*r->p)
        return "the end";
    size_t n = 0;
    while (r->p[n] && r->p[n] != ',' && r->p[n] != ')' && r->p[n] != ' ' && n < 24)
        n++;
    if (!n)
        n = 1;
    snprintf(buf, size, "'%.*s'", (int)n, r->p);
    return buf;
}

static bool expect(struct reader *r, const char *lit)
{
    skip_ws(r);
    size_t n = strlen(lit);
    if (strncmp(r->p, lit, n) != 0)
        return false;
    r->p += n;
    return true;
}

struct decl {
    char name[64];
    fld_arg_kind kind;
    uint32_t flags;
    fld_arg_value def;
    char def_text[48];
};

/* A type: Tensor, Tensor!, Tensor(a!), each with an optional ?; int, float, bool, str. */
static int read_type(struct reader *r, struct decl *d)
{
    char buf[32];
    skip_ws(r);
    size_t n = ident(r);
    static const struct {
        const char *name;
        fld_arg_kind kind;
    } types[] = {{"Tensor", FLD_ARG_TENSOR},
                 {"int", FLD_ARG_INT},
                 {"float", FLD_ARG_FLOAT},
                 {"bool", FLD_ARG_BOOL},
                 {"str", FLD_ARG_STR}};
    d->kind = 0;
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (n == strlen(types[i].name) && strncmp(r->p, types[i].name, n) == 0)
            d->kind = types[i].kind;
    if (!d->kind)
        return bad(r, "expected a type (Tensor, int, float, bool, str), found %s",
                   found(r, buf, sizeof buf));
    r->p += n;
    d->flags = 0;
    if (d->kind == FLD_ARG_TENSOR) {
        if (*r->p == '!') {
            r->p++;
            d->flags |= FLD_ARG_WRITTEN;
        } else if (*r->p == '(') {
            const char *open = r->p++;
            while (*r->p >= 'a' && *r->p <= 'z')
                r->p++;
            if (r->p == open + 1)
                return bad(r, "expected an alias letter after 'Tensor(', found %s",
                           found(r, buf, sizeof buf));
            if (*r->p != '!')
                return bad(r,
                           "an alias annotation must say the tensor is written "
                           "('Tensor(a!)'), found %s",
                           found(r, buf, sizeof buf));
            r->p++;
            if (*r->p != ')')
                return bad(r, "expected ')' closing the alias annotation, found %s",
                           found(r, buf, sizeof buf));
            r->p++;
            d->flags |= FLD_ARG_WRITTEN;
        }
    }
    if (*r->p == '?') {
        if (d->kind != FLD_ARG_TENSOR)
            return bad(r, "only a tensor may be optional");
        r->p++;
        d->flags |= FLD_ARG_OPTIONAL;
    }
    if (ident_char(*r->p) || *r->p == '(' || *r->p == '!')
        return bad(r, "unexpected %s after the type", found(r, buf, sizeof buf));
    return FLD_OK;
}

/* The shortest "%.Ng" spelling of v that reads back as v. */
static void float_text(double v, char *buf, size_t size)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, size, "%.*g", prec, v);
        if (strtod(buf, NULL) == v)
            break;
    }
    if (!strpbrk(buf, ".eEni"))
        strncat(buf, ".0", size - strlen(buf) - 1);
}

static int read_default(struct reader *r, struct decl *d)
{
    char buf[32], lit[48];
    skip_ws(r);
    const char *start = r->p;
    size_t n = 0;
    while (ident_char(start[n]) || start[n] == '.' || start[n] == '-' || start[n] == '+')
        n++;
    if (!n || n >= sizeof lit)
        return bad(r, "expected a default value, found %s", found(r, buf, sizeof buf));
    memcpy(lit, start, n);
    lit[n] = '\0';
    char *end;
    switch (d->kind) {
    case FLD_ARG_TENSOR:
        if (strcmp(lit, "None") != 0 || !(d->flags & FLD_ARG_OPTIONAL))
            return bad(r,
                       "a tensor's only default is None, and only for an optional tensor "
                       "('Tensor? %s=None')",
                       d->name);
        d->def.tensor = NULL;
        break;
    case FLD_ARG_INT:
        errno = 0;
        d->def.i = strtoll(lit, &end, 10);
        if (*end || errno)
            return bad(r, "'%s' is not an int default", lit);
        snprintf(lit, sizeof lit, "%" PRId64, d->def.i);
        break;
    case FLD_ARG_FLOAT:
        errno = 0;
        d->def.f = strtod(lit, &end);
        if (*end || errno ||
            (lit[0] != '-' && lit[0] != '+' && lit[0] != '.' && (lit[0] < '0' || lit[0] > '9')))
            return bad(r, "'%s' is not a float default", lit);
        /* PyTorch's schemas have no spelling for them (nor read a subnormal number) */
        if (!isfinite(d->def.f) || (d->def.f != 0.0 && !isnormal(d->def.f)))
            return bad(r,
                       "'%s' is not a finite float default (inf, nan and subnormal numbers "
                       "cannot be defaults)",
                       lit);
        float_text(d->def.f, lit, sizeof lit);
        break;
    case FLD_ARG_BOOL:
        if (strcmp(lit, "True") != 0 && strcmp(lit, "False") != 0)
            return bad(r, "a bool's default is True or False, not '%s'", lit);
        d->def.b = lit[0] == 'T';
        break;
    default:
        return bad(r, "a str argument takes no default");
    }
    r->p = start + n;
    snprintf(d->def_text, sizeof d->def_text, "%s", lit);
    d->flags |= FLD_ARG_HAS_DEFAULT;
    return FLD_OK;
}

static int read_arg(struct reader *r, struct decl *d, const struct decl *prev, size_t n_prev)
{
    char buf[32];
    int rc = read_type(r, d);
    if (rc)
        return rc;
    skip_ws(r);
    size_t n = ident(r);
    if (!n)
        return bad(r, "expected an argument name, found %s", found(r, buf, sizeof buf));
    if (n >= sizeof d->name)
        return bad(r, "argument name longer than %d characters", (int)sizeof d->name - 1);
    memcpy(d->name, r->p, n);
    d->name[n] = '\0';
    if (reserved_name(d->name))
        return bad(r, "argument name '%s' is a Python keyword, which no binding can take", d->name);
    for (size_t i = 0; i < n_prev; i++)
        if (strcmp(prev[i].name, d->name) == 0)
            return bad(r, "argument name '%s' used twice", d->name);
    r->p += n;
    d->def_text[0] = '\0';
    if (expect(r, "=")) {
        rc = read_default(r, d);
        if (rc)
            return rc;
    } else if (n_prev && (prev[n_prev - 1].flags & FLD_ARG_HAS_DEFAULT)) {
        return bad(r, "argument '%s' has no default but follows one that has", d->name);
    }
    return FLD_OK;
}

static const char *kind_text(fld_arg_kind k)
{
    switch (k) {
    case FLD_ARG_TENSOR:
        return "Tensor";
    case FLD_ARG_INT:
        return "int";
    case FLD_ARG_FLOAT:
        return "float";
    case FLD_ARG_BOOL:
        return "bool";
    case FLD_ARG_STR:
        return "str";
    }
    return "?";
}

/* Appends to a fixed buffer; false when it is full. */
static bool put(char *buf, size_t size, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static bool put(char *buf, size_t size, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *len, size - *len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= size - *len)
        return false;
    *len += (size_t)n;
    return true;
}

/* Builds the result: one allocation for the struct, the declarations and every string. */
static int build(struct reader *r, const struct decl *d, size_t n, const char *returns,
                 const char *declared_by, struct fld_sig **out)
{
    char canon[4096];
    size_t len = 0;
    bool ok = put(canon, sizeof canon, &len, "(");
    char alias = 'a';
    for (size_t i = 0; ok && i < n; i++) {
        ok = put(canon, sizeof canon, &len, "%s%s", i ? ", " : "", kind_text(d[i].kind));
        if (ok && (d[i].flags & FLD_ARG_WRITTEN)) {
            if (alias > 'z')
                return bad(r, "more than 26 written tensors");
            ok = put(canon, sizeof canon, &len, "(%c!)", alias++);
        }
        if (ok && (d[i].flags & FLD_ARG_OPTIONAL))
            ok = put(canon, sizeof canon, &len, "?");
        if (ok)
            ok = put(canon, sizeof canon, &len, " %s", d[i].name);
        if (ok && (d[i].flags & FLD_ARG_HAS_DEFAULT))
            ok = put(canon, sizeof canon, &len, "=%s", d[i].def_text);
    }
    if (ok)
        ok = put(canon, sizeof canon, &len, ") -> %s", *returns ? returns : "()");
    if (!ok)
        return bad(r, "signature longer than %d characters", (int)sizeof canon - 1);
    size_t names = 0;
    for (size_t i = 0; i < n; i++)
        names += strlen(d[i].name) + 1;
    size_t size = sizeof(struct fld_sig) + n * sizeof(fld_arg_decl) + names + len + 1 +
                  strlen(r->op) + 1 + strlen(declared_by) + 1 + strlen(returns) + 1;
    struct fld_sig *s = calloc(1, size);
    if (!s) {
        snprintf(r->err, r->err_size, "op '%s': out of memory reading its signature", r->op);
        return FLD_ENOMEM;
    }
    fld_arg_decl *args = (fld_arg_decl *)(s + 1);
    char *text = (char *)(args + n);
    for (size_t i = 0; i < n; i++) {
        args[i].name = strcpy(text, d[i].name);
        text += strlen(text) + 1;
        args[i].kind = d[i].kind;
        args[i].flags = d[i].flags;
        args[i].default_value = d[i].def;
    }
    s->info.schema = memcpy(text, canon, len + 1);
    text += len + 1;
    s->info.op = strcpy(text, r->op);
    text += strlen(text) + 1;
    s->info.declared_by = strcpy(text, declared_by);
    text += strlen(text) + 1;
    s->info.returns = strcpy(text, returns);
    s->info.n_args = n;
    s->info.args = n ? args : NULL;
    *out = s;
    return FLD_OK;
}

int fld__sig_parse(const char *op, const char *text, bool allow_returns, const char *declared_by,
                   struct fld_sig **out, char *err, size_t err_size)
{
    *out = NULL;
    struct reader r = {op ? op : "(null)", text ? text : "", text ? text : "", err, err_size};
    if (!text)
        return snprintf(err, err_size, "op '%s': the signature is NULL", r.op), FLD_EINVAL;
    char buf[32];
    struct decl *d = calloc(MAX_ARGS, sizeof *d);
    if (!d)
        return snprintf(err, err_size, "op '%s': out of memory reading its signature", r.op),
               FLD_ENOMEM;
    size_t n = 0;
    int rc = FLD_OK;
    char returns[16] = "";
    if (!expect(&r, "(")) {
        rc =
            bad(&r, "expected '(' opening the argument list, found %s", found(&r, buf, sizeof buf));
        goto done;
    }
    skip_ws(&r);
    if (*r.p != ')') {
        for (;;) {
            if (n == MAX_ARGS) {
                rc = bad(&r, "more than %d arguments", MAX_ARGS);
                goto done;
            }
            if ((rc = read_arg(&r, &d[n], d, n)) != FLD_OK)
                goto done;
            n++;
            if (expect(&r, ","))
                continue;
            skip_ws(&r);
            if (*r.p != ')') {
                rc = bad(&r, "expected ',' or ')' after argument '%s', found %s", d[n - 1].name,
                         found(&r, buf, sizeof buf));
                goto done;
            }
            break;
        }
    }
    r.p++; /* ')' */
    if (!expect(&r, "->")) {
        rc = bad(&r, "expected '->' after the argument list, found %s", found(&r, buf, sizeof buf));
        goto done;
    }
    skip_ws(&r);
    const char *ret_at = r.p;
    if (expect(&r, "(") && expect(&r, ")")) {
        /* "()": nothing returned */
    } else {
        r.p = ret_at;
        struct decl ret;
        memset(&ret, 0, sizeof ret);
        skip_ws(&r);
        const char *at = r.p;
        if (!allow_returns) {
            rc = bad(&r,
                     "a declared op returns '()' (its outputs are the written tensors), "
                     "found %s",
                     found(&r, buf, sizeof buf));
            goto done;
        }
        if ((rc = read_type(&r, &ret)) != FLD_OK)
            goto done;
        snprintf(returns, sizeof returns, "%.*s", (int)(r.p - at), at);
    }
    skip_ws(&r);
    if (*r.p) {
        rc = bad(&r, "unexpected %s after the signature", found(&r, buf, sizeof buf));
        goto done;
    }
    rc = build(&r, d, n, returns, declared_by ? declared_by : "", out);
done:
    free(d);
    return rc;
}

void fld__sig_free(struct fld_sig *s)
{
    free(s);
}

static void device_text(const DLTensor *t, char *buf, size_t size)
{
    int dev = fld__device_index((int)t->device.device_type);
    if (dev >= 0)
        snprintf(buf, size, "%s:%d", fld__devices[dev].name, (int)t->device.device_id);
    else
        snprintf(buf, size, "device type %d:%d", (int)t->device.device_type,
                 (int)t->device.device_id);
}

int fld__sig_check(const struct fld_sig *s, const void *args, int *dev, int *dt)
{
    const fld_signature_info *in = &s->info;
    const fld_args *a = args;
    *dev = FLD_DEV_ANY;
    *dt = -1;
    if (!a)
        return fld__fail(FLD_EINVAL, "%s: args is NULL (the op's signature '%s' takes an fld_args)",
                         in->op, in->schema);
    if (a->count != in->n_args || (a->count && !a->arg))
        return fld__fail(FLD_EINVAL, "%s: fld_args holds %u argument%s%s, its signature '%s' %zu",
                         in->op, a->count, a->count == 1 ? "" : "s",
                         a->count && !a->arg ? " but arg is NULL" : "", in->schema, in->n_args);
    const DLTensor *first = NULL;
    const char *first_name = NULL;
    for (size_t i = 0; i < in->n_args; i++) {
        const fld_arg_decl *d = &in->args[i];
        const fld_arg *v = &a->arg[i];
        if (v->kind != (uint32_t)d->kind)
            return fld__fail(FLD_EINVAL,
                             "%s: argument %zu '%s' is tagged %u, its signature declares %s (%d)",
                             in->op, i, d->name, v->kind, kind_text(d->kind), (int)d->kind);
        if (d->kind == FLD_ARG_STR && !v->v.s)
            return fld__fail(FLD_EINVAL, "%s: str argument '%s' is NULL", in->op, d->name);
        if (d->kind != FLD_ARG_TENSOR)
            continue;
        const DLTensor *t = v->v.tensor;
        if (!t) {
            if (d->flags & FLD_ARG_OPTIONAL)
                continue;
            return fld__fail(FLD_EINVAL, "%s: tensor '%s' is NULL (not optional in '%s')", in->op,
                             d->name, in->schema);
        }
        if (t->ndim < 0 || t->ndim > 64 || (t->ndim > 0 && !t->shape))
            return fld__fail(FLD_EINVAL, "%s: tensor '%s' has %s", in->op, d->name,
                             t->ndim < 0 || t->ndim > 64 ? "an invalid rank" : "no shape array");
        if (!first) {
            first = t;
            first_name = d->name;
            *dev = fld__device_index((int)t->device.device_type);
            if (*dev < 0)
                return fld__fail(FLD_EINVAL, "%s: tensor '%s' is on unknown device type %d", in->op,
                                 d->name, (int)t->device.device_type);
        } else if (fld__device_index((int)t->device.device_type) != *dev ||
                   t->device.device_id != first->device.device_id) {
            char a1[48], a2[48];
            device_text(t, a1, sizeof a1);
            device_text(first, a2, sizeof a2);
            return fld__fail(FLD_EINVAL, "%s: tensor '%s' is on %s, tensor '%s' on %s", in->op,
                             d->name, a1, first_name, a2);
        }
        if (*dt < 0)
            *dt = fld_dtype_index(t->dtype);
    }
    return FLD_OK;
}
