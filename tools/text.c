/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Outside text in the tool's output: plugin names and versions, file and
 * directory names, configuration values and sources come from files, the
 * environment and plugins. Printed as they are, an escape sequence in one
 * would drive the reader's terminal and a newline would split a table row.
 * Every such value goes through cli_text(), which escapes it as the
 * library's messages and logs are escaped (fld__escape(): control
 * characters and invalid UTF-8 as \xNN, C1 and bidirectional controls as
 * \uNNNN); --json escapes by JSON's own rules (json.c).
 */
#include <stdlib.h>
#include <string.h>

#include <fldispatch/internal/tool_api.h>

#include "cli.h"

/* One printf may quote several values: each call gets the next of these
 * buffers, reused round robin (the tool is single-threaded). */
#define TEXT_SLOTS 8

static struct {
    char *buf;
    size_t size;
} slots[TEXT_SLOTS];
static unsigned next_slot;

const char *cli_text(const char *s)
{
    if (s == NULL)
        return "(null)";
    size_t need = 4 * strlen(s) + 1; /* the most fld__escape() writes: \xNN per byte */
    unsigned i = next_slot++ % TEXT_SLOTS;
    if (slots[i].size < need) {
        char *grown = realloc(slots[i].buf, need);
        if (grown == NULL)
            return "(out of memory)";
        slots[i].buf = grown;
        slots[i].size = need;
    }
    return fld__escape(slots[i].buf, slots[i].size, s);
}
