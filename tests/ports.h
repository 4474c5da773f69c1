/*
 * ports.h: blocks of 8 TCP ports for the C tests, claimed the way tests/ports.sh claims them
 * (a directory hetring-ports.BASE under $TMPDIR, made atomically by mkdir), so that C tests and
 * shell tests running side by side (ctest -j) never pick the same ports. The claims are
 * removed when the test exits. Ports stay in 10000-31599, below the kernel's ephemeral range
 * (32768+), so that no outgoing connection can hold one.
 */
#ifndef HR_TEST_PORTS_H
#define HR_TEST_PORTS_H
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define PORTS_MAX_CLAIMS 16
static char ports_claims_[PORTS_MAX_CLAIMS][256];
static int ports_nclaims_;

static void ports_release_(void) {
    for (int i = 0; i < ports_nclaims_; i++) rmdir(ports_claims_[i]);
    ports_nclaims_ = 0;
}

/* The first port of a block of 8 no other test holds; exits the test when none is found. */
static int port_block(void) {
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    static int seeded;
    if (!seeded) {
        srand((unsigned)time(NULL) ^ (unsigned)getpid() * 2654435761u);
        seeded = 1;
        atexit(ports_release_);
    }
    for (int tries = 0; tries < 200 && ports_nclaims_ < PORTS_MAX_CLAIMS; tries++) {
        int base = 10000 + (rand() % 2700) * 8;
        char d[256];
        snprintf(d, sizeof d, "%s/hetring-ports.%d", tmp, base);
        if (mkdir(d, 0700) == 0) {
            snprintf(ports_claims_[ports_nclaims_++], sizeof ports_claims_[0], "%s", d);
            return base;
        }
    }
    fprintf(stderr, "ports.h: no free block of ports\n");
    exit(1);
}
#endif
