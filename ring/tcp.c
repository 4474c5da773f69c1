/*
 * tcp.c: TCP sockets with deadlines (see tcp.h).
 *
 * Invariant: every loop that waits goes through poll() with the time left to its deadline, so
 * no call here can block past the deadline it was given. A host name, a peer's or this node's
 * own to listen on, is looked up on a thread of its own (getaddrinfo has no deadline: a resolver
 * out of reach holds it for its own timeouts, seconds times attempts times servers), which the
 * caller waits for until its deadline; a numeric address needs no lookup.
 */
#include "ring/tcp.h"
#include "base/hr_addr.h"
#include "base/hr_time.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* Socket buffers: large enough to keep a pipeline segment or two in flight on a fast link.
 * 0 leaves the kernel's autotuning in charge. */
#define TCP_SOCKBUF (4 << 20)
/* Connections the kernel holds for the gate (form.c) while it takes none: a bounded election's
 * lowest ids are called by every electing node (capped by net.core.somaxconn). */
#define TCP_BACKLOG 1024

double tcp_now(void) {
    return hr_now();
}

int tcp_poll_ms(double deadline) {
    double left = deadline - tcp_now();
    if (left <= 0) return 0;
    if (left > 3600) return 3600 * 1000;
    return (int)(left * 1000.0) + 1;
}

void tcp_close(int *fd) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
}

void tcp_tune(int fd) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (TCP_SOCKBUF > 0) {
        int sz = TCP_SOCKBUF;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sz, sizeof sz);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* getaddrinfo's answer as a status: a resolver that is busy or out of reach now may answer the
 * next try, so a peer's address is then as a peer that does not answer yet (HR_ERR_PEER,
 * retried to the caller's deadline); a name that does not resolve is HR_ERR_CONFIG. */
static hr_status gai_status(int rc, const char *host, int passive, char *err, size_t errlen) {
    if (rc == 0) return HR_OK;
    if (rc == EAI_AGAIN && !passive)
        return hr_fail(err, errlen, HR_ERR_PEER, "cannot resolve %s for now: %s", host,
                       gai_strerror(rc));
    return hr_fail(err, errlen, HR_ERR_CONFIG, "cannot resolve %s: %s", host, gai_strerror(rc));
}

/* ---------------------------------------------------------------- a lookup with a deadline */

#define LOOKUP_ADDRS 8 /* addresses of one name tried, in the resolver's order */

typedef struct {
    int n;
    struct {
        int family, socktype, protocol;
        socklen_t len;
        struct sockaddr_storage addr;
    } a[LOOKUP_ADDRS];
} addr_list;

/* One getaddrinfo on its own thread. Callers that want the same host and port while it runs
 * wait on it rather than start another, so a resolver that hangs holds one thread per
 * address, however often a node retries. Freed by the last of the thread and its waiters. */
typedef struct lookup {
    struct lookup *next; /* lookups still running */
    char host[256], port[16];
    int passive; /* an address to listen on (AI_PASSIVE), not to connect to */
    int refs;    /* the thread, and each caller waiting */
    int done, rc;
    struct addrinfo *res;
} lookup;

static pthread_mutex_t lookup_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lookup_cv;
static pthread_once_t lookup_once = PTHREAD_ONCE_INIT;
static lookup *lookups; /* running, under lookup_mu */

static void lookup_init(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC); /* tcp_now's clock */
    pthread_cond_init(&lookup_cv, &a);
    pthread_condattr_destroy(&a);
}

/* Drop one reference to l. Under lookup_mu. */
static void lookup_put(lookup *l) {
    if (--l->refs > 0) return;
    if (l->res) freeaddrinfo(l->res);
    free(l);
}

static void *lookup_thread(void *arg) {
    lookup *l = arg;
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (l->passive) hints.ai_flags = AI_PASSIVE;
    int rc = getaddrinfo(l->host, l->port, &hints, &res);
    pthread_mutex_lock(&lookup_mu);
    l->rc = rc, l->res = rc == 0 ? res : NULL, l->done = 1;
    for (lookup **p = &lookups; *p; p = &(*p)->next)
        if (*p == l) {
            *p = l->next;
            break;
        }
    pthread_cond_broadcast(&lookup_cv);
    lookup_put(l);
    pthread_mutex_unlock(&lookup_mu);
    return NULL;
}

