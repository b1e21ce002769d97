/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Platforms: VLLM_FL_PLATFORM, detection from hwloc's PCI enumeration
 * (synthetic topologies from tests/data/hwloc fed through HWLOC_XMLFILE),
 * from plugin availability (in-process plugins), the platform file search,
 * and the shipped config/<platform>.yaml files.
 *
 * Every test forks (CK_FORK), so each starts with a fresh library. The
 * fixture clears the policy variables and points VLLM_FL_PLUGIN_DIR at an
 * empty directory, so that neither the machine's real plugins nor its real
 * PCI devices (every detection test sets HWLOC_XMLFILE) decide anything.
 */
#include <check.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "util/env.h"
#include "util/harness.h"
#include <fldispatch/plugin.h>

#define NO_ACCELERATOR "no accelerator found (PCI, plugins)"

static char plugin_dir[64];

static void setup(void)
{
    tt_clear_fld_environment();
    strcpy(plugin_dir, "/tmp/fld-test-platform-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(plugin_dir));
    setenv("VLLM_FL_PLUGIN_DIR", plugin_dir, 1);
    setenv("VLLM_FL_LOG_LEVEL", "ERROR", 1);
}

static void teardown(void)
{
    rmdir(plugin_dir);
}

static const char *env_or_fail(const char *name)
{
    const char *v = getenv(name);
    ck_assert_msg(v && *v, "%s is not set (run through make check)", name);
    return v;
}

/* realpath of $FLD_BUILDDIR/share/fldispatch/config, where the build copies config/. */
static void build_config_dir(char *out)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/share/fldispatch/config", env_or_fail("FLD_BUILDDIR"));
    ck_assert_msg(realpath(dir, out) != NULL, "%s missing (make configs)", dir);
}

static void use_topology(const char *file)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/tests/data/hwloc/%s", env_or_fail("FLD_SRCDIR"), file);
    ck_assert_msg(access(path, R_OK) == 0, "%s not readable", path);
    setenv("HWLOC_XMLFILE", path, 1);
}

static fld_platform_info platform_or_fail(void)
{
    fld_platform_info info;
    memset(&info, 0, sizeof info);
    int rc = fld_platform(&info);
    ck_assert_msg(rc == FLD_OK, "fld_platform: %d %s", rc, fld_last_error());
    ck_assert_ptr_nonnull(info.name);
    ck_assert_ptr_nonnull(info.detected_by);
    ck_assert_ptr_nonnull(info.config_file);
    ck_assert_ptr_nonnull(info.config_path);
    return info;
}

/* The platform file fld_platform() names is the build tree's copy of name.yaml. */
static void assert_build_config_file(const fld_platform_info *info, const char *name)
{
    char dir[PATH_MAX], expected[PATH_MAX + 32], real[PATH_MAX];
    build_config_dir(dir);
    snprintf(expected, sizeof expected, "%s/%s.yaml", dir, name);
    ck_assert_msg(realpath(info->config_file, real) != NULL, "config_file '%s' does not exist",
                  info->config_file);
    ck_assert_str_eq(real, expected);
}

/* ------------------------------------------------------------------------ */
/* VLLM_FL_PLATFORM                                                         */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *value, *platform;
} env_valid[] = {
    {"cpu", "cpu"},       {"cuda", "nvidia"},    {"nvidia", "nvidia"}, {"rocm", "rocm"},
    {"ascend", "ascend"}, {" CUDA\t", "nvidia"}, {"NVidia", "nvidia"}, {"Ascend\n", "ascend"},
};

/* vllm-plugin-FL's platform names for accelerators with no device type here: named, their
 * platform file looked up as any platform's (none ships), no device implied. */
static const char *const env_foreign[] = {"metax", "iluvatar", "musa", "hygon",
                                          "gcu",   "ptg",      "sunrise", " THead "};

