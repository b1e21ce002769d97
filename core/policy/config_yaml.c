/* SPDX-License-Identifier: Apache-2.0 */
/*
 * YAML files into a small tree, with libyaml's event API.
 *
 * The event API rather than libyaml's document loader because the loader
 * resolves aliases silently, and a policy file that says one thing in one
 * place and means it in another is what the strict schema is there to
 * prevent: anchors and aliases are rejected where they appear. The file is
 * read whole first so that a reader error (bad UTF-8), which libyaml reports
 * as a byte offset, can still be given as line:column.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include <fldispatch/fldispatch.h>

#include "config_tree.h"
#include "error.h"

#define MAX_DEPTH 64

#define TAG_STR  "tag:yaml.org,2002:str"
#define TAG_BOOL "tag:yaml.org,2002:bool"
#define TAG_SEQ  "tag:yaml.org,2002:seq"
#define TAG_MAP  "tag:yaml.org,2002:map"

void fld__yaml_free(struct fld_ynode *node)
{
    if (!node)
        return;
    for (size_t i = 0; i < node->n; i++)
        fld__yaml_free(node->kids[i]);
    free(node->kids);
    free(node->text);
    free(node);
}

const char *fld__ynode_describe(const struct fld_ynode *node, char *buf, size_t size)
{
    static const char *const bools[] = {"true", "false", "yes", "no", "on", "off"};
    if (!node)
        return "nothing";
    if (node->type == FLD_YNODE_SEQUENCE)
        return "a sequence";
    if (node->type == FLD_YNODE_MAPPING)
        return "a mapping";
    if (node->style == FLD_YSTYLE_PLAIN && !node->tag_str) {
        const char *t = node->text;
        if (!*t || strcmp(t, "~") == 0 || strcmp(t, "null") == 0 || strcmp(t, "Null") == 0 ||
            strcmp(t, "NULL") == 0)
            return "null";
        for (size_t i = 0; i < sizeof bools / sizeof bools[0]; i++) {
            if (strcasecmp(t, bools[i]) == 0) {
                snprintf(buf, size, "the boolean '%s'", t);
                return buf;
            }
        }
        snprintf(buf, size, "'%s'", t);
        return buf;
    }
    snprintf(buf, size, "the %s string '%s'",
             node->style == FLD_YSTYLE_BLOCK ? "block" : (node->tag_str ? "!!str" : "quoted"),
             node->text);
    return buf;
}

/* ------------------------------------------------------------------------ */
/* Reading the file                                                         */
/* ------------------------------------------------------------------------ */

enum fld_read_status fld__read_regular_file(const char *path, size_t max, char **data, size_t *len,
                                            int *err)
{
    struct stat st;
    char *buf = NULL;
    size_t cap = 0, n = 0;
    enum fld_read_status status = FLD_READ_OK;

    *data = NULL;
    *len = 0;
    *err = 0;
    /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return FLD_READ_OPEN;
    }
    if (fstat(fd, &st) != 0) {
        *err = errno;
        status = FLD_READ_OPEN;
        goto done;
    }
    if (S_ISDIR(st.st_mode)) {
        *err = EISDIR;
        status = FLD_READ_OPEN;
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        status = FLD_READ_NOT_REGULAR;
        goto done;
    }
    if (st.st_size > 0 && (unsigned long long)st.st_size > max) {
        status = FLD_READ_TOO_LARGE;
        goto done;
    }
    /* st_size is a hint only (files in /proc say 0, files can grow): read to EOF. */
    for (;;) {
        if (n == cap) {
            if (cap > max) {
                status = FLD_READ_TOO_LARGE;
                goto done;
            }
            size_t grown = cap ? 2 * cap : 4096;
            if (grown > max + 1)
                grown = max + 1;
            if (grown <= cap)
                grown = cap + 1;
            char *b = realloc(buf, grown);
            if (!b) {
                status = FLD_READ_NOMEM;
                goto done;
            }
            buf = b;
            cap = grown;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            *err = errno;
            status = FLD_READ_IO;
            goto done;
        }
        if (got == 0)
            break;
        n += (size_t)got;
    }
    if (n > max) {
        status = FLD_READ_TOO_LARGE;
        goto done;
    }
    if (!buf && !(buf = malloc(1))) {
        status = FLD_READ_NOMEM;
        goto done;
    }
