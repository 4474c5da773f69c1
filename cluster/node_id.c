/*
 * node_id.c: which node of the cluster file this process is (see node_id.h).
 */
#include "cluster/node_id.h"
#include "base/hr_addr.h"
#include "ring/tcp.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#define NODE_ID_ADDRS 8 /* addresses of one name looked at */

/* Is `a` a loopback address (all of 127/8, or ::1)? */
static int is_loopback(const struct sockaddr_storage *a) {
    if (a->ss_family == AF_INET) {
        const struct sockaddr_in *s = (const void *)a;
        return (ntohl(s->sin_addr.s_addr) >> 24) == 127;
    }
    if (a->ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const void *)a;
        return IN6_IS_ADDR_LOOPBACK(&s->sin6_addr);
    }
    return 0;
}

/* The addresses of `host` by `deadline` (tcp_lookup's resolver thread: getaddrinfo has no
 * deadline of its own). *n = 0 for a name that does not resolve, even for now, `err` then
 * saying why. HR_ERR_TIMEOUT when the resolver has not answered by then. */
static hr_status lookup(const char *host, double deadline, struct sockaddr_storage *a, int *n,
                        char *err, size_t errlen) {
    hr_status st = tcp_lookup(host, deadline, a, NODE_ID_ADDRS, n, err, errlen);
    if (st == HR_ERR_TIMEOUT) return st;
    if (st != HR_OK) *n = 0;
    else if (*n == 0)
        snprintf(err, errlen, "cannot resolve %s: no address", host);
    return HR_OK;
}

hr_status node_id_host_is_local(const char *host, double deadline, int *local, int *resolves,
                                char *err, size_t errlen) {
    struct sockaddr_storage res[NODE_ID_ADDRS];
    int n;
    *local = 0;
    HR_CHECK(lookup(host, deadline, res, &n, err, errlen));
    if (resolves) *resolves = n > 0;
    struct ifaddrs *ifs = NULL;
    if (n > 0 && getifaddrs(&ifs) != 0) ifs = NULL;
    for (int k = 0; k < n && !*local; k++) {
        const struct sockaddr_storage *a = &res[k];
        *local = is_loopback(a);
        for (struct ifaddrs *i = ifs; i && !*local; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != a->ss_family) continue;
            if (a->ss_family == AF_INET)
                *local = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
                         ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr;
            else
                *local =
                    memcmp(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr,
                           &((const struct sockaddr_in6 *)(const void *)a)->sin6_addr, 16) == 0;
        }
    }
    if (ifs) freeifaddrs(ifs);
    return HR_OK;
}

/* Whether every address `host` resolves to by `deadline` is a loopback one (*loop; 0 for a
 * name that does not resolve: the listener says why); the first goes to addr. */
static hr_status loopback_only(const char *host, double deadline, int *loop, char *addr, size_t n,
                               char *err, size_t errlen) {
    struct sockaddr_storage res[NODE_ID_ADDRS];
    int na;
    *loop = 0;
    HR_CHECK(lookup(host, deadline, res, &na, err, errlen));
    if (na == 0) return HR_OK;
    *loop = 1;
    for (int k = 0; k < na; k++) *loop &= is_loopback(&res[k]);
    socklen_t len =
        res[0].ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (getnameinfo((const struct sockaddr *)&res[0], len, addr, (socklen_t)n, NULL, 0,
                    NI_NUMERICHOST))
        snprintf(addr, n, "?");
    return HR_OK;
}

/* Node c->nodes[self] could not look up node c->nodes[k]'s host by connect_timeout. */
static hr_status slow_lookup(const cfg *c, int self, int k, char *err, size_t errlen) {
    char at[CFG_PATH + 64], what[96];
    if (k == self)
        snprintf(what, sizeof what, "which address node %ld listens on", c->nodes[self].id);
    else
        snprintf(what, sizeof what, "whether node %ld is on the machine of node %ld",
                 c->nodes[k].id, c->nodes[self].id);
    return hr_fail(err, errlen, HR_ERR_TIMEOUT,
                   "%s: [node.%ld] host = %s: looking it up took longer than connect_timeout "
                   "(%g s), so it is not known %s (is the resolver slow or out of reach? a "
                   "numeric address needs no lookup)",
                   cfg_where(c, k, "host", at, sizeof at), c->nodes[k].id, c->nodes[k].host,
                   c->connect_timeout, what);
}

