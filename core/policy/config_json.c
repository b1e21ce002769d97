/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strict JSON (RFC 8259) into the same small tree as YAML files, for
 * VLLM_FL_OP_CONFIG and the counters files `fldispatch stats` merges.
 *
 * That file is JSON in vllm-plugin-FL, read with Python's json module; read
 * as YAML (a superset) it accepted comments, single quotes, unquoted words
 * and block mappings that the Python system refuses, so the same file meant
 * something here and was an error there. This reader takes exactly JSON:
 * no comments, no trailing commas, no single quotes, no byte-order mark,
 * valid UTF-8, escapes checked, nothing but white space after the value.
 * Every error is "label:line:column: JSON syntax error: ..." (or "nested
 * deeper than 64 levels"), columns counted in characters.
 *
 * Strings become double-quoted scalars (FLD_YSTYLE_DOUBLE); numbers, true,
 * false and null become plain scalars holding their text, so the schema
 * code can tell a string from anything else.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fldispatch/fldispatch.h>

#include "config_tree.h"
#include "error.h"

#define MAX_DEPTH 64

struct json_reader {
    const char *label;
    const unsigned char *p, *end;
    unsigned line, column; /* of *p, 1-based */
    int depth;
};

static int fail_at(const struct json_reader *r, unsigned line, unsigned column, const char *fmt,
                   ...) __attribute__((format(printf, 4, 5)));

static int fail_at(const struct json_reader *r, unsigned line, unsigned column, const char *fmt,
                   ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fld__fail(FLD_ECONFIG, "%s:%u:%u: JSON syntax error: %s", r->label, line, column, msg);
}

static int fail_here(const struct json_reader *r, const char *what)
{
    if (r->p >= r->end)
        return fail_at(r, r->line, r->column, "unexpected end of file, expected %s", what);
    unsigned char c = *r->p;
    if (c >= 0x20 && c < 0x7f)
        return fail_at(r, r->line, r->column, "unexpected '%c', expected %s", c, what);
    return fail_at(r, r->line, r->column, "unexpected byte 0x%02x, expected %s", c, what);
}

/* Length of the UTF-8 sequence at p (1-4), or 0 when it is not valid UTF-8. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0];
    size_t n;
    unsigned cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    /* Overlong forms, surrogates and values past U+10FFFF are not UTF-8. */
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
        (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

/* Advances over one character (n bytes) that is not a newline. */
static void advance(struct json_reader *r, size_t n)
{
    r->p += n;
    r->column++;
}

static void skip_space(struct json_reader *r)
{
    while (r->p < r->end) {
        unsigned char c = *r->p;
        if (c == '\n') {
            r->p++;
            r->line++;
            r->column = 1;
        } else if (c == ' ' || c == '\t' || c == '\r') {
            advance(r, 1);
        } else {
            break;
        }
    }
}

static struct fld_ynode *node_new(const struct json_reader *r, enum fld_ynode_type type,
                                  unsigned line, unsigned column)
{
    struct fld_ynode *n = calloc(1, sizeof *n);
    if (!n) {
        fld__fail(FLD_ENOMEM, "%s: out of memory", r->label);
        return NULL;
    }
    n->type = type;
    n->line = line;
    n->column = column;
    return n;
}

static int add_kid(const struct json_reader *r, struct fld_ynode *parent, struct fld_ynode *kid)
{
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? 2 * parent->cap : 4;
        struct fld_ynode **kids = realloc(parent->kids, cap * sizeof *kids);
        if (!kids) {
            fld__yaml_free(kid);
            return fld__fail(FLD_ENOMEM, "%s: out of memory", r->label);
        }
        parent->kids = kids;
        parent->cap = cap;
    }
    parent->kids[parent->n++] = kid;
    return FLD_OK;
}

/* A growable byte buffer for string contents. */
struct buf {
    char *s;
    size_t n, cap;
};

static bool buf_put(struct buf *b, const void *data, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *g = realloc(b->s, cap);
        if (!g)
            return false;
        b->s = g;
        b->cap = cap;
    }
    memcpy(b->s + b->n, data, n);
    b->n += n;
    b->s[b->n] = '\0';
    return true;
}

