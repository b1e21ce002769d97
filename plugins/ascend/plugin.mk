# SPDX-License-Identifier: Apache-2.0
# The ascend plugin needs no SDK: CANN is opened with dlopen() at load time.
PLUGIN_LIBS_ascend = -ldl