START_TEST(test_env_foreign_platform)
{
    setenv("VLLM_FL_PLATFORM", env_foreign[_i], 1);
    use_topology("huawei_ascend910b.xml");
    ck_assert_msg(fld_init() == FLD_OK, "%s", fld_last_error());
    fld_platform_info info = platform_or_fail();
    char want[32];
    size_t k = 0;
    for (const char *c = env_foreign[_i]; *c; c++)
        if (*c != ' ')
            want[k++] = (char)(*c >= 'A' && *c <= 'Z' ? *c - 'A' + 'a' : *c);
    want[k] = '\0';
    ck_assert_str_eq(info.name, want);
    ck_assert_str_eq(info.detected_by, "VLLM_FL_PLATFORM");
    ck_assert_str_eq(info.config_file, "");
    /* The defaults: no platform file. */
    char buf[256];
    fld_policy_describe(buf, sizeof buf);
    ck_assert_str_eq(buf, "prefer=flagos;strict=0");
}
END_TEST

START_TEST(test_env_valid)
{
    setenv("VLLM_FL_PLATFORM", env_valid[_i].value, 1);
    /* The variable wins over what the PCI bus shows. */
    use_topology("huawei_ascend910b.xml");
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_platform_info info = platform_or_fail();
    ck_assert_str_eq(info.name, env_valid[_i].platform);
    ck_assert_str_eq(info.detected_by, "VLLM_FL_PLATFORM");
    assert_build_config_file(&info, env_valid[_i].platform);
}
END_TEST

static const char *const env_invalid[] = {"gpu", "cuda12", "npu", "cpu,cuda", "amd", "hip"};

START_TEST(test_env_invalid)
{
    const char *value = env_invalid[_i];
    setenv("VLLM_FL_PLATFORM", value, 1);
    ck_assert_int_eq(fld_init(), FLD_ECONFIG);
    char expected[256];
    snprintf(expected, sizeof expected,
             "VLLM_FL_PLATFORM: invalid value '%s' (valid: cpu, cuda, nvidia, rocm, ascend; or one "
             "of vllm-plugin-FL's platforms without a device type here: metax, iluvatar, musa, "
             "hygon, gcu, ptg, sunrise, thead)",
             value);
    ck_assert_msg(strstr(fld_last_error(), expected) != NULL, "'%s' not in last error: %s",
                  expected, fld_last_error());
    /* Remembered: the library stays uninitialised and says why. */
    fld_platform_info info;
    ck_assert_int_eq(fld_platform(&info), FLD_ECONFIG);
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "VLLM_FL_PLATFORM"));
}
END_TEST

