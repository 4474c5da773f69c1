/*
 * fuzz_ring.h: the two-member ring configuration of the fuzz targets that drive the ring's
 * framing and handshake (fuzz_frame.c, fuzz_handshake.c).
 */
#ifndef HR_FUZZ_RING_H
#define HR_FUZZ_RING_H

#include "ring/ring_config.h"
#include "tests/ring/loopback_ring.h"

#include <stdio.h>
#include <stdlib.h>

/* The deadline of a handshake and of a ring's steps. An input ends at once, the peer's bytes
 * followed by end-of-file, so an input whose call lasted the whole deadline means the code
 * waited on a closed peer: fuzz_waited fails it. The deadline is far above what a loaded
 * machine's stalls add to an input (with a 2 s deadline and a 1.5 s bound, a fuzzer run at a
 * load of 25 failed an input that replays in 0.06 s), and below run.sh's -timeout=10, so that a
 * wait is named here rather than as a libFuzzer timeout. */
#define FUZZ_WAIT_S 8.0

/* Fail the input (abort) when the call that began at t0 and had until t0 + FUZZ_WAIT_S lasted
 * that long, at `now`: `what` waited for its deadline. The message goes to stdout, which
 * run.sh's -close_fd_mask=2 leaves open. */
static inline void fuzz_waited(const char *what, double t0, double now) {
    if (now - t0 < FUZZ_WAIT_S) return;
    printf("%s waited %.2f s, its whole deadline, on a peer that had closed\n", what, now - t0);
    fflush(stdout);
    abort();
}

/* A ring "fuzz" of members 0 and 1 on 127.0.0.1, seen from member self: security none (mode
 * 0), auth (1) or encrypt (2 and up), a FUZZ_WAIT_S timeout, member m on port
 * port0 + m * step. */
static inline void fuzz_ring_config(ring_config *rc, int mode, int self, int port0, int step) {
    loopback_ring_config(rc, "fuzz", self, 2, port0, step);
    rc->security = mode == 0 ? RING_SEC_NONE : mode == 1 ? RING_SEC_AUTH : RING_SEC_ENCRYPT;
    rc->timeout = FUZZ_WAIT_S;
}

#endif
