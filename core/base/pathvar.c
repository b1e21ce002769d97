/* SPDX-License-Identifier: Apache-2.0 */
/* Path variables: the one reader (see pathvar.h). */
#include <stdlib.h>

#include <fldispatch/fldispatch.h>

#include "log.h"
#include "parse.h"
#include "pathvar.h"

const char *fld__path_variable(const char *name)
{
    const char *v = secure_getenv(name);
    if (!v) {
        if (getenv(name))
            fld__log(FLD_LOG_WARNING,
                     "%s ignored: path variables are not read in a privileged (setuid/setgid) "
                     "process",
                     name);
        return NULL;
    }
    return fld__is_blank(v) ? NULL : v;
}
