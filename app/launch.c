/*
 * launch.c: the local multi-node launcher (see launch.h).
 *
 * One poll loop watches a signalfd (SIGINT, SIGTERM, SIGCHLD) and one pipe per child carrying
 * its merged stdout and stderr. Output is cut into lines and written with a node prefix.
 * Children run in their own process groups, so a terminal's Ctrl-C reaches them only through
 * the launcher, once.
 */
#include "launch.h"
#include "hr_log.h"
#include "node_id.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    pid_t pid;      /* 0 once reaped */
    int fd;         /* read end of the output pipe, -1 at EOF */
    char buf[8192]; /* partial line not yet written */
    size_t len;     /* bytes in buf */
} child;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

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

static pid_t spawn(const launch_opts *o, long id, int out_fd, const sigset_t *old_mask) {
    pid_t parent = getpid();
    pid_t pid = fork();
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
    char idbuf[32];
    snprintf(idbuf, sizeof idbuf, "%ld", id);
    const char *argv[64] = {o->exe, "run", "--conf", o->conf, "--node", idbuf};
    int argc = 6;
    for (int i = 0; o->args && o->args[i] && argc < 63; i++) argv[argc++] = o->args[i];
    argv[argc] = NULL;
    setenv("HETRING_LAUNCHED", "1", 1);
    execv(o->exe, (char *const *)argv);
    fprintf(stderr, "cannot execute %s: %s\n", o->exe, strerror(errno));
    _exit(127);
}

static void signal_all(child *ch, int n, int sig) {
    for (int i = 0; i < n; i++)
        if (ch[i].pid > 0) kill(ch[i].pid, sig);
}

static const char *signame(int sig) {
    const char *s = sigabbrev_np(sig);
    return s ? s : "?";
}

void launch_result_free(launch_result *res) {
    if (!res) return;
    free(res->ids);
    free(res->exit_code);
    res->ids = NULL;
    res->exit_code = NULL;
}

/* Every node must be on an address of this machine. Returns 0, or 2 after saying which is not. */
static int check_local(const cfg *c) {
    for (int i = 0; i < c->n_nodes; i++)
        if (!node_id_host_is_local(c->nodes[i].host)) {
            fprintf(stderr,
                    "%s:%d: [node.%ld] host %s is not an address of this machine (expected every "
                    "node on a local address for hetring local; use hetring run on each host)\n",
                    c->path, c->nodes[i].line, c->nodes[i].id, c->nodes[i].host);
            return 2;
        }
    return 0;
}

/* The launcher while its children run. */
typedef struct {
    const launch_opts *o;
    launch_result *res; /* ids, exit codes and how the run ended */
    child *ch;          /* one per node, in c->nodes order */
    int n;              /* nodes */
    int alive;          /* children not yet reaped */
    int sfd;            /* signalfd for SIGINT, SIGTERM and SIGCHLD */
    double start;       /* now_s() when every child was started */
    double kill_at;     /* now_s() after which survivors get SIGKILL; 0 while none is due */
} launcher;

/* Send `sig` to every child still running and give them o->grace_s to exit. */
static void stop_all(launcher *l, int sig, double now) {
    signal_all(l->ch, l->n, sig);
    l->kill_at = now + l->o->grace_s;
}

/* Fork one child per node, its output on a non-blocking pipe. Returns 0, or 2 when a pipe or
 * fork failed (the children already started keep running for the caller to stop). */
static int start_children(launcher *l, const cfg *c, const sigset_t *old_mask) {
    for (int i = 0; i < l->n; i++) l->ch[i].fd = -1; /* none polled until started */
    for (int i = 0; i < l->n; i++) {
        int p[2];
        l->res->ids[i] = c->nodes[i].id;
        if (pipe2(p, O_CLOEXEC) != 0) {
            fprintf(stderr, "hetring local: pipe: %s\n", strerror(errno));
            return 2;
        }
        pid_t pid = spawn(l->o, c->nodes[i].id, p[1], old_mask);
        close(p[1]);
        if (pid < 0) {
            close(p[0]);
            fprintf(stderr, "hetring local: fork: %s\n", strerror(errno));
            return 2;
        }
        fcntl(p[0], F_SETFL, O_NONBLOCK);
        l->ch[i].pid = pid;
        l->ch[i].fd = p[0];
        l->alive++;
    }
    return 0;
}

