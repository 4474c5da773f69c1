/*
 * test_transport.c: the choice of a view's gradient transport (cluster/transport.h) as a table:
 * every combination of backend (auto, tcp, nccl), wire (fp32, bf16, powersgd, auto), security
 * (none, auth, encrypt), view size (1, 3), the members (all GPU nodes with device gradients and
 * NCCL; one CPU node; one libhetring user with host buffers; one build without NCCL) and whether
 * the members' facts are gathered, each with the transport and the reason expected; and the
 * start-up checks of backend = nccl and of buckets where every view goes over NCCL.
 */
#include "tests/check.h"
#include "cluster/transport.h"

#include <string.h>

enum { ALL_GPU, ONE_CPU, ONE_HOST, ONE_NO_NCCL, N_MEMBERS };
static const char *const member_names[] = {"all GPU", "node 7 CPU", "node 7 host buffers",
                                           "node 7 without NCCL"};

/* The expectation, written apart from transport.c's order of rules: the kind and a piece of
 * the reason. */
static transport_kind expect(int backend, int wire, int security, int n, int members, int gathered,
                             const char **why) {
    if (backend == CFG_BACKEND_TCP) return *why = "backend = tcp", TRANSPORT_TCP;
    if (wire == CFG_WIRE_BF16)
        return *why = "wire = bf16: the bf16 wire is the TCP ring's", TRANSPORT_TCP;
    if (wire == CFG_WIRE_POWERSGD)
        return *why = "wire = powersgd: the powersgd wire is the TCP ring's", TRANSPORT_TCP;
    if (wire == CFG_WIRE_AUTO)
        return *why = "wire = auto: it chooses among the TCP ring's wires", TRANSPORT_TCP;
    if (security == CFG_SEC_AUTH)
        return *why = "security = auth: NCCL's traffic is neither authenticated nor encrypted",
               TRANSPORT_TCP;
    if (security == CFG_SEC_ENCRYPT)
        return *why = "security = encrypt: NCCL's traffic is neither authenticated nor encrypted",
               TRANSPORT_TCP;
    if (n < 2) return *why = "one member", TRANSPORT_TCP;
    if (members == ONE_CPU) return *why = "node 7 is a CPU node (device = cpu)", TRANSPORT_TCP;
    if (!gathered) return *why = "gather the members' facts", TRANSPORT_GATHER;
    if (members == ONE_HOST)
        return *why = "node 7 hands its gradients over in host buffers", TRANSPORT_TCP;
    if (members == ONE_NO_NCCL)
        return *why = "node 7 cannot run NCCL (its build has none, or libnccl.so.2 does not load "
                      "there)",
               TRANSPORT_TCP;
    *why = backend == CFG_BACKEND_NCCL ? "with its gradients on the device (backend = nccl)"
                                       : "every member is a GPU node with its gradients on the "
                                         "device";
    return TRANSPORT_NCCL;
}

static void table(void) {
    static const int backends[] = {CFG_BACKEND_AUTO, CFG_BACKEND_TCP, CFG_BACKEND_NCCL};
    static const int secs[] = {CFG_SEC_NONE, CFG_SEC_AUTH, CFG_SEC_ENCRYPT};
    int rows = 0;
    for (int b = 0; b < 3; b++)
        for (int w = CFG_WIRE_FP32; w <= CFG_WIRE_AUTO; w++)
            for (int s = 0; s < 3; s++)
                for (int n = 1; n <= 3; n += 2)
                    for (int mem = 0; mem < N_MEMBERS; mem++)
                        for (int g = 0; g < 2; g++) {
                            transport_member m[3] = {
                                {.id = 3, .gpu = 1, .device_grads = 1, .nccl = 1},
                                {.id = 7, .gpu = 1, .device_grads = 1, .nccl = 1},
                                {.id = 9, .gpu = 1, .device_grads = 1, .nccl = 1}};
                            transport_member *odd = &m[n > 1 ? 1 : 0];
                            if (n == 1) odd->id = 7;
                            if (mem == ONE_CPU) odd->gpu = 0;
                            if (mem == ONE_HOST) odd->device_grads = 0;
                            if (mem == ONE_NO_NCCL) odd->nccl = 0;
                            const transport_facts f = {.backend = backends[b],
                                                       .wire = w,
                                                       .security = secs[s],
                                                       .n = n,
                                                       .m = m,
                                                       .gathered = g};
                            char why[256] = "";
                            const char *want_why;
                            transport_kind want =
                                expect(backends[b], w, secs[s], n, mem, g, &want_why);
                            transport_kind got = transport_choose(&f, why, sizeof why);
                            CHECK(
                                got == want && strstr(why, want_why),
                                "backend %d, wire %d, security %s, %d member(s), %s, gathered %d: "
                                "%s (%s), expected %s (... %s ...)",
                                backends[b], w, cfg_security_name(secs[s]), n, member_names[mem], g,
                                transport_name(got), why, transport_name(want), want_why);
                            CHECK(!(g && got == TRANSPORT_GATHER), "gathered facts decide");
                            rows++;
                        }
    printf("%d combinations checked\n", rows);
}

