/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Strict parsers for the value grammars of the policy: booleans, comma
 * lists, tokens and per-op orders. Every failure returns FLD_ECONFIG with a
 * message that names `what` (the variable or key being parsed), the bad
 * fragment and the valid values.
 */
#ifndef FLD_CORE_PARSE_H
#define FLD_CORE_PARSE_H

#include <stdbool.h>
#include <stddef.h>

/* Room for a value's source: a variable name or "file:line" (truncated). */
#define FLD_SOURCE_LEN 160

/* A list of strings, owned. `set` distinguishes "no list" from an empty one. */
struct fld_strlist {
    bool set;
    size_t n;
    char **items;
};

enum fld_token_kind {
    FLD_TOKEN_FLAGOS,      /* "flagos": DEFAULT impls */
    FLD_TOKEN_VENDOR,      /* "vendor": any VENDOR impl */
    FLD_TOKEN_VENDOR_NAME, /* "vendor:NAME": VENDOR impls of that vendor (NAME kept lowercase) */
    FLD_TOKEN_REFERENCE,   /* "reference": REFERENCE impls */
    FLD_TOKEN_IMPL         /* "impl:ID": the impl with that impl_id */
};

struct fld_token {
    enum fld_token_kind kind;
    char *arg; /* vendor name or impl id; NULL otherwise */
};

/* The token order of one op. */
struct fld_order {
    char *op;
    size_t n;
    size_t cap; /* room in tokens (fld__order_append_token() grows it by doubling) */
    struct fld_token *tokens;
    /* Where this op's order came from: "VLLM_FL_OP_CONFIG", "VLLM_FL_PER_OP",
     * "/etc/x.yaml:12", "scoped override", ... (empty for the default orders). */
    char source[FLD_SOURCE_LEN];
};

struct fld_orders {
    size_t n;
    struct fld_order *items; /* sorted by op name, unique */
};

/*
 * The white space of every value grammar and variable: space, \t, \n, \r,
 * \f, \v, whatever the locale (names must not depend on LC_CTYPE).
 */
static inline bool fld__is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
/* Whether s is NULL, empty or only white space: how a blank variable reads as unset. */
bool fld__is_blank(const char *s);
/* The first non-space character of s[0..*n), and in *n the length without the trailing white
 * space (0 for a blank one). */
const char *fld__trim(const char *s, size_t *n);

/* A number of seconds ("30", "0.5", "1e3"; trimmed) into *out: false for no number, text after
 * it, or a value that is not finite. The caller checks the range and words the message. */
bool fld__parse_seconds(const char *value, double *out);
/* Accepts 1/0, true/false, yes/no, on/off (case-insensitive, trimmed). */
int fld__parse_bool(const char *what, const char *value, bool *out);
/* An on/off environment switch: 1/true or 0/false (case-insensitive, trimmed). */
int fld__parse_switch(const char *what, const char *value, bool *out);
/* A 0/1 flag (VLLM_FL_STRICT): nothing else. */
int fld__parse_flag(const char *what, const char *value, bool *out);
/* "flagos" | "vendor" | "reference" (case-insensitive, trimmed) into *out (0, 1, 2 as enum
 * fld_prefer). */
int fld__parse_prefer(const char *what, const char *value, int *out);
/* Comma-separated names, trimmed; empty items are an error; duplicates dropped. A NULL or blank
 * value gives an unset list. */
int fld__parse_name_list(const char *what, const char *value, struct fld_strlist *out);
/* One token. */
int fld__parse_token(const char *what, const char *text, struct fld_token *out);
/*
 * The most different tokens one order may hold. Every token of an order is
 * tried against the op's candidates when a chain is built, and an op has at
 * most 64 candidates per call, so a longer order can only be a generated
 * mistake; past it an order is FLD_ECONFIG (repeats do not count: they are
 * dropped first).
 */
#define FLD_ORDER_MAX_TOKENS 1024

