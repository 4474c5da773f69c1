/*
 * stranger.c: connections from a node without the key, for ring_test.sh's `strangers` scenario.
 *
 *   stranger PORT N idle|garbage|http|churn WAIT_S
 *
 * Opens N connections to 127.0.0.1:PORT (retrying each for up to 5 s while the port is not yet
 * listened on), prints "connected 127.0.0.1:LOCALPORT" for each, and with `garbage` sends 300
 * bytes that are no hello, with `http` an HTTP request (a health checker's). Then it waits up to
 * WAIT_S seconds for the other end to close each connection (EOF or reset) and prints how many
 * it closed and how long the slowest took. With `churn` it closes each connection at once, as a
 * port scanner does, and prints how many it made.
 * Exit status: 0 all N closed within WAIT_S (made, for churn), 1 some still open, 2 a connection
 * could not be made within 5 s (those made are still held and watched).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAXN 1000

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int dial(int port) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    double end = now() + 5; /* the node may not listen yet */
    while (now() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return -1;
        struct timeval tv = {2, 0};
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv); /* bounds connect() too */
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0) return fd;
        close(fd);
        usleep(50000);
    }
    return -1;
}

/* Whether fd, open and not yet seen closed, has been closed by the other end. */
static int is_closed(int fd) {
    char b[512];
    ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
    return r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Look, without waiting, at the first n connections; note when each was seen closed. */
static int reap(const int *fd, int n, double *t_closed) {
    int k = 0;
    for (int i = 0; i < n; i++)
        if (t_closed[i] == 0 && is_closed(fd[i])) t_closed[i] = now(), k++;
    return k;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: stranger PORT N idle|garbage|http|churn WAIT_S\n");
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]), garbage = strcmp(argv[3], "garbage") == 0;
    int http = strcmp(argv[3], "http") == 0, churn = strcmp(argv[3], "churn") == 0;
    if (churn) { /* one connection at a time, closed at once: nothing is held */
        int made = 0;
        for (int i = 0; i < n; i++) {
            int fd = dial(port);
            if (fd < 0) break;
            close(fd);
            made++;
        }
        printf("churn: %d of %d connections made and closed\n", made, n);
        return made == n ? 0 : 2;
    }
    double wait_s = atof(argv[4]);
    if (n < 1 || n > MAXN) return 2;
    static int fd[MAXN];
    static double t_open[MAXN], t_closed[MAXN];
    setvbuf(stdout, NULL, _IOLBF, 0);
    int closed = 0, made = n;
    for (int i = 0; i < n; i++) {
        closed += reap(fd, i, t_closed); /* the time to close counts from each one's opening */
        fd[i] = dial(port);
        if (fd[i] < 0) { /* the node accepts no more: keep those made */
            printf("connection %d to port %d failed: %s\n", i, port, strerror(errno));
            made = i;
            break;
        }
        t_open[i] = now();
        struct sockaddr_in me;
        socklen_t sl = sizeof me;
        getsockname(fd[i], (struct sockaddr *)&me, &sl);
        printf("connected 127.0.0.1:%d\n", ntohs(me.sin_port));
        if (http) {
            static const char get[] = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
            if (send(fd[i], get, sizeof get - 1, MSG_NOSIGNAL) < 0) t_closed[i] = now(), closed++;
        } else if (garbage) {
            char junk[300];
            for (size_t k = 0; k < sizeof junk; k++) junk[k] = (char)(k * 37 + i);
            if (send(fd[i], junk, sizeof junk, MSG_NOSIGNAL) < 0) t_closed[i] = now(), closed++;
        }
    }
    n = made;
    double end = now() + wait_s;
    closed += reap(fd, n, t_closed);
    while (closed < n && now() < end) {
        static struct pollfd p[MAXN];
        int m = 0, idx[MAXN];
        for (int i = 0; i < n; i++)
            if (t_closed[i] == 0)
                p[m] = (struct pollfd){.fd = fd[i], .events = POLLIN}, idx[m++] = i;
        int left = (int)((end - now()) * 1000) + 1;
        if (poll(p, (nfds_t)m, left > 100 ? 100 : left) <= 0) continue;
        for (int k = 0; k < m; k++) {
            if (!p[k].revents) continue;
            if (!is_closed(p[k].fd)) continue;
            t_closed[idx[k]] = now();
            closed++;
        }
    }
    double slowest = 0;
    for (int i = 0; i < n; i++)
        if (t_closed[i] > 0 && t_closed[i] - t_open[i] > slowest) slowest = t_closed[i] - t_open[i];
    printf("%s: %d of %d connections closed by the node within %.1f s (slowest %.2f s)\n", argv[3],
           closed, n, wait_s, slowest);
    for (int i = 0; i < n; i++) close(fd[i]);
    return made < atoi(argv[2]) ? 2 : closed == n ? 0 : 1;
}
