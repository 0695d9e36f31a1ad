/* A node's pool of job threads: the threads that run the functions peers
 * spawn here. A job goes to a thread that waits for one (a wake-up), and a
 * new thread starts only when every pooled thread is busy; a thread that
 * finishes its job waits for the next: a wake-up costs a fraction of a
 * thread's start. The pool holds at most
 * as many threads as jobs ever ran here at once (DSM_SPAWN_MAX_RUNNING
 * bounds peers' spawns; a node's spawns to itself are its own to bound);
 * dsm_spawn_pool_destroy joins every one. */
#include <stdlib.h>

#include "runtime/internal.h"
#include "runtime/node_internal.h"
#include "util/thread.h"

typedef struct pool_job {
    void (*fn)(void *arg);
    void *arg;
    struct pool_job *next;
} pool_job_t;

struct dsm_spawn_pool {
    pthread_mutex_t lock;   /* everything below */
    pthread_cond_t cond;    /* a job queued, or closing */
    pool_job_t *head, *tail;
    unsigned queued, idle;  /* jobs no thread took yet; threads waiting for one */
    int closing;
    pthread_t *threads;
    unsigned n_threads, cap_threads;
};

dsm_spawn_pool_t *dsm_spawn_pool_new(void)
{
    dsm_spawn_pool_t *p = calloc(1, sizeof *p);
    if (p == NULL)
        return NULL;
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    return p;
}

static void *pool_main(void *arg)
{
    dsm_spawn_pool_t *p = arg;
    dsm_thread_name("dsm-spawn", -1);
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->head == NULL && !p->closing) {
            p->idle++;
            pthread_cond_wait(&p->cond, &p->lock);
            p->idle--;
        }
        if (p->head == NULL)   /* closing, and nothing left to run */
            break;
        pool_job_t *j = p->head;
        p->head = j->next;
        if (p->head == NULL)
            p->tail = NULL;
        p->queued--;
        pthread_mutex_unlock(&p->lock);
        j->fn(j->arg);
        free(j);
        pthread_mutex_lock(&p->lock);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

dsm_status_t dsm_spawn_pool_run(dsm_spawn_pool_t *p, void (*fn)(void *arg), void *arg)
{
    pool_job_t *j = malloc(sizeof *j);
    if (j == NULL)
        return DSM_ERR_NOMEM;
    *j = (pool_job_t){.fn = fn, .arg = arg};
    dsm_status_t st = DSM_OK;
    pthread_mutex_lock(&p->lock);
    if (p->closing) {
        st = DSM_ERR_CLOSED;
    } else if (p->queued + 1 > p->idle) {
        /* every waiting thread already has a job coming: one more thread */
        if (p->n_threads == p->cap_threads) {
            unsigned cap = p->cap_threads ? 2 * p->cap_threads : 8;
            pthread_t *t = realloc(p->threads, cap * sizeof *t);
            if (t == NULL)
                st = DSM_ERR_NOMEM;
            else {
                p->threads = t;
                p->cap_threads = cap;
            }
        }
        if (st == DSM_OK && dsm_thread_start(&p->threads[p->n_threads], NULL, pool_main, p) != 0)
            st = DSM_ERR_NOMEM;
        if (st == DSM_OK)
            p->n_threads++;
    }
    if (st == DSM_OK) {
        if (p->tail)
            p->tail->next = j;
        else
            p->head = j;
        p->tail = j;
        p->queued++;
        pthread_cond_signal(&p->cond);
    }
    pthread_mutex_unlock(&p->lock);
    if (st != DSM_OK)
        free(j);
    return st;
}

unsigned dsm_spawn_pool_threads(dsm_spawn_pool_t *p)
{
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    unsigned n = p->n_threads;
    pthread_mutex_unlock(&p->lock);
    return n;
}

unsigned dsm_spawn_pool_idle(dsm_spawn_pool_t *p)
{
    if (p == NULL)
        return 0;
    pthread_mutex_lock(&p->lock);
    unsigned n = p->idle;
    pthread_mutex_unlock(&p->lock);
    return n;
}

void dsm_spawn_pool_destroy(dsm_spawn_pool_t *p)
{
    if (p == NULL)
        return;
    /* queued jobs still run (each owes its caller a reply): the threads
     * leave once the queue is empty */
    pthread_mutex_lock(&p->lock);
    p->closing = 1;
    pthread_cond_broadcast(&p->cond);
    unsigned n = p->n_threads;
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < n; i++)
        pthread_join(p->threads[i], NULL);
    free(p->threads);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    free(p);
}
