/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which variant of the kernels runs: the best one that both the CPU (cpuid)
 * and the OS (xgetbv: the OS saves the wider registers on a context switch)
 * support, at or below the cap of VLLM_FL_CPU_ISA.
 *
 * Detection and choice are separate so the choice is a pure function of a
 * feature mask (the tests drive it with masks no machine here has).
 */
#include <stdio.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "runtime.h"

#define AVX2_NEEDS                                                                                 \
    (FLD_CPU_FEAT_AVX | FLD_CPU_FEAT_AVX2 | FLD_CPU_FEAT_FMA | FLD_CPU_FEAT_F16C | FLD_CPU_OS_AVX)
#define AVX512_NEEDS                                                                               \
    (AVX2_NEEDS | FLD_CPU_FEAT_AVX512F | FLD_CPU_FEAT_AVX512BW | FLD_CPU_FEAT_AVX512VL |           \
     FLD_CPU_FEAT_AVX512DQ | FLD_CPU_OS_AVX512)
#define OS_BITS (FLD_CPU_OS_AVX | FLD_CPU_OS_AVX512)

/*
 * Best first; the last one needs nothing. cpu_plugin.c maps the names to
 * the variants (struct fld_cpu_variant) in the same order.
 */
const char *const fld__cpu_isa_names[] = {
#if defined(__x86_64__)
    "avx512_bf16",
    "avx512",
    "avx2",
#elif defined(__aarch64__)
    "neon",
#endif
    "portable",
};

/* What each of them needs from the CPU and the OS. */
static const uint32_t isa_needs[] = {
#if defined(__x86_64__)
    AVX512_NEEDS | FLD_CPU_FEAT_AVX512_BF16,
    AVX512_NEEDS,
    AVX2_NEEDS,
#elif defined(__aarch64__)
    FLD_CPU_FEAT_NEON,
#endif
    0,
};

const int fld__cpu_isa_count = (int)(sizeof isa_needs / sizeof isa_needs[0]);

_Static_assert(sizeof isa_needs / sizeof isa_needs[0] ==
                   sizeof fld__cpu_isa_names / sizeof fld__cpu_isa_names[0],
               "isa_needs and fld__cpu_isa_names list the same variants");

#if defined(__x86_64__)
/* XCR0; only valid when CPUID says the OS enabled XSAVE (OSXSAVE). */
static uint64_t read_xcr0(void)
{
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

uint32_t fld__cpu_detect_features(void)
{
    unsigned eax, ebx, ecx, edx;
    uint32_t f = 0;
    if (!__get_cpuid_count(1, 0, &eax, &ebx, &ecx, &edx))
        return 0;
    if (ecx & (1u << 28))
        f |= FLD_CPU_FEAT_AVX;
    if (ecx & (1u << 12))
        f |= FLD_CPU_FEAT_FMA;
    if (ecx & (1u << 29))
        f |= FLD_CPU_FEAT_F16C;
    if (ecx & (1u << 27)) { /* OSXSAVE: xgetbv exists and XCR0 is meaningful */
        uint64_t xcr0 = read_xcr0();
        if ((xcr0 & 0x6u) == 0x6u)
            f |= FLD_CPU_OS_AVX;
        if ((xcr0 & 0xe6u) == 0xe6u)
            f |= FLD_CPU_OS_AVX512;
    }
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
        unsigned max_subleaf = eax;
        if (ebx & (1u << 5))
            f |= FLD_CPU_FEAT_AVX2;
        if (ebx & (1u << 16))
            f |= FLD_CPU_FEAT_AVX512F;
        if (ebx & (1u << 17))
            f |= FLD_CPU_FEAT_AVX512DQ;
        if (ebx & (1u << 30))
            f |= FLD_CPU_FEAT_AVX512BW;
        if (ebx & (1u << 31))
            f |= FLD_CPU_FEAT_AVX512VL;
        if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) &&
            (eax & (1u << 5)))
            f |= FLD_CPU_FEAT_AVX512_BF16;
    }
    return f;
}

bool fld__cpu_is_amd(void)
{
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx))
        return false;
    /* "AuthenticAMD" in ebx, edx, ecx */
    return ebx == 0x68747541u && edx == 0x69746e65u && ecx == 0x444d4163u;
}

bool fld__cpu_is_guest(void)
{
    unsigned eax, ebx, ecx, edx;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 31));
}
#elif defined(__aarch64__)
uint32_t fld__cpu_detect_features(void)
{
    return FLD_CPU_FEAT_NEON; /* Advanced SIMD is mandatory in AArch64 */
}

bool fld__cpu_is_amd(void)
{
    return false;
}

bool fld__cpu_is_guest(void)
{
    return false;
}
#else
uint32_t fld__cpu_detect_features(void)
{
    return 0;
}

bool fld__cpu_is_amd(void)
{
    return false;
}

bool fld__cpu_is_guest(void)
{
    return false;
}
#endif

/* Appends "; " (unless first) and text to buf. */
static void append(char *buf, size_t size, const char *text)
{
    size_t len = strlen(buf);
    if (len + 1 >= size)
        return;
    snprintf(buf + len, size - len, "%s%s", len ? "; " : "", text);
}

int fld__cpu_isa_choose(uint32_t features, const char *cap, char *why, size_t why_size)
{
    int first = 0;
    why[0] = '\0';
    if (cap) {
        first = -1;
        for (int i = 0; i < fld__cpu_isa_count; i++)
            if (strcmp(cap, fld__cpu_isa_names[i]) == 0)
                first = i;
        if (first < 0) {
            char valid[128] = "";
            for (int i = 0; i < fld__cpu_isa_count; i++) {
                size_t len = strlen(valid);
                snprintf(valid + len, sizeof valid - len, "%s%s", i ? ", " : "",
                         fld__cpu_isa_names[i]);
            }
            snprintf(why, why_size,
                     "VLLM_FL_CPU_ISA='%s' is not an instruction set of this build (valid: %s)",
                     cap, valid);
            return -1;
        }
    }
    int chosen = fld__cpu_isa_count - 1;
    for (int i = first; i < fld__cpu_isa_count; i++) {
        if ((features & isa_needs[i]) == isa_needs[i]) {
            chosen = i;
            break;
        }
    }

    char text[160];
    if (cap) {
        snprintf(text, sizeof text, "capped by VLLM_FL_CPU_ISA=%s", cap);
        append(why, why_size, text);
    }
    /* Every better variant the machine cannot run, grouped by the reason. */
    for (int pass = 0; pass < 2; pass++) {
        char names[96] = "";
        for (int i = 0; i < chosen; i++) {
            uint32_t missing = isa_needs[i] & ~features;
            if (!missing)
                continue;
            bool cpu_lacks = (missing & ~(uint32_t)OS_BITS) != 0;
            if (cpu_lacks != (pass == 0))
                continue;
            size_t len = strlen(names);
            snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                     fld__cpu_isa_names[i]);
        }
        if (names[0]) {
            snprintf(text, sizeof text, "%s not %s", names,
                     pass == 0 ? "supported by this CPU" : "enabled by the OS");
            append(why, why_size, text);
        }
    }
    return chosen;
}
