/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The build, the install and the test runner: what the Makefile,
 * .ci/deps.sh and tests/run.sh promise, checked by running them.
 *
 *   paths    make install PREFIX=X compiles X into the library (and only
 *            the files that use it are rebuilt); make is quiet, V=1 is not;
 *            the build tree named by a relative or an absolute path is one
 *            tree (nothing rebuilt, the GPU kernels included)
 *   static   libfldispatch.a finds the installed plugins, or says at
 *            WARNING why it cannot
 *   install  the layout (no example plugin among the plugins, its source
 *            under the docs), fldispatch.pc with Requires.private; the
 *            README's C program, built with its pkg-config line against a
 *            fresh prefix, starts without LD_LIBRARY_PATH
 *   runner   tests load the build tree's library whatever LD_LIBRARY_PATH
 *            says; a program's log is printed only when it fails; several
 *            suites of one program are labelled; the closing line counts
 *            the Python tests
 *   deps     a missing package set stops make with one apt-get line; the
 *            README lists every set
 *
 * Builds go to private trees under a temporary directory; the running build
 * tree is only installed from, with the directories it was configured with.
 */
#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fldispatch/fldispatch.h>

#include "util/build.h"
#include "util/files.h"
#include "util/harness.h"

#define CLIP "%.3000s"

/* A private temporary directory, by its real path (fld_plugin_path() and
 * the messages print real paths). */
static const char *tmpdir(void)
{
    static char real[PATH_MAX];
    const char *dir = tt_make_tmpdir("build");
    ck_assert_msg(realpath(dir, real) != NULL, "realpath(%s): %s", dir, strerror(errno));
    return real;
}

static char *read_text(const char *dir, const char *name)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return tt_read_file(path, NULL);
}

static void write_file(const char *path, mode_t mode, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot create %s: %s", path, strerror(errno));
    ck_assert(fputs(text, f) >= 0);
    ck_assert(fclose(f) == 0);
    ck_assert_msg(chmod(path, mode) == 0, "chmod %s: %s", path, strerror(errno));
}

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

/* Whether the file holds the bytes of text (a binary file too). */
static bool file_holds(const char *path, const char *text)
{
    size_t n;
    char *data = tt_read_file(path, &n);
    bool found = memmem(data, n, text, strlen(text)) != NULL;
    free(data);
    return found;
}

static int count_lines(const char *text)
{
    int n = 0;
    for (const char *p = text; *p; p++)
        n += *p == '\n';
    return n;
}

/* dir (absolute) as a path relative to the source tree, where make -C runs. */
static void relative_to_src(char *out, size_t size, const char *dir)
{
    char src[PATH_MAX];
    ck_assert_msg(realpath(tt_src_dir(), src) != NULL, "realpath(%s)", tt_src_dir());
    size_t used = 0;
    out[0] = '\0';
    for (const char *p = src; *p && used < size; p++)
        if (*p == '/' && p[1] != '\0')
            used += (size_t)snprintf(out + used, size - used, "../");
    ck_assert(used < size);
    snprintf(out + used, size - used, "%s", dir + 1);
}

/* ------------------------------------------------------------------------ */
/* paths                                                                    */
/* ------------------------------------------------------------------------ */