hr_status node_id_check_reachable(const cfg *c, int self, const int *same, char *err,
                                  size_t errlen) {
    char addr[NI_MAXHOST], at[CFG_PATH + 64], why[HR_ERRLEN];
    const cfg_node *me = &c->nodes[self];
    const double deadline = tcp_now() + c->connect_timeout;
    int loop, local, resolves;
    if (c->n_nodes < 2) return HR_OK;
    if (loopback_only(me->host, deadline, &loop, addr, sizeof addr, why, sizeof why) != HR_OK)
        return slow_lookup(c, self, self, err, errlen);
    if (!loop) return HR_OK;
    for (int k = 0; k < c->n_nodes; k++) {
        if (k == self || (same && same[k])) continue; /* at an address of self's: local */
        if (node_id_host_is_local(c->nodes[k].host, deadline, &local, &resolves, why, sizeof why) !=
            HR_OK)
            return slow_lookup(c, self, k, err, errlen);
        if (!resolves)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: [node.%ld] host = %s does not resolve (%s): node %ld listens on "
                           "%s (%s), a loopback address only this machine reaches, so node %ld "
                           "must be on this machine (expected a host that resolves to an address "
                           "of it)",
                           cfg_where(c, k, "host", at, sizeof at), c->nodes[k].id, c->nodes[k].host,
                           why, me->id, me->host, addr, c->nodes[k].id);
        if (!local)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: [node.%ld] host = %s is %s on this machine, a loopback address: "
                           "node %ld (%s), on another machine, could never connect to it "
                           "(expected an address of this machine that the others reach; a host "
                           "name that /etc/hosts maps to 127.0.1.1 does this)",
                           cfg_where(c, self, "host", at, sizeof at), me->id, me->host, addr,
                           c->nodes[k].id, c->nodes[k].host);
    }
    return HR_OK;
}

/* Whether a and b hold the same address (the port aside). */
static int same_addr(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
    if (a->ss_family != b->ss_family) return 0;
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr ==
               ((const struct sockaddr_in *)(const void *)b)->sin_addr.s_addr;
    return a->ss_family == AF_INET6 &&
           memcmp(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr,
                  &((const struct sockaddr_in6 *)(const void *)b)->sin6_addr, 16) == 0;
}

/* Whether `a` is a wildcard address, 0.0.0.0 or ::, which a listener binds on every address of
 * this machine (:: on the IPv4 ones too: the ring's sockets are dual-stack). */
static int is_wildcard(const struct sockaddr_storage *a) {
    if (a->ss_family == AF_INET)
        return ((const struct sockaddr_in *)(const void *)a)->sin_addr.s_addr == INADDR_ANY;
    return a->ss_family == AF_INET6 &&
           IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)(const void *)a)->sin6_addr);
}

/* Whether listeners on a and b, at one port, take the same socket: the same address, or a
 * wildcard beside an address of this machine (`ifs`) that it covers. */
static int same_socket(const struct sockaddr_storage *a, const struct sockaddr_storage *b,
                       struct ifaddrs *ifs) {
    if (same_addr(a, b)) return 1;
    if (!is_wildcard(a)) {
        const struct sockaddr_storage *t = a;
        a = b, b = t;
    }
    if (!is_wildcard(a)) return 0;
    if (is_wildcard(b)) return 1; /* 0.0.0.0 beside :: */
    if (a->ss_family == AF_INET && b->ss_family != AF_INET) return 0;
    if (is_loopback(b)) return 1;
    for (struct ifaddrs *i = ifs; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == b->ss_family &&
            same_addr((const struct sockaddr_storage *)(const void *)i->ifa_addr, b))
            return 1;
    return 0;
}

static void numeric(const struct sockaddr_storage *a, char *out, size_t n) {
    socklen_t len =
        a->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    if (getnameinfo((const struct sockaddr *)a, len, out, (socklen_t)n, NULL, 0, NI_NUMERICHOST))
        snprintf(out, n, "?");
}

