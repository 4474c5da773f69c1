/*
 * cmd_run.c: `hetring run`, one node of the cluster.
 *
 * A one-node cluster trains alone, without a ring; a cluster of several nodes forms
 * the ring and trains with the replicated controller setting every node's batch (dist.h).
 * Such a node joins a running job by itself, and SIGTERM, SIGINT or SIGHUP make it leave at the
 * next iteration boundary the members agree on, with a checkpoint (a second signal kills it); a
 * node alone stops at its next boundary the same way. SIGPIPE (its output's reader is gone) asks
 * the same leave, never kills, and the command then exits 1.
 */
#include "base/hr_addr.h"
#include "base/hr_cores.h"
#include "base/hr_log.h"
#include "cli/cli.h"
#include "cli/launch.h"
#include "cluster/hr_node.h"
#include "cluster/hr_fault.h"
#include "cluster/node_id.h"
#include "cluster/ring_setup.h"
#include "cluster/trainer_setup.h"
#include "trainer/train.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void usage(FILE *out) {
    fprintf(out,
            "usage: hetring run --conf FILE [--node ID] [--set SECTION.KEY=VALUE]...\n"
            "                   [--metrics FILE] [--summary FILE] [--quiet]\n"
            "\n"
            "Start one node of the cluster described by FILE.\n"
            "\n"
            "  --conf FILE      cluster INI file (the same file on every node)\n"
            "  --node ID        which [node.ID] this process is; otherwise HETRING_NODE, or a\n"
            "                   launcher's rank (position in id order): SLURM_PROCID,\n"
            "                   OMPI_COMM_WORLD_RANK, PMI_RANK or torchrun's RANK, whose world\n"
            "                   size (SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE, WORLD_SIZE)\n"
            "                   must be the node count; otherwise the one node whose host is a\n"
            "                   local address\n"
            "  --set S.K=V      override one key (node keys: node.ID.KEY=VALUE)\n"
            "  --metrics FILE   write one JSON record per iteration (JSONL); {id} in FILE becomes\n"
            "                   the node id\n"
            "  --summary FILE   write a JSON summary of the run (the rank-0 node writes it)\n"
            "  --quiet          no progress output\n"
            "  --help           this text\n"
            "\n"
            "With several nodes the run is elastic: when a node dies the others agree on a new\n"
            "view and go on while a quorum ([cluster] min_nodes) remains; a node started while\n"
            "the others train joins them and receives the state. SIGTERM, SIGINT or SIGHUP\n"
            "make this node leave after an iteration the others agree on, writing its\n"
            "checkpoint; a node alone stops after the iteration in progress, writing its\n"
            "checkpoint. Either exits 0; a second signal, half a second or more later, stops\n"
            "it at once. When its output cannot be written any more (a pipe whose reader\n"
            "exited: SIGPIPE) it leaves the same way and exits 1.\n");
}

/* "node ID of N ready", with the address it listens on when `listening`. */
static void announce(const cfg *c, int self, int listening) {
    const cfg_node *me = &c->nodes[self];
    char on[HR_ADDR_LEN + 8] = "", a[HR_ADDR_LEN];
    if (listening) snprintf(on, sizeof on, " on %s", hr_addr(a, sizeof a, me->host, me->port));
    HR_INFO(CLI, "node %ld of %d ready%s (%s, %ld thread(s)%s%s)", me->id, c->n_nodes, on,
            me->device < 0 ? "cpu" : "cuda", me->threads ? me->threads : hr_cores(),
            me->threads ? "" : ": threads = 0, every core it may use",
            me->slowdown > 1 || me->n_interference ? ", emulated slowdown" : "");
}

/* "held-out accuracy 0.9123" (or mse) for the closing line, or why there is none. */
static const char *held_out(const trainer *t, const train_result *res, char *out, size_t n) {
    if (t->eval.n == 0)
        snprintf(out, n, "no held-out samples to evaluate on");
    else
        snprintf(out, n, "held-out %s %.4g", t->y ? "accuracy" : "mse",
                 t->y ? res->eval_accuracy : res->eval_loss);
    return out;
}

/* The closing line of a run: its rate, last loss and held-out result, with the controller's
 * `policy` in a cluster run (NULL alone). A run resumed from a state at or past [train]
 * iterations trained nothing: it says so, where a rate of 0 and a last loss of nan said it
 * obliquely. */
