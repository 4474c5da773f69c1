/*
 * launch.c: the local multi-node launcher (see launch.h).
 *
 * One poll loop watches a signalfd (SIGINT, SIGTERM, SIGHUP, SIGCHLD) and one pipe per child
 * carrying its merged stdout and stderr. Output is cut into lines and written with a node prefix.
 * Children run in their own process groups, so a terminal's Ctrl-C reaches them only through
 * the launcher, once. A failed child either waits for its restart (respawn_at), stays down
 * while a quorum runs, or stops the others; the launcher is "stopping" (kill_at set) from the
 * first stop on, and from then on restarts nothing and no exit changes the outcome. Children
 * say on one shared socket (LAUNCH_FD_ENV) when they join the cluster; until the first does,
 * a child's own non-zero exit is a start-up failure, which stops the others.
 */
#include "cli/launch.h"
#include "base/hr_cores.h"
#include "base/hr_log.h"
#include "base/hr_time.h"
#include "cluster/node_id.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;         /* 0 once reaped */
    pid_t pgid;        /* its process group (the pid it started with), kept after the reap */
    int fd;            /* read end of the output pipe, -1 at EOF */
    double respawn_at; /* hr_now() at which this failed node starts again; 0 = none pending */
    int stopped;       /* the launcher signalled this process to stop: its exit is not its own */
    char buf[8192];    /* partial line not yet written */
    size_t len;        /* bytes in buf */
} child;

static void emit(FILE *out, long id, const char *s, size_t n) {
    if (!out) return;
    fprintf(out, "node%ld | %.*s\n", id, (int)n, s);
    fflush(out);
}

/* Read what a child wrote and print every complete line. */
static void drain(child *ch, long id, FILE *out) {
    for (;;) {
        if (ch->len == sizeof ch->buf) { /* a very long line: print it in pieces */
            emit(out, id, ch->buf, ch->len);
            ch->len = 0;
        }
        ssize_t n = read(ch->fd, ch->buf + ch->len, sizeof ch->buf - ch->len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        if (n <= 0) { /* EOF: flush the unterminated tail */
            if (ch->len) emit(out, id, ch->buf, ch->len);
            ch->len = 0;
            close(ch->fd);
            ch->fd = -1;
            return;
        }
        ch->len += (size_t)n;
        char *start = ch->buf, *nl;
        while ((nl = memchr(start, '\n', ch->len - (size_t)(start - ch->buf)))) {
            emit(out, id, start, (size_t)(nl - start));
            start = nl + 1;
        }
        ch->len -= (size_t)(start - ch->buf);
        memmove(ch->buf, start, ch->len);
    }
}

/* The children's environment: this process's with HETRING_LAUNCHED=1 and `fd_var`
 * (LAUNCH_FD_ENV=N), built before any fork (a child of a process with threads may not allocate
 * or setenv). NULL when out of memory; free with free() alone (the strings are environ's, a
 * static one and the caller's). */
static char **child_environment(char *fd_var) {
    extern char **environ;
    static char launched[] = "HETRING_LAUNCHED=1";
    const size_t fd_len = strlen(LAUNCH_FD_ENV "=");
    size_t n = 0, k = 0;
    while (environ[n]) n++;
    char **env = malloc((n + 3) * sizeof *env);
    if (!env) return NULL;
    for (size_t i = 0; i < n; i++)
        if (strncmp(environ[i], "HETRING_LAUNCHED=", 17) != 0 &&
            strncmp(environ[i], LAUNCH_FD_ENV "=", fd_len) != 0)
            env[k++] = environ[i];
    env[k++] = launched;
    env[k++] = fd_var;
    env[k] = NULL;
    return env;
}

/* The path of node id's network namespace under --netns (launch_opts.netns). */
static void netns_path(const launch_opts *o, long id, char *out, size_t n) {
    snprintf(out, n, "/var/run/netns/%s-%ld", o->netns, id);
}

/* The children's command line, "EXE run --conf FILE --node ID ARGS...", sized from the count of
 * o->args and built before any fork, with the slot CHILD_ARGV_ID for each child's id. NULL when
 * out of memory; free with free() alone (the strings are o's). */
#define CHILD_ARGV_ID 5
static const char **child_argv(const launch_opts *o) {
    size_t n = 0, k = 0;
    while (o->args && o->args[n]) n++;
    const char **argv = malloc((n + CHILD_ARGV_ID + 2) * sizeof *argv);
    if (!argv) return NULL;
    argv[k++] = o->exe, argv[k++] = "run", argv[k++] = "--conf", argv[k++] = o->conf;
    argv[k++] = "--node", argv[k++] = NULL; /* CHILD_ARGV_ID: the child's own id */
    for (size_t i = 0; i < n; i++) argv[k++] = o->args[i];
    argv[k] = NULL;
    return argv;
}

/* Node id's child, in its network namespace where o->netns names one (the path built by the
 * parent: the child of a process with threads only makes system calls). `argv` is child_argv's;
 * the child fills in its id in its own copy. `join_fd`, where it says it joined, stays open
 * across its exec. */
static pid_t spawn(const launch_opts *o, long id, int out_fd, int join_fd, const sigset_t *old_mask,
                   const char **argv, char **envp) {
    char ns[256] = "";
    if (o->netns) netns_path(o, id, ns, sizeof ns);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid > 0) setpgid(pid, pid); /* as the child does: the group exists before either goes on */
    if (pid != 0) return pid;
    /* child */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the launcher died before prctl took effect */
    setpgid(0, 0);
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    signal(SIGPIPE, SIG_DFL);
    dup2(out_fd, STDOUT_FILENO);
    dup2(out_fd, STDERR_FILENO);
    close(out_fd);
    fcntl(join_fd, F_SETFD, 0);
    if (ns[0]) {
        int fd = open(ns, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
            fprintf(stderr, "cannot enter the network namespace %s: %s\n", ns, strerror(errno));
            _exit(127);
        }
        close(fd);
    }
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, "%ld", id);
    argv[CHILD_ARGV_ID] = idbuf;
    execve(o->exe, (char *const *)argv, envp);
    fprintf(stderr, "cannot execute %s: %s\n", o->exe, strerror(errno));
    _exit(127);
}

