# SPDX-License-Identifier: Apache-2.0
"""The ABI record of the native torch kernels (_torch_ops.so): the torch and
the Python a build compiled them against. The build writes it next to the
.so (this file run as a script, without importing the package);
fldispatch.torch loads the .so only when the record equals this process's."""

import sys


def record() -> str:
    import torch

    return f"torch={torch.__version__} python={sys.version_info[0]}.{sys.version_info[1]}"


if __name__ == "__main__":
    print(record())
