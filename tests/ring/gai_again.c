/*
 * gai_again.c: an LD_PRELOAD shim for the ring tests: the first GAI_AGAIN_COUNT lookups of a
 * peer's address (getaddrinfo without AI_PASSIVE) fail with EAI_AGAIN, "Temporary failure in
 * name resolution", as a busy resolver answers; every other lookup, and every later one, is
 * glibc's. Each failure it makes is said on stderr ("gai_again: ...").
 */
#include <dlfcn.h> /* RTLD_NEXT: the build defines _GNU_SOURCE */
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static atomic_int failed;

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
    const char *env = getenv("GAI_AGAIN_COUNT");
    const int count = env ? atoi(env) : 0;
    if (!(hints && (hints->ai_flags & AI_PASSIVE))) {
        int k = atomic_fetch_add(&failed, 1);
        if (k < count) {
            fprintf(stderr, "gai_again: lookup %d of %s failed with EAI_AGAIN\n", k + 1,
                    node ? node : "(null)");
            return EAI_AGAIN;
        }
    }
    gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    return real ? real(node, service, hints, res) : EAI_SYSTEM;
}