/* "a|b|c" into a token list: no empty tokens; a repeated token is dropped (it can select
 * nothing the first one did not), then at most FLD_ORDER_MAX_TOKENS remain. Linear in the
 * text, but for the sort that finds repeats. */
int fld__parse_token_list(const char *what, const char *op, const char *text,
                          struct fld_order *out);
/* "op1=a|b;op2=c" (trailing ';' allowed; empty fragment, missing '=', empty op, repeated op are
 * errors). */
int fld__parse_per_op(const char *what, const char *spec, struct fld_orders *out);

/* Lowercases ASCII letters of s in place (vendor names compare without case). */
void fld__ascii_lower(char *s);
/* Lowercases every item of l and sorts it again (vendor lists). */
void fld__strlist_lower(struct fld_strlist *l);

void fld__strlist_free(struct fld_strlist *l);
int fld__strlist_copy(struct fld_strlist *dst, const struct fld_strlist *src);
bool fld__strlist_has(const struct fld_strlist *l, const char *s);
/* Adds the items of add to dst (dst becomes set). */
int fld__strlist_merge(struct fld_strlist *dst, const struct fld_strlist *add);
/*
 * Appends tok to o (taking its arg), growing o->tokens by doubling (o->cap).
 * Repeats are not looked for here: fld__order_finish() drops them once the
 * order is read. FLD_ENOMEM, with tok's arg freed.
 */
int fld__order_append_token(struct fld_order *o, struct fld_token *tok);
/*
 * Completes an order read token by token: drops every repeated token (the
 * first occurrence stays where it was; kinds compare exactly, vendor names
 * are already lowercase, impl ids compare with case) in O(n log n), then
 * FLD_ECONFIG naming what and op when more than FLD_ORDER_MAX_TOKENS
 * different tokens remain; FLD_ENOMEM. On error o is unchanged.
 */
int fld__order_finish(const char *what, const char *op, struct fld_order *o);
void fld__order_free(struct fld_order *o);
void fld__orders_free(struct fld_orders *o);
int fld__orders_copy(struct fld_orders *dst, const struct fld_orders *src);
/* Replaces or adds the orders of add into dst. */
int fld__orders_merge(struct fld_orders *dst, const struct fld_orders *add);
const struct fld_order *fld__orders_find(const struct fld_orders *o, const char *op);
/* Writes "a|b|vendor:x" into buf; returns the full length. */
size_t fld__order_format(const struct fld_order *o, char *buf, size_t size);
const char *fld__token_kind_name(enum fld_token_kind k);

/*
 * Building a list or a set of orders item by item: append everything, then
 * put it in order once. n appends and one sort cost O(n log n) in all, where
 * keeping the array sorted on every insert cost O(n^2) (a 16 MB policy file
 * took minutes).
 */
/* Appends s to l (which becomes set), growing l->items by doubling; *cap is the room in
 * l->items (0 for an empty list). Takes ownership of s on success only. l is unsorted until
 * fld__strlist_sort_unique(). */
int fld__strlist_append(struct fld_strlist *l, size_t *cap, char *s);
/* Sorts l and drops repeated items: the form the other fld__strlist_ functions expect. */
void fld__strlist_sort_unique(struct fld_strlist *l);
/* Appends *order to o, growing o->items by doubling; *cap as above. Takes ownership of *order
 * on success only. o is unsorted until fld__orders_sort(). */
int fld__orders_append(struct fld_orders *o, size_t *cap, struct fld_order *order);
/* Sorts o by op. The ops must be unique: rule out repeats with fld__first_clash() first. */
void fld__orders_sort(struct fld_orders *o);
/*
 * Among n named items in input order (a NULL name takes no part): *at is the index of the
 * first item whose name an earlier item has too, and *earlier the index of the first such
 * earlier item; both are n when no name repeats. With sides non-NULL (0 or 1 per item) only
 * an earlier item of the other side counts. FLD_OK, or FLD_ENOMEM.
 */
int fld__first_clash(const char *const *names, const unsigned char *sides, size_t n, size_t *at,
                     size_t *earlier);

#endif
