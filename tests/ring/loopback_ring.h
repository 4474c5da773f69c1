/*
 * loopback_ring.h: the configuration of a ring that a test forms inside one process, every
 * member on 127.0.0.1 (the ring tests that run several nodes on threads, and the fuzz targets).
 */
#ifndef HR_TEST_LOOPBACK_RING_H
#define HR_TEST_LOOPBACK_RING_H

#include "ring/ring_config.h"

#include <stdio.h>
#include <string.h>

/* Ring `name` of members 0..n-1 on 127.0.0.1, member m on port port0 + m * step, seen from
 * member `self`; every other field zero (security none): the caller sets what its test needs. */
static inline void loopback_ring_config(ring_config *rc, const char *name, long self, int n,
                                        int port0, int step) {
    memset(rc, 0, sizeof *rc);
    snprintf(rc->name, sizeof rc->name, "%s", name);
    rc->self_id = self;
    rc->n_members = n;
    for (int m = 0; m < n; m++) {
        rc->members[m].id = m;
        snprintf(rc->members[m].host, RING_STR, "127.0.0.1");
        rc->members[m].port = port0 + m * step;
    }
}

/* Security auth with the one test PSK (32 bytes of 0x5a) every member of such a ring holds. */
static inline void loopback_ring_psk(ring_config *rc) {
    rc->security = RING_SEC_AUTH;
    memset(rc->psk, 0x5a, sizeof rc->psk);
    rc->has_psk = 1;
}

#endif
