/*
 * bench_elastic.c: `hetring bench elastic`, a node killed (SIGKILL) or stopped (SIGSTOP) in the
 * middle of a run and brought back, measured from the nodes' own metrics.
 *
 * The run's cluster file is the template (bench/hetero.ini: MLP, 4 nodes) with the run's values
 * set over it through the config module, as bench hetero builds its files. The bench starts
 * every node itself (`hetring run --conf INI --node K --metrics DIR/mK.jsonl --quiet`, each
 * with PR_SET_PDEATHSIG), watches the target's metrics file, sends the signal once it shows the
 * fault iteration, and after --rejoin-after seconds starts the node again (kill) or sends
 * SIGCONT (stop). Every run has a deadline; past it every node is killed, and no node outlives
 * the bench. SIGINT or SIGTERM stops the bench as it stops bench hetero (bench_stop_on_signals):
 * the run in progress is killed and reaped, the runs completed so far are reported, and it
 * exits 130 or 143. The measures are computed by elastic_metrics.c from the files alone; the
 * reference is one uninterrupted run of the same file (same seed and B).
 */
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "bench/bench.h"
#include "bench/bench_util.h"
#include "bench/elastic_metrics.h"
#include "bench/plot.h"
#include "cli/cli.h"
#include "conf/cfg.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EB_MAX_NODES 6 /* 6 batch lines and 2 event lines fill a plot (PLOT_MAX_SERIES) */
#define EB_MAX_RUNS  15

typedef struct {
    long nodes;          /* cluster size (at most the template's) */
    int kill;            /* 1: --kill, 0: --stop */
    long target;         /* node hit */
    long fault_iter;     /* hit once its metrics show this iteration */
    double rejoin_after; /* seconds from the fault to the restart or SIGCONT */
    long iters;          /* iterations per run */
    long runs;           /* faulted runs; the table gives medians */
    double deadline;     /* seconds one run may take */
    const char *json;    /* --json FILE */
    const char *out_dir; /* cluster file, logs, metrics, CSV, PNG */
    const char *tmpl;    /* template cluster file */
    bench_sets sets;     /* --set overrides, after the bench's own */
    long port;           /* first port of the nodes (--port), 0: choose at start */
    char hetring[4096];  /* the hetring that runs the nodes */
    char conf[1024];     /* the run's cluster file */
    long B, ipe;         /* global batch, iterations per epoch (from the file) */
    long ids[EB_MAX_NODES];
} elastic_opts;

/* ================================================================ options */

static void usage(FILE *out) {
    char tmpl[4200];
    fprintf(
        out,
        "usage: hetring bench elastic [--nodes N] [--kill ID@ITER | --stop ID@ITER]\n"
        "                             [--rejoin-after S] [--iters N] [--runs R] [--json F]\n"
        "                             [--out DIR] [--conf F] [--set S.K=V]... [--deadline S]\n"
        "                             [--port P]\n"
        "\n"
        "Run a local cluster, kill (SIGKILL) or stop (SIGSTOP) one node once its metrics show\n"
        "an iteration, and start it again (or SIGCONT it) S seconds later. Reports, per run\n"
        "(JSON) and as medians (table): detection, resume and join times, state moved,\n"
        "samples missing or duplicated in the epochs the fault touched, whether the replicas\n"
        "ended identical, throughput before the fault and at the end, and the final loss\n"
        "against an uninterrupted reference run of the same file. SIGINT or SIGTERM stops\n"
        "the bench: the run in progress is stopped, the runs completed so far are reported,\n"
        "and it exits 130 or 143.\n"
        "\n"
        "  --nodes N         nodes, 2..%d and at most the template's (default 4)\n"
        "  --kill ID@ITER    SIGKILL node ID at iteration ITER, then start it again\n"
        "                    (default 2@30%% of --iters)\n"
        "  --stop ID@ITER    SIGSTOP node ID at iteration ITER, then SIGCONT it\n"
        "  --rejoin-after S  seconds between the fault and the restart (default 3 after a\n"
        "                    kill, 5 after a stop: a stopped node must stay silent past\n"
        "                    cluster.timeout and the election, about 1 s, to be left out)\n"
        "  --iters N         iterations per run (default 1000)\n"
        "  --runs R          faulted runs, 1..%d (default 5); one reference run besides\n"
        "  --json FILE       one object per run\n"
        "  --out DIR         cluster file, node logs, metrics, CSV and PNG (default\n"
        "                    bench-elastic)\n"
        "  --conf FILE       template cluster file (default %s)\n"
        "  --set S.K=V       override a key of the run's file, after the bench's own\n"
        "                    (cluster.timeout=2, cluster.rejoin_timeout=60, ports, iterations)\n"
        "  --deadline S      seconds one run may take before every node is killed\n"
        "                    (default 600)\n"
        "  --port P          node k listens on 127.0.0.1 port P+k (default: free ports found\n"
        "                    at start)\n",
        EB_MAX_NODES, EB_MAX_RUNS, bench_own_file("hetero.ini", tmpl, sizeof tmpl));
}