START_TEST(test_env_blank_is_unset)
{
    setenv("VLLM_FL_PLATFORM", "  ", 1);
    use_topology("amd_mi300x.xml");
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_platform_info info = platform_or_fail();
    ck_assert_str_eq(info.name, "rocm");
    ck_assert_ptr_nonnull(strstr(info.detected_by, "PCI device"));
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Detection from synthetic hwloc topologies                                */
/* ------------------------------------------------------------------------ */

static const struct {
    const char *xml, *platform, *detected_by;
} topologies[] = {
    {"nvidia_h100.xml", "nvidia",
     "PCI device 10de:2330 (class 0302) at 0000:1b:00.0 and 1 more NVIDIA device"},
    {"amd_mi300x.xml", "rocm", "PCI device 1002:74a1 (class 1200) at 0000:75:00.0"},
    /* The Huawei NIC at 0000:04:00.0 comes first on the bus and must not count. */
    {"huawei_ascend910b.xml", "ascend", "PCI device 19e5:d802 (class 1200) at 0000:c1:00.0"},
    /* An NVIDIA HD audio function (class 0403) is no GPU. */
    {"nvidia_audio_only.xml", "cpu", NO_ACCELERATOR},
    {"cpu_only.xml", "cpu", NO_ACCELERATOR},
    /* AMD comes first on the bus; the fixed order picks nvidia. */
    {"mixed_vendors.xml", "nvidia",
     "PCI device 10de:26b9 (class 0302) at 0000:3a:00.0; also rocm (2), ascend (1); nvidia "
     "chosen by the fixed order nvidia, rocm, ascend"},
};

START_TEST(test_detect_topology)
{
    use_topology(topologies[_i].xml);
    ck_assert_int_eq(fld_init(), FLD_OK);
    fld_platform_info info = platform_or_fail();
    ck_assert_msg(strcmp(info.name, topologies[_i].platform) == 0,
                  "%s: platform %s (%s), expected %s", topologies[_i].xml, info.name,
                  info.detected_by, topologies[_i].platform);
    ck_assert_str_eq(info.detected_by, topologies[_i].detected_by);
    assert_build_config_file(&info, topologies[_i].platform);
}
END_TEST

/* A topology hwloc refuses (no Machine object) is no error: detection goes on. */
START_TEST(test_detect_hwloc_failure_not_fatal)
{
    char path[] = "/tmp/fld-test-platform-xml-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    static const char xml[] = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                              "<topology version=\"2.0\"></topology>\n";
    ck_assert_int_eq(write(fd, xml, sizeof xml - 1), (ssize_t)(sizeof xml - 1));
    close(fd);
    setenv("HWLOC_XMLFILE", path, 1);
    int rc = fld_init();
    unlink(path);
    ck_assert_msg(rc == FLD_OK, "fld_init: %d %s", rc, fld_last_error());
    fld_platform_info info = platform_or_fail();
    ck_assert_str_eq(info.name, "cpu");
    ck_assert_str_eq(info.detected_by, NO_ACCELERATOR);
}
END_TEST

/* ------------------------------------------------------------------------ */
/* Detection from plugin availability                                       */
/* ------------------------------------------------------------------------ */

static int ok_fn(const void *args)
{
    (void)args;
    return FLD_OK;
}

static bool not_here(const char **reason)
{
    *reason = "no device";
    return false;
}

/* A device plugin's probe: detection must not call it (it would start a driver). */
static int probes;
static bool probed_yes(const char **reason)
{
    (void)reason;
    probes++;
    return true;
}

#define PROBE(id, vendor, kind, devices, avail)                                                    \
    {                                                                                              \
        "plat_probe", id, kind, vendor, FLD_PRIORITY_VENDOR, devices, FLD_DTYPE_MASK_ALL, ok_fn,   \
            avail, NULL                                                                            \
    }

/* Each case registers the impls of one row as an in-process plugin. */
static const struct {
    const char *plugin;
    fld_impl impls[2];
    size_t n;
    const char *platform, *detected_by;
} plugin_cases[] = {
    {"fakecuda",
     {PROBE("vendor.fakecuda", "fakecuda", FLD_KIND_VENDOR, FLD_DEVICE_MASK_CUDA, NULL)},
     1,
     "nvidia",
     "plugin 'fakecuda' has an available implementation for cuda (vendor.fakecuda of plat_probe)"},
    {"fakerocm",
     {PROBE("vendor.fakerocm", "fakerocm", FLD_KIND_VENDOR, FLD_DEVICE_MASK_ROCM, NULL)},
     1,
     "rocm",
     "plugin 'fakerocm' has an available implementation for rocm (vendor.fakerocm of plat_probe)"},
    {"fakenpu",
     {PROBE("vendor.fakenpu", "fakenpu", FLD_KIND_VENDOR, FLD_DEVICE_MASK_ASCEND, NULL)},
     1,
     "ascend",
     "plugin 'fakenpu' has an available implementation for ascend (vendor.fakenpu of plat_probe)"},
    /* Registered in the order rocm, cuda: the fixed order still says nvidia. */
    {"fakeboth",
     {PROBE("vendor.a_rocm", "fakeboth", FLD_KIND_VENDOR, FLD_DEVICE_MASK_ROCM, NULL),
      PROBE("vendor.b_cuda", "fakeboth", FLD_KIND_VENDOR, FLD_DEVICE_MASK_CUDA, NULL)},
     2,
     "nvidia",
     "plugin 'fakeboth' has an available implementation for cuda (vendor.b_cuda of plat_probe); "
     "also rocm (1); nvidia chosen by the fixed order nvidia, rocm, ascend"},
    /* Not evidence of an accelerator: */
    {"unavail",
     {PROBE("vendor.unavail", "unavail", FLD_KIND_VENDOR, FLD_DEVICE_MASK_CUDA, not_here)},
     1,
     "cpu",
     NO_ACCELERATOR},
    {"probed",
     {PROBE("vendor.probed", "probed", FLD_KIND_VENDOR, FLD_DEVICE_MASK_CUDA, probed_yes)},
     1,
     "cpu",
     NO_ACCELERATOR},
    {"anydevice",
     {PROBE("vendor.any", "anydevice", FLD_KIND_VENDOR, FLD_DEVICE_MASK_ALL, NULL)},
     1,
     "cpu",
     NO_ACCELERATOR},
    {"cpuandcuda",
     {PROBE("vendor.cc", "cpuandcuda", FLD_KIND_VENDOR, FLD_DEVICE_MASK_CPU | FLD_DEVICE_MASK_CUDA,
            NULL)},
     1,
     "cpu",
     NO_ACCELERATOR},
    {"twogpus",
     {PROBE("vendor.two", "twogpus", FLD_KIND_VENDOR, FLD_DEVICE_MASK_CUDA | FLD_DEVICE_MASK_ROCM,
            NULL)},
     1,
     "cpu",
     NO_ACCELERATOR},
    {"refcuda",
     {PROBE("reference.refcuda", NULL, FLD_KIND_REFERENCE, FLD_DEVICE_MASK_CUDA, NULL)},
     1,
     "cpu",
     NO_ACCELERATOR},
};

static size_t plugin_case;

static int register_case(fld_registry *reg)
{
    for (size_t i = 0; i < plugin_cases[plugin_case].n; i++) {
        int rc = fld_registry_register(reg, &plugin_cases[plugin_case].impls[i]);
        if (rc != FLD_OK)
            return rc;
    }
    return FLD_OK;
}

START_TEST(test_detect_plugins)
{
    plugin_case = (size_t)_i;
    use_topology("cpu_only.xml");
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_str_eq(platform_or_fail().name, "cpu");

    static fld_plugin_descriptor desc = {FLD_PLUGIN_MAGIC,
                                         FLD_PLUGIN_ABI_MAJOR,
                                         FLD_PLUGIN_ABI_MINOR,
                                         sizeof(fld_plugin_descriptor),
                                         0,
                                         NULL,
                                         "1.0",
                                         FLD_VERSION_STRING,
                                         register_case};
    desc.name = plugin_cases[_i].plugin;
    int rc = fld_register_plugin(&desc);
    ck_assert_msg(rc == FLD_OK, "fld_register_plugin: %d %s", rc, fld_last_error());
    /* Detection runs at init and reload, against the registry of that moment. */
    rc = fld_reload();
    ck_assert_msg(rc == FLD_OK, "fld_reload: %d %s", rc, fld_last_error());
    fld_platform_info info = platform_or_fail();
    ck_assert_msg(strcmp(info.name, plugin_cases[_i].platform) == 0,
                  "%s: platform %s (%s), expected %s", plugin_cases[_i].plugin, info.name,
                  info.detected_by, plugin_cases[_i].platform);
    ck_assert_str_eq(info.detected_by, plugin_cases[_i].detected_by);
    ck_assert_int_eq(probes, 0);
}
END_TEST

/* The PCI bus is asked before the plugins. */
START_TEST(test_pci_before_plugins)
{
    plugin_case = 0; /* fakecuda */
    use_topology("amd_mi300x.xml");
    ck_assert_int_eq(fld_init(), FLD_OK);
    static const fld_plugin_descriptor desc = {FLD_PLUGIN_MAGIC,
                                               FLD_PLUGIN_ABI_MAJOR,
                                               FLD_PLUGIN_ABI_MINOR,
                                               sizeof(fld_plugin_descriptor),
                                               0,
                                               "fakecuda",
                                               "1.0",
                                               FLD_VERSION_STRING,
                                               register_case};
    ck_assert_int_eq(fld_register_plugin(&desc), FLD_OK);
    ck_assert_int_eq(fld_reload(), FLD_OK);
    fld_platform_info info = platform_or_fail();
    ck_assert_str_eq(info.name, "rocm");
    ck_assert_str_eq(info.detected_by, "PCI device 1002:74a1 (class 1200) at 0000:75:00.0");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* fld_platform(), the search path, reload                                  */
/* ------------------------------------------------------------------------ */

START_TEST(test_config_path)
{
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    fld_platform_info info = platform_or_fail(); /* initialises lazily */
    char dir[PATH_MAX];
    build_config_dir(dir);
    /* The build tree's directory first, then the install directory, no repeats. */
    size_t n = strlen(dir);
    ck_assert_msg(strncmp(info.config_path, dir, n) == 0 &&
                      (info.config_path[n] == '\0' || info.config_path[n] == ':'),
                  "config_path '%s' does not start with '%s'", info.config_path, dir);
    const char *second = strchr(info.config_path, ':');
    if (second) {
        ck_assert_ptr_null(strchr(second + 1, ':'));
        ck_assert_str_ne(second + 1, dir);
        ck_assert_msg(second[1] == '/', "install directory '%s' is not absolute", second + 1);
    }
    ck_assert_str_eq(info.config_file, strcat(dir, "/cpu.yaml"));
}
END_TEST

START_TEST(test_null_argument)
{
    setenv("VLLM_FL_PLATFORM", "cpu", 1);
    ck_assert_int_eq(fld_platform(NULL), FLD_EINVAL);
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "fld_platform"));
}
END_TEST

