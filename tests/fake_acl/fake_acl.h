/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Test-only queries of the fake CANN library (tests/fake_acl/fake_acl.c).
 * A test dlopen()s $(FLD_BUILDDIR)/tests/fake_acl/lib64/libascendcl.so,
 * the same object the ascend plugin opened, and dlsym()s these.
 */
#ifndef FLD_TESTS_FAKE_ACL_H
#define FLD_TESTS_FAKE_ACL_H

/* Live aclTensor and aclScalar descriptors, unrun executors and aclrtMalloc blocks. */
typedef int (*fake_acl_count_fn)(void);
/* Protocol violations seen so far, and the last one's text. */
typedef const char *(*fake_acl_text_fn)(void);
typedef void (*fake_acl_reset_fn)(void);

/*
 * Exported names:
 *   int fake_acl_live_tensors(void), fake_acl_live_executors(void),
 *       fake_acl_live_scalars(void), fake_acl_live_allocs(void),
 *       fake_acl_violations(void),
 *       fake_acl_inits(void)
 *   const char *fake_acl_last_violation(void)
 *   const char *fake_acl_log(void)  -- one line per call:
 *       "<function> [key=value ...]"
 *   void fake_acl_log_reset(void)
 *
 * Environment read on every call:
 *   FAKE_ACL_DEVICES=N      device count (default 1)
 *   FAKE_ACL_FAIL=f1,f2     those functions fail (aclCreateTensor: NULL)
 *   FAKE_ACL_WORKSPACE=N    workspace size every GetWorkspaceSize returns
 *                           (default: a fixed size per operator, see
 *                           fake_acl.c)
 *   FAKE_ACL_LOG=path       the log lines are also appended to that file
 */

#endif