/* A cluster x.ini of nodes 0 and 4 on GPUs 0 and 1, every other field zero. */
static void two_gpu_nodes(cfg *c, cfg_node nodes[2]) {
    memset(c, 0, sizeof *c);
    memset(nodes, 0, 2 * sizeof *nodes);
    nodes[0].id = 0, nodes[0].device = 0;
    nodes[1].id = 4, nodes[1].device = 1;
    c->nodes = nodes, c->n_nodes = 2;
    snprintf(c->path, sizeof c->path, "x.ini");
}

/* backend = nccl at start-up: both keys named with security, the build named without NCCL, the
 * node named with a CPU node; auto and tcp always pass. */
static void startup(void) {
    cfg c;
    cfg_node nodes[2];
    two_gpu_nodes(&c, nodes);
    char err[512];
    c.security = CFG_SEC_ENCRYPT;
    c.backend = CFG_BACKEND_AUTO;
    CHECK(transport_check_config(&c, 0, err, sizeof err) == HR_OK, "auto passes");
    c.backend = CFG_BACKEND_TCP;
    CHECK(transport_check_config(&c, 0, err, sizeof err) == HR_OK, "tcp passes");
    c.backend = CFG_BACKEND_NCCL;
    CHECK(transport_check_config(&c, 1, err, sizeof err) == HR_ERR_CONFIG &&
              strstr(err, "x.ini: [cluster] backend = nccl with [cluster] security = encrypt"),
          "security: %s", err);
    printf("%s\n", err);
    c.security = CFG_SEC_NONE;
    CHECK(transport_check_config(&c, 0, err, sizeof err) == HR_ERR_CONFIG &&
              strstr(err, "this build has no NCCL"),
          "no NCCL: %s", err);
    CHECK(transport_check_config(&c, 1, err, sizeof err) == HR_OK, "GPU nodes, NCCL: %s", err);
    nodes[1].device = -1;
    CHECK(transport_check_config(&c, 1, err, sizeof err) == HR_ERR_CONFIG &&
              strstr(err, "[node.4] device = cpu"),
          "a CPU node: %s", err);
}

/* bucket_bytes = N with backend = auto is refused only where every view goes over NCCL: every
 * node a GPU node, security none, wire fp32 and NCCL in the build. */
static void buckets(void) {
    cfg c;
    cfg_node nodes[2];
    two_gpu_nodes(&c, nodes);
    c.backend = CFG_BACKEND_AUTO, c.security = CFG_SEC_NONE, c.wire = CFG_WIRE_FP32;
    c.bucket_bytes = 65536;
    char err[512];
    CHECK(transport_check_buckets(&c, 1, err, sizeof err) == HR_ERR_CONFIG &&
              strstr(err, "x.ini:1: bucket_bytes = 65536") && strstr(err, "without buckets"),
          "buckets over NCCL: %s", err);
    printf("%s\n", err);
    CHECK(transport_check_buckets(&c, 0, err, sizeof err) == HR_OK, "no NCCL: buckets on TCP");
    c.bucket_bytes = 0;
    CHECK(transport_check_buckets(&c, 1, err, sizeof err) == HR_OK, "bucket_bytes = 0");
    c.bucket_bytes = CFG_AUTO;
    CHECK(transport_check_buckets(&c, 1, err, sizeof err) == HR_OK, "bucket_bytes = auto");
    c.bucket_bytes = 65536;
    c.backend = CFG_BACKEND_TCP;
    CHECK(transport_check_buckets(&c, 1, err, sizeof err) == HR_OK, "backend = tcp");
    c.backend = CFG_BACKEND_AUTO, c.security = CFG_SEC_ENCRYPT;
    CHECK(transport_check_buckets(&c, 1, err, sizeof err) == HR_OK, "security: TCP");
    c.security = CFG_SEC_NONE, c.wire = CFG_WIRE_BF16;
    CHECK(transport_check_buckets(&c, 1, err, sizeof err) == HR_OK, "wire = bf16: TCP");
    c.wire = CFG_WIRE_FP32, nodes[1].device = -1;
    CHECK(transport_check_buckets(&c, 1, err, sizeof err) == HR_OK, "a CPU node: TCP");
}

int main(void) {
    table();
    startup();
    buckets();
    return check_exit();
}
