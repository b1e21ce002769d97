# SPDX-License-Identifier: Apache-2.0
# Included by the top-level Makefile like every tests/*/tests.mk. The fuzzers
# are not part of make check (they need clang): see fuzz.mk.
include tests/fuzz/fuzz.mk