static void say_done(const trainer *t, const train_result *res, const char *policy) {
    char ho[96], pol[48] = "";
    held_out(t, res, ho, sizeof ho);
    if (policy) snprintf(pol, sizeof pol, ", policy %s", policy);
    /* the run's iterations since this node started; it computed fewer where it took a state
     * past some of them (a view change after a step the others applied): no iteration lost */
    const long ran = res->samples / train_global_batch(t);
    char mine[96] = "";
    if (res->iterations != ran)
        snprintf(mine, sizeof mine, " (%ld computed by this node, %ld in a state from a peer)",
                 res->iterations, ran - res->iterations);
    if (res->iterations == 0)
        HR_INFO(TRAIN,
                "done: nothing left to train (resumed at iteration %ld, [train] iterations = %ld); "
                "%s",
                t->iter, t->total, ho);
    else
        HR_INFO(TRAIN,
                "done: %ld iterations%s, %ld samples in %.2f s (%.0f samples/s), final loss "
                "%.4f, %s%s%s",
                ran, mine, res->samples, res->wall_s, res->samples_per_s, res->final_loss, ho, pol,
                res->emulated ? " (emulated heterogeneity)" : "");
}

static volatile sig_atomic_t leave_requested; /* the signal that asked to leave; 0: none */
static struct timespec leave_asked_at;        /* when it came (CLOCK_MONOTONIC) */

/* A signal within LAUNCH_SIGNAL_SAME_S of the first is the same request delivered twice. */
static void on_leave_signal(int sig) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now); /* async-signal-safe */
    if (!leave_requested) {
        leave_asked_at = now;
        leave_requested = sig;
        return;
    }
    if (sig == SIGPIPE) return; /* every later write to the closed output raises it again */
    const double since = (double)(now.tv_sec - leave_asked_at.tv_sec) +
                         (double)(now.tv_nsec - leave_asked_at.tv_nsec) * 1e-9;
    if (since < LAUNCH_SIGNAL_SAME_S) return;
    /* a second request: the default action, once this handler returns (the signal is blocked
     * while it runs) */
    signal(sig, SIG_DFL);
    raise(sig);
}

/* The signals that ask this node to leave: SIGTERM (a scheduler's pre-emption), SIGINT
 * (Ctrl-C), SIGHUP (its terminal closed) and SIGPIPE (its standard output or error is a pipe
 * whose reader exited, `hetring run | head`: the write fails with EPIPE instead of killing the
 * node, perhaps mid-save, without a word to its peers). */
static const int leave_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};
#define N_LEAVE_SIGNALS ((int)(sizeof leave_signals / sizeof leave_signals[0]))

/* Each of leave_signals asks this node to leave cleanly; a second one, LAUNCH_SIGNAL_SAME_S or
 * more after the first, takes the default action, SIGPIPE's excepted. */
static void catch_leave_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_leave_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask); /* each blocks the others while the handler runs */
    for (int i = 0; i < N_LEAVE_SIGNALS; i++) sigaddset(&sa.sa_mask, leave_signals[i]);
    for (int i = 0; i < N_LEAVE_SIGNALS; i++) sigaction(leave_signals[i], &sa, NULL);
}

/* Why this node was asked to leave, for its messages: "SIGHUP (its terminal closed)". */
static const char *leave_cause(char *out, size_t n) {
    const char *sig = sigabbrev_np(leave_requested);
    const char *why = leave_requested == SIGHUP    ? " (its terminal closed)"
                      : leave_requested == SIGPIPE ? " (its output's reader is gone)"
                                                   : "";
    snprintf(out, n, "SIG%s%s", sig ? sig : "?", why);
    return out;
}

/* The exit status of a run that ended as asked: 1 when it was asked by a closed output, which
 * the user's command did not get whole. */
static int left_status(void) {
    return leave_requested == SIGPIPE ? CLI_FAIL : CLI_OK;
}

/* Alone, a leave signal stops the run after the iteration in progress, as a cluster node leaves
 * at a boundary: with its checkpoint when one is configured (one is already written after the
 * last iteration, which ends the run anyway). */
static hr_status stop_if_asked(void *ctx, trainer *t, char *err, size_t errlen) {
    (void)ctx;
    if (!leave_requested || t->iter >= t->total) return HR_OK;
    const char *ck = t->conf.checkpoint; /* this node's: "{id}" replaced */
    if (ck[0]) HR_CHECK(train_save(t, ck, err, errlen));
    char cause[64];
    HR_INFO(TRAIN, "stopping at iteration %ld on %s%s%s", t->iter, leave_cause(cause, sizeof cause),
            ck[0] ? "; checkpoint written to " : " (no checkpoint configured)", ck);
    return HR_ERR_INTERRUPTED;
}

/* Train on this node alone; a leave signal stops it at the next iteration boundary with its
 * checkpoint (exit 0, as a cluster node that leaves; 1 on SIGPIPE: left_status). */