static void signal_all(child *ch, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (ch[i].pid > 0) kill(ch[i].pid, sig), ch[i].stopped = 1;
}

/* SIGKILL to every child still running and to its whole process group, also after the child
 * itself was reaped while its output pipe stays open: whatever a node left behind dies with
 * it, and none of it holds the launcher by holding the pipe. */
static void kill_all(child *ch, int n) {
    for (int i = 0; i < n; i++) {
        if (ch[i].pid > 0) kill(ch[i].pid, SIGKILL), ch[i].stopped = 1;
        if ((ch[i].pid > 0 || ch[i].fd >= 0) && ch[i].pgid > 0) kill(-ch[i].pgid, SIGKILL);
    }
}

static const char *signame(int sig) {
    const char *s = sigabbrev_np(sig);
    return s ? s : "?";
}

void launch_result_free(launch_result *res) {
    if (!res) return;
    free(res->ids);
    free(res->exit_code);
    free(res->restarts);
    res->ids = NULL;
    res->exit_code = NULL;
    res->restarts = NULL;
}

/* Every node must be on an address of this machine, or with --netns have its namespace (where
 * its own `hetring run` checks that its host is local). Returns 0, or 2 after saying what is
 * wrong. */
static int check_local(const cfg *c, const launch_opts *o) {
    const double deadline = hr_now() + c->connect_timeout;
    for (int i = 0; i < c->n_nodes; i++) {
        if (o->netns) {
            char ns[256];
            netns_path(o, c->nodes[i].id, ns, sizeof ns);
            if (access(ns, R_OK) != 0) {
                fprintf(stderr, "%s:%d: [node.%ld]: --netns %s: no network namespace %s (%s)\n",
                        c->path, c->nodes[i].line, c->nodes[i].id, o->netns, ns, strerror(errno));
                return 2;
            }
            continue;
        }
        char why[HR_ERRLEN];
        int local, resolves;
        if (node_id_host_is_local(c->nodes[i].host, deadline, &local, &resolves, why, sizeof why) !=
            HR_OK) {
            fprintf(stderr,
                    "%s:%d: [node.%ld] host %s: looking it up took longer than connect_timeout "
                    "(%g s), so it is not known whether it is on this machine (is the resolver "
                    "slow or out of reach? a numeric address needs no lookup)\n",
                    c->path, c->nodes[i].line, c->nodes[i].id, c->nodes[i].host,
                    c->connect_timeout);
            return 2;
        }
        if (!resolves) {
            fprintf(stderr,
                    "%s:%d: [node.%ld] host %s does not resolve (%s) (expected a name or "
                    "address of this machine: hetring local starts every node here)\n",
                    c->path, c->nodes[i].line, c->nodes[i].id, c->nodes[i].host, why);
            return 2;
        }
        if (!local) {
            fprintf(stderr,
                    "%s:%d: [node.%ld] host %s is not an address of this machine (expected every "
                    "node on a local address for hetring local; use hetring run on each host)\n",
                    c->path, c->nodes[i].line, c->nodes[i].id, c->nodes[i].host);
            return 2;
        }
    }
    return 0;
}

