# SPDX-License-Identifier: Apache-2.0
"""A program's calls into fldispatch as a type checker sees them through the
package's types (py.typed, _C.pyi). make lint's mypy checks this file with
the package (python/pyproject.toml), never runs it. Each line marked
`# type: ignore[code]` is a call the types must refuse: mypy's
warn_unused_ignores fails the check where one is accepted, so the refusals
are tested as well as the acceptances."""

from typing import Any

import fldispatch
import fldispatch.registry
from fldispatch import compat
from fldispatch.json_types import CallCounts, Explanation


def calls(out: Any, x: Any, weight: Any) -> None:
    # the catalog's ops, as the catalog declares them (_ops.pyi)
    fldispatch.rms_norm(out, x, weight, eps=1e-6)
    fldispatch.rms_norm(out, x, None, residual=x)
    fldispatch.silu_and_mul(out, x)
    fldispatch.rotary_embedding(x, x, None, 128, x, True)
    backend: str = fldispatch.attention_backend("cuda", use_mla=True)
    fldispatch.rms_norm(out, x, eps="1e-6")  # type: ignore[arg-type]
    fldispatch.silu_and_mul(out)  # type: ignore[call-arg]
    fldispatch.rms_nrom(out, x)  # type: ignore[attr-defined]
    nothing: int = fldispatch.silu_and_mul(out, x)  # type: ignore[assignment, func-returns-value]
    print(backend, nothing)
    impl: str = fldispatch.resolve("rms_norm", "cuda", "bf16")
    why: Explanation = fldispatch.explain("rms_norm")
    selected: str | None = why["selected"]
    print(impl, selected, why["candidates"][0], fldispatch.OPS, fldispatch.__version__)
    print(why["selectd"])  # type: ignore[typeddict-item]
    first: str = why["selected"]  # type: ignore[assignment]
    print(first)
    fldispatch.call_op("rms_norm", out, x, weight, eps=1e-6)
    norm = fldispatch.prepare("rms_norm", out, x, weight)
    norm(out, x, weight)

    fldispatch.resolve(op="rms_norm")
    fldispatch.call_op(name="rms_norm")  # type: ignore[call-arg]
    fldispatch.load_plugin(path="/x.so")  # type: ignore[call-arg]
    n: int = fldispatch.resolve("rms_norm")  # type: ignore[assignment]
    print(n)


def policy_and_state() -> None:
    with fldispatch.policy(prefer="reference", deny_vendors=["amd"]):
        pass
    fldispatch.set_policy(per_op={"rms_norm": ["vendor", "reference"]}, strict=True)
    fldispatch.set_policy(strict="yes")  # type: ignore[arg-type]
    fldispatch.reset_policy()
    for op, device, dtype, impl_id in fldispatch.failed_impls():
        print(op.upper(), device, dtype, impl_id)
    for p in fldispatch.plugins():
        print(p["name"], p["impl_count"] + 1)
    fldispatch.set_log_level("info")
    fldispatch.stats_enable("calls")
    counters: list[CallCounts] = fldispatch.stats()
    print(sum(c["calls"] for c in counters), fldispatch.get_stream("cuda"))
    for entry in fldispatch.config()["policy"]:
        print(entry["key"], entry["value"], entry["source"])
    print(fldispatch.config()["platform"]["name"], [m["impl_id"] for m in fldispatch.impls()])
    try:
        fldispatch.reload()
    except fldispatch.ConfigError as exc:
        status: int = exc.status  # a subclass's status is an int
        print(status)
    except fldispatch.Error as exc:
        print(exc.status + 1)  # type: ignore[operator]  # the base class's may be None


def my_silu(out: Any, x: Any) -> None:
    pass


def registration() -> None:
    fldispatch.register_impl("silu_and_mul", my_silu, impl_id="vendor.acme", kind="vendor",
                             vendor="acme", priority=110, devices=["cuda"])
    fldispatch.register_impl("silu_and_mul", my_silu, kind="vendor")  # type: ignore[call-arg]
    fldispatch.register_impl("silu_and_mul", "my_silu", impl_id="a", kind="vendor")  # type: ignore[arg-type]
    with fldispatch.registering(plugin="acme"):
        fldispatch.register_impl("silu_and_mul", my_silu, impl_id="vendor.acme", kind="vendor",
                                 vendor="acme")
    fldispatch.declare_op("my_op", "(Tensor(a!) out, Tensor x) -> ()")
    fldispatch.registry.discover_plugins()
    print(compat.OpImpl)


def register(registry: fldispatch.registering) -> None:
    """A Python plugin's register function, as discovery calls it."""
    registry.register_impl("silu_and_mul", my_silu, impl_id="vendor.acme", kind="vendor", vendor="acme")
    registry.register_many([compat.OpImpl(op_name="silu_and_mul", impl_id="vendor.acme2",
                                          kind=compat.BackendImplKind.VENDOR, fn=my_silu, vendor="acme")])
    registry.register_many(my_silu)  # type: ignore[arg-type]