static bool buf_put_code_point(struct buf *b, unsigned cp)
{
    unsigned char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (unsigned char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (unsigned char)(0xc0 | (cp >> 6));
        u[1] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (unsigned char)(0xe0 | (cp >> 12));
        u[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (unsigned char)(0xf0 | (cp >> 18));
        u[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (unsigned char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    return buf_put(b, u, n);
}

/* Four hex digits after "\u"; -1 if they are not. */
static long hex4(const unsigned char *p, const unsigned char *end)
{
    long v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        unsigned char c = p[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

static int read_string(struct json_reader *r, struct fld_ynode **out)
{
    unsigned line = r->line, column = r->column;
    struct buf b = {NULL, 0, 0};
    struct fld_ynode *n;
    advance(r, 1); /* the opening quote */
    if (!buf_put(&b, "", 0))
        goto oom;
    for (;;) {
        if (r->p >= r->end) {
            free(b.s);
            return fail_at(r, line, column, "unterminated string");
        }
        unsigned char c = *r->p;
        if (c == '"') {
            advance(r, 1);
            break;
        }
        if (c < 0x20) {
            free(b.s);
            return fail_at(r, r->line, r->column,
                           "control character 0x%02x in a string (write it as \\u%04x)", c, c);
        }
        if (c != '\\') {
            size_t len = utf8_len(r->p, r->end);
            if (!len) {
                free(b.s);
                return fail_at(r, r->line, r->column, "invalid UTF-8 byte 0x%02x", c);
            }
            if (!buf_put(&b, r->p, len))
                goto oom;
            advance(r, len);
            continue;
        }
        unsigned eline = r->line, ecol = r->column;
        if (r->end - r->p < 2) {
            free(b.s);
            return fail_at(r, line, column, "unterminated string");
        }
        unsigned char e = r->p[1];
        static const char simple_in[] = "\"\\/bfnrt", simple_out[] = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(simple_in, e) : NULL;
        if (k) {
            if (!buf_put(&b, &simple_out[k - simple_in], 1))
                goto oom;
            advance(r, 1);
            advance(r, 1);
            continue;
        }
        if (e != 'u') {
            free(b.s);
            return fail_at(
                r, eline, ecol,
                "invalid escape '\\%c' (valid: \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)",
                e >= 0x20 && e < 0x7f ? e : '?');
        }
        long hi = hex4(r->p + 2, r->end);
        if (hi < 0) {
            free(b.s);
            return fail_at(r, eline, ecol, "\\u must be followed by four hex digits");
        }
        unsigned cp = (unsigned)hi;
        size_t used = 6;
        if (hi >= 0xdc00 && hi <= 0xdfff) {
            free(b.s);
            return fail_at(r, eline, ecol, "lone low surrogate \\u%04lx", hi);
        }
        if (hi >= 0xd800 && hi <= 0xdbff) {
            long lo = r->end - r->p >= 12 && r->p[6] == '\\' && r->p[7] == 'u'
                          ? hex4(r->p + 8, r->end)
                          : -1;
            if (lo < 0xdc00 || lo > 0xdfff) {
                free(b.s);
                return fail_at(r, eline, ecol,
                               "high surrogate \\u%04lx not followed by a low surrogate", hi);
            }
            cp = 0x10000 + (((unsigned)hi - 0xd800) << 10) + ((unsigned)lo - 0xdc00);
            used = 12;
        }
        if (cp == 0) {
            free(b.s);
            return fail_at(r, eline, ecol, "\\u0000 (NUL) is not allowed in a string here");
        }
        if (!buf_put_code_point(&b, cp))
            goto oom;
        for (size_t i = 0; i < used; i++)
            advance(r, 1);
    }
    if (!(n = node_new(r, FLD_YNODE_SCALAR, line, column))) {
        free(b.s);
        return FLD_ENOMEM;
    }
    n->text = b.s;
    n->style = FLD_YSTYLE_DOUBLE;
    *out = n;
    return FLD_OK;
oom:
    free(b.s);
    return fld__fail(FLD_ENOMEM, "%s: out of memory", r->label);
}

static bool is_digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

/* number = [ "-" ] int [ frac ] [ exp ], as RFC 8259 has it. */
static int read_number(struct json_reader *r, struct fld_ynode **out)
{
    unsigned line = r->line, column = r->column;
    const unsigned char *start = r->p, *p = r->p, *end = r->end;
    if (p < end && *p == '-')
        p++;
    if (p >= end || !is_digit(*p))
        return fail_at(r, line, column, "invalid number (digits expected after '-')");
    if (*p == '0') {
        p++;
        if (p < end && is_digit(*p))
            return fail_at(r, line, column, "invalid number (no leading zeros in JSON)");
    } else {
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && *p == '.') {
        p++;
        if (p >= end || !is_digit(*p))
            return fail_at(r, line, column, "invalid number (digits expected after '.')");
        while (p < end && is_digit(*p))
            p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || !is_digit(*p))
            return fail_at(r, line, column, "invalid number (digits expected in the exponent)");
        while (p < end && is_digit(*p))
            p++;
    }
    struct fld_ynode *n = node_new(r, FLD_YNODE_SCALAR, line, column);
    if (!n)
        return FLD_ENOMEM;
    if (!(n->text = strndup((const char *)start, (size_t)(p - start)))) {
        free(n);
        return fld__fail(FLD_ENOMEM, "%s: out of memory", r->label);
    }
    n->style = FLD_YSTYLE_PLAIN;
    for (const unsigned char *q = start; q < p; q++)
        advance(r, 1);
    *out = n;
    return FLD_OK;
}

static int read_word(struct json_reader *r, struct fld_ynode **out)
{
    static const char *const words[] = {"true", "false", "null"};
    for (size_t i = 0; i < 3; i++) {
        size_t len = strlen(words[i]);
        if ((size_t)(r->end - r->p) >= len && memcmp(r->p, words[i], len) == 0) {
            struct fld_ynode *n = node_new(r, FLD_YNODE_SCALAR, r->line, r->column);
            if (!n)
                return FLD_ENOMEM;
            if (!(n->text = strdup(words[i]))) {
                free(n);
                return fld__fail(FLD_ENOMEM, "%s: out of memory", r->label);
            }
            n->style = FLD_YSTYLE_PLAIN;
            n->tag_bool = i < 2;
            for (size_t k = 0; k < len; k++)
                advance(r, 1);
            *out = n;
            return FLD_OK;
        }
    }
    return fail_here(r, "a JSON value (an object, array, string, number, true, false or null)");
}

static int read_value(struct json_reader *r, struct fld_ynode **out);

/* An object or an array; *r->p is '{' or '['. */
static int read_collection(struct json_reader *r, struct fld_ynode **out)
{
    bool object = *r->p == '{';
    const char close = object ? '}' : ']';
    struct fld_ynode *n =
        node_new(r, object ? FLD_YNODE_MAPPING : FLD_YNODE_SEQUENCE, r->line, r->column);
    int rc;
    if (!n)
        return FLD_ENOMEM;
    if (++r->depth > MAX_DEPTH) {
        rc = fld__fail(FLD_ECONFIG, "%s:%u:%u: nested deeper than %d levels", r->label, r->line,
                       r->column, MAX_DEPTH);
        goto fail;
    }
    advance(r, 1);
    skip_space(r);
    if (r->p < r->end && *r->p == close) {
        advance(r, 1);
        goto done;
    }
    for (;;) {
        struct fld_ynode *kid = NULL;
        skip_space(r);
        if (object) {
            if (r->p >= r->end || *r->p != '"') {
                rc = fail_here(r, "a string key in double quotes");
                goto fail;
            }
            if ((rc = read_string(r, &kid)) != FLD_OK || (rc = add_kid(r, n, kid)) != FLD_OK)
                goto fail;
            skip_space(r);
            if (r->p >= r->end || *r->p != ':') {
                rc = fail_here(r, "':' after the key");
                goto fail;
            }
            advance(r, 1);
            skip_space(r);
        }
        if ((rc = read_value(r, &kid)) != FLD_OK || (rc = add_kid(r, n, kid)) != FLD_OK)
            goto fail;
        skip_space(r);
        if (r->p < r->end && *r->p == ',') {
            advance(r, 1);
            skip_space(r);
            if (r->p < r->end && *r->p == close) {
                rc = fail_at(r, r->line, r->column, "trailing ',' before '%c' (not JSON)", close);
                goto fail;
            }
            continue;
        }
        if (r->p < r->end && *r->p == close) {
            advance(r, 1);
            break;
        }
        rc = fail_here(r, object ? "',' or '}'" : "',' or ']'");
        goto fail;
    }
done:
    r->depth--;
    *out = n;
    return FLD_OK;
fail:
    fld__yaml_free(n);
    return rc;
}

static int read_value(struct json_reader *r, struct fld_ynode **out)
{
    skip_space(r);
    if (r->p >= r->end)
        return fail_here(r, "a JSON value");
    unsigned char c = *r->p;
    if (c == '{' || c == '[')
        return read_collection(r, out);
    if (c == '"')
        return read_string(r, out);
    if (c == '-' || is_digit(c))
        return read_number(r, out);
    if (c == '/' || c == '#')
        return fail_at(r, r->line, r->column, "comments are not JSON");
    if (c == '\'')
        return fail_at(r, r->line, r->column, "single quotes are not JSON (use double quotes)");
    return read_word(r, out);
}

/*
 * Strict JSON (RFC 8259: no comments, trailing commas, single quotes or
 * byte-order mark; valid UTF-8) into the same tree: strings are
 * FLD_YSTYLE_DOUBLE scalars, numbers/true/false/null plain scalars with
 * their text (true/false with tag_bool). *root is NULL for a file with no
 * value. FLD_ECONFIG with "label:line:column: message"; FLD_ENOMEM.
 */
static int json_parse(const char *data, size_t len, const char *label, struct fld_ynode **root)
{
    struct json_reader r = {
        label, (const unsigned char *)data, (const unsigned char *)data + len, 1, 1, 0};
    *root = NULL;
    if (len >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0)
        return fail_at(&r, 1, 1, "byte-order mark at the start (JSON text has none)");
    skip_space(&r);
    if (r.p >= r.end)
        return FLD_OK; /* no value: the caller words "empty file" */
    struct fld_ynode *n;
    int rc = read_value(&r, &n);
    if (rc)
        return rc;
    skip_space(&r);
    if (r.p < r.end) {
        fld__yaml_free(n);
        return fail_here(&r, "the end of the file after the JSON value");
    }
    *root = n;
    return FLD_OK;
}

int fld__json_load(const char *path, const char *label, struct fld_ynode **root)
{
    char *data = NULL;
    size_t len = 0;
    *root = NULL;
    int rc = fld__read_config_file(path, &data, &len);
    if (rc)
        return rc;
    rc = json_parse(data, len, label ? label : path, root);
    free(data);
    return rc;
}

const char *fld__json_describe(const struct fld_ynode *node, char *buf, size_t size)
{
    if (!node)
        return "nothing";
    if (node->type == FLD_YNODE_SEQUENCE)
        return "an array";
    if (node->type == FLD_YNODE_MAPPING)
        return "an object";
    if (node->style == FLD_YSTYLE_DOUBLE)
        snprintf(buf, size, "the string \"%s\"", node->text);
    else if (strcmp(node->text, "null") == 0)
        return "null";
    else if (node->tag_bool)
        snprintf(buf, size, "%s", node->text);
    else
        snprintf(buf, size, "the number %s", node->text);
    return buf;
}
