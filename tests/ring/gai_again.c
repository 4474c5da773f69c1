/*
 * gai_again.c: an LD_PRELOAD shim for the ring tests, on lookups of a peer's address
 * (getaddrinfo without AI_PASSIVE):
 *   GAI_AGAIN_COUNT=N  the first N fail with EAI_AGAIN, "Temporary failure in name resolution",
 *                      as a busy resolver answers;
 *   GAI_SLOW_S=S       each one answers only after S seconds, as a resolver out of reach does
 *                      (its timeouts, times its attempts and servers);
 * and on lookups of the node's own address to listen on (AI_PASSIVE):
 *   GAI_SLOW_OWN_S=S   each one answers only after S seconds.
 * Every other lookup, and every later one, is glibc's. Each failure or delay it makes is said
 * on stderr ("gai_again: ...").
 */
#include <dlfcn.h> /* RTLD_NEXT: the build defines _GNU_SOURCE */
#include <netdb.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

static atomic_int failed;

static void sleep_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&t, &t) != 0) {
    }
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
    const char *env = getenv("GAI_AGAIN_COUNT"), *slow = getenv("GAI_SLOW_S");
    const char *slow_own = getenv("GAI_SLOW_OWN_S");
    const int count = env ? atoi(env) : 0;
    if (hints && (hints->ai_flags & AI_PASSIVE) && slow_own) {
        fprintf(stderr, "gai_again: own lookup of %s answers in %g s\n", node ? node : "(null)",
                atof(slow_own));
        sleep_s(atof(slow_own));
    }
    if (!(hints && (hints->ai_flags & AI_PASSIVE))) {
        int k = atomic_fetch_add(&failed, 1);
        if (k < count) {
            fprintf(stderr, "gai_again: lookup %d of %s failed with EAI_AGAIN\n", k + 1,
                    node ? node : "(null)");
            return EAI_AGAIN;
        }
        if (slow) {
            double s = atof(slow);
            fprintf(stderr, "gai_again: lookup %d of %s answers in %g s\n", k + 1,
                    node ? node : "(null)", s);
            sleep_s(s);
        }
    }
    gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    return real ? real(node, service, hints, res) : EAI_SYSTEM;
}
