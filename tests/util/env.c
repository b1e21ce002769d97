/* SPDX-License-Identifier: Apache-2.0 */
#include <stdlib.h>
#include <string.h>

#include "env.h"

extern char **environ;

bool tt_steers_fldispatch(const char *entry)
{
    static const char *const prefixes[] = {"VLLM_FL_", "HWLOC_"};
    static const char *const exact[] = {"USE_FLAGGEMS", "FLD_TEMPLATE_ENABLE"};
    size_t len = strcspn(entry, "=");
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++)
        if (strncmp(entry, prefixes[i], strlen(prefixes[i])) == 0 && len > strlen(prefixes[i]))
            return true;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strlen(exact[i]) == len && strncmp(entry, exact[i], len) == 0)
            return true;
    return false;
}

void tt_clear_fld_environment(void)
{
    /* unsetenv() rewrites environ: restart the scan after each removal. */
    for (int removed = 1; removed;) {
        removed = 0;
        for (char **e = environ; e && *e; e++) {
            const char *eq = strchr(*e, '=');
            size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
            if (!tt_steers_fldispatch(*e))
                continue;
            char name[256];
            if (len >= sizeof name)
                continue;
            memcpy(name, *e, len);
            name[len] = '\0';
            unsetenv(name);
            removed = 1;
            break;
        }
    }
}
