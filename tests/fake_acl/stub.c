/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libnnopbase.so and libopapi.so of the fake CANN: empty libraries that
 * depend on the fake libascendcl.so, where every function lives (one shared
 * state for the whole fake).
 */
int fake_acl_stub_marker(void);
int fake_acl_stub_marker(void)
{
    return 0;
}
