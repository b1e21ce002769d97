"""python -m fldispatch ARGS: the fldispatch command-line tool of this
installation (list, resolve, config, verify, bench, doctor), which the
package carries in bin/ (a build tree: next to the library)."""

import os
import sys


def tool_path():
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (os.path.join(here, "bin", "fldispatch"),
                      os.path.join(os.path.realpath(os.path.join(here, "lib")), "..", "bin",
                                   "fldispatch")):
        if os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    return None


def main():
    path = tool_path()
    if path is None:
        sys.exit("fldispatch: the command-line tool is not part of this installation")
    os.execv(path, [path] + sys.argv[1:])


if __name__ == "__main__":
    main()