/* The launcher while its children run. */
typedef struct {
    const launch_opts *o;
    launch_result *res; /* ids, exit codes, restarts and how the run ended */
    child *ch;          /* one per node, in c->nodes order */
    int n;              /* nodes */
    int alive;          /* children not yet reaped */
    int pending;        /* failed children waiting for their restart */
    int sfd;            /* signalfd for SIGINT, SIGTERM, SIGHUP and SIGCHLD */
    sigset_t old_mask;  /* the caller's signal mask, which children get back */
    char **envp;        /* the children's environment (child_environment) */
    char fd_var[40];    /* LAUNCH_FD_ENV=N in envp */
    int join[2];        /* a socket pair: children write their ids on [1] when they join the
                         * cluster, the launcher reads [0] */
    int formed;         /* a child said it joined: the cluster formed */
    const char **argv;  /* the children's command line (child_argv) */
    double start;       /* hr_now() when every child was started */
    double kill_at;     /* hr_now() after which survivors get SIGKILL; 0 while none is due */
    double killed;      /* hr_now() when they got it (kill_all); 0 = not yet */
    double stop_at;     /* hr_now() at which nodes left without a quorum get SIGTERM; 0 = none */
    double signal_at;   /* hr_now() when the first SIGINT, SIGTERM or SIGHUP came; 0 = none */
} launcher;

/* Send `sig` (then SIGCONT, so that a stopped child acts on it) to every child still running,
 * give them o->grace_s to exit and drop every pending restart. */
static void stop_all(launcher *l, int sig, double now) {
    signal_all(l->ch, l->n, sig);
    signal_all(l->ch, l->n, SIGCONT);
    if (!l->kill_at) l->kill_at = now + l->o->grace_s;
    for (int i = 0; i < l->n; i++) l->ch[i].respawn_at = 0;
    l->pending = 0;
}

/* Fork child `i` with its output on a fresh non-blocking pipe. Returns 0, or -1 after a message
 * when the pipe or the fork failed. */
static int start_child(launcher *l, int i) {
    child *ch = &l->ch[i];
    if (ch->fd >= 0) { /* a dead incarnation's output: print what is left, then drop the pipe */
        drain(ch, l->res->ids[i], l->o->out);
        if (ch->fd >= 0) close(ch->fd);
        if (ch->len) emit(l->o->out, l->res->ids[i], ch->buf, ch->len);
        ch->fd = -1;
        ch->len = 0;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0) {
        const int emfile = errno == EMFILE; /* a restart, past fd_budget's count */
        HR_ERROR(CLI, "cannot start node %ld: pipe: %s%s", l->res->ids[i], strerror(errno),
                 emfile ? " (the open-file limit, RLIMIT_NOFILE or ulimit -n: raise it)" : "");
        return -1;
    }
    pid_t pid = spawn(l->o, l->res->ids[i], p[1], l->join[1], &l->old_mask, l->argv, l->envp);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        HR_ERROR(CLI, "cannot start node %ld: fork: %s", l->res->ids[i], strerror(errno));
        return -1;
    }
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    ch->pid = ch->pgid = pid;
    ch->fd = p[0];
    ch->stopped = 0;
    l->alive++;
    return 0;
}