/* ID@ITER into o->target and o->fault_iter. */
static int fault_opt(elastic_opts *o, const char *name, const char *arg) {
    char *at, *end;
    long id = strtol(arg, &at, 10), it = -1;
    if (at != arg && *at == '@') it = strtol(at + 1, &end, 10);
    if (at == arg || *at != '@' || end == at + 1 || *end || id < 0 || it < 1) {
        cli_usage_error("bench elastic", "--%s '%s' (expected ID@ITER, ITER >= 1)", name, arg);
        return -1;
    }
    int is_kill = strcmp(name, "kill") == 0;
    if (o->fault_iter >= 0 && is_kill != o->kill) {
        cli_usage_error("bench elastic",
                        "--kill and --stop: a run has one fault; give one of them");
        return -1;
    }
    o->target = id, o->fault_iter = it, o->kill = is_kill;
    return 0;
}
static int kill_opt(const char *suite, const char *arg, void *dst) {
    (void)suite;
    return fault_opt(dst, "kill", arg);
}
static int stop_opt(const char *suite, const char *arg, void *dst) {
    (void)suite;
    return fault_opt(dst, "stop", arg);
}

static int parse_opts(elastic_opts *o, int argc, char **argv) {
    const bench_opt opts[] = {
        {.name = "nodes", .kind = BENCH_OPT_LONG, .dst = &o->nodes, .lo = 2, .hi = EB_MAX_NODES},
        {.name = "kill", .kind = BENCH_OPT_FN, .dst = o, .fn = kill_opt},
        {.name = "stop", .kind = BENCH_OPT_FN, .dst = o, .fn = stop_opt},
        {.name = "rejoin-after", .kind = BENCH_OPT_REAL, .dst = &o->rejoin_after},
        {.name = "iters", .kind = BENCH_OPT_LONG, .dst = &o->iters, .lo = 8, .hi = 1000000},
        {.name = "runs", .kind = BENCH_OPT_LONG, .dst = &o->runs, .lo = 1, .hi = EB_MAX_RUNS},
        {.name = "json", .kind = BENCH_OPT_OUT, .dst = &o->json},
        {.name = "out", .kind = BENCH_OPT_STR, .dst = &o->out_dir},
        {.name = "conf", .kind = BENCH_OPT_STR, .dst = &o->tmpl},
        {.name = "set", .kind = BENCH_OPT_FN, .dst = &o->sets, .fn = bench_add_set},
        {.name = "deadline", .kind = BENCH_OPT_REAL, .dst = &o->deadline},
        {.name = "port",
         .kind = BENCH_OPT_LONG,
         .dst = &o->port,
         .lo = 1024,
         .hi = 65535 - EB_MAX_NODES},
        {0}};
    int rc = bench_parse_opts("elastic", opts, usage, argc, argv);
    if (rc >= 0) return rc;
    if (isnan(o->rejoin_after)) o->rejoin_after = o->kill ? 3 : 5; /* not given */
    if (!(o->rejoin_after >= 0 && o->rejoin_after <= 3600))
        return cli_usage_error("bench elastic", "--rejoin-after %g (expected 0..3600 seconds)",
                               o->rejoin_after);
    if (!(o->deadline >= 1 && o->deadline <= 86400))
        return cli_usage_error("bench elastic", "--deadline %g (expected 1..86400 seconds)",
                               o->deadline);
    if (o->fault_iter < 0) o->fault_iter = o->iters * 3 / 10;
    if (o->fault_iter >= o->iters)
        return cli_usage_error("bench elastic", "the fault at iteration %ld is past --iters %ld",
                               o->fault_iter, o->iters);
    return -1;
}