START_TEST(test_reload_redetects)
{
    setenv("VLLM_FL_PLATFORM", "rocm", 1);
    ck_assert_int_eq(fld_init(), FLD_OK);
    ck_assert_str_eq(platform_or_fail().name, "rocm");

    /* An invalid value on reload changes nothing. */
    setenv("VLLM_FL_PLATFORM", "tpu", 1);
    ck_assert_int_eq(fld_reload(), FLD_ECONFIG);
    ck_assert_ptr_nonnull(strstr(fld_last_error(), "VLLM_FL_PLATFORM: invalid value 'tpu'"));
    fld_platform_info info = platform_or_fail();
    ck_assert_str_eq(info.name, "rocm");
    assert_build_config_file(&info, "rocm");

    /* Unset: detection from the bus. */
    unsetenv("VLLM_FL_PLATFORM");
    use_topology("huawei_ascend910b.xml");
    ck_assert_int_eq(fld_reload(), FLD_OK);
    info = platform_or_fail();
    ck_assert_str_eq(info.name, "ascend");
    ck_assert_ptr_nonnull(strstr(info.detected_by, "19e5:d802"));
    assert_build_config_file(&info, "ascend");
}
END_TEST

/* ------------------------------------------------------------------------ */
/* The shipped platform files                                               */
/* ------------------------------------------------------------------------ */