/* The launcher holds one pipe per node (its output), and two while it makes each: under the
 * open-file limit, it raises the soft limit toward the hard one (the nodes inherit it), as a
 * node's ring does (ring/open.c, fd_budget); where that is not enough, it says so, naming the
 * limit and the count, before any node starts. Returns 0, or 2 after the message. */
static int fd_budget(int n) {
    const long open = hr_fds_open(), need = open + n + 2;
    if (open < 0) return 0;
    unsigned long soft, hard;
    const int got = hr_fds_reserve(need, &soft, &hard);
    if (got == 1)
        HR_INFO(CLI,
                "raised the open-file limit (RLIMIT_NOFILE) from %lu to %ld: the launcher holds "
                "a pipe per node",
                soft, need);
    if (got >= 0) return 0;
    HR_ERROR(CLI,
             "the open-file limit (RLIMIT_NOFILE, ulimit -n) is %lu (hard %lu), but starting %d "
             "nodes needs %ld descriptors in this launcher (a pipe per node, %ld open now), and "
             "each node more of its own: raise it (ulimit -n %ld or more) or start fewer nodes",
             soft, hard, n, need, open, need);
    return 2;
}

/* Fork one child per node. Returns 0, or 2 when one could not be started (the children
 * already started keep running for the caller to stop). */
static int start_children(launcher *l, const cfg *c) {
    for (int i = 0; i < l->n; i++) l->ch[i].fd = -1; /* none polled until started */
    for (int i = 0; i < l->n; i++) l->res->ids[i] = c->nodes[i].id;
    if (fd_budget(l->n) != 0) return 2;
    for (int i = 0; i < l->n; i++)
        if (start_child(l, i) != 0) return 2;
    return 0;
}

/* Stop every node as an interruption of the run does, saying why the first time. */
static void interrupt(launcher *l, const char *why) {
    if (!l->res->interrupted) HR_WARN(CLI, "%s: stopping %d node(s)", why, l->alive);
    l->res->interrupted = 1;
    stop_all(l, SIGTERM, hr_now());
}

/* SIGINT, SIGTERM and SIGHUP (its terminal closed) to the launcher reach every child as
 * SIGTERM: each leaves with its checkpoint, rather than die with the launcher
 * (PR_SET_PDEATHSIG). A second one (Ctrl-C twice) LAUNCH_SIGNAL_SAME_S or more after the first
 * kills the nodes still leaving; one sooner is the first delivered twice. */
static void forward_signals(launcher *l) {
    struct signalfd_siginfo si;
    while (read(l->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo != SIGINT && si.ssi_signo != SIGTERM && si.ssi_signo != SIGHUP) continue;
        double now = hr_now();
        char why[64];
        snprintf(why, sizeof why, "received SIG%s", signame((int)si.ssi_signo));
        if (!l->signal_at) {
            l->signal_at = now;
            interrupt(l, why);
        } else if (!l->killed && l->alive > 0 && now - l->signal_at >= LAUNCH_SIGNAL_SAME_S) {
            HR_WARN(CLI,
                    "%s again: killing the %d node(s) still leaving, without their checkpoints",
                    why, l->alive);
            kill_all(l->ch, l->n);
            l->killed = now;
        }
    }
}

/* Whether `out` is a pipe or socket whose reader is gone (`hetring local | head`): the nodes'
 * output has nowhere to go, and the user's command has ended. */
