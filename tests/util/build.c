/* SPDX-License-Identifier: Apache-2.0 */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "build.h"
#include "harness.h"

const char *tt_make(void)
{
    return tt_make_in(tt_build_dir());
}

const char *tt_make_in(const char *build_dir)
{
    static char cmd[3 * PATH_MAX];
    const char *san = getenv("FLD_SANITIZE");
    ck_assert_msg(strchr(tt_src_dir(), '\'') == NULL && strchr(build_dir, '\'') == NULL,
                  "paths with quotes are not supported");
    snprintf(
        cmd, sizeof cmd,
        "env -u MAKEFLAGS -u MAKELEVEL -u MFLAGS -u PREFIX -u LIBDIR -u BINDIR -u DATADIR "
        "-u INCLUDEDIR -u DESTDIR -u V -u B make --no-print-directory -C '%s' B='%s' SANITIZE='%s'",
        tt_src_dir(), build_dir, san != NULL ? san : "");
    return cmd;
}

/* One #define of gen/fld_paths.h with suffix removed from its value. */
static void configured_dir(const char *macro, const char *suffix, char *out)
{
    char file[PATH_MAX], line[PATH_MAX + 128], prefix[128];
    snprintf(file, sizeof file, "%s/gen/fld_paths.h", tt_build_dir());
    FILE *f = fopen(file, "r");
    ck_assert_msg(f != NULL, "cannot read %s: %s", file, strerror(errno));
    bool ok = false;
    snprintf(prefix, sizeof prefix, "#define %s \"", macro);
    while (!ok && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, prefix, strlen(prefix)) != 0)
            continue;
        char *value = line + strlen(prefix);
        char *end = strchr(value, '"');
        if (end == NULL)
            break;
        *end = '\0';
        size_t n = strlen(value), ns = strlen(suffix);
        if (n > ns && strcmp(value + n - ns, suffix) == 0) {
            value[n - ns] = '\0';
            snprintf(out, PATH_MAX, "%s", value);
            ok = true;
        }
    }
    fclose(f);
    ck_assert_msg(ok, "%s: no %s ending in '%s'", file, macro, suffix);
}

void tt_configured_dirs(char *libdir, char *datadir, char *bindir)
{
    configured_dir("FLD_INSTALL_PLUGIN_DIR", "/fldispatch/plugins", libdir);
    configured_dir("FLD_INSTALL_CONFIG_DIR", "/fldispatch/config", datadir);
    configured_dir("FLD_INSTALL_BIN_DIR", "", bindir);
}

void tt_install_dir_args(char *out, size_t size)
{
    char libdir[PATH_MAX], datadir[PATH_MAX], bindir[PATH_MAX];
    tt_configured_dirs(libdir, datadir, bindir);
    snprintf(out, size, "LIBDIR='%s' DATADIR='%s' BINDIR='%s'", libdir, datadir, bindir);
}

static int run_v(const char *log, bool must_pass, const char *fmt, va_list ap)
{
    char cmd[16384], full[16384 + PATH_MAX + 16];
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    snprintf(full, sizeof full, "{ %s ; } >>'%s' 2>&1", cmd, log);
    int st = system(full);
    int status = st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
    if (!must_pass || status == 0)
        return status;
    char text[4096] = "";
    FILE *f = fopen(log, "r");
    if (f != NULL) {
        fseek(f, 0, SEEK_END);
        long size = ftell(f);
        fseek(f, size > (long)sizeof text - 1 ? size - (long)sizeof text + 1 : 0, SEEK_SET);
        size_t n = fread(text, 1, sizeof text - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    ck_abort_msg("command failed (status %d): %s\n%s", status, cmd, text);
    return status;
}

void tt_sh(const char *log, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    run_v(log, true, fmt, ap);
    va_end(ap);
}

int tt_sh_status(const char *log, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int status = run_v(log, false, fmt, ap);
    va_end(ap);
    return status;
}

char *tt_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap + 1);
    ck_assert_ptr_nonnull(buf);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            cap *= 2;
            char *bigger = realloc(buf, cap + 1);
            if (bigger == NULL)
                free(buf);
            ck_assert_ptr_nonnull(bigger);
            buf = bigger;
        }
    }
    fclose(f);
    buf[n] = '\0';
    if (size != NULL)
        *size = n;
    return buf;
}
