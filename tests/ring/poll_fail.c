/*
 * poll_fail.c: an LD_PRELOAD shim for the ring tests: while the file POLL_FAIL_FILE exists,
 * every poll() fails with ENOMEM, as the kernel's does when it cannot allocate its table. A
 * node under it must still give up at its deadline, never spin past it. Said once on stderr
 * ("poll_fail: ...") when it starts failing.
 */
#include <dlfcn.h> /* RTLD_NEXT: the build defines _GNU_SOURCE */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

typedef int (*poll_fn)(struct pollfd *, nfds_t, int);

static atomic_int said;

int poll(struct pollfd *fds, nfds_t n, int timeout_ms) {
    const char *f = getenv("POLL_FAIL_FILE");
    if (f && access(f, F_OK) == 0) {
        if (!atomic_exchange(&said, 1)) fprintf(stderr, "poll_fail: poll() fails with ENOMEM\n");
        errno = ENOMEM;
        return -1;
    }
    poll_fn real = (poll_fn)dlsym(RTLD_NEXT, "poll");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    return real(fds, n, timeout_ms);
}
