/*
 * transport.c: the choice of a view's gradient transport and the start-up check of backend
 * (see transport.h). Pure functions: no I/O, no state; tests/app/test_transport.c checks
 * every combination.
 */
#include "cluster/transport.h"

#include <stdio.h>

const char *transport_name(transport_kind k) {
    return k == TRANSPORT_NCCL ? "nccl" : k == TRANSPORT_TCP ? "tcp" : "gather";
}

/* The INI's rules: TCP with the reason, or GATHER. */
static transport_kind by_config(const transport_facts *f, char *why, size_t len) {
    if (f->backend == CFG_BACKEND_TCP) {
        snprintf(why, len, "backend = tcp");
        return TRANSPORT_TCP;
    }
    if (f->wire == CFG_WIRE_AUTO) {
        snprintf(why, len, "wire = auto: it chooses among the TCP ring's wires");
        return TRANSPORT_TCP;
    }
    if (f->wire != CFG_WIRE_FP32) {
        snprintf(why, len, "wire = %s: the %s wire is the TCP ring's", cfg_wire_name(f->wire),
                 cfg_wire_name(f->wire));
        return TRANSPORT_TCP;
    }
    if (f->security != CFG_SEC_NONE) {
        snprintf(why, len,
                 "security = %s: NCCL's traffic is neither authenticated nor encrypted, so the "
                 "gradients stay on the TCP ring",
                 cfg_security_name(f->security));
        return TRANSPORT_TCP;
    }
    if (f->n < 2) {
        snprintf(why, len, "one member: nothing to all-reduce");
        return TRANSPORT_TCP;
    }
    for (int k = 0; k < f->n; k++)
        if (!f->m[k].gpu) {
            snprintf(why, len, "node %ld is a CPU node (device = cpu)", f->m[k].id);
            return TRANSPORT_TCP;
        }
    snprintf(why, len, "every member is a GPU node: gather the members' facts");
    return TRANSPORT_GATHER;
}

transport_kind transport_choose(const transport_facts *f, char *why, size_t len) {
    transport_kind k = by_config(f, why, len);
    if (k != TRANSPORT_GATHER || !f->gathered) return k;
    for (int i = 0; i < f->n; i++) {
        if (!f->m[i].device_grads) {
            snprintf(why, len,
                     "node %ld hands its gradients over in host buffers (a libhetring user), "
                     "not on its device",
                     f->m[i].id);
            return TRANSPORT_TCP;
        }
        if (!f->m[i].nccl) {
            snprintf(why, len,
                     "node %ld cannot run NCCL (its build has none, or libnccl.so.2 does "
                     "not load there)",
                     f->m[i].id);
            return TRANSPORT_TCP;
        }
    }
    snprintf(why, len, "every member is a GPU node with its gradients on the device%s",
             f->backend == CFG_BACKEND_NCCL ? " (backend = nccl)" : "");
    return TRANSPORT_NCCL;
}

hr_status transport_check_config(const cfg *c, int have_nccl, char *err, size_t errlen) {
    if (c->backend != CFG_BACKEND_NCCL) return HR_OK;
    if (c->security != CFG_SEC_NONE)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: [cluster] backend = nccl with [cluster] security = %s: NCCL's traffic "
                       "is neither authenticated nor encrypted; use security = none on a trusted "
                       "network, or backend = auto (which stays on TCP with security) or tcp",
                       c->path, cfg_security_name(c->security));
    if (!have_nccl)
        return hr_fail(err, errlen, HR_ERR_CONFIG,
                       "%s: [cluster] backend = nccl: this build has no NCCL (configured without "
                       "the CUDA Toolkit and NCCL; `hetring version` says so): rebuild with "
                       "-DHETRING_CUDA=ON, or use backend = tcp",
                       c->path);
    for (int k = 0; k < c->n_nodes; k++)
        if (c->nodes[k].device < 0)
            return hr_fail(err, errlen, HR_ERR_CONFIG,
                           "%s: [cluster] backend = nccl, but [node.%ld] device = cpu: NCCL needs "
                           "every node a GPU node (device = cuda:N); use backend = auto, which "
                           "picks NCCL for views of GPU nodes only",
                           c->path, c->nodes[k].id);
    return HR_OK;
}

hr_status transport_check_buckets(const cfg *c, int have_nccl, char *err, size_t errlen) {
    if (c->backend != CFG_BACKEND_AUTO || c->bucket_bytes == CFG_AUTO || c->bucket_bytes <= 0 ||
        c->wire != CFG_WIRE_FP32 || c->security != CFG_SEC_NONE || c->n_nodes < 2 || !have_nccl)
        return HR_OK;
    for (int k = 0; k < c->n_nodes; k++)
        if (c->nodes[k].device < 0) return HR_OK;
    char at[CFG_PATH + 64];
    return hr_fail(err, errlen, HR_ERR_CONFIG,
                   "%s: bucket_bytes = %ld, but every node is a GPU node with backend = auto, "
                   "security = none and wire = fp32, so with NCCL in this build the views "
                   "all-reduce over NCCL, the whole gradient after the compute, without buckets "
                   "(expected bucket_bytes = auto or 0, or backend = tcp for buckets on the TCP "
                   "ring)",
                   cfg_where(c, -1, "bucket_bytes", at, sizeof at), c->bucket_bytes);
}