/* ================================================================ the cluster file */

/* The template with the run's values over it: size, length, timeouts, ports, then --set. */
static hr_status set_run(cfg *c, elastic_opts *o, int port, char *err, size_t errlen) {
    if (c->n_nodes < o->nodes)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s: %d [node.ID] sections (expected >= %ld)",
                       o->tmpl, c->n_nodes, o->nodes);
    c->n_nodes = (int)o->nodes; /* the first N nodes of the template */
    hr_status st = bench_cfg_set(c, err, errlen, "train.iterations=%ld", o->iters);
    if (st == HR_OK) st = bench_cfg_set(c, err, errlen, "cluster.timeout=2");
    if (st == HR_OK) st = bench_cfg_set(c, err, errlen, "cluster.rejoin_timeout=60");
    for (int k = 0; k < c->n_nodes && st == HR_OK; k++)
        st = bench_cfg_set(c, err, errlen, "node.%ld.port=%d", c->nodes[k].id, port + k);
    for (int i = 0; i < o->sets.n && st == HR_OK; i++) st = cfg_set(c, o->sets.v[i], err, errlen);
    if (st == HR_OK) st = cfg_validate(c, err, errlen);
    if (st == HR_OK && cfg_node_index(c, o->target) < 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "node %ld is not in the cluster (%s)", o->target,
                       o->tmpl);
    return st;
}

/* Write the run's cluster file; B, the iterations per epoch and the ids come from it. */
static int write_config(elastic_opts *o) {
    char err[HR_ERRLEN];
    cfg c;
    cfg_init(&c);
    if (o->port == 0 && (o->port = bench_free_ports(EB_MAX_NODES)) < 0) {
        fprintf(stderr,
                "hetring bench elastic: no %d free ports on 127.0.0.1 in 10000-30799; "
                "give --port P\n",
                EB_MAX_NODES);
        return -1;
    }
    hr_status st = cfg_parse_file(&c, o->tmpl, err, sizeof err);
    if (st == HR_OK) st = set_run(&c, o, (int)o->port, err, sizeof err);
    snprintf(o->conf, sizeof o->conf, "%s/elastic.ini", o->out_dir);
    int rc = -1;
    if (st != HR_OK) {
        fprintf(stderr, "hetring bench elastic: %s\n", err);
    } else if (bench_write_cfg(&c, o->conf, "generated by hetring bench elastic") != 0) {
        fprintf(stderr, "hetring bench elastic: cannot write %s: %s\n", o->conf, strerror(errno));
    } else {
        o->B = c.global_batch;
        o->ipe = c.samples / c.global_batch;
        for (int k = 0; k < c.n_nodes; k++) o->ids[k] = c.nodes[k].id;
        rc = 0;
    }
    cfg_free(&c);
    return rc;
}

/* ================================================================ the nodes */

/* One node's process. */
typedef struct {
    pid_t pid;  /* 0 once reaped */
    int status; /* exit status of the last process, 128 + signal, -1 while running */
} node_proc;

/* The run in progress. */
typedef struct {
    const elastic_opts *o;
    char dir[512];             /* this run's directory */
    node_proc p[EB_MAX_NODES]; /* by index in o->ids */
    int faulted; /* 1 after the signal, 2 after the restart, 3 when there was none to make */
    double fault_t, restart_t; /* t_unix of the signal and of the restart */
    double fault_mono;         /* hr_now() of the signal */
    long seen_iter;            /* the target's highest recorded iteration */
    long offset;               /* bytes of the target's metrics file read so far */
    int timed_out;             /* the deadline passed */
    int ended_early;           /* the others ended before the target came back or finished */
    double alone_since;        /* hr_now() since when only the target runs; 0 = not */
} run_state;

static void node_path(const run_state *s, const char *what, long id, char *buf, size_t n) {
    snprintf(buf, n, "%s/%s%ld.%s", s->dir, what[0] == 'm' ? "m" : "n", id,
             what[0] == 'm' ? "jsonl" : "log");
}

