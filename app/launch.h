/*
 * launch.h: start every node of a cluster file as a child process on this machine.
 *
 * Used by `hetring local` and by the bench suite. Guarantees:
 *  - each child's stdout and stderr lines are prefixed with "nodeID | ";
 *  - SIGINT and SIGTERM to the launcher are forwarded to every child;
 *  - when a child fails (non-zero exit or a signal) the others are stopped, first with
 *    SIGTERM and after `grace_s` with SIGKILL;
 *  - no child outlives the launcher: children are started with PR_SET_PDEATHSIG, so even a
 *    SIGKILL of the launcher takes them down.
 */
#ifndef HR_LAUNCH_H
#define HR_LAUNCH_H

#include "cfg.h"

#include <stdio.h>

typedef struct {
    const char *exe;         /* hetring executable to run for each node */
    const char *conf;        /* cluster file passed to each node */
    const char *const *args; /* extra arguments after "run --conf F --node ID", NULL-terminated */
    FILE *out;               /* where prefixed child output goes (NULL: discard) */
    double grace_s;          /* SIGTERM-to-SIGKILL grace period when stopping children */
    double deadline_s;       /* stop everything after this long; 0 = no limit */
} launch_opts;

typedef struct {
    int n;           /* number of children */
    long *ids;       /* node id of each child */
    int *exit_code;  /* exit status, or 128+signal when killed */
    int failed_node; /* index of the first child that failed, or -1 */
    int interrupted; /* a SIGINT or SIGTERM reached the launcher */
    int timed_out;   /* deadline_s passed */
} launch_result;

/* Run every node of `c` and wait for all of them. Returns 0 when all exited 0, else 1 with
 * `res` saying why; 2 when the setup failed (message on stderr). `res` must be freed. */
int launch_cluster(const cfg *c, const launch_opts *o, launch_result *res);
void launch_result_free(launch_result *res);

#endif