/* Every node's host, each name looked up at most once, by one deadline. */
typedef struct {
    const cfg *c;
    int self;
    double deadline;
    int *n;                        /* (n_nodes) addresses of node k's host; -1: not looked up */
    struct sockaddr_storage *addr; /* (n_nodes x NODE_ID_ADDRS) */
    char (*why)[HR_ERRLEN];        /* (n_nodes) why node k's host has no address, when n[k] = 0 */
} host_table;

/* Node k's addresses: looked up now, or copied from a node whose host is written alike. */
static hr_status host_get(host_table *t, int k, char *err, size_t errlen) {
    const cfg *c = t->c;
    char why[HR_ERRLEN];
    if (t->n[k] >= 0) return HR_OK;
    for (int j = 0; j < c->n_nodes; j++)
        if (j != k && t->n[j] >= 0 && strcasecmp(c->nodes[j].host, c->nodes[k].host) == 0) {
            t->n[k] = t->n[j];
            memcpy(&t->addr[k * NODE_ID_ADDRS], &t->addr[j * NODE_ID_ADDRS],
                   NODE_ID_ADDRS * sizeof *t->addr);
            memcpy(t->why[k], t->why[j], sizeof t->why[k]);
            return HR_OK;
        }
    if (lookup(c->nodes[k].host, t->deadline, &t->addr[k * NODE_ID_ADDRS], &t->n[k], why,
               sizeof why) != HR_OK)
        return slow_lookup(c, t->self, k, err, errlen);
    if (t->n[k] == 0) snprintf(t->why[k], sizeof t->why[k], "%s", why);
    return HR_OK;
}

/* Whether nodes i and k listen on one socket: HR_ERR_CONFIG naming both, else HR_OK. */
static hr_status check_endpoint(host_table *t, int i, int k, struct ifaddrs *ifs, char *err,
                                size_t errlen) {
    const cfg *c = t->c;
    const cfg_node *a = &c->nodes[i], *b = &c->nodes[k];
    HR_CHECK(host_get(t, i, err, errlen));
    HR_CHECK(host_get(t, k, err, errlen));
    for (int x = 0; x < t->n[i]; x++)
        for (int y = 0; y < t->n[k]; y++) {
            const struct sockaddr_storage *p = &t->addr[i * NODE_ID_ADDRS + x];
            const struct sockaddr_storage *q = &t->addr[k * NODE_ID_ADDRS + y];
            if (!same_socket(p, q, ifs)) continue;
            char at_a[CFG_PATH + 64], at_b[CFG_PATH + 64], ea[HR_ADDR_LEN], eb[HR_ADDR_LEN];
            char na[80], nb[80], ep[HR_ADDR_LEN]; /* numeric addresses */
            numeric(p, na, sizeof na), numeric(q, nb, sizeof nb);
            hr_addr(ep, sizeof ep, is_wildcard(p) ? nb : na, a->port);
            return hr_fail(
                err, errlen, HR_ERR_CONFIG,
                "%s: [node.%ld] %s and %s: [node.%ld] %s are the same endpoint (%s%s%s): "
                "both nodes would listen on it, so one could not, or would talk to "
                "itself (expected a distinct address:port per node: another port for "
                "one of them)",
                cfg_where(c, k, "host", at_b, sizeof at_b), b->id,
                hr_addr(eb, sizeof eb, b->host, b->port),
                cfg_where(c, i, "host", at_a, sizeof at_a), a->id,
                hr_addr(ea, sizeof ea, a->host, a->port), ep,
                is_wildcard(p) || is_wildcard(q) ? ", where " : "",
                is_wildcard(p) || is_wildcard(q)
                    ? "a wildcard host listens on every address of this machine"
                    : "");
        }
    return HR_OK;
}

/* Two nodes at one port whose hosts are written differently (conf/ refuses them written alike,
 * and resolves nothing): refused when they resolve to one socket. */
static hr_status check_endpoints(host_table *t, char *err, size_t errlen) {
    const cfg *c = t->c;
    struct ifaddrs *ifs = NULL;
    int ifs_read = 0;
    hr_status st = HR_OK;
    for (int k = 0; k < c->n_nodes && st == HR_OK; k++)
        for (int i = 0; i < k && st == HR_OK; i++) {
            if (c->nodes[i].port != c->nodes[k].port ||
                strcasecmp(c->nodes[i].host, c->nodes[k].host) == 0)
                continue;
            if (!ifs_read && getifaddrs(&ifs) != 0) ifs = NULL;
            ifs_read = 1;
            st = check_endpoint(t, i, k, ifs, err, errlen);
        }
    if (ifs) freeifaddrs(ifs);
    return st;
}

