/* SPDX-License-Identifier: Apache-2.0 */
#include "json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void json_init(struct json_writer *w, FILE *f)
{
    w->f = f;
    w->depth = 0;
    w->has_items[0] = false;
    w->after_key = false;
}

void json_begin_document_schema(struct json_writer *w, FILE *f, int schema)
{
    json_init(w, f);
    json_begin_object(w);
    json_key(w, "schema");
    json_int(w, schema);
}

void json_begin_document(struct json_writer *w, FILE *f)
{
    json_begin_document_schema(w, f, JSON_SCHEMA_VERSION);
}

static void indent(struct json_writer *w)
{
    fputc('\n', w->f);
    for (int i = 0; i < w->depth; i++)
        fputs("  ", w->f);
}

/* Separator and indentation before a value or a key. */
static void before_item(struct json_writer *w)
{
    if (w->after_key) {
        w->after_key = false;
        return;
    }
    if (w->depth == 0)
        return;
    if (w->has_items[w->depth])
        fputc(',', w->f);
    w->has_items[w->depth] = true;
    indent(w);
}

static void open_level(struct json_writer *w, char c)
{
    before_item(w);
    fputc(c, w->f);
    if (w->depth + 1 < JSON_MAX_DEPTH)
        w->depth++;
    w->has_items[w->depth] = false;
}

static void close_level(struct json_writer *w, char c)
{
    bool had = w->has_items[w->depth];
    if (w->depth > 0)
        w->depth--;
    if (had)
        indent(w);
    fputc(c, w->f);
}

void json_begin_object(struct json_writer *w)
{
    open_level(w, '{');
}

void json_end_object(struct json_writer *w)
{
    close_level(w, '}');
}

void json_begin_array(struct json_writer *w)
{
    open_level(w, '[');
}

void json_end_array(struct json_writer *w)
{
    close_level(w, ']');
}

void json_key(struct json_writer *w, const char *key)
{
    before_item(w);
    json_write_escaped(w->f, key);
    fputs(": ", w->f);
    w->after_key = true;
}

size_t json_utf8_sequence(const unsigned char *p)
{
    unsigned char c = p[0];
    if (c == 0)
        return 0;
    if (c < 0x80)
        return 1;
    /* The range of the second byte depends on the first (RFC 3629 section 4). */
    unsigned char lo = 0x80, hi = 0xbf;
    size_t len;
    if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        if (c == 0xe0)
            lo = 0xa0; /* no overlong forms */
        else if (c == 0xed)
            hi = 0x9f; /* no UTF-16 surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        if (c == 0xf0)
            lo = 0x90;
        else if (c == 0xf4)
            hi = 0x8f; /* nothing past U+10FFFF */
    } else {
        return 0;
    }
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

void json_write_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        switch (*p) {
        case '"':
            fputs("\\\"", f);
            break;
        case '\\':
            fputs("\\\\", f);
            break;
        case '\n':
            fputs("\\n", f);
            break;
        case '\r':
            fputs("\\r", f);
            break;
        case '\t':
            fputs("\\t", f);
            break;
        default:
            if (*p < 0x20) {
                fprintf(f, "\\u%04x", *p);
            } else {
                size_t len = json_utf8_sequence(p);
                if (len == 0) {
                    fputs("\\ufffd", f); /* one per byte that is not valid UTF-8 */
                    len = 1;
                } else {
                    fwrite(p, 1, len, f);
                }
                p += len;
                continue;
            }
        }
        p++;
    }
    fputc('"', f);
}

void json_string(struct json_writer *w, const char *s)
{
    if (!s) {
        json_null(w);
        return;
    }
    before_item(w);
    json_write_escaped(w->f, s);
}

void json_text_or_null(struct json_writer *w, const char *s)
{
    json_string(w, s && *s ? s : NULL);
}

void json_split(struct json_writer *w, const char *list, const char *seps)
{
    if (!list) {
        json_null(w);
        return;
    }
    json_begin_array(w);
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, seps);
        size_t start = 0, end = len;
        while (start < end && (p[start] == ' ' || p[start] == '\t'))
            start++;
        while (end > start && (p[end - 1] == ' ' || p[end - 1] == '\t'))
            end--;
        if (end > start) {
            char *item = strndup(p + start, end - start);
            if (item) {
                json_string(w, item);
                free(item);
            }
        }
        if (p[len] == '\0')
            break;
        p += len + 1;
    }
    json_end_array(w);
}

void json_int(struct json_writer *w, long long v)
{
    before_item(w);
    fprintf(w->f, "%lld", v);
}

void json_double(struct json_writer *w, double v, int decimals)
{
    if (!isfinite(v)) {
        json_null(w);
        return;
    }
    before_item(w);
    fprintf(w->f, "%.*f", decimals, v);
}

void json_bool(struct json_writer *w, bool v)
{
    before_item(w);
    fputs(v ? "true" : "false", w->f);
}

void json_null(struct json_writer *w)
{
    before_item(w);
    fputs("null", w->f);
}

void json_finish(struct json_writer *w)
{
    fputc('\n', w->f);
    fflush(w->f);
}