static void addr_list_add(addr_list *out, const struct addrinfo *res) {
    for (const struct addrinfo *a = res; a && out->n < LOOKUP_ADDRS; a = a->ai_next) {
        if (a->ai_addrlen > sizeof out->a[0].addr) continue;
        out->a[out->n].family = a->ai_family, out->a[out->n].socktype = a->ai_socktype;
        out->a[out->n].protocol = a->ai_protocol, out->a[out->n].len = a->ai_addrlen;
        memcpy(&out->a[out->n].addr, a->ai_addr, a->ai_addrlen);
        out->n++;
    }
}

/* The addresses of host:port by `deadline`, to listen on (`passive`) or to connect to: at once
 * for a numeric address, else from a lookup thread (HR_ERR_TIMEOUT when it has not answered by
 * then; it goes on, and a later call for the same address waits on it). */
static hr_status resolve_by(const char *host, long port, int passive, double deadline,
                            addr_list *out, char *err, size_t errlen) {
    char ps[16];
    snprintf(ps, sizeof ps, "%ld", port);
    out->n = 0;
    struct sockaddr_in *v4 = (struct sockaddr_in *)&out->a[0].addr;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&out->a[0].addr;
    memset(&out->a[0], 0, sizeof out->a[0]);
    out->a[0].socktype = SOCK_STREAM;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) { /* no lookup */
        v4->sin_family = AF_INET, v4->sin_port = htons((uint16_t)port);
        out->a[0].family = AF_INET, out->a[0].len = sizeof *v4, out->n = 1;
        return HR_OK;
    }
    if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6, v6->sin6_port = htons((uint16_t)port);
        out->a[0].family = AF_INET6, out->a[0].len = sizeof *v6, out->n = 1;
        return HR_OK;
    }
    if (strlen(host) >= sizeof((lookup *)0)->host)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "cannot resolve %.64s...: name too long", host);
    pthread_once(&lookup_once, lookup_init);
    pthread_mutex_lock(&lookup_mu);
    lookup *l = lookups;
    while (l && (strcmp(l->host, host) != 0 || strcmp(l->port, ps) != 0 || l->passive != passive))
        l = l->next;
    if (!l) {
        l = calloc(1, sizeof *l);
        pthread_attr_t a;
        pthread_t th;
        int e = l ? pthread_attr_init(&a) : ENOMEM;
        if (l && e == 0) {
            snprintf(l->host, sizeof l->host, "%s", host);
            snprintf(l->port, sizeof l->port, "%s", ps);
            l->passive = passive;
            l->refs = 1; /* the thread's */
            pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
            e = pthread_create(&th, &a, lookup_thread, l);
            pthread_attr_destroy(&a);
        }
        if (e != 0) {
            pthread_mutex_unlock(&lookup_mu);
            free(l);
            return hr_fail(err, errlen, HR_ERR_PEER, "cannot look up %s now: %s", host,
                           strerror(e));
        }
        l->next = lookups, lookups = l;
    }
    l->refs++;
    while (!l->done) {
        double left = deadline - tcp_now();
        if (left <= 0) break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        if (left > 3600) left = 3600;
        long long ns = (long long)ts.tv_nsec + (long long)(left * 1e9);
        ts.tv_sec += (time_t)(ns / 1000000000LL), ts.tv_nsec = (long)(ns % 1000000000LL);
        pthread_cond_timedwait(&lookup_cv, &lookup_mu, &ts);
    }
    const int done = l->done, rc = l->rc;
    if (done && rc == 0) addr_list_add(out, l->res);
    lookup_put(l);
    pthread_mutex_unlock(&lookup_mu);
    if (!done)
        return hr_fail(err, errlen, HR_ERR_TIMEOUT,
                       "looking up %s took longer than the time left (is the resolver slow or out "
                       "of reach?)",
                       host);
    return gai_status(rc, host, passive, err, errlen);
}

hr_status tcp_lookup(const char *host, double deadline, struct sockaddr_storage *out, int max,
                     int *n, char *err, size_t errlen) {
    addr_list al;
    *n = 0;
    HR_CHECK(resolve_by(host, 0, 0, deadline, &al, err, errlen));
    for (int i = 0; i < al.n && *n < max; i++, ++*n) {
        memset(&out[*n], 0, sizeof out[*n]);
        memcpy(&out[*n], &al.a[i].addr, al.a[i].len);
    }
    return HR_OK;
}

