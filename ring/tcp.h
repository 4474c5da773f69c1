/*
 * tcp.h: TCP sockets with deadlines, for the ring.
 *
 * Every call that can block takes an absolute deadline on the monotonic clock (tcp_now()
 * seconds) and returns HR_ERR_TIMEOUT when it passes. Sockets are non-blocking; waiting is done
 * with poll(). A peer that closes or resets the connection gives HR_ERR_PEER, other socket
 * failures HR_ERR_IO. Sends use MSG_NOSIGNAL, so a dead peer never raises SIGPIPE.
 */
#ifndef HR_TCP_H
#define HR_TCP_H

#include "base/hr_status.h"

#include <stddef.h>
#include <sys/socket.h>

/* Seconds on the monotonic clock. */
double tcp_now(void);

/* poll()'s timeout for waiting until `deadline`: 0 once it has passed, at most an hour (a
 * longer wait is several polls; a far deadline never overflows to a negative, endless one). */
int tcp_poll_ms(double deadline);

/* The addresses of `host` (name or numeric), by `deadline`: up to `max` of them, in the
 * resolver's order, into out[], their count into *n. A name is looked up on the thread
 * tcp_connect uses (HR_ERR_TIMEOUT when it has not answered by then: a resolver slow or out of
 * reach); a resolver's temporary failure (EAI_AGAIN) is HR_ERR_PEER, a name that does not
 * resolve HR_ERR_CONFIG. */
hr_status tcp_lookup(const char *host, double deadline, struct sockaddr_storage *out, int max,
                     int *n, char *err, size_t errlen);

/* Listen on host:port (SO_REUSEADDR, non-blocking). A host name is looked up by `deadline`, as
 * tcp_connect looks one up (HR_ERR_TIMEOUT when the lookup has not answered by then); a name
 * that does not resolve, even for now, is HR_ERR_CONFIG. */
hr_status tcp_listen(const char *host, long port, double deadline, int *out_fd, char *err,
                     size_t errlen);

/* One connection attempt to host:port, finished by `deadline`, the name lookup included (a
 * host name is looked up on a thread of its own; a lookup that has not answered by then gives
 * HR_ERR_TIMEOUT, and the next attempt for that address waits on the same lookup). ECONNREFUSED
 * and friends, and a resolver's temporary failure (EAI_AGAIN), give HR_ERR_PEER, so that
 * callers can retry; a name that does not resolve is HR_ERR_CONFIG. The socket is tuned
 * (tcp_tune). */
hr_status tcp_connect(const char *host, long port, double deadline, int *out_fd, char *err,
                      size_t errlen);

/* Accept one connection by `deadline`; `peer` receives "addr:port" of the remote end. */
hr_status tcp_accept(int lfd, double deadline, int *out_fd, char *peer, size_t peerlen, char *err,
                     size_t errlen);

/* Non-blocking, TCP_NODELAY and the ring's socket buffer sizes. */
void tcp_tune(int fd);

/* Move exactly `len` bytes, or fail by `deadline`. */
hr_status tcp_send_all(int fd, const void *buf, size_t len, double deadline);
hr_status tcp_recv_all(int fd, void *buf, size_t len, double deadline);

/* Wait until fd is ready for `events` (POLLIN/POLLOUT) or the deadline passes. */
hr_status tcp_wait(int fd, short events, double deadline);

/* Close fd if open and set it to -1. */
void tcp_close(int *fd);

#endif
