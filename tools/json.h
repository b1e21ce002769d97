/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A tiny streaming JSON writer for the tool's --json output: it tracks
 * nesting and commas, escapes strings, and indents two spaces per level.
 *
 * Every document is an object that starts with "schema": JSON_SCHEMA_VERSION
 * (json_begin_document); docs/json-output.md describes the conventions and
 * docs/schemas/ holds one JSON Schema per command.
 *
 * Output is always valid UTF-8: a byte of a string that is not part of a
 * well-formed UTF-8 sequence (RFC 3629: no overlong forms, no surrogates,
 * nothing past U+10FFFF) is written as \ufffd, the replacement character,
 * one per byte. Control characters are escaped.
 */
#ifndef FLD_TOOLS_JSON_H
#define FLD_TOOLS_JSON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The "schema" number of every --json document; raised when a key changes meaning or goes. */
#define JSON_SCHEMA_VERSION 1
/*
 * bench [OP...]'s document has its own number: 2 when it gained the elements
 * and the CPU clock, 3 when "targets" went (bench/targets.py checks them).
 */
#define JSON_SCHEMA_BENCH_KERNELS 3

#define JSON_MAX_DEPTH 32

struct json_writer {
    FILE *f;
    int depth;
    bool has_items[JSON_MAX_DEPTH]; /* a value was written at this level: next needs a comma */
    bool after_key;                 /* a key was written: the value follows on the same line */
};

void json_init(struct json_writer *w, FILE *f);
/* json_init, the opening brace of the top-level object and its "schema" member. */
void json_begin_document(struct json_writer *w, FILE *f);
/* The same with another "schema" number (a document that changed on its own). */
void json_begin_document_schema(struct json_writer *w, FILE *f, int schema);
void json_begin_object(struct json_writer *w);
void json_end_object(struct json_writer *w);
void json_begin_array(struct json_writer *w);
void json_end_array(struct json_writer *w);
/* The key of the next value inside an object. */
void json_key(struct json_writer *w, const char *key);
/* NULL writes null. */
void json_string(struct json_writer *w, const char *s);
/* NULL and "" write null: for optional text such as a reason or a detail line. */
void json_text_or_null(struct json_writer *w, const char *s);
/*
 * The items of a list in one string, separated by any character of seps
 * (":" for search paths, "," for vendor lists, "|" for token orders), as an
 * array of strings; empty items are left out, surrounding blanks trimmed.
 * NULL writes null.
 */
void json_split(struct json_writer *w, const char *list, const char *seps);
void json_int(struct json_writer *w, long long v);
/* Non-finite values write null (JSON has no NaN or infinity). */
void json_double(struct json_writer *w, double v, int decimals);
void json_bool(struct json_writer *w, bool v);
void json_null(struct json_writer *w);
/* Ends the document with a newline. */
void json_finish(struct json_writer *w);

/* Writes s as a quoted, escaped JSON string (invalid UTF-8 replaced, see above). */
void json_write_escaped(FILE *f, const char *s);

/*
 * The length of the well-formed UTF-8 sequence at p (1 to 4), or 0 when the
 * byte at p does not start one (or *p is NUL).
 */
size_t json_utf8_sequence(const unsigned char *p);

#endif