/* Start node index k; its output appended to nK.log. */
static int start_node(run_state *s, int k) {
    const elastic_opts *o = s->o;
    char log[1024], metrics[1024], id[32];
    node_path(s, "log", o->ids[k], log, sizeof log);
    node_path(s, "metrics", o->ids[k], metrics, sizeof metrics);
    snprintf(id, sizeof id, "%ld", o->ids[k]);
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid(), pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent) _exit(127);
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
        if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(127);
        close(fd);
        char *argv[] = {(char *)o->hetring, "run", "--conf",    (char *)o->conf,
                        "--node",           id,    "--metrics", metrics,
                        "--quiet",          NULL};
        execv(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    s->p[k] = (node_proc){.pid = pid, .status = -1};
    return 0;
}

static void reap(run_state *s) {
    for (int k = 0; k < s->o->nodes; k++) {
        int st;
        if (s->p[k].pid > 0 && waitpid(s->p[k].pid, &st, WNOHANG) == s->p[k].pid) {
            s->p[k].pid = 0;
            s->p[k].status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
    }
}

static int running(const run_state *s) {
    int n = 0;
    for (int k = 0; k < s->o->nodes; k++) n += s->p[k].pid > 0;
    return n;
}

/* The highest iteration in the target's metrics file, reading only what is new. */
static void follow_target(run_state *s) {
    char path[1024], buf[65536];
    node_path(s, "metrics", s->o->target, path, sizeof path);
    FILE *f = fopen(path, "r");
    if (!f) return;
    if (fseek(f, s->offset, SEEK_SET) == 0) {
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = 0;
        char *last_nl = strrchr(buf, '\n'); /* complete lines only */
        if (last_nl) {
            *last_nl = 0;
            s->offset += (long)(last_nl - buf) + 1;
            for (char *p = buf; (p = strstr(p, "{\"iter\":")); p++) {
                long it = strtol(p + 8, NULL, 10);
                if (it > s->seen_iter) s->seen_iter = it;
            }
        }
    }
    fclose(f);
}

static int index_of(const elastic_opts *o, long id) {
    for (int k = 0; k < o->nodes; k++)
        if (o->ids[k] == id) return k;
    return 0;
}

/* Send the fault, then the restart, when due. */
static void drive_fault(run_state *s, int with_fault) {
    const elastic_opts *o = s->o;
    int k = index_of(o, o->target);
    if (!with_fault || s->faulted == 2) return;
    if (s->faulted == 0) {
        follow_target(s);
        if (s->seen_iter < o->fault_iter || s->p[k].pid <= 0) return;
        kill(s->p[k].pid, o->kill ? SIGKILL : SIGSTOP);
        s->fault_t = hr_unix_s(), s->fault_mono = hr_now(), s->faulted = 1;
        printf("  node %ld %s at iteration %ld\n", o->target, o->kill ? "killed" : "stopped",
               s->seen_iter);
        fflush(stdout);
        return;
    }
    if (hr_now() < s->fault_mono + o->rejoin_after) return;
    if (running(s) == (s->p[k].pid > 0)) { /* no cluster is left to come back to */
        s->ended_early = 1, s->faulted = 3;
        if (s->p[k].pid > 0) kill(s->p[k].pid, SIGKILL), kill(s->p[k].pid, SIGCONT);
        return;
    }
    if (o->kill) {
        if (s->p[k].pid > 0) { /* SIGKILL has been sent: reaping it cannot block for long */
            int st;
            waitpid(s->p[k].pid, &st, 0);
            s->p[k].pid = 0;
            s->p[k].status = 128 + SIGKILL;
        }
        start_node(s, k);
    } else if (s->p[k].pid > 0) {
        kill(s->p[k].pid, SIGCONT);
    }
    s->restart_t = hr_unix_s(), s->faulted = 2;
    printf("  node %ld %s\n", o->target, o->kill ? "started again" : "continued");
    fflush(stdout);
}

/* Once the others have ended, the target gets EB_LAST_S to end too (a joiner that missed the
 * end would wait for its rejoin_timeout). */
#define EB_LAST_S 10
static void watch_last(run_state *s) {
    int k = index_of(s->o, s->o->target);
    if (s->faulted != 2 || s->p[k].pid <= 0 || running(s) != 1) return;
    if (!s->alone_since) s->alone_since = hr_now();
    if (hr_now() - s->alone_since < EB_LAST_S) return;
    kill(s->p[k].pid, SIGKILL);
    s->ended_early = 1;
}

/* SIGKILL every node still running (SIGCONT for a stopped one) and reap it. */
static void kill_nodes(run_state *s) {
    for (int k = 0; k < s->o->nodes; k++)
        if (s->p[k].pid > 0) kill(s->p[k].pid, SIGKILL), kill(s->p[k].pid, SIGCONT);
    for (int k = 0; k < s->o->nodes; k++)
        if (s->p[k].pid > 0) waitpid(s->p[k].pid, NULL, 0), s->p[k].pid = 0;
}

/* Run the cluster once in directory `dir` (with the fault when `with_fault`) until every node
 * has exited or the deadline passed; no node is left running. Returns 0 when every node's last
 * process exited 0 (and the fault happened, when asked for), BENCH_STOPPED when a signal
 * stopped the bench (the nodes killed and reaped), else -1 after saying why. */
static int run_cluster(run_state *s, const elastic_opts *o, const char *dir, int with_fault) {
    memset(s, 0, sizeof *s);
    s->o = o;
    s->seen_iter = -1;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "bench elastic: cannot create %s: %s\n", dir, strerror(errno));
        return -1;
    }
    for (int k = 0; k < o->nodes; k++) { /* a fresh run: no records of an earlier one */
        char path[1024];
        node_path(s, "metrics", o->ids[k], path, sizeof path);
        unlink(path);
        node_path(s, "log", o->ids[k], path, sizeof path);
        unlink(path);
    }
    double until = hr_now() + o->deadline;
    for (int k = 0; k < o->nodes; k++) start_node(s, k);
    const struct timespec tick = {0, 10 * 1000 * 1000};
    while (running(s) > 0 || (with_fault && s->faulted == 1)) {
        nanosleep(&tick, NULL);
        if (bench_stopped()) return kill_nodes(s), BENCH_STOPPED;
        reap(s);
        drive_fault(s, with_fault);
        watch_last(s);
        if (hr_now() > until) {
            s->timed_out = 1;
            kill_nodes(s);
            break;
        }
    }
    int ok = !s->timed_out && !s->ended_early && (!with_fault || s->faulted == 2);
    for (int k = 0; k < o->nodes; k++) ok &= s->p[k].status == 0;
    if (ok) return 0;
    fprintf(stderr, "bench elastic: the run in %s failed:%s%s", dir,
            s->timed_out ? " past its deadline;" : "",
            with_fault && s->faulted == 0 ? " the fault never happened;" : "");
    if (s->ended_early)
        fprintf(stderr,
                " the others ended before node %ld was back (raise --iters or lower "
                "--rejoin-after);",
                o->target);
    for (int k = 0; k < o->nodes; k++)
        fprintf(stderr, " node %ld exit %d;", o->ids[k], s->p[k].status);
    fprintf(stderr, " see the nK.log files there\n");
    return -1;
}

