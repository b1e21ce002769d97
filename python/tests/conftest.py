# SPDX-License-Identifier: Apache-2.0
"""Shared set-up of the Python tests (run by `make check`, or by hand:
PYTHONPATH=build/python python3 -m pytest python/tests).

As tests/run.sh does for the C tests, the caller's VLLM_FL_* variables are
removed and the platform is pinned to cpu before the library initialises.
"""

import os

for _name in [n for n in os.environ if n.startswith("VLLM_FL_")]:
    del os.environ[_name]
for _name in ("USE_FLAGGEMS", "HWLOC_XMLFILE", "HWLOC_FORCE_XMLFILE"):
    os.environ.pop(_name, None)
os.environ["VLLM_FL_PLATFORM"] = "cpu"
# make check CPU_ISA=avx2: the whole run on a capped kernel variant.
if os.environ.get("FLD_CHECK_CPU_ISA"):
    os.environ["VLLM_FL_CPU_ISA"] = os.environ["FLD_CHECK_CPU_ISA"]

import pytest  # noqa: E402

import fldispatch  # noqa: E402

# Where make check puts the fixture plugins (python/tests/plugins/*.c).
FIXTURES = os.environ.get("FLDPY_TEST_FIXTURES", "")


def fixture_plugin(name):
    path = os.path.join(FIXTURES, f"fld-{name}.so") if FIXTURES else ""
    if not path or not os.path.exists(path):
        pytest.skip(f"fixture plugin fld-{name}.so not built (make check builds it; "
                    "set FLDPY_TEST_FIXTURES to its directory)")
    return path


# The two policies the kernel grids run under: the library's default (the
# cpu plugin's vendor.cpu kernels) and prefer=reference (reference.c).
POLICIES = ("default", "reference")


@pytest.fixture(params=POLICIES)
def policy(request):
    if request.param == "default":
        assert fldispatch.resolve("silu_and_mul") != "reference.c"
        yield request.param
    else:
        with fldispatch.policy(prefer="reference"):
            assert fldispatch.resolve("silu_and_mul") == "reference.c"
            yield request.param


def unserved_device():
    """A device no loaded plugin can serve here (no driver, no runtime)."""
    for device in ("ascend", "rocm", "cuda"):
        if fldispatch.explain("silu_and_mul", device)["selected"] is None:
            return device
    pytest.skip("every device type has an available plugin on this machine")