hr_status tcp_listen(const char *host, long port, double deadline, int *out_fd, char *err,
                     size_t errlen) {
    addr_list al;
    *out_fd = -1;
    char why[HR_ERRLEN];
    hr_status st = resolve_by(host, port, 1, deadline, &al, why, sizeof why);
    if (st != HR_OK)
        return hr_fail(err, errlen, st, "cannot listen on %s: %s",
                       hr_addr((char[HR_ADDR_LEN]){0}, HR_ADDR_LEN, host, port), why);
    int fd = -1, e = EADDRNOTAVAIL;
    for (int i = 0; i < al.n; i++) {
        fd = socket(al.a[i].family, al.a[i].socktype | SOCK_CLOEXEC, al.a[i].protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (TCP_SOCKBUF > 0) { /* inherited by accepted sockets, so the window scale fits */
            int sz = TCP_SOCKBUF;
            setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sz, sizeof sz);
        }
        if (bind(fd, (struct sockaddr *)&al.a[i].addr, al.a[i].len) == 0 &&
            listen(fd, TCP_BACKLOG) == 0)
            break;
        e = errno;
        close(fd);
        fd = -1;
    }
    if (fd < 0)
        return hr_fail(err, errlen, HR_ERR_IO, "cannot listen on %s: %s",
                       hr_addr((char[HR_ADDR_LEN]){0}, HR_ADDR_LEN, host, port), strerror(e));
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    *out_fd = fd;
    return HR_OK;
}

hr_status tcp_wait(int fd, short events, double deadline) {
    for (;;) {
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, tcp_poll_ms(deadline));
        if (rc > 0) return HR_OK;
        if (rc == 0) {
            if (tcp_now() >= deadline) return HR_ERR_TIMEOUT;
            continue;
        }
        if (errno != EINTR) return HR_ERR_IO;
    }
}

hr_status tcp_connect(const char *host, long port, double deadline, int *out_fd, char *err,
                      size_t errlen) {
    addr_list al;
    *out_fd = -1;
    HR_CHECK(resolve_by(host, port, 0, deadline, &al, err, errlen));
    hr_status st = HR_ERR_PEER;
    int e = ECONNREFUSED;
    for (int i = 0; i < al.n; i++) {
        int fd = socket(al.a[i].family, al.a[i].socktype | SOCK_CLOEXEC, al.a[i].protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        tcp_tune(fd);
        int rc = connect(fd, (const struct sockaddr *)&al.a[i].addr, al.a[i].len);
        if (rc != 0 && errno == EINPROGRESS) {
            hr_status w = tcp_wait(fd, POLLOUT, deadline);
            if (w != HR_OK) {
                close(fd);
                st = w;
                e = w == HR_ERR_TIMEOUT ? ETIMEDOUT : errno;
                continue;
            }
            socklen_t sl = sizeof e;
            if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &sl) != 0) e = errno;
            rc = e ? -1 : 0;
        } else if (rc != 0) {
            e = errno;
        }
        if (rc == 0) {
            *out_fd = fd;
            return HR_OK;
        }
        close(fd);
        st = HR_ERR_PEER;
    }
    return hr_fail(err, errlen, st, "%s", strerror(e));
}

hr_status tcp_accept(int lfd, double deadline, int *out_fd, char *peer, size_t peerlen, char *err,
                     size_t errlen) {
    *out_fd = -1;
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
        if (fd >= 0) {
            tcp_tune(fd);
            char h[INET6_ADDRSTRLEN] = "?";
            int p = 0;
            if (ss.ss_family == AF_INET) {
                struct sockaddr_in *s = (struct sockaddr_in *)&ss;
                inet_ntop(AF_INET, &s->sin_addr, h, sizeof h);
                p = ntohs(s->sin_port);
            } else if (ss.ss_family == AF_INET6) {
                struct sockaddr_in6 *s = (struct sockaddr_in6 *)&ss;
                inet_ntop(AF_INET6, &s->sin6_addr, h, sizeof h);
                p = ntohs(s->sin6_port);
            }
            if (peer) hr_addr(peer, peerlen, h, p);
            *out_fd = fd;
            return HR_OK;
        }
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return hr_fail(err, errlen, HR_ERR_IO, "accept: %s", strerror(errno));
        hr_status w = tcp_wait(lfd, POLLIN, deadline);
        if (w != HR_OK) return hr_fail(err, errlen, w, "no connection arrived in time");
    }
}

hr_status tcp_send_all(int fd, const void *buf, size_t len, double deadline) {
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            HR_CHECK(tcp_wait(fd, POLLOUT, deadline));
            continue;
        }
        return (errno == EPIPE || errno == ECONNRESET) ? HR_ERR_PEER : HR_ERR_IO;
    }
    return HR_OK;
}

hr_status tcp_recv_all(int fd, void *buf, size_t len, double deadline) {
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) return HR_ERR_PEER;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            HR_CHECK(tcp_wait(fd, POLLIN, deadline));
            continue;
        }
        return errno == ECONNRESET ? HR_ERR_PEER : HR_ERR_IO;
    }
    return HR_OK;
}
