/*
 * A tiny streaming JSON writer for the tool's --json output: it tracks
 * nesting and commas, escapes strings, and indents two spaces per level.
 */
#ifndef FLD_TOOLS_JSON_H
#define FLD_TOOLS_JSON_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define JSON_MAX_DEPTH 32

struct json_writer {
    FILE *f;
    int depth;
    bool has_items[JSON_MAX_DEPTH]; /* a value was written at this level: next needs a comma */
    bool after_key;                 /* a key was written: the value follows on the same line */
};

void json_init(struct json_writer *w, FILE *f);
void json_begin_object(struct json_writer *w);
void json_end_object(struct json_writer *w);
void json_begin_array(struct json_writer *w);
void json_end_array(struct json_writer *w);
/* The key of the next value inside an object. */
void json_key(struct json_writer *w, const char *key);
/* NULL writes null. */
void json_string(struct json_writer *w, const char *s);
void json_int(struct json_writer *w, long long v);
/* Non-finite values write null (JSON has no NaN or infinity). */
void json_double(struct json_writer *w, double v, int decimals);
void json_bool(struct json_writer *w, bool v);
void json_null(struct json_writer *w);
/* Ends the document with a newline. */
void json_finish(struct json_writer *w);

/* Writes s as a quoted, escaped JSON string. */
void json_write_escaped(FILE *f, const char *s);

#endif
