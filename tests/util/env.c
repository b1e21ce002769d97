#include <stdlib.h>
#include <string.h>

#include "env.h"

extern char **environ;

static int steers_fldispatch(const char *entry, size_t name_len)
{
    static const char *const exact[] = {"USE_FLAGGEMS", "HWLOC_XMLFILE", "HWLOC_FORCE_XMLFILE"};
    if (name_len >= 8 && strncmp(entry, "VLLM_FL_", 8) == 0)
        return 1;
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        if (strlen(exact[i]) == name_len && strncmp(entry, exact[i], name_len) == 0)
            return 1;
    return 0;
}

void tt_clear_fld_environment(void)
{
    /* unsetenv() rewrites environ: restart the scan after each removal. */
    for (int removed = 1; removed;) {
        removed = 0;
        for (char **e = environ; e && *e; e++) {
            const char *eq = strchr(*e, '=');
            size_t len = eq ? (size_t)(eq - *e) : strlen(*e);
            if (!steers_fldispatch(*e, len))
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
