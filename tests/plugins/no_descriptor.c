/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Fixture: a valid shared object that is not a plugin. It exports a
 * look-alike symbol but no fld_plugin_entry, so the host must reject it
 * without calling anything.
 */
#include <stdio.h>
#include <stdlib.h>

#include <fldispatch/plugin.h>

__attribute__((visibility("default"))) int fld_plugin_entry_misspelt(void);
__attribute__((visibility("default"))) int fld_plugin_entry_misspelt(void)
{
    fprintf(stderr, "no_descriptor fixture: a function of a rejected plugin was called\n");
    abort();
}