/* Load every node's metrics file of directory `dir`. */
static void load_nodes(const elastic_opts *o, const char *dir, em_node *nodes) {
    for (int k = 0; k < o->nodes; k++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/m%ld.jsonl", dir, o->ids[k]);
        em_node_load(&nodes[k], o->ids[k], path);
    }
}

/* ================================================================ the plot */

/* dir/elastic.csv (t, samples/s over 5 iterations, each node's batch by id, empty when it is
 * no member) from the reference node's records, and fault.csv / restart.csv, two points
 * each: a vertical line at the event for both plots (columns t, samples/s, batch). */
static double write_csv(const char *dir, const elastic_opts *o, const em_node *x, double t0,
                        double *max_sps) {
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/elastic.csv", dir);
    FILE *f = bench_open_out(path, tmp, sizeof tmp);
    if (!f) return -1;
    fprintf(f, "t,samples_per_s");
    for (int k = 0; k < o->nodes; k++) fprintf(f, ",b%ld", o->ids[k]);
    fprintf(f, "\n");
    *max_sps = 0;
    for (long i = 5; i < x->n_it; i++) {
        const em_iter *it = &x->it[i];
        double dt = it->t - x->it[i - 5].t, sps = dt > 0 ? 5.0 * (double)o->B / dt : NAN;
        if (sps > *max_sps) *max_sps = sps;
        fprintf(f, "%.4f,%.1f", it->t - t0, sps);
        for (int k = 0; k < o->nodes; k++) {
            int r = -1;
            for (int j = 0; j < it->nb; j++)
                if (it->nodes[j] == o->ids[k]) r = j;
            if (r >= 0)
                fprintf(f, ",%.0f", it->b[r]);
            else
                fprintf(f, ",NaN");
        }
        fprintf(f, "\n");
    }
    return bench_commit(f, tmp, path);
}

