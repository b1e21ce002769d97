/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The platform: which kind of machine this is (cpu, nvidia, rocm, ascend),
 * how that was decided, and where its platform file lives.
 *
 * Decided by VLLM_FL_PLATFORM when set (cpu, cuda or nvidia, rocm, ascend;
 * anything else is FLD_ECONFIG), else by hwloc's PCI enumeration (NVIDIA
 * 0x10de display controllers, AMD 0x1002 display or processing
 * accelerators, Huawei 0x19e5 processing accelerators), else by plugin
 * availability (an available implementation for that device), else cpu.
 * HWLOC_XMLFILE (hwloc's own variable) makes hwloc read a saved topology,
 * which the tests use to fake machines.
 */
#ifndef FLD_CORE_PLATFORM_H
#define FLD_CORE_PLATFORM_H

#include <limits.h>

struct fld_platform {
    char name[16];              /* "cpu", "nvidia", "rocm", "ascend" */
    char detected_by[256];      /* "VLLM_FL_PLATFORM", "PCI device 10de:2330 (class 0302)", ... */
    char config_file[PATH_MAX]; /* the platform file found, or "" */
};

/*
 * Decides the platform. Host lock held (plugin availability is read from the
 * registry). FLD_ECONFIG for an invalid VLLM_FL_PLATFORM.
 */
int fld__platform_detect(struct fld_platform *out);

/* Records the platform in force (for fld_platform()). Host lock held. */
void fld__platform_set_current(const struct fld_platform *p);
/* Forgets the current platform (fld_shutdown: its copy is freed with the retire list). */
void fld__platform_shutdown(void);

#endif
