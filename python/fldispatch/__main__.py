# SPDX-License-Identifier: Apache-2.0
"""python -m fldispatch ARGS: the fldispatch command-line tool of this
installation (list, resolve, config, verify, bench, doctor), which the
package carries in bin/ (a build tree: next to the library).

list, resolve, config, verify and tune run inside this Python process when
the package has the tool as a shared object (_tool.so, built by `make
python`): they then see the Python implementations and plugins
(fldispatch.register_impl, entry points, the flagos tier) as the library in
this process has them, and verify and tune run the Python implementations
too (tune times them beside the C ones and may pin them in its manifest). The other commands, or a package
without _tool.so, run the tool program itself (a process of its own, which
sees the C plugins only).

Ctrl-C ends an in-process command as it ends the tool program (SIGINT, at
once, nothing more written), also while a Python implementation runs; an
implementation that raises KeyboardInterrupt or SystemExit ends it too,
instead of declining its calls (the tool has no caller to hand them to).
Arguments reach the tool as the bytes the command line held (os.fsencode).

tune with --device cuda or rocm alone (or --timer) is the GPU tune of
fldispatch.tune_gpu instead: device time under CUDA-graph replay, measured
through PyTorch, so that Python implementations, which launch on PyTorch's
stream, are captured too; without a PyTorch that has the device it says why
and exits 2. A list with the cpu stays the tool's tune, which captures
through the device plugin's graph hooks.
"""

import os
import sys
from typing import NoReturn


def tool_path() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "bin", "fldispatch"),
                      os.path.join(os.path.realpath(os.path.join(here, "lib")), "..", "bin",
                                   "fldispatch")):
        if os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return None


IN_PROCESS = ("list", "resolve", "config", "verify", "tune")


def run_in_process(argv: list[str]) -> int | None:
    """The tool's main() in this process, after the Python plugins are loaded;
    None when the package has no _tool.so."""
    import ctypes

    here = os.path.dirname(os.path.abspath(__file__))
    so = os.path.join(here, "_tool.so")
    if not os.path.exists(so):
        return None
    import signal

    import fldispatch
    fldispatch.registry._ensure_plugins()
    sys.stdout.flush()
    tool = ctypes.PyDLL(so)  # keeps the GIL: Python implementations may run (verify)
    args = [b"fldispatch"] + [os.fsencode(a) for a in argv]
    c_argv = (ctypes.c_char_p * (len(args) + 1))(*args, None)
    # Python's SIGINT handler only sets a flag that the tool's C loops never
    # look at: the default action instead, as the tool program has (an
    # ignored SIGINT, as in a background job, stays ignored).
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    fldispatch._C._interrupts_end_process(True)
    try:
        rc = tool.fld_tool_main(len(args), c_argv)
    finally:
        fldispatch._C._interrupts_end_process(False)
        if handler is signal.default_int_handler:
            signal.signal(signal.SIGINT, handler)
    ctypes.CDLL(None).fflush(None)
    return rc


def gpu_tune(argv: list[str]) -> bool:
    """Whether `tune ARGS` is the GPU tune: --device cuda or rocm (a list with the cpu
    stays the tool's, which times a GPU through the device plugin's graph hooks), or --timer."""
    it = iter(argv)
    for a in it:
        name, eq, value = a.partition("=")
        if name == "--timer":
            return True
        if name == "--device":
            value = value if eq else next(it, "")
            from fldispatch import devices

            if value in devices.TORCH_BUILT:
                return True
    return False


def main() -> NoReturn:
    if len(sys.argv) > 1 and sys.argv[1] == "tune" and gpu_tune(sys.argv[2:]):
        from fldispatch import tune_gpu

        sys.exit(tune_gpu.main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] in IN_PROCESS:
        try:
            rc = run_in_process(sys.argv[1:])
        except KeyboardInterrupt:
            # Ctrl-C while the Python plugins load: ended as the tool would be,
            # by SIGINT, without a traceback
            import signal

            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
            raise
        if rc is not None:
            sys.exit(rc)
    path = tool_path()
    if path is None:
        sys.exit("fldispatch: the command-line tool is not part of this installation")
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
