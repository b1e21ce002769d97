# SPDX-License-Identifier: Apache-2.0
"""The user guide's synopsis of the command-line tool (docs/user-guide.md,
"Command-line tool") names, for each command, the options that the tool's
own usage (`fldispatch help COMMAND`) names: a new option in the tool and not
in the guide, or one the tool dropped, fails here."""

import re
import subprocess
from pathlib import Path

import pytest

from fldispatch.__main__ import tool_path

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"
# In the synopsis block, a line indented this far continues a description.
DESCRIPTION_COLUMN = 59
OPTION = re.compile(r"--[a-z][a-z0-9-]*")


def guide_synopsis():
    """{command: the options its synopsis lines name}."""
    text = GUIDE.read_text()
    block = re.search(r"^## Command-line tool\n+```\n(.*?)^```", text, re.S | re.M)
    assert block, f"{GUIDE}: no synopsis block under '## Command-line tool'"
    commands: dict[str, set[str]]
    commands, current = {}, None
    for line in block.group(1).splitlines():
        head = re.match(r"fldispatch (\w+) *", line)
        if head:
            current, rest = head.group(1), line[head.end():]
        elif len(line) - len(line.lstrip()) < DESCRIPTION_COLUMN:
            rest = line.strip()  # a continuation of the synopsis
        else:
            continue  # a description's continuation
        # The synopsis ends where three spaces or more lead to the description.
        if current and current != "help":
            synopsis = re.split(r" {3,}", rest)[0]
            commands.setdefault(current, set()).update(OPTION.findall(synopsis))
    return commands


def tool_usage(command):
    """The options that the Usage lines of `fldispatch help COMMAND` name."""
    tool = tool_path()
    if tool is None:
        pytest.skip("the fldispatch tool is not built next to this package")
    r = subprocess.run([tool, "help", command], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    usage = re.search(r"^Usage: (.*?)\n\n", r.stdout, re.S | re.M)
    assert usage, r.stdout
    return set(OPTION.findall(usage.group(1)))


SYNOPSIS = guide_synopsis()


def test_the_guide_has_a_synopsis_of_every_command():
    assert {"list", "resolve", "config", "freeze", "verify", "bench", "doctor", "tune"} <= set(SYNOPSIS)


@pytest.mark.parametrize("command", sorted(SYNOPSIS))
def test_the_guides_synopsis_names_the_tools_options(command):
    documented, usage = SYNOPSIS[command], tool_usage(command)
    assert documented == usage, (f"docs/user-guide.md's synopsis of '{command}': missing "
                                 f"{sorted(usage - documented)}, not in the tool {sorted(documented - usage)}")