done:
    close(fd);
    if (status != FLD_READ_OK) {
        free(buf);
        return status;
    }
    *data = buf;
    *len = n;
    return FLD_READ_OK;
}

int fld__read_config_file(const char *path, char **data, size_t *len)
{
    int err;
    switch (fld__read_regular_file(path, FLD_YAML_MAX_FILE_SIZE, data, len, &err)) {
    case FLD_READ_OK:
        return FLD_OK;
    case FLD_READ_OPEN:
        return fld__fail(FLD_ECONFIG, "cannot open '%s': %s", path, strerror(err));
    case FLD_READ_NOT_REGULAR:
        return fld__fail(FLD_ECONFIG, "cannot open '%s': not a regular file", path);
    case FLD_READ_TOO_LARGE:
        return fld__fail(FLD_ECONFIG, "cannot read '%s': larger than %u bytes", path,
                         FLD_YAML_MAX_FILE_SIZE);
    case FLD_READ_IO:
        return fld__fail(FLD_ECONFIG, "cannot read '%s': %s", path, strerror(err));
    case FLD_READ_NOMEM:
    default:
        return fld__fail(FLD_ENOMEM, "reading '%s': out of memory", path);
    }
}

/* Line and column (1-based, in bytes) of a byte offset. */
static void offset_position(const char *data, size_t len, size_t offset, unsigned *line,
                            unsigned *column)
{
    *line = 1;
    *column = 1;
    for (size_t i = 0; i < offset && i < len; i++) {
        if (data[i] == '\n') {
            (*line)++;
            *column = 1;
        } else {
            (*column)++;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Events into nodes                                                        */
/* ------------------------------------------------------------------------ */

struct builder {
    const char *label;
    const char *second_document;
    struct fld_ynode *root;
    struct fld_ynode *stack[MAX_DEPTH];
    size_t depth;
    int documents;
};

static int node_error(const struct builder *b, const yaml_mark_t *mark, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int node_error(const struct builder *b, const yaml_mark_t *mark, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fld__fail(FLD_ECONFIG, "%s:%zu:%zu: %s", b->label, mark->line + 1, mark->column + 1,
                     msg);
}

static int check_anchor(const struct builder *b, const yaml_event_t *ev, const yaml_char_t *anchor)
{
    if (!anchor)
        return FLD_OK;
    return node_error(b, &ev->start_mark,
                      "anchors and aliases are not supported (anchor '&%s'); write the value out",
                      (const char *)anchor);
}

static int check_tag(const struct builder *b, const yaml_event_t *ev, const yaml_char_t *tag,
                     const char *allowed, const char *shorthand)
{
    if (!tag || strcmp((const char *)tag, allowed) == 0)
        return FLD_OK;
    return node_error(b, &ev->start_mark, "unsupported tag '%s' (valid: no tag, or %s)",
                      (const char *)tag, shorthand);
}

static struct fld_ynode *new_node(enum fld_ynode_type type, const yaml_event_t *ev)
{
    struct fld_ynode *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->type = type;
    n->line = (unsigned)ev->start_mark.line + 1;
    n->column = (unsigned)ev->start_mark.column + 1;
    return n;
}

/* Hangs n under the open collection (or makes it the root); takes ownership. */
static int attach(struct builder *b, struct fld_ynode *n)
{
    if (b->depth == 0) {
        b->root = n;
        return FLD_OK;
    }
    struct fld_ynode *parent = b->stack[b->depth - 1];
    if (parent->n == parent->cap) {
        size_t cap = parent->cap ? parent->cap * 2 : 8;
        struct fld_ynode **kids = realloc(parent->kids, cap * sizeof *kids);
        if (!kids) {
            fld__yaml_free(n);
            return fld__fail(FLD_ENOMEM, "%s: out of memory", b->label);
        }
        parent->kids = kids;
        parent->cap = cap;
    }
    parent->kids[parent->n++] = n;
    return FLD_OK;
}

static int on_scalar(struct builder *b, const yaml_event_t *ev)
{
    int rc = check_anchor(b, ev, ev->data.scalar.anchor);
    const char *tag = (const char *)ev->data.scalar.tag;
    bool tag_bool = false, tag_str = false;

    if (rc)
        return rc;
    /* "!" is the non-specific tag of a quoted scalar: a string. */
    if (tag && strcmp(tag, TAG_BOOL) == 0)
        tag_bool = true;
    else if (tag && (strcmp(tag, TAG_STR) == 0 || strcmp(tag, "!") == 0))
        tag_str = true;
    else if (tag)
        return node_error(b, &ev->start_mark, "unsupported tag '%s' (valid: no tag, !!str, !!bool)",
                          tag);
    if (memchr(ev->data.scalar.value, '\0', ev->data.scalar.length))
        return node_error(b, &ev->start_mark, "a NUL character inside a string");

    struct fld_ynode *n = new_node(FLD_YNODE_SCALAR, ev);
    if (!n)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", b->label);
    n->text = strndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
    if (!n->text) {
        free(n);
        return fld__fail(FLD_ENOMEM, "%s: out of memory", b->label);
    }
    switch (ev->data.scalar.style) {
    case YAML_SINGLE_QUOTED_SCALAR_STYLE:
        n->style = FLD_YSTYLE_SINGLE;
        break;
    case YAML_DOUBLE_QUOTED_SCALAR_STYLE:
        n->style = FLD_YSTYLE_DOUBLE;
        break;
    case YAML_LITERAL_SCALAR_STYLE:
    case YAML_FOLDED_SCALAR_STYLE:
        n->style = FLD_YSTYLE_BLOCK;
        break;
    default:
        n->style = FLD_YSTYLE_PLAIN;
    }
    n->tag_bool = tag_bool;
    n->tag_str = tag_str;
    return attach(b, n);
}

static int on_collection_start(struct builder *b, const yaml_event_t *ev, enum fld_ynode_type type)
{
    bool seq = type == FLD_YNODE_SEQUENCE;
    int rc =
        check_anchor(b, ev, seq ? ev->data.sequence_start.anchor : ev->data.mapping_start.anchor);
    if (!rc)
        rc = check_tag(b, ev, seq ? ev->data.sequence_start.tag : ev->data.mapping_start.tag,
                       seq ? TAG_SEQ : TAG_MAP, seq ? "!!seq" : "!!map");
    if (rc)
        return rc;
    if (b->depth == MAX_DEPTH)
        return node_error(b, &ev->start_mark, "nested deeper than %d levels", MAX_DEPTH);
    struct fld_ynode *n = new_node(type, ev);
    if (!n)
        return fld__fail(FLD_ENOMEM, "%s: out of memory", b->label);
    if ((rc = attach(b, n)) != FLD_OK)
        return rc;
    b->stack[b->depth++] = n;
    return FLD_OK;
}

/* One event; *done at the end of the stream. */
static int on_event(struct builder *b, const yaml_event_t *ev, bool *done)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (b->documents++ > 0)
            return node_error(b, &ev->start_mark, "%s", b->second_document);
        return FLD_OK;
    case YAML_SCALAR_EVENT:
        return on_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT:
        return on_collection_start(b, ev, FLD_YNODE_SEQUENCE);
    case YAML_MAPPING_START_EVENT:
        return on_collection_start(b, ev, FLD_YNODE_MAPPING);
    case YAML_SEQUENCE_END_EVENT:
    case YAML_MAPPING_END_EVENT:
        if (b->depth)
            b->depth--;
        return FLD_OK;
    case YAML_ALIAS_EVENT:
        return node_error(
            b, &ev->start_mark,
            "anchors and aliases are not supported (alias '*%s'); write the value out",
            (const char *)ev->data.alias.anchor);
    case YAML_STREAM_END_EVENT:
        *done = true;
        return FLD_OK;
    default:
        return FLD_OK;
    }
}

static int syntax_error(const struct builder *b, const yaml_parser_t *parser, const char *data,
                        size_t len)
{
    unsigned line, column;
    const char *problem = parser->problem ? parser->problem : "unknown error";

    switch (parser->error) {
    case YAML_MEMORY_ERROR:
        return fld__fail(FLD_ENOMEM, "%s: out of memory", b->label);
    case YAML_READER_ERROR:
        offset_position(data, len, parser->problem_offset, &line, &column);
        return fld__fail(FLD_ECONFIG,
                         "%s:%u:%u: cannot read the file: %s (a YAML file is UTF-8 text)", b->label,
                         line, column, problem);
    default:
        break;
    }
    line = (unsigned)parser->problem_mark.line + 1;
    column = (unsigned)parser->problem_mark.column + 1;
    if (parser->context)
        return fld__fail(FLD_ECONFIG, "%s:%u:%u: YAML syntax error: %s (%s, line %zu column %zu)",
                         b->label, line, column, problem, parser->context,
                         parser->context_mark.line + 1, parser->context_mark.column + 1);
    return fld__fail(FLD_ECONFIG, "%s:%u:%u: YAML syntax error: %s", b->label, line, column,
                     problem);
}

/*
 * A policy file, platform file or manifest is UTF-8. libyaml would switch
 * to UTF-16 on a UTF-16 byte order mark (and misread UTF-32 as UTF-16), so
 * these marks are refused by name; the parser is then told the input is
 * UTF-8, and its reader refuses any byte that is not (with the position).
 * A UTF-8 mark is allowed and skipped.
 */
static const struct {
    const char *bytes;
    size_t len;
    const char *encoding;
} foreign_marks[] = {
    /* UTF-32LE first: its mark starts with UTF-16LE's. */
    {"\xff\xfe\x00\x00", 4, "UTF-32LE"},
    {"\x00\x00\xfe\xff", 4, "UTF-32BE"},
    {"\xff\xfe", 2, "UTF-16LE"},
    {"\xfe\xff", 2, "UTF-16BE"},
};

static int check_encoding(const char *data, size_t len, const char *label, size_t *skip)
{
    *skip = 0;
    for (size_t i = 0; i < sizeof foreign_marks / sizeof foreign_marks[0]; i++)
        if (len >= foreign_marks[i].len &&
            memcmp(data, foreign_marks[i].bytes, foreign_marks[i].len) == 0)
            return fld__fail(FLD_ECONFIG,
                             "%s:1:1: cannot read the file: it starts with the byte order mark "
                             "of %s; a YAML file here is UTF-8 text (convert it, e.g. with "
                             "'iconv -f %s -t UTF-8')",
                             label, foreign_marks[i].encoding, foreign_marks[i].encoding);
    if (len >= 3 && memcmp(data, "\xef\xbb\xbf", 3) == 0)
        *skip = 3;
    return FLD_OK;
}

int fld__yaml_parse(const char *data, size_t len, const char *label, const char *second_document,
                    struct fld_ynode **root)
{
    struct builder b = {
        .label = label,
        .second_document = second_document
                               ? second_document
                               : "a second YAML document (a policy file holds exactly one)",
    };
    yaml_parser_t parser;
    bool done = false;
    int rc;

    *root = NULL;
    size_t skip;
    /* libyaml insists on a non-NULL input, even an empty one. */
    if (!data)
        data = "", len = 0;
    if ((rc = check_encoding(data, len, b.label, &skip)) != FLD_OK)
        return rc;
    data += skip; /* positions count from after a UTF-8 mark, as the characters do */
    len -= skip;
    if (!yaml_parser_initialize(&parser))
        return fld__fail(FLD_ENOMEM, "%s: out of memory", b.label);
    yaml_parser_set_input_string(&parser, (const unsigned char *)data, len);
    yaml_parser_set_encoding(&parser, YAML_UTF8_ENCODING);
    while (!done) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = syntax_error(&b, &parser, data, len);
            goto fail;
        }
        rc = on_event(&b, &ev, &done);
        yaml_event_delete(&ev);
        if (rc)
            goto fail;
    }
    yaml_parser_delete(&parser);
    *root = b.root;
    return FLD_OK;
fail:
    yaml_parser_delete(&parser);
    fld__yaml_free(b.root);
    return rc;
}

int fld__yaml_load(const char *path, const char *label, struct fld_ynode **root)
{
    char *data = NULL;
    size_t len = 0;
    int rc;

    *root = NULL;
    if ((rc = fld__read_config_file(path, &data, &len)) != FLD_OK)
        return rc;
    rc = fld__yaml_parse(data, len, label ? label : path, NULL, root);
    free(data);
    return rc;
}
