#include "json.h"

#include <math.h>

void json_init(struct json_writer *w, FILE *f)
{
    w->f = f;
    w->depth = 0;
    w->has_items[0] = false;
    w->after_key = false;
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

void json_write_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
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
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f); /* UTF-8 passes through unchanged */
        }
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