/* 1-based line of the first line of config/<name>.yaml starting with prefix, or 0. */
static int line_of(const char *name, const char *prefix)
{
    char path[PATH_MAX], line[512];
    snprintf(path, sizeof path, "%s/config/%s.yaml", env_or_fail("FLD_SRCDIR"), name);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    int n = 0, found = 0;
    while (!found && fgets(line, sizeof line, f)) {
        n++;
        if (strncmp(line, prefix, strlen(prefix)) == 0)
            found = n;
    }
    fclose(f);
    return found;
}

#define MAX_FIELDS 64

struct fields {
    size_t n;
    char key[MAX_FIELDS][64];
    char value[MAX_FIELDS][1024];
    char source[MAX_FIELDS][PATH_MAX];
};

static int collect_field(const fld_config_field *f, void *user)
{
    struct fields *fs = user;
    ck_assert_uint_lt(fs->n, MAX_FIELDS);
    snprintf(fs->key[fs->n], sizeof fs->key[0], "%s", f->key);
    snprintf(fs->value[fs->n], sizeof fs->value[0], "%s", f->value ? f->value : "");
    snprintf(fs->source[fs->n], sizeof fs->source[0], "%s", f->source ? f->source : "");
    fs->n++;
    return 0;
}

static size_t field_index(const struct fields *fs, const char *key)
{
    for (size_t i = 0; i < fs->n; i++)
        if (strcmp(fs->key[i], key) == 0)
            return i;
    ck_abort_msg("no config field '%s'", key);
    return 0;
}