/* same[k]: node k's host is written as self's, or resolves to an address of self's host. */
static hr_status find_same(host_table *t, int *same, char *err, size_t errlen) {
    const cfg *c = t->c;
    const int self = t->self;
    for (int k = 0; k < c->n_nodes; k++) {
        same[k] = k == self || strcasecmp(c->nodes[k].host, c->nodes[self].host) == 0;
        if (same[k]) continue;
        HR_CHECK(host_get(t, self, err, errlen));
        HR_CHECK(host_get(t, k, err, errlen));
        const struct sockaddr_storage *mine = &t->addr[self * NODE_ID_ADDRS];
        const struct sockaddr_storage *theirs = &t->addr[k * NODE_ID_ADDRS];
        for (int i = 0; i < t->n[self] && !same[k]; i++)
            for (int j = 0; j < t->n[k] && !same[k]; j++) same[k] = same_addr(&mine[i], &theirs[j]);
    }
    return HR_OK;
}

/* This node listens on its host (where it has peers): a name that does not resolve here is
 * refused now, naming its line, rather than by the listener. */
static hr_status check_own(host_table *t, char *err, size_t errlen) {
    const cfg *c = t->c;
    const int self = t->self;
    char at[CFG_PATH + 64];
    if (c->n_nodes < 2) return HR_OK; /* a node alone listens on nothing */
    HR_CHECK(host_get(t, self, err, errlen));
    if (t->n[self] > 0) return HR_OK;
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: [node.%ld] host = %s does not resolve (%s), so node %ld cannot listen "
                   "on it (expected a name or address of this machine)",
                   cfg_where(c, self, "host", at, sizeof at), c->nodes[self].id,
                   c->nodes[self].host, t->why[self], c->nodes[self].id);
}

hr_status node_id_check_hosts(const cfg *c, int self, int *same, char *err, size_t errlen) {
    const size_t nn = (size_t)c->n_nodes;
    host_table t = {.c = c, .self = self, .deadline = tcp_now() + c->connect_timeout};
    t.n = malloc(nn * sizeof *t.n);
    t.addr = calloc(nn * NODE_ID_ADDRS, sizeof *t.addr);
    t.why = calloc(nn, sizeof *t.why);
    hr_status st = HR_OK;
    if (!t.n || !t.addr || !t.why) st = hr_fail(err, errlen, HR_ERR_NOMEM, "out of memory");
    for (size_t k = 0; st == HR_OK && k < nn; k++) t.n[k] = -1;
    if (st == HR_OK) st = check_endpoints(&t, err, errlen);
    if (st == HR_OK) st = find_same(&t, same, err, errlen);
    if (st == HR_OK) st = check_own(&t, err, errlen);
    free(t.why);
    free(t.n);
    free(t.addr);
    return st;
}

static void list_candidates(const cfg *c, const int *which, char *out, size_t n) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < c->n_nodes && o < n; i++)
        if (!which || which[i]) {
            char a[HR_ADDR_LEN];
            o += (size_t)snprintf(out + o, n - o, "%s%ld (%s)", o ? ", " : "", c->nodes[i].id,
                                  hr_addr(a, sizeof a, c->nodes[i].host, c->nodes[i].port));
        }
}

/* A launcher's rank, with the world size it launched; the size must be the node count. */
typedef struct {
    const char *rank, *size; /* environment variables */
} launcher_env;

static const launcher_env launchers[] = {
    {"SLURM_PROCID", "SLURM_NTASKS"},                 /* srun */
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, /* Open MPI's mpirun */
    {"PMI_RANK", "PMI_SIZE"},                         /* MPICH, Intel MPI (PMI) */
    {"RANK", "WORLD_SIZE"},                           /* torchrun */
};

