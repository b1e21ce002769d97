/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Escaping of text that leaves the library (see escape.h). A small UTF-8
 * decoder that follows the well-formed byte sequences of Unicode (table 3-7):
 * anything else is escaped byte by byte.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

/*
 * The length of the well-formed UTF-8 sequence at s (1 to 4) with its code
 * point in *cp, or 0 when the byte at s does not start one.
 */
static size_t decode(const unsigned char *s, uint32_t *cp)
{
    unsigned char b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (b >= 0xc2 && b <= 0xdf) {
        n = 2;
        *cp = b & 0x1fu;
    } else if (b >= 0xe0 && b <= 0xef) {
        n = 3;
        *cp = b & 0x0fu;
        if (b == 0xe0)
            lo = 0xa0; /* no overlong forms */
        else if (b == 0xed)
            hi = 0x9f; /* no surrogates */
    } else if (b >= 0xf0 && b <= 0xf4) {
        n = 4;
        *cp = b & 0x07u;
        if (b == 0xf0)
            lo = 0x90;
        else if (b == 0xf4)
            hi = 0x8f; /* nothing past U+10FFFF */
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        unsigned char c = s[i]; /* a NUL ends the string and fails the range test */
        if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xbf))
            return 0;
        *cp = (*cp << 6) | (c & 0x3fu);
    }
    return n;
}

static bool shown_as_escape(uint32_t cp)
{
    return cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f) ||
           (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

bool fld__needs_escape(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        if (*p >= 0x20 && *p < 0x7f) {
            p++;
            continue;
        }
        uint32_t cp;
        size_t n = decode(p, &cp);
        if (n == 0 || shown_as_escape(cp))
            return true;
        p += n;
    }
    return false;
}

char *fld__escape(char *dst, size_t size, const char *src)
{
    if (size == 0)
        return dst;
    const unsigned char *p = (const unsigned char *)(src ? src : "");
    size_t out = 0;
    while (*p) {
        char piece[8];
        size_t len;
        uint32_t cp;
        size_t n = decode(p, &cp);
        if (n == 0) {
            len = (size_t)snprintf(piece, sizeof piece, "\\x%02x", *p);
            n = 1;
        } else if (shown_as_escape(cp)) {
            len = cp < 0x80 ? (size_t)snprintf(piece, sizeof piece, "\\x%02x", (unsigned)cp)
                            : (size_t)snprintf(piece, sizeof piece, "\\u%04x", (unsigned)cp);
        } else {
            memcpy(piece, p, n);
            len = n;
        }
        if (out + len >= size)
            break;
        memcpy(dst + out, piece, len);
        out += len;
        p += n;
    }
    dst[out] = '\0';
    return dst;
}

void fld__escape_in_place(char *buf, size_t size)
{
    if (size == 0 || !fld__needs_escape(buf))
        return;
    char local[2048];
    size_t len = strnlen(buf, size - 1);
    char *copy = len < sizeof local ? local : malloc(len + 1);
    if (!copy) {
        buf[0] = '\0'; /* out of memory: no text rather than unescaped text */
        return;
    }
    memcpy(copy, buf, len);
    copy[len] = '\0';
    fld__escape(buf, size, copy);
    if (copy != local)
        free(copy);
}

void fld__json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}
