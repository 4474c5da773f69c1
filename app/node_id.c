/*
 * node_id.c: which node of the cluster file this process is (see node_id.h).
 */
#include "node_id.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

int node_id_host_is_local(const char *host) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) return 0;
    int local = 0;
    struct ifaddrs *ifs = NULL;
    if (getifaddrs(&ifs) != 0) ifs = NULL;
    for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            const struct sockaddr_in *s = (const void *)a->ai_addr;
            if ((ntohl(s->sin_addr.s_addr) >> 24) == 127) local = 1; /* all of 127/8 is ours */
        } else if (a->ai_family == AF_INET6) {
            const struct sockaddr_in6 *s = (const void *)a->ai_addr;
            if (IN6_IS_ADDR_LOOPBACK(&s->sin6_addr)) local = 1;
        }
        for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
            if (!i->ifa_addr || i->ifa_addr->sa_family != a->ai_family) continue;
            if (a->ai_family == AF_INET)
                local = ((const struct sockaddr_in *)(const void *)i->ifa_addr)->sin_addr.s_addr ==
                        ((const struct sockaddr_in *)(const void *)a->ai_addr)->sin_addr.s_addr;
            else
                local = memcmp(&((const struct sockaddr_in6 *)(const void *)i->ifa_addr)->sin6_addr,
                               &((const struct sockaddr_in6 *)(const void *)a->ai_addr)->sin6_addr,
                               16) == 0;
        }
    }
    if (ifs) freeifaddrs(ifs);
    freeaddrinfo(res);
    return local;
}

static void list_candidates(const cfg *c, const int *which, char *out, size_t n) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; i < c->n_nodes && o < n; i++)
        if (!which || which[i])
            o += (size_t)snprintf(out + o, n - o, "%s%ld (%s:%ld)", o ? ", " : "", c->nodes[i].id,
                                  c->nodes[i].host, c->nodes[i].port);
}

hr_status node_id_resolve(const cfg *c, const char *cli_id, int *out_idx, char *err,
                          size_t errlen) {
    char cand[2048];
    list_candidates(c, NULL, cand, sizeof cand);
    struct {
        const char *name, *val;
        int is_rank;
    } src[] = {
        {"--node", cli_id, 0},
        {"HETRING_NODE", getenv("HETRING_NODE"), 0},
        {"SLURM_PROCID", getenv("SLURM_PROCID"), 1},
        {"OMPI_COMM_WORLD_RANK", getenv("OMPI_COMM_WORLD_RANK"), 1},
    };
    for (size_t s = 0; s < sizeof src / sizeof src[0]; s++) {
        if (!src[s].val || !src[s].val[0]) continue;
        long v;
        if (cfg_parse_long(src[s].val, &v) || v < 0)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s = '%s' is not a node %s (expected one of %s)", src[s].name,
                           src[s].val, src[s].is_rank ? "rank" : "id", cand);
        int idx = src[s].is_rank ? (v < c->n_nodes ? (int)v : -1) : cfg_node_index(c, v);
        if (idx < 0)
            return hr_fail(err, errlen, HR_ERR_CONFIG, "%s = %ld names no node of %s (expected %s)",
                           src[s].name, v, c->path,
                           src[s].is_rank ? "a rank below the node count" : cand);
        *out_idx = idx;
        return HR_OK;
    }
    int *local = calloc((size_t)c->n_nodes, sizeof *local);
    if (!local) return HR_ERR_NOMEM;
    int n_local = 0, found = -1;
    for (int i = 0; i < c->n_nodes; i++)
        if (node_id_host_is_local(c->nodes[i].host)) local[i] = 1, n_local++, found = i;
    hr_status st = HR_OK;
    if (n_local == 1) {
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