/* SIGINT and SIGTERM to the launcher go on to every child. */
static void forward_signals(launcher *l) {
    struct signalfd_siginfo si;
    while (read(l->sfd, &si, sizeof si) == (ssize_t)sizeof si) {
        if (si.ssi_signo != SIGINT && si.ssi_signo != SIGTERM) continue;
        if (!l->res->interrupted)
            HR_WARN(CLI, "received SIG%s: stopping %d node(s)", signame((int)si.ssi_signo),
                    l->alive);
        l->res->interrupted = 1;
        signal_all(l->ch, l->n, (int)si.ssi_signo);
        if (!l->kill_at) l->kill_at = now_s() + l->o->grace_s;
    }
}

/* Note the exit of child `i`; the first to fail on its own stops the others. */
static void on_exit_status(launcher *l, int i, int status) {
    launch_result *res = l->res;
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    res->exit_code[i] = code;
    if (code == 0 || res->failed_node >= 0 || res->interrupted || l->kill_at) return;
    res->failed_node = i;
    if (WIFSIGNALED(status))
        HR_ERROR(CLI, "node %ld was killed by SIG%s; stopping the others", res->ids[i],
                 signame(WTERMSIG(status)));
    else
        HR_ERROR(CLI, "node %ld exited with status %d; stopping the others", res->ids[i], code);
    stop_all(l, SIGTERM, now_s());
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

/* The run's deadline, then the grace period after a stop. */
static void enforce_deadlines(launcher *l, double t) {
    if (l->o->deadline_s > 0 && !l->res->timed_out && t - l->start > l->o->deadline_s) {
        HR_ERROR(CLI, "the run passed its %.0f s deadline; stopping every node", l->o->deadline_s);
        l->res->timed_out = 1;
        stop_all(l, SIGTERM, t);
    }
    if (l->kill_at && t > l->kill_at && l->alive > 0) {
        HR_WARN(CLI, "%d node(s) still running after %.0f s; killing them", l->alive,
                l->o->grace_s);
        signal_all(l->ch, l->n, SIGKILL);
        l->kill_at = t + 3600;
    }
}

/* Relay output, signals and exits until every child is reaped and its pipe closed. */
static void watch(launcher *l, struct pollfd *pfd) {
    int open_fds = l->alive;
    while (l->alive > 0 || open_fds > 0) {
        int np = 0;
        pfd[np++] = (struct pollfd){.fd = l->sfd, .events = POLLIN};
        for (int i = 0; i < l->n; i++)
            if (l->ch[i].fd >= 0) pfd[np++] = (struct pollfd){.fd = l->ch[i].fd, .events = POLLIN};
        poll(pfd, (nfds_t)np, 200 /* ms */);
        for (int i = 0; i < l->n; i++)
            if (l->ch[i].fd >= 0) drain(&l->ch[i], l->res->ids[i], l->o->out);
        forward_signals(l);
        reap(l);
        open_fds = 0;
        for (int i = 0; i < l->n; i++) open_fds += l->ch[i].fd >= 0;
        double t = now_s();
        enforce_deadlines(l, t);
        if (l->alive == 0 && open_fds > 0 && l->kill_at && t > l->kill_at)
            break; /* stray writers */
    }
}

int launch_cluster(const cfg *c, const launch_opts *o, launch_result *res) {
    memset(res, 0, sizeof *res);
    res->failed_node = -1;
    int n = c->n_nodes;
    if (check_local(c)) return 2;
    launcher l = {.o = o, .res = res, .n = n};
    l.ch = calloc((size_t)n, sizeof *l.ch);
    res->ids = calloc((size_t)n, sizeof *res->ids);
    res->exit_code = calloc((size_t)n, sizeof *res->exit_code);
    if (!l.ch || !res->ids || !res->exit_code) {
        free(l.ch);
        launch_result_free(res);
        fprintf(stderr, "hetring local: out of memory\n");
        return 2;
    }
    res->n = n;

    sigset_t mask, old;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGCHLD);
    sigprocmask(SIG_BLOCK, &mask, &old);
    l.sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    void (*old_pipe)(int) = signal(SIGPIPE, SIG_IGN);

    int rc = start_children(&l, c, &old);
    l.start = now_s();
    if (rc) stop_all(&l, SIGTERM, l.start); /* could not start everyone: stop who did start */
    struct pollfd *pfd = calloc((size_t)n + 1, sizeof *pfd);
    watch(&l, pfd);
    free(pfd);
    for (int i = 0; i < n; i++)
        if (l.ch[i].fd >= 0) close(l.ch[i].fd);
    free(l.ch);
    close(l.sfd);
    signal(SIGPIPE, old_pipe);
    sigprocmask(SIG_SETMASK, &old, NULL);
    if (rc) return rc;
    for (int i = 0; i < n; i++)
        if (res->exit_code[i] != 0) return 1;
    return res->interrupted || res->timed_out ? 1 : 0;
}