/* source is "<...>/<name>.yaml:<line>" or "<name>.yaml:<line>" for one of the lines given. */
static bool source_is_line(const char *source, const char *name, int line_a, int line_b)
{
    const int lines[2] = {line_a, line_b};
    for (int i = 0; i < 2; i++) {
        if (lines[i] <= 0)
            continue;
        char want[64];
        int n = snprintf(want, sizeof want, "%s.yaml:%d", name, lines[i]);
        size_t len = strlen(source);
        if (len >= (size_t)n && strcmp(source + len - (size_t)n, want) == 0 &&
            (len == (size_t)n || source[len - (size_t)n - 1] == '/'))
            return true;
    }
    return false;
}

#define assert_source(fs, key, name, line_a, line_b)                                               \
    do {                                                                                           \
        size_t i_ = field_index((fs), (key));                                                      \
        ck_assert_msg(source_is_line((fs)->source[i_], (name), (line_a), (line_b)),                \
                      "field %s has source '%s', expected %s.yaml:%d", (key), (fs)->source[i_],    \
                      (name), (line_a));                                                           \
    } while (0)

static const char *const platforms[] = {"cpu", "nvidia", "rocm", "ascend"};

START_TEST(test_shipped_file_loads)
{
    const char *name = platforms[_i];
    setenv("VLLM_FL_PLATFORM", name, 1);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "%s.yaml: fld_init: %d %s", name, rc, fld_last_error());
    fld_platform_info info = platform_or_fail();
    assert_build_config_file(&info, name);

    static struct fields fs;
    memset(&fs, 0, sizeof fs);
    ck_assert_int_eq(fld_foreach_config_field(collect_field, &fs), 0);
    if (strcmp(name, "cpu") == 0) {
        /* cpu.yaml sets nothing: the built-in defaults, reported as such. */
        ck_assert_uint_gt(fs.n, 0);
        for (size_t i = 0; i < fs.n; i++)
            ck_assert_msg(strcmp(fs.source[i], "default") == 0, "cpu: field %s has source '%s'",
                          fs.key[i], fs.source[i]);
        return;
    }
    int prefer_line = line_of(name, "prefer:"), strict_line = line_of(name, "strict:");
    ck_assert_int_gt(prefer_line, 0);
    ck_assert_int_gt(strict_line, 0);
    assert_source(&fs, "prefer", name, prefer_line, 0);
    ck_assert_str_eq(fs.value[field_index(&fs, "prefer")], "flagos");
    assert_source(&fs, "strict", name, strict_line, 0);

    int backends_line = line_of(name, "op_backends:");
    int rms_line = line_of(name, "  rms_norm:");
    ck_assert_int_gt(rms_line, 0);
    assert_source(&fs, "op_backends.rms_norm", name, rms_line, backends_line);
    ck_assert_str_eq(fs.value[field_index(&fs, "op_backends.rms_norm")],
                     strcmp(name, "ascend") == 0 ? "vendor|flagos|reference"
                                                 : "flagos|vendor|reference");
    assert_source(&fs, "op_backends.attention_backend", name, line_of(name, "  attention_backend:"),
                  backends_line);

    /* The order reaches selection, with the file as its source. */
    fld_resolution *res = NULL;
    rc = fld_explain("rms_norm", FLD_DEVICE_CPU, FLD_DTYPE_F32, &res);
    ck_assert_msg(rc == FLD_OK, "fld_explain: %d %s", rc, fld_last_error());
    ck_assert_str_eq(res->order, fs.value[field_index(&fs, "op_backends.rms_norm")]);
    char want[32];
    snprintf(want, sizeof want, "%s.yaml", name);
    ck_assert_msg(strstr(res->order_source, want) != NULL, "order source '%s' does not name %s",
                  res->order_source, want);
    fld_resolution_free(res);

    if (strcmp(name, "rocm") == 0)
        return;
    size_t bl = field_index(&fs, "flagos_blacklist");
    assert_source(&fs, "flagos_blacklist", name, line_of(name, "flagos_blacklist:"), 0);
    ck_assert_ptr_nonnull(strstr(
        fs.value[bl], strcmp(name, "ascend") == 0 ? "argmax" : "deepseek_v4_fp8_einsum"));
    /* vllm-plugin-FL's latest Ascend list does not name silu_and_mul. */
    ck_assert_ptr_null(strstr(fs.value[bl], "silu"));
}
END_TEST