/* The world size `l` launched, when it says one, must be the node count of `c`. */
static hr_status check_world_size(const cfg *c, const launcher_env *l, char *err, size_t errlen) {
    const char *v = getenv(l->size);
    long n;
    if (!v || !v[0]) return HR_OK;
    if (cfg_parse_long(v, &n) || n < 1)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s = '%s' is not a world size (expected %d, "
                       "the number of nodes in %s)",
                       l->size, v, c->n_nodes, c->path);
    if (n != c->n_nodes)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s = %ld, but %s has %d node%s (expected one process per [node.ID] "
                       "section: launch %d, or list %ld nodes in the file)",
                       l->size, n, c->path, c->n_nodes, c->n_nodes == 1 ? "" : "s", c->n_nodes, n);
    return HR_OK;
}

/* The node a rank (position in id order) names. */
static hr_status from_rank(const cfg *c, const launcher_env *l, const char *val, int *out_idx,
                           const char *cand, char *err, size_t errlen) {
    long v;
    if (cfg_parse_long(val, &v) || v < 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s = '%s' is not a node rank (expected one of "
                       "0 to %d, for %s)",
                       l->rank, val, c->n_nodes - 1, cand);
    HR_CHECK(check_world_size(c, l, err, errlen));
    if (v >= c->n_nodes)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s = %ld names no node of %s (expected a rank below the node count, %d)",
                       l->rank, v, c->path, c->n_nodes);
    *out_idx = (int)v;
    return HR_OK;
}

/* The node an id (--node, HETRING_NODE) names. */
static hr_status from_id(const cfg *c, const char *src, const char *val, int *out_idx,
                         const char *cand, char *err, size_t errlen) {
    long v;
    if (cfg_parse_long(val, &v) || v < 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s = '%s' is not a node id (expected one of %s)", src, val, cand);
    int idx = cfg_node_index(c, v);
    if (idx < 0)
        return hr_fail(err, errlen, HR_ERR_CONFIG, "%s = %ld names no node of %s (expected %s)",
                       src, v, c->path, cand);
    *out_idx = idx;
    return HR_OK;
}

hr_status node_id_resolve(const cfg *c, const char *cli_id, int *out_idx, char *err,
                          size_t errlen) {
    char cand[2048];
    list_candidates(c, NULL, cand, sizeof cand);
    const char *env_id = getenv("HETRING_NODE");
    if (cli_id && cli_id[0]) return from_id(c, "--node", cli_id, out_idx, cand, err, errlen);
    if (env_id && env_id[0]) return from_id(c, "HETRING_NODE", env_id, out_idx, cand, err, errlen);
    for (size_t l = 0; l < sizeof launchers / sizeof launchers[0]; l++) {
        const char *v = getenv(launchers[l].rank);
        if (v && v[0]) return from_rank(c, &launchers[l], v, out_idx, cand, err, errlen);
    }
    int *local = calloc((size_t)c->n_nodes, sizeof *local);
    if (!local) return HR_ERR_NOMEM;
    int n_local = 0, found = -1;
    const double deadline = tcp_now() + c->connect_timeout;
    hr_status st = HR_OK;
    for (int i = 0; i < c->n_nodes && st == HR_OK; i++) {
        char why[HR_ERRLEN], at[CFG_PATH + 64];
        if (node_id_host_is_local(c->nodes[i].host, deadline, &local[i], NULL, why, sizeof why) !=
            HR_OK)
            st = hr_fail(err, errlen, HR_ERR_TIMEOUT,
                         "cannot tell which node this is: %s: [node.%ld] host = %s: looking it "
                         "up took longer than connect_timeout (%g s) (is the resolver slow or "
                         "out of reach? --node ID or HETRING_NODE needs no lookup)",
                         cfg_where(c, i, "host", at, sizeof at), c->nodes[i].id, c->nodes[i].host,
                         c->connect_timeout);
        if (local[i]) n_local++, found = i;
    }
    if (st != HR_OK) {
    } else if (n_local == 1) {
        *out_idx = found;
    } else if (n_local == 0) {
        st = hr_fail(err, errlen, HR_ERR_CONFIG,
                     "cannot tell which node this is: no node's host is an address of this "
                     "machine (expected --node ID or HETRING_NODE; nodes: %s)",
                     cand);
    } else {
        list_candidates(c, local, cand, sizeof cand);
        st = hr_fail(err, errlen, HR_ERR_CONFIG,
                     "cannot tell which node this is: %d nodes are on this machine (expected "
                     "--node ID or HETRING_NODE; candidates: %s)",
                     n_local, cand);
    }
    free(local);
    return st;
}
