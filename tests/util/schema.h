/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test helper: a --json output checked against its published JSON Schema
 * (docs/schemas/<command>.schema.json) by a real validator.
 *
 *   tt_tool_run(&r, NO_ENV, ARGS("list", "--json"));
 *   tt_assert_schema(r.out, "list");
 *
 * The check runs tests/util/validate_json.py under /usr/bin/python3, the
 * interpreter Debian's python3-jsonschema is installed for ($FLD_TEST_PYTHON
 * overrides it); the sources are found through $FLD_SRCDIR (make check sets
 * it). It fails the test through Check with the validator's findings: bytes
 * that are not UTF-8, JSON errors, each schema error with its JSON path, or
 * the package to install when the jsonschema module is missing.
 */
#ifndef FLD_TESTS_UTIL_SCHEMA_H
#define FLD_TESTS_UTIL_SCHEMA_H

/*
 * Runs the validator on text against docs/schemas/<schema>.schema.json and
 * returns its exit status (0 valid, 1 invalid, 2 could not run; 128 + N
 * when killed by signal N); its output, NUL-terminated and malloc'd, in
 * *report unless report is NULL. python NULL: the default interpreter.
 */
int tt_validate_json(const char *text, const char *schema, const char *python, char **report);

/* tt_validate_json() with the default interpreter; fails the test unless text is valid. */
void tt_assert_schema(const char *text, const char *schema);

#endif