/* An environment variable replaces one field; the file keeps the others. */
START_TEST(test_env_overrides_file_field)
{
    setenv("VLLM_FL_PLATFORM", "nvidia", 1);
    setenv("VLLM_FL_PREFER", "vendor", 1);
    int rc = fld_init();
    ck_assert_msg(rc == FLD_OK, "fld_init: %d %s", rc, fld_last_error());
    static struct fields fs;
    memset(&fs, 0, sizeof fs);
    ck_assert_int_eq(fld_foreach_config_field(collect_field, &fs), 0);
    size_t prefer = field_index(&fs, "prefer");
    ck_assert_str_eq(fs.value[prefer], "vendor");
    ck_assert_str_eq(fs.source[prefer], "VLLM_FL_PREFER");
    assert_source(&fs, "strict", "nvidia", line_of("nvidia", "strict:"), 0);
    assert_source(&fs, "flagos_blacklist", "nvidia", line_of("nvidia", "flagos_blacklist:"), 0);
}
END_TEST

static Suite *platform_suite(void)
{
    Suite *s = suite_create("platform");
    TCase *tc = tcase_create("env");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_env_valid, 0, (int)(sizeof env_valid / sizeof env_valid[0]));
    tcase_add_loop_test(tc, test_env_foreign_platform, 0,
                        (int)(sizeof env_foreign / sizeof env_foreign[0]));
    tcase_add_loop_test(tc, test_env_invalid, 0, (int)(sizeof env_invalid / sizeof env_invalid[0]));
    tcase_add_test(tc, test_env_blank_is_unset);
    suite_add_tcase(s, tc);

    tc = tcase_create("detect");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_detect_topology, 0,
                        (int)(sizeof topologies / sizeof topologies[0]));
    tcase_add_test(tc, test_detect_hwloc_failure_not_fatal);
    tcase_add_loop_test(tc, test_detect_plugins, 0,
                        (int)(sizeof plugin_cases / sizeof plugin_cases[0]));
    tcase_add_test(tc, test_pci_before_plugins);
    suite_add_tcase(s, tc);

    tc = tcase_create("info");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_config_path);
    tcase_add_test(tc, test_null_argument);
    tcase_add_test(tc, test_reload_redetects);
    suite_add_tcase(s, tc);

    tc = tcase_create("files");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, test_shipped_file_loads, 0,
                        (int)(sizeof platforms / sizeof platforms[0]));
    tcase_add_test(tc, test_env_overrides_file_field);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tt_run_suite(platform_suite());
}
