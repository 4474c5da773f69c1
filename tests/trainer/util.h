/* util.h: helpers shared by the trainer tests. */
#ifndef HR_TEST_TRAINER_UTIL_H
#define HR_TEST_TRAINER_UTIL_H

#include "cluster/hr_node.h"
#include "cluster/trainer_setup.h"
#include "conf/cfg.h"
#include "tests/blas_main.h"
#include "tests/check.h"
#include "tests/ports.h"
#include "trainer/train.h"

#include <pthread.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh temporary directory (removed by the test at the end with rm_rf). */
static inline void tmpdir(char *buf, size_t len) {
    snprintf(buf, len, "/tmp/hr-trainer-test-XXXXXX");
    if (!mkdtemp(buf)) {
        perror("mkdtemp");
        exit(2);
    }
}

static inline void rm_rf(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
}

/* The main of a test that works in the temporary directory dir (len bytes): choose the BLAS, make
 * dir, run cases[] up to its NULL, remove dir; the exit status. */
static inline int tmpdir_main(char **argv, char *dir, size_t len, void (*const cases[])(void)) {
    test_blas_main(argv);
    tmpdir(dir, len);
    for (int i = 0; cases[i]; i++) cases[i]();
    rm_rf(dir);
    return check_exit();
}

/* Create the config file dir/name (its path into path[len]). Exits on failure. */
static inline FILE *cfg_create(const char *dir, const char *name, char *path, size_t len) {
    snprintf(path, len, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (!f) exit(2);
    return f;
}

/* Close the config file f written by cfg_create and load it into c. Exits on failure. */
static inline void cfg_close_load(cfg *c, FILE *f, const char *path) {
    char err[512];
    fclose(f);
    if (cfg_load(c, path, err, sizeof err) != HR_OK) {
        fprintf(stderr, "config: %s\n", err);
        exit(2);
    }
}

/* Load a one-node config whose [train] section is `train` (INI lines). Exits on failure. */
static inline void one_node_cfg(cfg *c, const char *dir, const char *train) {
    char path[600];
    FILE *f = cfg_create(dir, "c.ini", path, sizeof path);
    fprintf(f,
            "[cluster]\nsecurity = none\n[train]\n%s\n[node.0]\nhost = 127.0.0.1\nport = 47990\n"
            "threads = 1\n",
            train);
    cfg_close_load(c, f, path);
}

/* Load a config of `n` nodes on 127.0.0.1 ports port..port+n-1 with the given [train] and
 * [controller] lines; node k gets capacity caps[k] (NULL: 1). Exits on failure. */
static inline void ring_cfg(cfg *c, const char *dir, const char *train, const char *controller,
                            int n, int port, const double *caps) {
    char path[600];
    FILE *f = cfg_create(dir, "ring.ini", path, sizeof path);
    fprintf(f,
            "[cluster]\nsecurity = none\nconnect_timeout = 20\ntimeout = 20\n[train]\n%s\n"
            "[controller]\n%s\n",
            train, controller);
    for (int k = 0; k < n; k++)
        fprintf(f, "[node.%d]\nhost = 127.0.0.1\nport = %d\nthreads = 1\ncapacity = %g\n", k,
                port + k, caps ? caps[k] : 1.0);
    cfg_close_load(c, f, path);
}

/* A base port for this process: a block of 8 claimed from the shared claim of every test
 * (tests/ports.h), held until the test exits. */
static inline int test_port(void) {
    return port_block();
}

/* train_init for node `self` of c, with the config converted as `hetring run` does. */
static inline hr_status test_train_init(trainer *t, const cfg *c, int self, char *err,
                                        size_t errlen) {
    train_config tc;
    app_train_config(c, self, NULL, &tc);
    return train_init(t, &tc, err, errlen);
}

/* A one-node trainer on the config whose [train] section is `train` (written into dir), as
 * `hetring run` sets it up. Exits on failure. */
static inline void test_trainer_or_die(trainer *t, cfg *c, const char *dir, const char *train) {
    char err[HR_ERRLEN];
    one_node_cfg(c, dir, train);
    if (test_train_init(t, c, 0, err, sizeof err) != HR_OK) {
        fprintf(stderr, "train_init: %s\n", err);
        exit(2);
    }
}

/* One node of a ring inside this process, set up as `hetring run` does (cmd_run.c): the
 * trainer as a libhetring node (hr_node.h). */
typedef struct {
    hr_node an; /* the library's node, the trainer's peer */
    trainer t;  /* the node's trainer */
    int have_t; /* t was initialised */
    char err[HR_ERRLEN];
} test_node;

static inline hr_status test_node_up(test_node *n, const cfg *c, int self) {
    memset(n, 0, sizeof *n);
    hr_status st = test_train_init(&n->t, c, self, n->err, sizeof n->err);
    if (st != HR_OK) return st;
    n->have_t = 1;
    return hr_node_open(&n->an, c, self, NULL, &n->t, NULL, NULL, NULL, NULL, n->err,
                        sizeof n->err);
}

static inline void test_node_down(test_node *n) {
    hr_node_close(&n->an);
    if (n->have_t) train_free(&n->t);
    n->have_t = 0;
}

/* Run body(node, arg) on `n` threads, one per node of c; returns when all have finished. */
typedef struct {
    const cfg *c;
    int self;
    void (*body)(int self, const cfg *c, void *arg);
    void *arg;
} test_thread_;

static inline void *test_thread_main_(void *p) {
    test_thread_ *a = p;
    a->body(a->self, a->c, a->arg);
    return NULL;
}

static inline void run_nodes(const cfg *c, int n, void (*body)(int self, const cfg *c, void *arg),
                             void *arg) {
    pthread_t th[8];
    test_thread_ a[8];
    if (n > 8) exit(2);
    for (int k = 0; k < n; k++) {
        a[k] = (test_thread_){c, k, body, arg};
        if (pthread_create(&th[k], NULL, test_thread_main_, &a[k]) != 0) exit(2);
    }
    for (int k = 0; k < n; k++) pthread_join(th[k], NULL);
}

#endif