static int output_gone(FILE *out) {
    struct pollfd p = {.fd = out ? fileno(out) : -1};
    return p.fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

/* Whether a node other than `i` runs or waits for its restart: a cluster to rejoin. */
static int others_active(const launcher *l, int i) {
    for (int k = 0; k < l->n; k++)
        if (k != i && (l->ch[k].pid > 0 || l->ch[k].respawn_at > 0)) return 1;
    return 0;
}

/* Whether failed child `i` is to be restarted; when not, `why` says why ("" when restarts are
 * off). */
static int may_respawn(const launcher *l, int i, char *why, size_t n) {
    long id = l->res->ids[i];
    why[0] = 0;
    if (l->o->max_respawns <= 0) return 0;
    if (l->res->exit_code[i] == LAUNCH_EXIT_REFUSED)
        snprintf(why, n,
                 "not restarting node %ld: it refused its command line or configuration (exit "
                 "status %d) and would again",
                 id, LAUNCH_EXIT_REFUSED);
    else if (l->res->restarts[i] >= l->o->max_respawns)
        snprintf(why, n, "node %ld was restarted %d time(s), the most allowed; it stays down", id,
                 l->res->restarts[i]);
    else if (!others_active(l, i))
        snprintf(why, n, "not restarting node %ld: no other node is running", id);
    return why[0] == 0;
}

/* Read which children said they joined the cluster. */
static void read_joined(launcher *l) {
    char buf[256];
    while (recv(l->join[0], buf, sizeof buf, MSG_DONTWAIT) > 0) {
        if (!l->formed) HR_DEBUG(CLI, "the cluster formed");
        l->formed = 1;
    }
}

/* After child `i` failed (`what` says how; `exited`: by itself, with a non-zero status): restart
 * it later, let the others go on while a quorum runs or a restart is pending, or stop them; at
 * once when it exited before the cluster formed, a start-up failure that the others would only
 * wait on. */
static void on_failure(launcher *l, int i, const char *what, int exited) {
    launch_result *res = l->res;
    double now = hr_now();
    char why[160];
    if (res->failed_node < 0) res->failed_node = i;
    int respawn = may_respawn(l, i, why, sizeof why);
    if (respawn) l->ch[i].respawn_at = now + l->o->respawn_s, l->pending++;
    if (exited && !respawn && !l->formed && l->alive > 0) {
        res->failed_node = i, res->at_start = 1;
        HR_ERROR(CLI, "%s before the cluster formed (its error is above); stopping the others",
                 what);
        stop_all(l, SIGTERM, now);
    } else if (l->alive == 0 && l->pending == 0) {
        HR_ERROR(CLI, "%s; no node is running any more", what);
    } else if (l->alive >= res->quorum || l->pending > 0) {
        HR_WARN(CLI, "%s; %d of %d nodes still running (quorum %ld)%s", what, l->alive, l->n,
                res->quorum, l->alive < res->quorum ? "; waiting for a restart" : "");
    } else {
        res->quorum_lost = 1;
        if (l->o->quorum_wait_s > 0) {
            HR_ERROR(CLI,
                     "%s; %d of %d nodes still running, below the quorum of %ld; they wait "
                     "%.1f s (rejoin_timeout) for it, then give up or are stopped",
                     what, l->alive, l->n, res->quorum, l->o->quorum_wait_s);
            l->stop_at = now + l->o->quorum_wait_s + l->o->grace_s;
        } else {
            HR_ERROR(CLI,
                     "%s; %d of %d nodes still running, below the quorum of %ld; stopping "
                     "the others",
                     what, l->alive, l->n, res->quorum);
            stop_all(l, SIGTERM, now);
        }
    }
    if (respawn)
        HR_WARN(CLI, "respawning node %ld in %.1f s", res->ids[i], l->o->respawn_s);
    else if (why[0])
        HR_WARN(CLI, "%s", why);
}

/* Note the exit of child `i`. Once the launcher is stopping, or the quorum is lost, exits are
 * only recorded. A node that exits 0 has finished (or left): when fewer than a quorum are left
 * running, they get what a lost quorum gives them (rejoin_timeout and the grace) to finish too,
 * and are stopped after it, so that a node which cannot end (stopped, hung) never holds the
 * launcher. */
static void on_exit_status(launcher *l, int i, int status) {
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    l->res->exit_code[i] = code;
    if (l->kill_at || l->res->quorum_lost) return;
    if (code == 0) {
        if (l->alive > 0 && l->alive < l->res->quorum && !l->pending && !l->stop_at)
            l->stop_at = hr_now() + l->o->quorum_wait_s + l->o->grace_s;
        return;
    }
    char what[128];
    if (WIFSIGNALED(status))
        snprintf(what, sizeof what, "node %ld was killed by SIG%s", l->res->ids[i],
                 signame(WTERMSIG(status)));
    else
        snprintf(what, sizeof what, "node %ld exited with status %d", l->res->ids[i], code);
    read_joined(l); /* whatever this child wrote before it exited is there by now */
    on_failure(l, i, what, WIFEXITED(status));
}

static void reap(launcher *l) {
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) break;
        for (int i = 0; i < l->n; i++) {
            if (l->ch[i].pid != pid) continue;
            l->ch[i].pid = 0;
            l->alive--;
            on_exit_status(l, i, status);
        }
    }
}

