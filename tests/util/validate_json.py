# SPDX-License-Identifier: Apache-2.0
"""Checks one fldispatch --json document against its JSON Schema.

Usage: /usr/bin/python3 tests/util/validate_json.py SCHEMA [FILE]

Reads FILE (standard input without one) as bytes and checks, in order, that
it is valid UTF-8, that it is exactly one JSON value with no duplicate keys
and no NaN or Infinity, that SCHEMA is itself a valid draft 2020-12 schema,
and that the document validates against it. Prints every problem, with the
JSON path of each schema error, and exits 1; exits 0 when all is well, and 2
when it cannot run (no jsonschema module, a file it cannot read).

It needs Debian's python3-jsonschema (4.10 in bookworm) for /usr/bin/python3;
the tests run it with that interpreter, not the python3 first in PATH.
"""
import json
import sys


def fail_setup(message):
    print("validate_json: " + message, file=sys.stderr)
    sys.exit(2)


try:
    import jsonschema
except ImportError:
    fail_setup("the jsonschema module is missing for %s: install the Debian package "
               "python3-jsonschema (apt-get install python3-jsonschema)" % sys.executable)


def no_duplicates(pairs):
    seen = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError("duplicate key %r" % key)
        seen[key] = value
    return seen


def no_constant(name):
    raise ValueError("%s is not JSON" % name)


def clipped(message, limit=300):
    return message if len(message) <= limit else message[:limit] + "..."


def where(path):
    return "$" + "".join("[%d]" % p if isinstance(p, int) else "." + str(p) for p in path)


def main(argv):
    if len(argv) not in (2, 3):
        fail_setup("usage: validate_json.py SCHEMA [FILE]")
    try:
        with open(argv[1], "rb") as f:
            schema = json.loads(f.read().decode("utf-8"))
        if len(argv) == 3:
            with open(argv[2], "rb") as f:
                data = f.read()
        else:
            data = sys.stdin.buffer.read()
    except (OSError, ValueError) as e:
        fail_setup(str(e))

    try:
        text = data.decode("utf-8", errors="strict")
    except UnicodeDecodeError as e:
        print("not valid UTF-8: byte 0x%02x at offset %d" % (data[e.start], e.start))
        return 1
    try:
        doc = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except ValueError as e:
        print("not valid JSON: %s" % e)
        return 1

    validator_class = jsonschema.validators.validator_for(schema)
    try:
        validator_class.check_schema(schema)
    except jsonschema.exceptions.SchemaError as e:
        print("%s is not a valid schema: %s" % (argv[1], e.message))
        return 1
    errors = sorted(validator_class(schema).iter_errors(doc), key=lambda e: list(e.absolute_path))
    for error in errors:
        print("%s: %s" % (where(error.absolute_path), clipped(error.message)))
        # A oneOf/anyOf failure says little alone: show why each branch failed.
        for sub in sorted(error.context or [], key=lambda s: list(s.absolute_path))[:12]:
            print("    %s: %s" % (where(sub.absolute_path), clipped(sub.message)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