START_TEST(test_install_dirs_compiled_in)
{
    const char *tmp = tmpdir();
    char tree[PATH_MAX], prefix[PATH_MAX], log[PATH_MAX], lib[PATH_MAX], archive[PATH_MAX];
    char want[PATH_MAX + 64];
    snprintf(tree, sizeof tree, "%s/b", tmp);
    snprintf(prefix, sizeof prefix, "%s/prefix", tmp);
    snprintf(lib, sizeof lib, "%s/lib/libfldispatch.so.0", tree);
    snprintf(archive, sizeof archive, "%s/lib/libfldispatch.a", tree);

    /* A plain make: the default prefix, one short line per step. */
    snprintf(log, sizeof log, "%s/make1.log", tmp);
    tt_sh(log, "%s lib", tt_make_in(tree));
    char *out = read_text(tmp, "make1.log");
    ck_assert_msg(strstr(out, "  CC      core/registry/discovery.c\n") != NULL,
                  "make does not print 'CC core/registry/discovery.c':\n" CLIP, out);
    ck_assert_msg(strstr(out, "-fvisibility") == NULL, "make printed command lines:\n" CLIP, out);
    free(out);
    ck_assert(file_holds(lib, "/usr/local/lib/fldispatch/plugins"));

    /* make PREFIX=X after it (V=1: whole command lines): X is compiled in,
     * and only the files that include the generated header are rebuilt. */
    snprintf(log, sizeof log, "%s/make2.log", tmp);
    tt_sh(log, "%s lib PREFIX='%s' V=1", tt_make_in(tree), prefix);
    out = read_text(tmp, "make2.log");
    ck_assert_msg(strstr(out, "-fvisibility=hidden") && strstr(out, "core/registry/discovery.c"),
                  "V=1 did not print the compiler's command line for core/registry/discovery.c:\n" CLIP,
                  out);
    ck_assert_msg(strstr(out, "core/registry/registry.c") == NULL,
                  "core/registry/registry.c (which does not use the install paths) was rebuilt:\n" CLIP,
                  out);
    free(out);
    snprintf(want, sizeof want, "%s/lib/fldispatch/plugins", prefix);
    ck_assert_msg(file_holds(lib, want), "%s does not hold '%s'", lib, want);
    ck_assert_msg(file_holds(archive, want), "%s does not hold '%s'", archive, want);
    snprintf(want, sizeof want, "%s/share/fldispatch/config", prefix);
    ck_assert_msg(file_holds(lib, want), "%s does not hold '%s'", lib, want);
    snprintf(want, sizeof want, "%s/bin", prefix);
    ck_assert_msg(file_holds(lib, want), "%s does not hold '%s'", lib, want);
    ck_assert_msg(!file_holds(lib, "/usr/local/lib/fldispatch/plugins"),
                  "%s still holds the old plugin directory", lib);

    /* The same PREFIX again: nothing is rebuilt. */
    struct stat before, after;
    ck_assert_int_eq(stat(lib, &before), 0);
    snprintf(log, sizeof log, "%s/make3.log", tmp);
    tt_sh(log, "%s lib PREFIX='%s'", tt_make_in(tree), prefix);
    ck_assert_int_eq(stat(lib, &after), 0);
    out = read_text(tmp, "make3.log");
    ck_assert_msg(strstr(out, "  CC ") == NULL && strstr(out, "  LD ") == NULL,
                  "an unchanged PREFIX rebuilt:\n" CLIP, out);
    free(out);
    ck_assert(before.st_mtim.tv_sec == after.st_mtim.tv_sec &&
              before.st_mtim.tv_nsec == after.st_mtim.tv_nsec);

    /* The same tree by a relative path (as a plain make in the source tree
     * names build/, where the tests name it by its absolute path): nothing
     * is rebuilt either. */
    char rel[2 * PATH_MAX];
    relative_to_src(rel, sizeof rel, tree);
    snprintf(log, sizeof log, "%s/make4.log", tmp);
    tt_sh(log, "%s lib PREFIX='%s'", tt_make_in(rel), prefix);
    out = read_text(tmp, "make4.log");
    ck_assert_msg(strstr(out, "  CC ") == NULL && strstr(out, "  LD ") == NULL,
                  "B=%s (the same tree as B=%s) rebuilt:\n" CLIP, rel, tree, out);
    free(out);
}
END_TEST

/*
 * The GPU kernels' objects depend on a stamp of the compiler's command; a
 * make with B=<absolute path> and one with B=<relative path> of the same
 * tree must give the same stamp, or the next plain make after make check
 * recompiles the kernels (minutes of nvcc). A stand-in toolkit (CUDA_HOME)
 * whose nvcc counts its calls shows it where no CUDA is installed too.
 */
