/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The tree of a configuration document and its readers: config_yaml.c
 * builds it from libyaml's events (policy files, config.c; the manifest,
 * manifest.c), config_json.c from strict JSON
 * (VLLM_FL_OP_CONFIG's file); both read files through
 * fld__read_regular_file(). What a document means is its reader's: this
 * header knows no policy and includes no module header, so the manifest
 * reads its file without reaching the policy through here.
 */
#ifndef FLD_CORE_CONFIG_TREE_H
#define FLD_CORE_CONFIG_TREE_H

#include <stdbool.h>
#include <stddef.h>

/* ------------------------------------------------------------------------ */
/* YAML documents as a small tree                                           */
/* ------------------------------------------------------------------------ */

enum fld_ynode_type { FLD_YNODE_SCALAR, FLD_YNODE_SEQUENCE, FLD_YNODE_MAPPING };

enum fld_yscalar_style {
    FLD_YSTYLE_PLAIN,  /* unquoted: may be a boolean or null */
    FLD_YSTYLE_SINGLE, /* 'x' */
    FLD_YSTYLE_DOUBLE, /* "x" (the only JSON string) */
    FLD_YSTYLE_BLOCK   /* | or > */
};

struct fld_ynode {
    enum fld_ynode_type type;
    unsigned line, column; /* 1-based (libyaml's marks are 0-based) */
    /* Scalars: the text (NUL-terminated, no embedded NUL), its style, and
     * whether an explicit !!str or !!bool tag decided its type. */
    char *text;
    enum fld_yscalar_style style;
    bool tag_str, tag_bool;
    /* Sequences: the items. Mappings: key, value, key, value, ... */
    size_t n, cap; /* cap: room in kids, grown by doubling */
    struct fld_ynode **kids;
};

/*
 * Parses the YAML (or JSON) file at path into a tree. *root is NULL for a
 * stream without a document (an empty or comments-only file). Anchors,
 * aliases, tags other than the standard ones, more than one document and
 * nesting deeper than 64 levels are errors. FLD_ECONFIG with
 * "label:line:column: message" (syntax errors) or "cannot open 'path':
 * strerror"; FLD_ENOMEM.
 */
int fld__yaml_load(const char *path, const char *label, struct fld_ynode **root);
void fld__yaml_free(struct fld_ynode *node);

/*
 * Like fld__yaml_load, for text already in memory (data need not be
 * NUL-terminated). second_document is the message for a second document
 * (NULL: the policy file's). Depth, anchor, alias and tag rules as there;
 * reader errors (bad UTF-8) as "label:line:column".
 */
int fld__yaml_parse(const char *data, size_t len, const char *label, const char *second_document,
                    struct fld_ynode **root);

/* Why fld__read_regular_file failed; the caller words the message. */
enum fld_read_status {
    FLD_READ_OK,
    FLD_READ_OPEN,        /* open() failed: *err is its errno (EISDIR for a directory) */
    FLD_READ_NOT_REGULAR, /* a FIFO, socket or device: reading it could block forever */
    FLD_READ_TOO_LARGE,   /* more than max bytes */
    FLD_READ_IO,          /* read() failed: *err is its errno */
    FLD_READ_NOMEM
};

/*
 * Reads the regular file at path whole (at most max bytes) into *data
 * (malloc'd, never NULL, not NUL-terminated) and *len. Opened
 * without blocking, so a FIFO named where a config file belongs is refused
 * instead of waiting for a writer while the caller holds a lock.
 */
enum fld_read_status fld__read_regular_file(const char *path, size_t max, char **data, size_t *len,
                                            int *err);

/* The size limit fld__yaml_load applies: configuration files are a few kilobytes. */
#define FLD_YAML_MAX_FILE_SIZE (16u << 20)

/* fld__read_regular_file with FLD_YAML_MAX_FILE_SIZE, its failures worded:
 * "cannot open 'path': ...", "cannot read 'path': ..." (FLD_ECONFIG), FLD_ENOMEM. */
int fld__read_config_file(const char *path, char **data, size_t *len);

int fld__json_load(const char *path, const char *label, struct fld_ynode **root);
/* "an object", "an array", "the string \"x\"", "the number 3", "true", "null". */
const char *fld__json_describe(const struct fld_ynode *node, char *buf, size_t size);

/* "a mapping", "a sequence", "the quoted string 'x'", "the boolean 'on'", "null", ... */
const char *fld__ynode_describe(const struct fld_ynode *node, char *buf, size_t size);

#endif