static int train_one(const cfg *c, int self, const train_opts *to) {
    trainer t;
    train_result res;
    char err[HR_ERRLEN] = "";
    train_config tc;
    app_train_config(c, self, NULL, &tc); /* alone on its machine */
    announce(c, self, 0); /* one node listens on nothing */
    hr_status st = train_init(&t, &tc, err, sizeof err);
    if (st != HR_OK) {
        cli_name_data_key(c, err, sizeof err);
        fprintf(stderr, "hetring run: %s\n", err[0] ? err : hr_strerror(st));
        return st == HR_ERR_CONFIG ? CLI_USAGE : CLI_FAIL;
    }
    train_opts o = *to;
    o.after_iter = stop_if_asked;
    o.member_ctx = (void *)c;
    catch_leave_signals();
    st = train_run(&t, &o, &res, err, sizeof err);
    if (st != HR_OK) {
        fprintf(stderr, "hetring run: %s\n", err[0] ? err : hr_strerror(st));
        train_free(&t);
        return CLI_FAIL;
    }
    if (res.left)
        HR_INFO(TRAIN, "node %ld stopped at iteration %ld of %ld", c->nodes[self].id, t.iter,
                t.total);
    else
        say_done(&t, &res, NULL);
    train_free(&t);
    return res.left ? left_status() : CLI_OK;
}

/* The reason a cluster run failed, for its last line. train_run's own fallback says only
 * "iteration K: peer failure": the ring knows which peer and why, so a ring failure is told in
 * its words; a replica mismatch was told just above, naming the nodes. */
static void failure_reason(const hr_node *n, hr_status st, long iter, const char *err, char *out,
                           size_t cap) {
    char generic[128];
    snprintf(generic, sizeof generic, "iteration %ld: %s", iter, hr_strerror(st));
    int ring_kind = st == HR_ERR_PEER || st == HR_ERR_TIMEOUT || st == HR_ERR_AUTH ||
                    st == HR_ERR_PROTO || st == HR_ERR_VIEW;
    const char *ring_why = hr_node_ring_error(n);
    if (err[0] && strcmp(err, generic) != 0)
        snprintf(out, cap, "%s", err);
    else if (ring_kind && ring_why[0])
        snprintf(out, cap, "iteration %ld: %s", iter, ring_why);
    else if (st == HR_ERR_MISMATCH)
        snprintf(out, cap,
                 "iteration %ld: the nodes disagree (the error above names them); stopped", iter);
    else
        snprintf(out, cap, "%s", err[0] ? err : hr_strerror(st));
}

typedef struct {
    const cfg *c;
    int self;
} listen_ctx;

/* The port is bound: only now is "ready on HOST:PORT" true. */
static void on_listen(void *ctx) {
    const listen_ctx *l = ctx;
    announce(l->c, l->self, 1);
}

/* Train as one node of a ring, through libhetring (hr_node.h): resume from this node's
 * checkpoint if it has one, agree on a view with the others (taking the newest state any of
 * them holds), let the replicated controller set the split, and train, changing views as nodes
 * leave and join. */
static int train_cluster(const cfg *c, int self, const train_opts *opts) {
    train_opts o = *opts, *to = &o;
    hr_node n;
    trainer t;
    train_result res;
    char err[HR_ERRLEN] = "";
    int have_trainer = 0, rc = CLI_FAIL, recorded = 0;
    long split[CFG_MAX_NODES]; /* the checkpoint's split of every node, when it has one */
    memset(&n, 0, sizeof n);
    train_config tc;
    int same[CFG_MAX_NODES]; /* the nodes on this machine, which share its memory; the library
                              * takes this answer rather than look the hosts up again */
    catch_leave_signals(); /* first: a signal while the data loads or the first election runs
                            * stops the node before it joins */
    hr_status st = node_id_check_hosts(c, self, same, err, sizeof err);
    if (st != HR_OK) goto fail;
    app_train_config(c, self, same, &tc);
    st = train_init(&t, &tc, err, sizeof err);
    if (st != HR_OK) {
        cli_name_data_key(c, err, sizeof err);
        goto fail;
    }
    have_trainer = 1;
    const char *ck = t.conf.checkpoint; /* this node's: "{id}" replaced */
    if (ck[0] && access(ck, F_OK) == 0) {
        st = train_load(&t, ck, split, c->n_nodes, &recorded, err, sizeof err);
        if (st != HR_OK) goto fail;
        HR_INFO(TRAIN, "resumed from checkpoint %s at iteration %ld", ck, t.iter);
    }
    listen_ctx lc = {c, self};
    st = hr_node_open(&n, c, self, same, &t, recorded ? split : NULL, &leave_requested, on_listen,
                      &lc, err, sizeof err);
    if (st == HR_ERR_INTERRUPTED && leave_requested) { /* asked to leave before it joined */
        char cause[64];
        HR_INFO(TRAIN,
                "node %ld stopped on %s before it joined the cluster (nothing trained, "
                "no checkpoint written)",
                c->nodes[self].id, leave_cause(cause, sizeof cause));
        rc = left_status();
        goto out;
    }
    if (st != HR_OK) goto fail;
    launch_joined(c->nodes[self].id); /* its first view formed: no start-up failure any more */
    hr_node_hooks(&n, to);
    st = train_run(&t, to, &res, err, sizeof err);
    if (st != HR_OK) goto fail;
    char cause[64];
    if (res.left)
        HR_INFO(TRAIN, "node %ld left the cluster at iteration %ld on %s", c->nodes[self].id,
                t.iter, leave_cause(cause, sizeof cause));
    else if (train_lead(&t))
        say_done(&t, &res, cfg_policy_name(c->policy));
    rc = res.left ? left_status() : CLI_OK;
    goto out; /* a leave asked by SIGPIPE is no failure of the run's to tell */
fail:
    if (rc != CLI_OK) {
        char why[HR_ERRLEN + 64];
        failure_reason(&n, st, have_trainer ? t.iter : -1, err, why, sizeof why);
        fprintf(stderr, "hetring run: node %ld: %s\n", c->nodes[self].id, why);
        if (st == HR_ERR_CONFIG) rc = CLI_USAGE;
    }
out:
    hr_node_close(&n);
    if (have_trainer) train_free(&t);
    return rc;
}

