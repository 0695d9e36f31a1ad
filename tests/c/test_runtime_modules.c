/* The module table (dsm/module.h): every module gets its index as its slot
 * and a block of handler ids of its own count, packed in table order inside
 * the modules' range; the published list names them in that order; and a
 * module outside the table is refused by dsm_node_add_module. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "dsm/sdk.h"
#include "dsm/module.h"
#include "runtime/internal.h"

static void test_ids_from_table(void **state)
{
    (void)state;
    assert_int_equal(dsm_modules_assign(), DSM_OK);
    assert_true(dsm_module_count >= 1 && dsm_module_count <= DSM_NODE_MAX_MODULES);
    unsigned next = DSM_AM_MODULE_FIRST;
    char want[512] = "";
    for (size_t i = 0; i < dsm_module_count; i++) {
        const dsm_module_t *m = dsm_module_table[i];
        assert_int_equal(m->slot, (int)i);
        assert_int_equal(m->am_base, next);
        assert_true(m->am_count > 0 && m->handlers != NULL && m->attach != NULL && m->detach != NULL);
        assert_ptr_equal(dsm_module_find(m->name), m);
        next += m->am_count;
        char part[64];
        snprintf(part, sizeof part, "%s%s:%u", i ? " " : "", m->name, m->am_count);
        strcat(want, part);
    }
    assert_true(next <= DSM_AM_USER_FIRST);
    assert_string_equal(dsm_modules_signature(), want);
    assert_null(dsm_module_find("no-such-module"));
    /* The mechanisms dsm_start attaches are all in it. */
    const char *names[] = {"heap", "deleg", "own", "dir", "compact", "mheap", "chan"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) assert_non_null(dsm_module_find(names[i]));
}

static void nop(void *ctx, const dsm_am_msg_t *msg) { (void)ctx; (void)msg; }

static void test_stranger_refused(void **state)
{
    (void)state;
    /* A descriptor that is not in the table gets no ids: refused before it
     * could take another module's slot (checked before the node is). */
    static const dsm_am_handler_t handlers[1] = {nop};
    static dsm_module_t stranger = {.name = "stranger", .am_count = 1, .handlers = handlers};
    int st = 0;
    assert_int_equal(dsm_node_add_module(NULL, &stranger, &st), DSM_ERR_STATE);
    assert_int_equal(dsm_node_add_module(NULL, dsm_module_table[0], &st), DSM_ERR_INVALID);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ids_from_table),
        cmocka_unit_test(test_stranger_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
