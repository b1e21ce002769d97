/* SPDX-License-Identifier: Apache-2.0 */
/* The fixture plugin of tests/plugins/sig_ops.c, built for the Python tests too. */
#include "../../../tests/plugins/sig_ops.c"