/* Start the failed children whose delay has passed. */
static void respawn_due(launcher *l, double t) {
    for (int i = 0; i < l->n; i++) {
        child *ch = &l->ch[i];
        if (!ch->respawn_at || t < ch->respawn_at) continue;
        ch->respawn_at = 0;
        l->pending--;
        if (!others_active(l, i)) {
            HR_WARN(CLI, "not restarting node %ld: no other node is running", l->res->ids[i]);
            continue;
        }
        l->res->restarts[i]++; /* counted before it is tried, so failed forks are bounded too */
        if (start_child(l, i) != 0) {
            char what[64];
            snprintf(what, sizeof what, "node %ld could not be restarted", l->res->ids[i]);
            on_failure(l, i, what, 0);
            continue;
        }
        HR_WARN(CLI, "node %ld restarted (pid %ld)", l->res->ids[i], (long)ch->pid);
    }
}

/* The run's deadline, then the grace period after a stop. */
static void enforce_deadlines(launcher *l, double t) {
    if (l->o->deadline_s > 0 && !l->res->timed_out && t - l->start > l->o->deadline_s) {
        HR_ERROR(CLI, "the run passed its %.0f s deadline; stopping every node", l->o->deadline_s);
        l->res->timed_out = 1;
        stop_all(l, SIGTERM, t);
    }
    if (l->stop_at && t > l->stop_at && !l->kill_at && l->alive > 0) {
        HR_ERROR(CLI, "%d node(s) still running without a quorum; stopping them", l->alive);
        stop_all(l, SIGTERM, t);
    }
    if (l->kill_at && t > l->kill_at && !l->killed) {
        int open_fds = 0;
        for (int i = 0; i < l->n; i++) open_fds += l->ch[i].fd >= 0;
        if (l->alive > 0)
            HR_WARN(CLI, "%d node(s) still running after %g s; killing them", l->alive,
                    l->o->grace_s);
        else if (open_fds > 0)
            HR_WARN(CLI,
                    "processes that %d node(s) left behind still hold their output after "
                    "%g s; killing them",
                    open_fds, l->o->grace_s);
        if (l->alive > 0 || open_fds > 0) kill_all(l->ch, l->n), l->killed = t;
    }
}

/* Milliseconds poll may sleep: 200, or less when a restart falls due sooner. */
static int poll_ms(const launcher *l, double t) {
    int ms = 200;
    for (int i = 0; i < l->n; i++)
        if (l->ch[i].respawn_at > 0) {
            double d = (l->ch[i].respawn_at - t) * 1e3 + 1;
            if (d < ms) ms = d < 0 ? 0 : (int)d;
        }
    return ms;
}

/* Relay output, signals, exits and restarts until every child is reaped, its pipe closed and
 * no restart is pending. */
static void watch(launcher *l, struct pollfd *pfd) {
    int open_fds = l->alive;
    while (l->alive > 0 || open_fds > 0 || l->pending > 0) {
        int np = 0;
        pfd[np++] = (struct pollfd){.fd = l->sfd, .events = POLLIN};
        pfd[np++] = (struct pollfd){.fd = l->join[0], .events = POLLIN};
        for (int i = 0; i < l->n; i++)
            if (l->ch[i].fd >= 0) pfd[np++] = (struct pollfd){.fd = l->ch[i].fd, .events = POLLIN};
        poll(pfd, (nfds_t)np, poll_ms(l, hr_now()));
        for (int i = 0; i < l->n; i++)
            if (l->ch[i].fd >= 0) drain(&l->ch[i], l->res->ids[i], l->o->out);
        forward_signals(l);
        if (!l->res->interrupted && output_gone(l->o->out))
            interrupt(l, "standard output was closed (its reader exited)");
        read_joined(l);
        reap(l);
        double t = hr_now();
        respawn_due(l, t);
        open_fds = 0;
        for (int i = 0; i < l->n; i++) open_fds += l->ch[i].fd >= 0;
        enforce_deadlines(l, t);
        if (l->alive == 0 && l->pending == 0 && open_fds > 0 && l->killed && t > l->killed + 1)
            break; /* a writer outside every node's process group */
    }
}

