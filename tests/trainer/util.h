/* util.h: helpers shared by the trainer tests. */
#ifndef HR_TEST_TRAINER_UTIL_H
#define HR_TEST_TRAINER_UTIL_H

#include "cfg.h"

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

/* Load a one-node config whose [train] section is `train` (INI lines). Exits on failure. */
static inline void one_node_cfg(cfg *c, const char *dir, const char *train) {
    char path[600], err[512];
    snprintf(path, sizeof path, "%s/c.ini", dir);
    FILE *f = fopen(path, "w");
    if (!f) exit(2);
    fprintf(f,
            "[cluster]\nsecurity = none\n[train]\n%s\n[node.0]\nhost = 127.0.0.1\nport = 47990\n"
            "threads = 1\n",
            train);
    fclose(f);
    if (cfg_load(c, path, err, sizeof err) != HR_OK) {
        fprintf(stderr, "config: %s\n", err);
        exit(2);
    }
}

#endif
