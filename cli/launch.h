/*
 * launch.h: start every node of a cluster file as a child process on this machine.
 *
 * Used by `hetring local`. Guarantees:
 *  - each child's stdout and stderr lines are prefixed with "nodeID | ";
 *  - SIGINT and SIGTERM to the launcher reach every child as SIGTERM (a node checkpoints and
 *    leaves at an iteration boundary), followed by SIGCONT so that a stopped node acts on it;
 *    after `grace_s` the ones still running get SIGKILL, with their process groups (each child
 *    leads one, so whatever it started dies with it), and no node is restarted any more;
 *  - a child that fails (non-zero exit or a signal) stops the others only when fewer than the
 *    quorum (`min_nodes`) are left running and no restart is pending; otherwise they go on.
 *    Below the quorum the nodes pause and give up by themselves after their rejoin_timeout:
 *    the launcher stops those still running `quorum_wait_s` plus `grace_s` later. So too when
 *    children that exited 0 (finished, or left) leave fewer than the quorum running;
 *  - a child that exits by itself with a non-zero status (not one killed by a signal) before any
 *    node joined the cluster (formed its first view), and is not to be restarted, failed at
 *    start (its configuration, its port, its files): the launcher stops the others at once
 *    (SIGTERM), whatever the quorum, rather than have them wait for it. Each child learns
 *    where to say that it joined from LAUNCH_FD_ENV (launch_joined);
 *  - with `max_respawns` > 0 a failed child is started again with the same command line after
 *    `respawn_s`, at most `max_respawns` times per node, and only while another node is running
 *    or waiting for its own restart (a node that fails after the others finished stays down);
 *    never one that exited LAUNCH_EXIT_REFUSED (it refused its command line or configuration);
 *  - no child outlives the launcher: children are started with PR_SET_PDEATHSIG, so even a
 *    SIGKILL of the launcher takes them down.
 */
#ifndef HR_LAUNCH_H
#define HR_LAUNCH_H

#include "conf/cfg.h"

#include <stdio.h>

/* Restarts per node that `hetring local --respawn` allows. */
#define LAUNCH_MAX_RESPAWNS 5
/* The exit status of a node that refused its command line or configuration (hetring run's
 * usage or configuration error): the same command would refuse again, so it is not restarted. */
#define LAUNCH_EXIT_REFUSED 2
/* The environment variable that gives a child the descriptor on which it says it joined. */
#define LAUNCH_FD_ENV "HETRING_LAUNCH_FD"
/* A node's second leave signal this many seconds or more after its first stops it at once,
 * without its checkpoint; one sooner is the same request delivered twice (timeout(1), for one,
 * sends its signal to the node and to the node's process group). */
#define LAUNCH_SIGNAL_SAME_S 0.5

typedef struct {
    const char *exe;         /* hetring executable to run for each node */
    const char *conf;        /* cluster file passed to each node */
    const char *const *args; /* extra arguments after "run --conf F --node ID", NULL-terminated */
    FILE *out;               /* where prefixed child output goes (NULL: discard) */
    double grace_s;          /* SIGTERM-to-SIGKILL grace period when stopping children */
    double deadline_s;       /* stop everything after this long; 0 = no limit */
    long min_nodes;          /* quorum: nodes that must run for the others to go on after a
                              * failure; 0 = floor(N/2) + 1 of the N nodes in the file */
    double quorum_wait_s;    /* seconds the nodes wait for a lost quorum to return (their
                              * rejoin_timeout) before the launcher stops them; 0 = at once */
    double respawn_s;        /* seconds between a child's failure and its restart */
    int max_respawns;        /* restarts per node; 0 = a failed node stays down */
    const char *netns;       /* node ID runs in the network namespace NETNS-ID
                              * (/var/run/netns/NETNS-ID, made beforehand), or NULL */
} launch_opts;

typedef struct {
    int n;           /* number of nodes */
    long *ids;       /* node id of each child */
    int *exit_code;  /* exit status of each node's last process, or 128+signal when killed */
    int *restarts;   /* how often each node was started again */
    long quorum;     /* the quorum the run kept (min_nodes, resolved) */
    int failed_node; /* index of the first child that failed, or -1 */
    int quorum_lost; /* fewer than `quorum` ran with no restart pending: the others were stopped
                      * (or ended by themselves) */
    int interrupted; /* a SIGINT, SIGTERM or SIGHUP reached the launcher, or the reader of its
                      * output exited */
    int timed_out;   /* deadline_s passed */
    int refused;     /* every node that failed exited LAUNCH_EXIT_REFUSED, and nothing else
                      * stopped the run: the configuration was refused, each node said why */
    int at_start;    /* failed_node exited with an error before any node joined the cluster:
                      * the others were stopped */
} launch_result;

/* Run every node of `c` and wait for all of them. Returns 0 when the last process of every node
 * exited 0 (a node that failed and whose restart then exited 0 counts as a success) and the run
 * was neither interrupted, timed out nor stopped for want of a quorum; 2 when the setup failed
 * (message on stderr) or the nodes refused the configuration (res->refused); else 1 with `res`
 * saying why. `res` must be freed. */
int launch_cluster(const cfg *c, const launch_opts *o, launch_result *res);
void launch_result_free(launch_result *res);

/* In a node that launch_cluster started (LAUNCH_FD_ENV set): tell the launcher that this node,
 * `id`, joined the cluster, once, when its first view formed. Elsewhere it does nothing. */
void launch_joined(long id);

#endif