static void write_event(const char *dir, const char *name, double t, double max_sps, long B) {
    char path[1024], tmp[1100];
    snprintf(path, sizeof path, "%s/%s.csv", dir, name);
    FILE *f = bench_open_out(path, tmp, sizeof tmp);
    if (!f) return;
    fprintf(f, "t,samples_per_s,batch\n%.4f,0,0\n%.4f,%.1f,%ld\n", t, t, max_sps, B);
    bench_commit(f, tmp, path);
}

/* elastic.png: samples/s and every node's batch against time, the events marked. */
static void plot_run(const char *dir, const elastic_opts *o, const em_node *nodes,
                     const em_fault *f, const em_result *r) {
    const em_node *x = NULL;
    for (int k = 0; k < o->nodes; k++)
        if (nodes[k].id != o->target && nodes[k].n_it > 5 && (!x || nodes[k].id < x->id))
            x = &nodes[k];
    if (!x) return;
    double t0 = x->it[0].t, max_sps;
    if (write_csv(dir, o, x, t0, &max_sps) != 0) return;
    write_event(dir, "fault", f->fault_t - t0, max_sps, o->B);
    if (f->restart_t > 0) write_event(dir, "restart", f->restart_t - t0, max_sps, o->B);
    static plot_spec p[2];
    memset(p, 0, sizeof p);
    char csv[PLOT_PATH], fault[PLOT_PATH], restart[PLOT_PATH], script[PLOT_PATH], log[PLOT_PATH];
    snprintf(csv, sizeof csv, "%s/elastic.csv", dir);
    snprintf(fault, sizeof fault, "%s/fault.csv", dir);
    snprintf(restart, sizeof restart, "%s/restart.csv", dir);
    snprintf(script, sizeof script, "%s/elastic.gp", dir);
    snprintf(log, sizeof log, "%s/gnuplot.log", dir);
    const char *ev = o->kill ? "kill" : "stop";
    snprintf(p[0].png, sizeof p[0].png, "%s/elastic-throughput.png", dir);
    snprintf(p[0].title, sizeof p[0].title,
             "samples/s (node %ld, 5-iteration window); node %ld: %s, then back (view %ld)", x->id,
             o->target, ev, r->excl_view);
    p[0].xlabel = "seconds", p[0].ylabel = "samples/s";
    plot_add(&p[0], csv, 1, 2, 1, "samples/s");
    snprintf(p[1].png, sizeof p[1].png, "%s/elastic-batch.png", dir);
    snprintf(p[1].title, sizeof p[1].title, "batch per node (global batch %ld)", o->B);
    p[1].xlabel = "seconds", p[1].ylabel = "samples";
    for (int k = 0; k < o->nodes; k++) plot_add(&p[1], csv, 1, 3 + k, 1, "node %ld", o->ids[k]);
    for (int i = 0; i < 2; i++) {
        plot_add(&p[i], fault, 1, 2 + i, 1, "%s node %ld", ev, o->target);
        if (f->restart_t > 0) plot_add(&p[i], restart, 1, 2 + i, 1, "node %ld back", o->target);
    }
    if (plot_render(script, p, 2, log) == 0)
        printf("plots: %s/elastic-throughput.png, %s/elastic-batch.png\n", dir, dir);
}

/* ================================================================ report */

typedef struct {
    int ok;      /* the run completed */
    em_result r; /* its measures */
} run_report;

static void json_num(FILE *f, const char *key, double v, int last) {
    if (isfinite(v))
        fprintf(f, "\"%s\": %.6g%s", key, v, last ? "" : ", ");
    else
        fprintf(f, "\"%s\": null%s", key, last ? "" : ", ");
}