/* Who the per-iteration test faults act for. */
typedef struct {
    long id;        /* this node's id */
    int configured; /* the nodes the cluster file lists */
} fault_ctx;

/* The per-iteration hook: HETRING_FAULT crash:NODE:ITER, sleep, sleep_short. */
static void fault_at_iter(void *ctx, long iter, int members) {
    const fault_ctx *f = ctx;
    hr_fault_point(f->id, iter);
    hr_fault_pace(f->id, members, f->configured);
}

/* hetring run's options; hetring local finds the run options it checks with the same table */
static const struct option run_options[] = {
    {"conf", required_argument, 0, 0},    {"node", required_argument, 0, 0},
    {"set", required_argument, 0, 0},     {"metrics", required_argument, 0, 0},
    {"summary", required_argument, 0, 0}, {"quiet", no_argument, 0, 0},
    {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};

const struct option *cmd_run_options(void) {
    return run_options;
}

int cmd_run(int argc, char **argv) {
    const struct option *opts = run_options;
    cli_common o = {0};
    train_opts to = {.progress = TRAIN_PROGRESS_AUTO};
    int idx, ch;
    optind = 1;
    while ((ch = getopt_long(argc, argv, "h", opts, &idx)) != -1) {
        if (ch == 'h') return usage(stdout), CLI_OK;
        if (ch != 0) return usage(stderr), CLI_USAGE;
        const char *name = opts[idx].name;
        if (strcmp(name, "metrics") == 0)
            to.metrics_path = optarg;
        else if (strcmp(name, "summary") == 0)
            to.summary_path = optarg;
        else if (strcmp(name, "quiet") == 0)
            to.progress = TRAIN_PROGRESS_NONE;
        else if (cli_common_opt(&o, name, optarg) <= 0)
            return usage(stderr), CLI_USAGE;
    }
    if (optind < argc) return cli_usage_error("run", "unexpected argument '%s'", argv[optind]);
    cfg c;
    int rc = cli_load_config(&c, &o, "run");
    if (rc) return rc;
    int self;
    if ((rc = cli_resolve_node(&c, o.node, "run", &self))) return rc;
    const cfg_node *me = &c.nodes[self];
    hr_log_set_node((int)me->id); /* security = none is the ring's to warn about, once */
    char err[HR_ERRLEN];
    if (app_check_device(&c, self, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hetring run: node %ld: %s\n", me->id, err);
        cfg_free(&c);
        return CLI_USAGE;
    }
    hr_fault_point(me->id, -1);
    fault_ctx fault = {me->id, c.n_nodes};
    to.on_iter = fault_at_iter;
    to.on_iter_ctx = &fault;
    char metrics[CFG_PATH];
    if (to.metrics_path) { /* "{id}" gives each node its own file */
        app_expand_id(metrics, sizeof metrics, to.metrics_path, me->id);
        to.metrics_path = metrics;
    }
    if (train_check_outputs(&to, err, sizeof err) != HR_OK) {
        fprintf(stderr, "hetring run: node %ld: %s\n", me->id, err);
        cfg_free(&c);
        return CLI_USAGE;
    }
    if (c.n_nodes > 1) {
        rc = train_cluster(&c, self, &to);
        cfg_free(&c);
        return rc;
    }
    rc = train_one(&c, self, &to);
    cfg_free(&c);
    return rc;
}