START_TEST(test_gpu_stamp_ignores_build_dir_spelling)
{
    const char *tmp = tmpdir();
    char tree[PATH_MAX], rel[2 * PATH_MAX], cuda[PATH_MAX], bin[PATH_MAX], lib64[PATH_MAX];
    char path[PATH_MAX + 32], log[PATH_MAX], calls[PATH_MAX], script[2 * PATH_MAX];
    snprintf(tree, sizeof tree, "%s/b", tmp);
    relative_to_src(rel, sizeof rel, tree);
    tt_make_subdir(cuda, tmp, "cuda", 0755);
    tt_make_subdir(bin, cuda, "bin", 0755);
    tt_make_subdir(lib64, cuda, "lib64", 0755);
    snprintf(calls, sizeof calls, "%s/nvcc-calls", tmp);
    snprintf(script, sizeof script,
             "#!/bin/sh\n"
             "echo \"$*\" >>'%s'\n"
             "while [ $# -gt 1 ]; do [ \"$1\" = -o ] && : >\"$2\"; shift; done\n",
             calls);
    snprintf(path, sizeof path, "%s/nvcc", bin);
    write_file(path, 0755, script);
    snprintf(path, sizeof path, "%s/libcudart_static.a", lib64);
    write_file(path, 0644, "");

    const char *goal = "obj/plugins/cuda/cuda_kernels.o";
    snprintf(log, sizeof log, "%s/absolute.log", tmp);
    tt_sh(log, "%s CUDA_HOME='%s' '%s/%s'", tt_make_in(tree), cuda, tree, goal);
    char *n = read_text(tmp, "nvcc-calls");
    ck_assert_msg(count_lines(n) == 1, "the stand-in nvcc was not called once:\n" CLIP, n);
    free(n);
    snprintf(log, sizeof log, "%s/relative.log", tmp);
    tt_sh(log, "%s CUDA_HOME='%s' '%s/%s'", tt_make_in(rel), cuda, rel, goal);
    char *out = read_text(tmp, "relative.log");
    n = read_text(tmp, "nvcc-calls");
    ck_assert_msg(count_lines(n) == 1 && strstr(out, "NVCC") == NULL,
                  "B=%s recompiled the kernels built with B=%s:\n" CLIP "\nnvcc calls:\n" CLIP,
                  rel, tree, out, n);
    free(n);
    free(out);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* static                                                                   */
/* ------------------------------------------------------------------------ */

/* Runs a static host with the default search path; its stdout and stderr. */
static void run_host(const char *tmp, const char *host, char **out, char **err)
{
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/hosts.log", tmp);
    tt_sh(log, "env -u VLLM_FL_PLUGIN_DIR -u VLLM_FL_PLUGIN_MODULES '%s/%s' >'%s/out' 2>'%s/err'",
          tmp, host, tmp, tmp);
    *out = read_text(tmp, "out");
    *err = read_text(tmp, "err");
}

START_TEST(test_static_library_plugins)
{
    const char *tmp = tmpdir();
    const char *src = tt_src_dir();
    const char *san = getenv("FLD_SANITIZE");
    char tree[PATH_MAX], prefix[PATH_MAX], plugdir[PATH_MAX], log[PATH_MAX];
    char from[PATH_MAX], to[PATH_MAX + 32], line[3 * PATH_MAX], sanflags[256] = "";
    snprintf(tree, sizeof tree, "%s/b", tmp);
    snprintf(prefix, sizeof prefix, "%s/prefix", tmp);
    snprintf(log, sizeof log, "%s/build.log", tmp);
    tt_sh(log, "%s lib PREFIX='%s'", tt_make_in(tree), prefix);

    /* The installed layout: the library, and the build's cpu plugin in the
     * plugin directory compiled into libfldispatch.a. */
    char libdir[PATH_MAX], fld[PATH_MAX];
    tt_make_subdir(libdir, tmp, "prefix", 0755);
    tt_make_subdir(libdir, prefix, "lib", 0755);
    tt_make_subdir(fld, libdir, "fldispatch", 0755);
    tt_make_subdir(plugdir, fld, "plugins", 0755);
    snprintf(from, sizeof from, "%s/lib/libfldispatch.so.0", tree);
    snprintf(to, sizeof to, "%s/libfldispatch.so.0", libdir);
    tt_copy_file(from, to, 0755);
    snprintf(from, sizeof from, "%s/lib/fldispatch/plugins/fld-cpu.so", tt_build_dir());
    snprintf(to, sizeof to, "%s/fld-cpu.so", plugdir);
    tt_copy_file(from, to, 0755);

    if (san != NULL && san[0] != '\0')
        snprintf(sanflags, sizeof sanflags, "-fsanitize=%s", san);
    const char *hosts[] = {"host", "host_rdynamic"};
    for (int i = 0; i < 2; i++)
        tt_sh(log,
              "cc -std=c11 %s %s -I'%s/include' -o '%s/%s' '%s/tests/static_link/static_host.c' "
              "'%s/lib/libfldispatch.a' $(pkg-config --libs yaml-0.1 hwloc) -ldl -lm "
              "-pthread",
              sanflags, i ? "-rdynamic" : "", src, tmp, hosts[i], src, tree);

    /* Not exported: the plugin would bind to another copy; skipped, and said. */
    char *out, *err;
    run_host(tmp, "host", &out, &err);
    snprintf(line, sizeof line, "path %s\n", plugdir);
    ck_assert_msg(strstr(out, line) != NULL, "search path is not the compiled-in one:\n" CLIP, out);
    snprintf(line, sizeof line,
             "plugin fld-cpu.so skipped %s/fld-cpu.so | this copy of libfldispatch is linked "
             "statically into %s/host, which does not export the library's functions",
             plugdir, tmp);
    ck_assert_msg(strstr(out, line) != NULL, "no 'skipped' record for the plugin:\n" CLIP, out);
    ck_assert_msg(strstr(out, "-rdynamic") != NULL, "the fix is not named:\n" CLIP, out);
    ck_assert_msg(strstr(out, "rms_norm reference.c\n") != NULL, CLIP, out);
    ck_assert_msg(strstr(err, "[WARNING]") && strstr(err, "fld-cpu.so skipped"),
                  "no WARNING for the skipped plugin:\n" CLIP, err);
    free(out);
    free(err);

    /* -rdynamic: the plugin's calls reach the program's copy; it loads. */
    run_host(tmp, "host_rdynamic", &out, &err);
    snprintf(line, sizeof line, "plugin cpu loaded %s/fld-cpu.so | \n", plugdir);
    ck_assert_msg(strstr(out, line) != NULL, "cpu not loaded:\n" CLIP "\n" CLIP, out, err);
    ck_assert_msg(strstr(out, "rms_norm vendor.cpu\n") != NULL, CLIP, out);
    ck_assert_msg(strstr(err, "skipped") == NULL, CLIP, err);
    free(out);
    free(err);

    /* The compiled-in directory is gone: a WARNING names it. */
    snprintf(to, sizeof to, "%s.gone", plugdir);
    ck_assert_int_eq(rename(plugdir, to), 0);
    run_host(tmp, "host_rdynamic", &out, &err);
    snprintf(line, sizeof line,
             "the plugin directory %s (compiled into libfldispatch.a, linked into "
             "%s/host_rdynamic) does not exist",
             plugdir, tmp);
    ck_assert_msg(strstr(err, "[WARNING]") && strstr(err, line), "no WARNING naming %s:\n" CLIP,
                  plugdir, err);
    free(out);
    free(err);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* install                                                                  */
/* ------------------------------------------------------------------------ */

static int find_plugin(const fld_plugin_info *info, void *user)
{
    const fld_plugin_info **found = user;
    if (strcmp(info->name, "template") == 0 && strstr(info->path, "/fld-acme.so")) {
        *found = info;
        return 1;
    }
    return 0;
}

START_TEST(test_install_layout)
{
    const char *tmp = tmpdir();
    char libdir[PATH_MAX], datadir[PATH_MAX], bindir[PATH_MAX], args[4 * PATH_MAX];
    char dest[PATH_MAX], log[PATH_MAX], path[3 * PATH_MAX], pcpath[3 * PATH_MAX];
    tt_configured_dirs(libdir, datadir, bindir);
    tt_install_dir_args(args, sizeof args);
    snprintf(dest, sizeof dest, "%s/dest", tmp);
    snprintf(log, sizeof log, "%s/install.log", tmp);
    tt_sh(log, "%s install DESTDIR='%s' PREFIX=/usr %s", tt_make(), dest, args);

    /* The plugins, without the example; the example's source under the docs. */
    snprintf(path, sizeof path, "%s%s/fldispatch/plugins/fld-cpu.so", dest, libdir);
    ck_assert_msg(exists(path), "%s not installed", path);
    snprintf(path, sizeof path, "%s%s/fldispatch/plugins/fld-template.so", dest, libdir);
    ck_assert_msg(!exists(path), "the example plugin was installed as %s", path);
    char example[3 * PATH_MAX];
    snprintf(example, sizeof example, "%s%s/doc/fldispatch/examples/template", dest, datadir);
    snprintf(path, sizeof path, "%s/README.md", example);
    ck_assert_msg(exists(path), "%s not installed", path);
    snprintf(path, sizeof path, "%s/template.c", example);
    ck_assert_msg(exists(path), "%s not installed", path);
    snprintf(path, sizeof path, "%s%s/doc/fldispatch/LICENSE", dest, datadir);
    ck_assert_msg(exists(path), "%s not installed", path);

    /* The public headers; not the tool's internal interface (include/fldispatch/internal/). */
    snprintf(path, sizeof path, "%s/usr/include/fldispatch/plugin.h", dest);
    ck_assert_msg(exists(path), "%s not installed", path);
    snprintf(path, sizeof path, "%s/usr/include/fldispatch/internal", dest);
    ck_assert_msg(!exists(path), "%s installed: it is not a public header", path);

    /* fldispatch.pc: the libraries it needs by their own .pc files. */
    snprintf(pcpath, sizeof pcpath, "%s%s/pkgconfig", dest, libdir);
    snprintf(path, sizeof path, "%s/fldispatch.pc", pcpath);
    char *pc = tt_read_file(path, NULL);
    ck_assert_msg(strstr(pc, "\nRequires.private: yaml-0.1 hwloc\n") != NULL, CLIP, pc);
    ck_assert_msg(strstr(pc, "-lyaml") == NULL && strstr(pc, "-lhwloc") == NULL, CLIP, pc);
    free(pc);
    char pkgconfig[4 * PATH_MAX];
    snprintf(pkgconfig, sizeof pkgconfig,
             "PKG_CONFIG_SYSROOT_DIR='%s' PKG_CONFIG_PATH='%s' pkg-config", dest, pcpath);
    tt_sh(log, "%s --static --libs fldispatch >'%s/static-libs'", pkgconfig, tmp);
    char *libs = read_text(tmp, "static-libs");
    ck_assert_msg(strstr(libs, "-lfldispatch") && strstr(libs, "-lyaml") && strstr(libs, "-lhwloc"),
                  "pkg-config --static --libs fldispatch: %s", libs);
    free(libs);

    /* The installed example builds against the installed headers, and loads. */
    char plugins[PATH_MAX], empty[PATH_MAX], built[PATH_MAX + 16];
    tt_make_subdir(plugins, tmp, "plugins", 0755);
    tt_make_subdir(empty, tmp, "empty", 0755);
    tt_sh(log,
          "cc -std=c11 -Wall -Wextra -Werror -O2 -fPIC -shared -o '%s/fld-acme.so' "
          "'%s/template.c' $(%s --cflags --libs fldispatch)",
          plugins, example, pkgconfig);
    snprintf(built, sizeof built, "%s/fld-acme.so", plugins);
    ck_assert_int_eq(chmod(built, 0755), 0);
    ck_assert_int_eq(setenv("VLLM_FL_PLUGIN_DIR", empty, 1), 0);
    unsetenv("VLLM_FL_PLUGIN_MODULES");
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_msg(fld_load_plugin(built) == FLD_OK, "%s", fld_last_error());
    const fld_plugin_info *found = NULL;
    fld_foreach_plugin(find_plugin, &found);
    ck_assert_msg(found != NULL, "the installed example did not load as plugin 'template'");
    fld_shutdown();

    /* make uninstall takes the example and the licence away too. */
    tt_sh(log, "%s uninstall DESTDIR='%s' PREFIX=/usr %s", tt_make(), dest, args);
    ck_assert_msg(!exists(example), "%s left behind by make uninstall", example);
    snprintf(path, sizeof path, "%s%s/doc/fldispatch", dest, datadir);
    ck_assert_msg(!exists(path), "%s left behind by make uninstall", path);
}
END_TEST

/* The first ```c block of README.md: a whole program. */
static char *readme_c_program(void)
{
    char *readme = read_text(tt_src_dir(), "README.md");
    char *start = strstr(readme, "\n```c\n");
    ck_assert_msg(start != NULL, "README.md has no ```c block");
    start += strlen("\n```c\n");
    char *end = strstr(start, "\n```\n");
    ck_assert_msg(end != NULL, "README.md: the ```c block does not end");
    end[1] = '\0';
    char *program = strdup(start);
    ck_assert(program != NULL);
    free(readme);
    ck_assert_msg(strstr(program, "int main(") != NULL, "README.md's C block is no program:\n%s",
                  program);
    return program;
}

START_TEST(test_pkg_config_program_starts)
{
    const char *tmp = tmpdir();
    char tree[PATH_MAX], prefix[PATH_MAX], log[PATH_MAX], path[PATH_MAX + 32];
    snprintf(tree, sizeof tree, "%s/b", tmp);
    snprintf(prefix, sizeof prefix, "%s/prefix", tmp);
    snprintf(log, sizeof log, "%s/install.log", tmp);
    /* A fresh prefix, not one of the loader's directories. One plugin
     * (ascend: plain C, quick to build) stands for them all. */
    tt_sh(log, "%s install PREFIX='%s' PLUGIN_NAMES=ascend", tt_make_in(tree), prefix);

    char *program = readme_c_program();
    snprintf(path, sizeof path, "%s/app.c", tmp);
    write_file(path, 0644, program);
    free(program);
    /* The README's line, with the prefix's fldispatch.pc (under a sanitizer
     * the program links its runtime too, as the library did). */
    const char *san = getenv("FLD_SANITIZE");
    char sanflags[256] = "";
    if (san != NULL && san[0] != '\0')
        snprintf(sanflags, sizeof sanflags, "-fsanitize=%s", san);
    tt_sh(log,
          "cd '%s' && PKG_CONFIG_PATH='%s/lib/pkgconfig' sh -c "
          "'cc %s app.c $(pkg-config --cflags --libs fldispatch) -o app'",
          tmp, prefix, sanflags);
    /* Started as a user would: no LD_LIBRARY_PATH (tests/run.sh sets one). */
    int status = tt_sh_status(log,
                              "cd '%s' && env -u LD_LIBRARY_PATH -u VLLM_FL_PLUGIN_DIR "
                              "-u VLLM_FL_PLUGIN_MODULES ./app >'%s/app.out' 2>&1",
                              tmp, tmp);
    char *out = read_text(tmp, "app.out");
    ck_assert_msg(status == 0 && strstr(out, "rms_norm by reference.c: out[0][0] = 0.1980\n"),
                  "the README's program, built against %s, did not run (status %d):\n" CLIP,
                  prefix, status, out);
    free(out);
    /* ... with the prefix's library. */
    tt_sh(log, "cd '%s' && env -u LD_LIBRARY_PATH LD_TRACE_LOADED_OBJECTS=1 ./app >'%s/ldd.out'",
          tmp, tmp);
    out = read_text(tmp, "ldd.out");
    snprintf(path, sizeof path, "%s/lib/libfldispatch.so.0", prefix);
    ck_assert_msg(strstr(out, path) != NULL, "the program did not load %s:\n" CLIP, path, out);
    free(out);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* runner                                                                   */
/* ------------------------------------------------------------------------ */

START_TEST(test_build_library_first)
{
    const char *tmp = tmpdir();
    char log[PATH_MAX], path[PATH_MAX + 32], self[PATH_MAX], buildlib[PATH_MAX];
    char impostor[PATH_MAX];
    snprintf(log, sizeof log, "%s/impostor.log", tmp);
    tt_make_subdir(impostor, tmp, "impostor", 0755);
    snprintf(path, sizeof path, "%s/impostor.c", tmp);
    write_file(path, 0644, "const char *fld_version(void) { return \"impostor\"; }\n");
    tt_sh(log, "cc -shared -fPIC -Wl,-soname,libfldispatch.so.0 -o '%s/libfldispatch.so.0' '%s'",
          impostor, path);
    ck_assert(realpath("/proc/self/exe", self) != NULL);
    snprintf(path, sizeof path, "%s/lib", tt_build_dir());
    ck_assert(realpath(path, buildlib) != NULL);

    /* A test program: its DT_RPATH comes before LD_LIBRARY_PATH. */
    tt_sh(log, "LD_LIBRARY_PATH='%s' '%s' --which-library >'%s/which'", impostor, self, tmp);
    char *which = read_text(tmp, "which");
    ck_assert_msg(strncmp(which, buildlib, strlen(buildlib)) == 0 &&
                      strstr(which, " impostor") == NULL,
                  "with LD_LIBRARY_PATH=%s the test program loaded: %s (want %s/...)", impostor,
                  which, buildlib);
    free(which);

    /* What a test starts (the tool): tests/run.sh puts the build tree's
     * library first. The script passes when the tool reports the build
     * tree's plugin directory, derived from the library it loaded. */
    char script[PATH_MAX], text[4 * PATH_MAX];
    snprintf(script, sizeof script, "%s/tool_check.sh", tmp);
    snprintf(
        text, sizeof text,
        "#!/bin/sh\n"
        "out=$(\"$FLD_BUILDDIR/bin/fldispatch\" config 2>&1)\n"
        "case \"$out\" in\n"
        "*'plugin path:    %s/fldispatch/plugins'*)\n"
        "    echo '100%%: Checks: 1, Failures: 0, Errors: 0' ;;\n"
        "*) printf '%%s\\n' \"$out\"; echo '0%%: Checks: 1, Failures: 1, Errors: 0'; exit 1 ;;\n"
        "esac\n",
        buildlib);
    write_file(script, 0755, text);
    int status =
        tt_sh_status(log,
                     "env -u FLD_TEST_WRAPPER -u FLD_PYTHON_LOG LD_LIBRARY_PATH='%s' FLD_TEST_LOGDIR='%s/logs' "
                     "sh '%s/tests/run.sh' '%s' >'%s/run.out' 2>&1",
                     impostor, tmp, tt_src_dir(), script, tmp);
    char *out = read_text(tmp, "run.out");
    ck_assert_msg(status == 0 && strstr(out, "1 passed, 0 failed"),
                  "under tests/run.sh with LD_LIBRARY_PATH=%s the tool did not use %s:\n" CLIP,
                  impostor, buildlib, out);
    free(out);
}
END_TEST

START_TEST(test_log_only_on_failure)
{
    const char *tmp = tmpdir();
    char pass[PATH_MAX], fail[PATH_MAX], log[PATH_MAX];
    snprintf(pass, sizeof pass, "%s/prog_pass", tmp);
    snprintf(fail, sizeof fail, "%s/prog_fail", tmp);
    write_file(pass, 0755,
               "#!/bin/sh\n"
               "echo 'Running suite(s): pass'\n"
               "echo '[WARNING] provoked on purpose by prog_pass'\n"
               "echo '100%: Checks: 2, Failures: 0, Errors: 0'\n");
    write_file(fail, 0755,
               "#!/bin/sh\n"
               "echo '[ERROR] provoked on purpose by prog_fail'\n"
               "echo '50%: Checks: 2, Failures: 1, Errors: 0'\n"
               "exit 1\n");
    snprintf(log, sizeof log, "%s/runner.log", tmp);
    int status =
        tt_sh_status(log,
                     "env -u FLD_TEST_WRAPPER -u FLD_PYTHON_LOG FLD_TEST_LOGDIR='%s/logs' sh '%s/tests/run.sh' "
                     "'%s' '%s' >'%s/out'",
                     tmp, tt_src_dir(), pass, fail, tmp);
    char *out = read_text(tmp, "out");
    ck_assert_msg(status != 0, "a failing program did not fail the run:\n" CLIP, out);
    ck_assert_msg(strstr(out, "provoked on purpose by prog_pass") == NULL,
                  "the log of a passing program was printed:\n" CLIP, out);
    ck_assert_msg(strstr(out, "prog_pass: 100%: Checks: 2, Failures: 0, Errors: 0\n") != NULL,
                  "no summary line for the passing program:\n" CLIP, out);
    ck_assert_msg(strstr(out, "prog_fail: [ERROR] provoked on purpose by prog_fail\n") != NULL,
                  "the log of the failing program was not printed:\n" CLIP, out);
    ck_assert_msg(strstr(out, "failing test programs: prog_fail\n") != NULL, CLIP, out);
    ck_assert_msg(strstr(out, "3 passed, 1 failed\n") != NULL, CLIP, out);
    free(out);
    /* The passing program's log is kept. */
    snprintf(log, sizeof log, "%s/logs", tmp);
    char *kept = read_text(log, "prog_pass.log");
    ck_assert(strstr(kept, "[WARNING] provoked on purpose by prog_pass") != NULL);
    free(kept);
}
END_TEST

/*
 * A program that runs several suites (test_kernels: one per instruction
 * set) gets one labelled line per suite; the Python tests' pytest summary
 * (python/python.mk's log) is printed and counted, so the closing line is
 * the whole run's, also when no C program ran (TESTS=python).
 */
START_TEST(test_summary_labels_suites_and_counts_python)
{
    const char *tmp = tmpdir();
    char prog[PATH_MAX], pylog[PATH_MAX], status[PATH_MAX + 8], log[PATH_MAX];
    snprintf(prog, sizeof prog, "%s/prog_isa", tmp);
    write_file(prog, 0755,
               "#!/bin/sh\n"
               "echo 'Running suite(s): kernels'\n"
               "echo '100%: Checks: 5, Failures: 0, Errors: 0'\n"
               "echo 'Running suite(s): isa avx2'\n"
               "echo '100%: Checks: 3, Failures: 0, Errors: 0'\n");
    snprintf(pylog, sizeof pylog, "%s/python.log", tmp);
    write_file(pylog, 0644, "....s\n=========== 12 passed, 1 skipped in 4.20s ===========\n");
    snprintf(status, sizeof status, "%s.status", pylog);
    write_file(status, 0644, "0\n");
    snprintf(log, sizeof log, "%s/runner.log", tmp);
    int st = tt_sh_status(log,
                          "env -u FLD_TEST_WRAPPER FLD_TEST_LOGDIR='%s/logs' FLD_PYTHON_LOG='%s' "
                          "sh '%s/tests/run.sh' '%s' >'%s/out'",
                          tmp, pylog, tt_src_dir(), prog, tmp);
    char *out = read_text(tmp, "out");
    ck_assert_msg(st == 0, CLIP, out);
    ck_assert_msg(strstr(out, "prog_isa [kernels]: 100%: Checks: 5,") &&
                      strstr(out, "prog_isa [isa avx2]: 100%: Checks: 3,"),
                  "the suites' lines are not labelled:\n" CLIP, out);
    ck_assert_msg(strstr(out, "python/tests: 12 passed, 1 skipped in 4.20s\n"), CLIP, out);
    ck_assert_msg(strstr(out, "\n20 passed, 0 failed\n"), CLIP, out);
    free(out);

    /* The Python tests alone: their count closes the run, not "0 passed". */
    st = tt_sh_status(log,
                      "env -u FLD_TEST_WRAPPER FLD_TEST_LOGDIR='%s/logs' FLD_PYTHON_LOG='%s' "
                      "sh '%s/tests/run.sh' >'%s/out'",
                      tmp, pylog, tt_src_dir(), tmp);
    out = read_text(tmp, "out");
    ck_assert_msg(st == 0 && strstr(out, "\n12 passed, 0 failed\n"), CLIP, out);
    free(out);

    /* A Python failure fails the run, and is counted. */
    write_file(pylog, 0644, "..F\n== 1 failed, 11 passed in 4.20s ==\n");
    write_file(status, 0644, "1\n");
    st = tt_sh_status(log,
                      "env -u FLD_TEST_WRAPPER FLD_TEST_LOGDIR='%s/logs' FLD_PYTHON_LOG='%s' "
                      "sh '%s/tests/run.sh' '%s' >'%s/out'",
                      tmp, pylog, tt_src_dir(), prog, tmp);
    out = read_text(tmp, "out");
    ck_assert_msg(st != 0 && strstr(out, "failing test programs: python/tests\n") &&
                      strstr(out, "\n19 passed, 1 failed\n"),
                  CLIP, out);
    free(out);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* deps                                                                     */
/* ------------------------------------------------------------------------ */

/* The packages of the sets, as .ci/deps.sh lists them. */
static char *set_packages(const char *tmp, const char *sets)
{
    char log[PATH_MAX];
    snprintf(log, sizeof log, "%s/list.log", tmp);
    tt_sh(log, "sh '%s/.ci/deps.sh' --list %s >'%s/list'", tt_src_dir(), sets, tmp);
    char *list = read_text(tmp, "list");
    char *nl = strchr(list, '\n');
    if (nl)
        *nl = '\0';
    return list;
}

START_TEST(test_missing_packages_one_line)
{
    /* A machine where nothing is installed and the user is not root. */
    const char *tmp = tmpdir();
    char bin[PATH_MAX], tool[PATH_MAX + 16], tree[PATH_MAX], log[PATH_MAX];
    tt_make_subdir(bin, tmp, "bin", 0755);
    snprintf(tool, sizeof tool, "%s/dpkg-query", bin);
    write_file(tool, 0755, "#!/bin/sh\nexit 1\n");
    snprintf(tool, sizeof tool, "%s/id", bin);
    write_file(tool, 0755, "#!/bin/sh\necho 1000\n");
    snprintf(tree, sizeof tree, "%s/b", tmp);
    snprintf(log, sizeof log, "%s/make.log", tmp);

    static const struct {
        const char *goal, *sets;
    } cases[] = {
        {"", "build"},
        {"run", "build"},
        {"check", "build test"},
        {"check-valgrind", "build test valgrind"},
        {"fuzz-smoke", "build fuzz"},
        {"check-fresh", "fresh"},
        {"lint", "build lint"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int status = tt_sh_status(log, "PATH='%s':\"$PATH\" %s %s >'%s/out' 2>&1", bin,
                                  tt_make_in(tree), cases[i].goal, tmp);
        char *out = read_text(tmp, "out");
        char *pkgs = set_packages(tmp, cases[i].sets);
        char want[1024];
        snprintf(want, sizeof want, "missing Debian packages (%s): run 'sudo apt-get install %s'",
                 cases[i].sets, pkgs);
        ck_assert_msg(status == 2 && count_lines(out) == 1 && strstr(out, want) != NULL,
                      "make %s (status %d) did not stop with one line naming \"%s\":\n" CLIP,
                      cases[i].goal, status, want, out);
        free(pkgs);
        free(out);
    }
    ck_assert_msg(!exists(tree), "make built something before it stopped");

    /* Goals that need no package, and DEPS_CHECK=no, go on. */
    ck_assert_int_eq(tt_sh_status(log, "PATH='%s':\"$PATH\" %s clean", bin, tt_make_in(tree)), 0);
    ck_assert_int_eq(
        tt_sh_status(log, "PATH='%s':\"$PATH\" %s -n lib DEPS_CHECK=no", bin, tt_make_in(tree)), 0);
}
END_TEST

/*
 * As root, only the README's two commands (make run, make check) install
 * what is missing, and say so in one line; every other goal stops with the
 * one apt-get line, as for a user. FLD_DEPS_DRY_RUN=1 runs no apt-get.
 */
START_TEST(test_root_installs_only_for_run_and_check)
{
    const char *tmp = tmpdir();
    char bin[PATH_MAX], tool[PATH_MAX + 16], tree[PATH_MAX], log[PATH_MAX];
    tt_make_subdir(bin, tmp, "bin", 0755);
    snprintf(tool, sizeof tool, "%s/dpkg-query", bin);
    write_file(tool, 0755, "#!/bin/sh\nexit 1\n");
    snprintf(tool, sizeof tool, "%s/id", bin);
    write_file(tool, 0755, "#!/bin/sh\necho 0\n");
    snprintf(tree, sizeof tree, "%s/b", tmp);
    snprintf(log, sizeof log, "%s/make.log", tmp);

    static const struct {
        const char *goal, *sets;
        bool installs;
    } cases[] = {
        {"", "build", false},         {"lint", "build lint", false},
        {"fuzz-smoke", "build fuzz", false}, {"run", "build", true},
        {"check", "build test", true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        /* -n: where the packages are "installed", make goes on running nothing. */
        int status =
            tt_sh_status(log, "PATH='%s':\"$PATH\" FLD_DEPS_DRY_RUN=1 %s -n %s >'%s/out' 2>&1", bin,
                         tt_make_in(tree), cases[i].goal, tmp);
        char *out = read_text(tmp, "out");
        char *pkgs = set_packages(tmp, cases[i].sets);
        char want[1024];
        if (cases[i].installs)
            snprintf(want, sizeof want, "would install Debian packages (%s), as root: %s (dry run)",
                     cases[i].sets, pkgs);
        else
            snprintf(want, sizeof want,
                     "missing Debian packages (%s): run 'apt-get install %s' (make run and make "
                     "check install them)",
                     cases[i].sets, pkgs);
        /* Installing, the check lets make go on; what -n prints next (sub-makes that would
         * find the packages installed) is not at issue. */
        const char *first = strstr(out, "Debian packages");
        bool installing = first - out >= 14 && strncmp(first - 14, "would install ", 14) == 0;
        bool ok = strstr(out, want) != NULL &&
                  (cases[i].installs ? installing : status == 2 && count_lines(out) == 1);
        ck_assert_msg(ok,
                      "make -n %s as root (status %d) did not print \"%s\":\n" CLIP,
                      cases[i].goal, status, want, out);
        free(pkgs);
        free(out);
    }
}
END_TEST

START_TEST(test_readme_lists_package_sets)
{
    const char *tmp = tmpdir();
    char *readme = read_text(tt_src_dir(), "README.md");
    const char *sets[] = {"build", "test", "rocm", "fuzz", "valgrind", "fresh", "lint"};
    for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++) {
        char *pkgs = set_packages(tmp, sets[i]);
        char want[512];
        snprintf(want, sizeof want, "| %s | `%s` |", sets[i], pkgs);
        ck_assert_msg(strstr(readme, want) != NULL, "README.md has no row \"%s\"", want);
        free(pkgs);
    }
    free(readme);
}
END_TEST

static Suite *build_suite(void)
{
    Suite *s = suite_create("build");
    TCase *tc = tcase_create("paths");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_install_dirs_compiled_in);
    tcase_add_test(tc, test_gpu_stamp_ignores_build_dir_spelling);
    suite_add_tcase(s, tc);

    tc = tcase_create("static");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_static_library_plugins);
    suite_add_tcase(s, tc);

    tc = tcase_create("install");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, test_install_layout);
    suite_add_tcase(s, tc);

    tc = tcase_create("program");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, test_pkg_config_program_starts);
    suite_add_tcase(s, tc);

    tc = tcase_create("runner");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_build_library_first);
    tcase_add_test(tc, test_log_only_on_failure);
    tcase_add_test(tc, test_summary_labels_suites_and_counts_python);
    suite_add_tcase(s, tc);

    tc = tcase_create("deps");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_missing_packages_one_line);
    tcase_add_test(tc, test_root_installs_only_for_run_and_check);
    tcase_add_test(tc, test_readme_lists_package_sets);
    suite_add_tcase(s, tc);
    return s;
}

/* With --which-library: prints the file the library was loaded from and its
 * version (test_build_library_first runs this program so). */
static int which_library(void)
{
    Dl_info info;
    char real[PATH_MAX];
    if (!dladdr((void *)fld_version, &info) || !info.dli_fname || !realpath(info.dli_fname, real)) {
        printf("unknown\n");
        return 1;
    }
    printf("%s %s\n", real, fld_version());
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--which-library") == 0)
        return which_library();
    return tt_run_suite_with_src_and_build_dir("test_build", build_suite());
}