static void json_run(FILE *f, const elastic_opts *o, int run, const run_report *rr,
                     double ref_loss) {
    const em_result *r = &rr->r;
    fprintf(f, "  {\"run\": %d, \"ok\": %s, \"event\": \"%s\", \"node\": %ld, \"at_iter\": %ld, ",
            run, rr->ok ? "true" : "false", o->kill ? "kill" : "stop", o->target, o->fault_iter);
    json_num(f, "rejoin_after_s", o->rejoin_after, 0);
    json_num(f, "detect_s", r->detect_s, 0);
    json_num(f, "resume_s", r->resume_s, 0);
    json_num(f, "join_s", r->join_s, 0);
    json_num(f, "state_bytes", r->state_bytes, 0);
    json_num(f, "samples_missing", r->samples_missing < 0 ? NAN : (double)r->samples_missing, 0);
    json_num(f, "samples_duplicated",
             r->samples_duplicated < 0 ? NAN : (double)r->samples_duplicated, 0);
    fprintf(f, "\"replicas_identical\": %s, ", r->replicas_identical ? "true" : "false");
    json_num(f, "throughput_before", r->throughput_before, 0);
    json_num(f, "throughput_after", r->throughput_after, 0);
    json_num(f, "final_loss", r->final_loss, 0);
    json_num(f, "reference_loss", ref_loss, 0);
    fprintf(f,
            "\"final_iter\": %ld, \"fault_iter\": %ld, \"throughput_window\": %ld, "
            "\"samples_from_iter\": %ld, \"samples_to_iter\": %ld}",
            r->final_iter, r->fault_iter, r->window, r->touched_from, r->touched_to);
}

/* The median of one measure over the completed runs. */
static double median_of(const run_report *rr, int n, size_t offset, int is_long) {
    double v[EB_MAX_RUNS];
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (!rr[i].ok) continue;
        const char *p = (const char *)&rr[i].r + offset;
        double x = is_long ? (double)*(const long *)p : *(const double *)p;
        if (!is_long || x >= 0) v[k++] = x;
    }
    return bench_median(v, k);
}

#define MED(field, is_long) median_of(rr, n, offsetof(em_result, field), is_long)

static void print_row(const char *label, double det, double res, double join, double bytes,
                      double miss, double dup, const char *ident, double before, double after,
                      double loss, double ref) {
    printf("%-8s %8.3f %8.3f %8.3f %9.2f %8.0f %8.0f %9s %9.0f %9.0f %6.3f %9.5f %9.5f %9.2e\n",
           label, det, res, join, bytes / 1e6, miss, dup, ident, before, after, after / before,
           loss, ref, fabs(loss - ref) / ref);
}

static void print_header(void) {
    bench_print_blas(stdout, "# ");
    printf("%-8s %8s %8s %8s %9s %8s %8s %9s %9s %9s %6s %9s %9s %9s\n", "run", "detect_s",
           "resume_s", "join_s", "state_MB", "missing", "dup", "identical", "sps_befor",
           "sps_after", "ratio", "loss", "ref_loss", "rel_diff");
}

static void print_run(int i, const run_report *rr, double ref) {
    char label[16];
    const em_result *r = &rr->r;
    snprintf(label, sizeof label, "%d", i + 1);
    if (!rr->ok) {
        printf("%-8s (failed)\n", label);
        return;
    }
    print_row(label, r->detect_s, r->resume_s, r->join_s, r->state_bytes,
              (double)r->samples_missing, (double)r->samples_duplicated,
              r->replicas_identical ? "yes" : "NO", r->throughput_before, r->throughput_after,
              r->final_loss, ref);
}

static void print_medians(const run_report *rr, int n, double ref) {
    int ok = 0, same = 0;
    for (int i = 0; i < n; i++) ok += rr[i].ok, same += rr[i].ok && rr[i].r.replicas_identical;
    char ident[32];
    snprintf(ident, sizeof ident, "%d/%d", same, ok);
    if (!ok) return;
    print_row("median", MED(detect_s, 0), MED(resume_s, 0), MED(join_s, 0), MED(state_bytes, 0),
              MED(samples_missing, 1), MED(samples_duplicated, 1), ident, MED(throughput_before, 0),
              MED(throughput_after, 0), MED(final_loss, 0), ref);
}

/* ================================================================ main */