/* The outcome: 0 when the last process of every node exited 0 and nothing stopped the run; 2
 * when the nodes that failed by themselves (not stopped by the launcher) all refused the
 * configuration (res->refused). */
static int outcome(const launcher *l) {
    launch_result *res = l->res;
    int failed = 0, own = 0, refused = 0;
    for (int i = 0; i < res->n; i++) {
        if (res->exit_code[i] == 0) continue;
        failed++;
        own += !l->ch[i].stopped;
        refused += !l->ch[i].stopped && res->exit_code[i] == LAUNCH_EXIT_REFUSED;
    }
    res->refused = refused > 0 && refused == own && !res->interrupted && !res->timed_out;
    if (res->refused) return 2;
    return failed || res->interrupted || res->timed_out || res->quorum_lost ? 1 : 0;
}

int launch_cluster(const cfg *c, const launch_opts *o, launch_result *res) {
    memset(res, 0, sizeof *res);
    res->failed_node = -1;
    int n = c->n_nodes;
    if (check_local(c, o)) return 2;
    launcher l = {.o = o, .res = res, .n = n};
    if (socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, l.join) != 0) {
        fprintf(stderr, "hetring local: socketpair: %s\n", strerror(errno));
        return 2;
    }
    snprintf(l.fd_var, sizeof l.fd_var, "%s=%d", LAUNCH_FD_ENV, l.join[1]);
    l.ch = calloc((size_t)n, sizeof *l.ch);
    res->ids = calloc((size_t)n, sizeof *res->ids);
    res->exit_code = calloc((size_t)n, sizeof *res->exit_code);
    res->restarts = calloc((size_t)n, sizeof *res->restarts);
    l.envp = child_environment(l.fd_var);
    l.argv = child_argv(o);
    if (!l.ch || !res->ids || !res->exit_code || !res->restarts || !l.envp || !l.argv) {
        free(l.ch);
        free(l.envp);
        free(l.argv);
        close(l.join[0]);
        close(l.join[1]);
        launch_result_free(res);
        fprintf(stderr, "hetring local: out of memory\n");
        return 2;
    }
    res->n = n;
    res->quorum = o->min_nodes > 0 ? o->min_nodes : n / 2 + 1;

    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGHUP);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &l.old_mask);
    l.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);

    int rc = start_children(&l, c);
    l.start = hr_now();
    if (rc) stop_all(&l, SIGTERM, l.start); /* could not start everyone: stop who did start */
    struct pollfd *pfd = calloc((size_t)n + 2, sizeof *pfd);
    watch(&l, pfd);
    free(pfd);
    if (!rc) rc = outcome(&l);
    for (int i = 0; i < n; i++)
        if (l.ch[i].fd >= 0) close(l.ch[i].fd);
    free(l.ch);
    free(l.envp);
    free(l.argv);
    close(l.sfd);
    close(l.join[0]);
    close(l.join[1]);
    signal(SIGPIPE, old_pipe);
    sigprocmask(SIG_SETMASK, &l.old_mask, NULL);
    return rc;
}

void launch_joined(long id) {
    const char *v = getenv(LAUNCH_FD_ENV);
    if (!v || !v[0]) return;
    char *end;
    long fd = strtol(v, &end, 10);
    struct stat st;
    unsetenv(LAUNCH_FD_ENV); /* once */
    if (*end || fd < 3 || fd > 65535 || fstat((int)fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return;
    char line[32];
    int len = snprintf(line, sizeof line, "%ld\n", id);
    if (send((int)fd, line, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        HR_DEBUG(CLI, "cannot tell the launcher that node %ld joined: %s", id, strerror(errno));
    close((int)fd);
}
