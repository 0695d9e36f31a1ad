/* Negative test switches: in a test build (DSM_TESTS=ON defines
 * DSM_TEST_SWITCHES), DSM_TEST_BREAK=name[,name...] removes one ordering or
 * check a protocol needs, so a test can show that its check catches the
 * violation. Other builds compile every switch to 0: nothing to pay, nothing
 * to misuse. */
#ifndef DSM_UTIL_TEST_SWITCH_H
#define DSM_UTIL_TEST_SWITCH_H

#ifdef DSM_TEST_SWITCHES
/* Nonzero when DSM_TEST_BREAK (read once) names this switch. */
int dsm_test_switch(const char *name);
#else
#define dsm_test_switch(name) 0
#endif

#endif
