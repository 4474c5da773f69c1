/*
 * fuzz_ring.h: the two-member ring configuration of the fuzz targets that drive the ring's
 * framing and handshake (fuzz_frame.c, fuzz_handshake.c).
 */
#ifndef HR_FUZZ_RING_H
#define HR_FUZZ_RING_H

#include "ring/ring_config.h"

#include <stdio.h>
#include <string.h>

/* A ring "fuzz" of members 0 and 1 on 127.0.0.1, seen from member self: security none (mode
 * 0), auth (1) or encrypt (2 and up), a 2 s timeout, member m on port port0 + m * step. */
static inline void fuzz_ring_config(ring_config *rc, int mode, int self, int port0, int step) {
    memset(rc, 0, sizeof *rc);
    snprintf(rc->name, sizeof rc->name, "fuzz");
    rc->security = mode == 0 ? RING_SEC_NONE : mode == 1 ? RING_SEC_AUTH : RING_SEC_ENCRYPT;
    rc->self_id = self;
    rc->n_members = 2;
    rc->timeout = 2;
    for (int m = 0; m < 2; m++) {
        rc->members[m].id = m;
        snprintf(rc->members[m].host, RING_STR, "127.0.0.1");
        rc->members[m].port = port0 + m * step;
    }
}

#endif
