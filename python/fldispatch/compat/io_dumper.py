# SPDX-License-Identifier: Apache-2.0
"""vllm_fl.dispatch.io_dumper: fldispatch.iodump under upstream's module name.

This name and fldispatch.iodump are one module object, so state read or
patched through either is the same.
"""

import sys

from .. import iodump

sys.modules[__name__] = iodump
