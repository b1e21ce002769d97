/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Growable arrays: an item pointer, a count and a capacity, kept by their
 * owner (a struct with `items`, `n`, `cap`). VEC_RESERVE makes room for one
 * more item, so that the owner appends with `items[n++] = x`.
 */
#ifndef FLD_TOOLS_VEC_H
#define FLD_TOOLS_VEC_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/*
 * Room for one more item in the array whose pointer is at *itemsp (an
 * array of items of `size` bytes, n of them used, *cap allocated): when it
 * is full the capacity doubles, or becomes `first` when it is empty. 0, or
 * -1 when the new size overflows or memory runs out; then the array and
 * *cap are as they were. The pointer is read and written through memcpy so
 * that any item type's pointer can be passed (VEC_RESERVE does).
 */
static inline int vec_reserve_(void *itemsp, size_t n, size_t *cap, size_t size, size_t first)
{
    void *items, *grown;
    size_t want;
    if (n < *cap)
        return 0;
    if (*cap == 0)
        want = first ? first : 1;
    else if (*cap <= SIZE_MAX / 2)
        want = 2 * *cap;
    else
        return -1;
    if (want > SIZE_MAX / size)
        return -1;
    memcpy(&items, itemsp, sizeof items);
    if (!(grown = realloc(items, want * size)))
        return -1;
    memcpy(itemsp, &grown, sizeof grown);
    *cap = want;
    return 0;
}

/* VEC_RESERVE(o->items, o->n, o->cap, 16): 0, or -1 (nothing changed). */
#define VEC_RESERVE(items, n, cap, first)                                                          \
    vec_reserve_(&(items), (n), &(cap), sizeof *(items), (first))

#endif
