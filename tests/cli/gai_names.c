/*
 * gai_names.c: an LD_PRELOAD shim for the CLI tests, a resolver of the test's own names:
 *   GAI_NAMES=NAME=ADDR[,NAME=ADDR...]  each lookup of NAME answers ADDR (a numeric address),
 *                                       as /etc/hosts would, without touching it, or with ADDR
 *                                       empty EAI_NONAME, as for a name that does not exist;
 * and each such lookup is said on stderr, "gai_names: lookup of NAME" (with " to listen" for
 * the node's own address, AI_PASSIVE), so a test can count them. Every other name is glibc's.
 */
#include <dlfcn.h> /* RTLD_NEXT: the build defines _GNU_SOURCE */
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*gai_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

/* The address GAI_NAMES gives `node` into addr, or 0 when it gives none. */
static int mapped(const char *node, char *addr, size_t n) {
    const char *m = getenv("GAI_NAMES");
    size_t len = node ? strlen(node) : 0;
    for (const char *p = m; p && *p && len;) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        if (eq && eq < end && (size_t)(eq - p) == len && strncmp(p, node, len) == 0 &&
            (size_t)(end - eq - 1) < n) {
            memcpy(addr, eq + 1, (size_t)(end - eq - 1));
            addr[end - eq - 1] = 0;
            return 1;
        }
        p = *end ? end + 1 : end;
    }
    return 0;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
                struct addrinfo **res) {
    gai_fn real = (gai_fn)dlsym(RTLD_NEXT, "getaddrinfo");
    char addr[64];
    if (!real) return EAI_SYSTEM;
    if (!mapped(node, addr, sizeof addr)) return real(node, service, hints, res);
    fprintf(stderr, "gai_names: lookup of %s%s\n", node,
            hints && (hints->ai_flags & AI_PASSIVE) ? " to listen" : "");
    if (!addr[0]) return EAI_NONAME;
    struct addrinfo h = {0};
    if (hints) h = *hints;
    h.ai_flags |= AI_NUMERICHOST;
    return real(addr, service, &h, res);
}
