/*
 * tcp.c: TCP sockets with deadlines (see tcp.h).
 *
 * Invariant: every loop that waits goes through poll() with the time left to its deadline, so
 * no call here can block past the deadline it was given.
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
#include <stdio.h>
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

static hr_status resolve(const char *host, long port, int passive, struct addrinfo **res, char *err,
                         size_t errlen) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    if (passive) hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%ld", port);
    int rc = getaddrinfo(host, ps, &hints, res);
    /* a resolver that is busy or out of reach now may answer the next try: a peer's address is
     * then as a peer that does not answer yet (HR_ERR_PEER, retried to the caller's deadline) */
    if (rc == EAI_AGAIN && !passive)
        return hr_fail(err, errlen, HR_ERR_PEER, "cannot resolve %s for now: %s", host,
                       gai_strerror(rc));
    if (rc != 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "cannot resolve %s: %s", host, gai_strerror(rc));
    return HR_OK;
}

hr_status tcp_listen(const char *host, long port, int *out_fd, char *err, size_t errlen) {
    struct addrinfo *res = NULL;
    *out_fd = -1;
    HR_CHECK(resolve(host, port, 1, &res, err, errlen));
    int fd = -1, e = 0;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
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
        if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, TCP_BACKLOG) == 0) break;
        e = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
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
    struct addrinfo *res = NULL;
    *out_fd = -1;
    HR_CHECK(resolve(host, port, 0, &res, err, errlen));
    hr_status st = HR_ERR_PEER;
    int e = ECONNREFUSED;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            e = errno;
            continue;
        }
        tcp_tune(fd);
        int rc = connect(fd, a->ai_addr, a->ai_addrlen);
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
            freeaddrinfo(res);
            *out_fd = fd;
            return HR_OK;
        }
        close(fd);
        st = HR_ERR_PEER;
    }
    freeaddrinfo(res);
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