/* One faulted run in OUT/runK: run, analyse, plot (the last run's plot is kept). 0, -1 when it
 * failed, BENCH_STOPPED when a signal stopped it. */
static int faulted_run(const elastic_opts *o, int i, run_report *rr) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/run%d", o->out_dir, i + 1);
    run_state s;
    printf("run %d/%ld: %s\n", i + 1, o->runs, dir);
    int rc = run_cluster(&s, o, dir, 1);
    if (rc == BENCH_STOPPED) return BENCH_STOPPED;
    rr->ok = rc == 0;
    em_node nodes[EB_MAX_NODES];
    load_nodes(o, dir, nodes);
    em_fault f = {.kill = o->kill,
                  .target = o->target,
                  .fault_t = s.fault_t,
                  .restart_t = s.restart_t,
                  .B = o->B,
                  .ipe = o->ipe,
                  .iters = o->iters};
    em_analyse(nodes, (int)o->nodes, &f, &rr->r);
    if (rr->ok) plot_run(dir, o, nodes, &f, &rr->r);
    for (int k = 0; k < o->nodes; k++) em_node_free(&nodes[k]);
    return rr->ok ? 0 : -1;
}

/* The uninterrupted run of the same file: its final loss, or NAN. */
static double reference_run(const elastic_opts *o) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/reference", o->out_dir);
    printf("reference run (no fault): %s\n", dir);
    run_state s;
    if (run_cluster(&s, o, dir, 0) != 0) return NAN;
    em_node nodes[EB_MAX_NODES];
    load_nodes(o, dir, nodes);
    double loss = em_final_loss(nodes, (int)o->nodes);
    for (int k = 0; k < o->nodes; k++) em_node_free(&nodes[k]);
    return loss;
}

/* The first n runs (those completed) as a JSON array. */
static int write_json(const elastic_opts *o, const run_report *rr, int n, double ref) {
    if (!o->json) return 0;
    FILE *f = fopen(o->json, "w");
    if (!f) {
        fprintf(stderr, "bench elastic: cannot write %s: %s\n", o->json, strerror(errno));
        return -1;
    }
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++) {
        json_run(f, o, i + 1, &rr[i], ref);
        fprintf(f, "%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "]\n");
    return bench_close(f, o->json);
}

int bench_elastic(int argc, char **argv) {
    static char tmpl[4200];
    elastic_opts o = {.nodes = 4,
                      .kill = 1,
                      .target = 2,
                      .fault_iter = -1,
                      .rejoin_after = NAN,
                      .iters = 1000,
                      .runs = 5,
                      .deadline = 600,
                      .out_dir = "bench-elastic",
                      .tmpl = bench_own_file("hetero.ini", tmpl, sizeof tmpl)};
    int rc = parse_opts(&o, argc, argv);
    if (rc >= 0) return rc;
    rc = bench_prepare_runs("elastic", o.hetring, sizeof o.hetring, o.out_dir);
    if (rc >= 0) return rc;
    if (write_config(&o) != 0) return CLI_USAGE;
    printf("bench elastic: %ld nodes, %s node %ld at iteration %ld, back after %.1f s, %ld "
           "iterations, B = %ld; cluster file %s\n",
           o.nodes, o.kill ? "SIGKILL" : "SIGSTOP", o.target, o.fault_iter, o.rejoin_after, o.iters,
           o.B, o.conf);
    bench_stop_on_signals();
    double ref = reference_run(&o);
    run_report rr[EB_MAX_RUNS];
    memset(rr, 0, sizeof rr);
    int failed = 0, done = 0;
    for (; done < o.runs && !bench_stopped(); done++) {
        int run_rc = faulted_run(&o, done, &rr[done]);
        if (run_rc == BENCH_STOPPED) break;
        failed += run_rc != 0;
    }
    printf("\nevent %s, medians over %d run(s):\n", o.kill ? "kill" : "stop", done);
    print_header();
    for (int i = 0; i < done; i++) print_run(i, &rr[i], ref);
    print_medians(rr, done, ref);
    int lost = write_json(&o, rr, done, ref) != 0;
    int stopped = bench_stop_status("elastic", done, (int)o.runs, failed);
    if (stopped >= 0) return stopped;
    return failed || lost || isnan(ref) ? CLI_FAIL : CLI_OK;
}
