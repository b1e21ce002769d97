/* SPDX-License-Identifier: Apache-2.0 */
/* Argument validators of the catalog ops' families (used by the schema table). */
#ifndef FLD_CORE_VALIDATE_H
#define FLD_CORE_VALIDATE_H

#include "ops.h"

int fld__validate_activation(const char *op, const void *args, struct fld_call_key *key);
int fld__validate_elementwise(const char *op, const void *args, struct fld_call_key *key);
int fld__validate_rms_norm(const char *op, const void *args, struct fld_call_key *key);
int fld__validate_rotary(const char *op, const void *args, struct fld_call_key *key);
int fld__validate_rotary_out(const char *op, const void *args, struct fld_call_key *key);
int fld__validate_attention(const char *op, const void *args, struct fld_call_key *key);

/*
 * The bytes a tensor that passed its validator spans, from its first element
 * (data + byte_offset) past its last; 0 when it is empty. split: 1, or for a
 * rotary query or key its rank minus the positions' rank.
 */
uint64_t fld__tensor_span(const DLTensor *t, int split);

#endif
