/*
 * test_node_id.c: which node a process is: --node, HETRING_NODE, SLURM_PROCID,
 * OMPI_COMM_WORLD_RANK, PMI_RANK, RANK, then the one node on a local address; errors list the
 * candidates, and a launcher's world size must be the node count.
 */
#include "cluster/node_id.h"
#include "cluster/cluster_setup.h"
#include "cluster/trainer_setup.h"
#include "base/hr_time.h"
#include "tests/check.h"
#include "tests/conf/two_nodes.h"
#include "ring/tcp.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void test_resolve(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    int idx = -1;
    write_file(tmp, two_nodes);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    /* only node 0 is on a local address */
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 0, "local: %d %s",
          idx, err);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 1, "ompi: %d", idx);
    setenv("SLURM_PROCID", "0", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 0, "slurm: %d", idx);
    setenv("HETRING_NODE", "5", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 1, "env: %d", idx);
    CHECK(node_id_resolve(&c, "0", &idx, err, sizeof err) == HR_OK && idx == 0, "--node: %d", idx);
    CHECK(node_id_resolve(&c, "7", &idx, err, sizeof err) == HR_ERR_CONFIG, "bad --node");
    CHECK(strstr(err, "0 (127.0.0.1:7001), 5 (192.0.2.1:7002)"), "candidates: %s", err);
    unsetenv("HETRING_NODE");
    unsetenv("SLURM_PROCID");
    unsetenv("OMPI_COMM_WORLD_RANK");
    cfg_free(&c);
    /* two local nodes: ambiguous, and the error lists both */
    write_file(tmp, "[cluster]\nsecurity = none\n[node.0]\nhost = 127.0.0.1\nport = 7001\n"
                    "[node.1]\nhost = 127.0.0.2\nport = 7001\n");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_ERR_CONFIG, "ambiguous");
    CHECK(strstr(err, "2 nodes are on this machine") &&
              strstr(err, "0 (127.0.0.1:7001), 1 (127.0.0.2:7001)"),
          "ambiguous: %s", err);
    cfg_free(&c);
    /* no local node */
    write_file(tmp, "[cluster]\nsecurity = none\n[node.3]\nhost = 192.0.2.7\nport = 7001\n");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_ERR_CONFIG, "none local");
    CHECK(strstr(err, "3 (192.0.2.7:7001)"), "none: %s", err);
    cfg_free(&c);
}

/* Whether `host` is an address of this machine (a numeric one needs no lookup). */
static int is_local(const char *host) {
    char err[HR_ERRLEN] = "";
    int local = -1;
    CHECK(node_id_host_is_local(host, hr_now() + 30, &local, NULL, err, sizeof err) == HR_OK,
          "%s: %s", host, err);
    return local;
}

static void test_local(void) {
    CHECK(is_local("127.0.0.1") && is_local("127.9.9.9"), "127/8 is this machine");
    CHECK(is_local("::1"), "::1 is this machine");
    CHECK(!is_local("192.0.2.1"), "a documentation address is not");
}

/* MPICH's PMI_RANK and torchrun's RANK are ranks too, after the others; each launcher's world
 * size must be the node count, and a mismatch names the variable and both numbers. */
/* A loopback host beside a node on another machine is refused (hetring_open and the dry run
 * call this before the ring binds or connects); beside local nodes, or alone, it is fine. */
static void test_reachable(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    write_file(tmp, two_nodes); /* node 0 on 127.0.0.1, node 5 on 192.0.2.1 */
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(node_id_check_reachable(&c, 0, NULL, err, sizeof err) == HR_ERR_CONFIG,
          "loopback beside a "
          "remote node passed");
    CHECK(strstr(err, ":6: [node.0] host = 127.0.0.1 is 127.0.0.1 on this machine, a loopback "
                      "address: node 5 (192.0.2.1), on another machine"),
          "got: %s", err);
    CHECK(node_id_check_reachable(&c, 1, NULL, err, sizeof err) == HR_OK,
          "node 5 is not loopback: %s", err);
    cfg_free(&c);
    write_file(tmp, "[cluster]\nsecurity = none\n[node.0]\nhost = localhost\nport = 7001\n"
                    "[node.1]\nhost = 127.0.0.2\nport = 7001\n");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(node_id_check_reachable(&c, 0, NULL, err, sizeof err) == HR_OK, "all on this machine: %s",
          err);
    cfg_free(&c);
}

/* Nodes on one machine are counted by address, not by how their host is written: localhost
 * and 127.0.0.1 are one machine, and so is LOCALHOST; 127.0.0.2 stands for another (a loopback
 * cluster's second machine, as dist.overlap_auto has it), and 192.0.2.1 is another. Each count
 * that follows: the nodes that share the machine's memory (train_config.host_nodes), the
 * machine fact's nodes and threads (overlap), and the checkpoint file without {id} that another
 * node of the machine writes too. NULL counts the hosts as written. */
static void test_same_machine(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    write_file(tmp, "[cluster]\nsecurity = none\nwire = bf16\n[train]\ncheckpoint = "
                    "/tmp/hr-same-machine.ckpt\n[node.0]\nhost = localhost\nport = 7001\n"
                    "threads = 2\n[node.1]\nhost = 127.0.0.1\nport = 7002\nthreads = 2\n"
                    "[node.2]\nhost = 127.0.0.2\nport = 7003\nthreads = 2\n[node.3]\n"
                    "host = 192.0.2.1\nport = 7004\nthreads = 2\n[node.4]\nhost = LOCALHOST\n"
                    "port = 7005\nthreads = 2\n");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    int same[5] = {-1, -1, -1, -1, -1};
    CHECK(node_id_check_hosts(&c, 0, same, err, sizeof err) == HR_OK, "%s", err);
    CHECK(same[0] == 1 && same[1] == 1 && same[2] == 0 && same[3] == 0 && same[4] == 1,
          "nodes on localhost's machine: %d %d %d %d %d, expected 1 1 0 0 1", same[0], same[1],
          same[2], same[3], same[4]);
    int other[5] = {-1, -1, -1, -1, -1};
    CHECK(node_id_check_hosts(&c, 2, other, err, sizeof err) == HR_OK, "%s", err);
    CHECK(!other[0] && !other[1] && other[2] && !other[3] && !other[4],
          "nodes on 127.0.0.2's machine: %d %d %d %d %d, expected 0 0 1 0 0", other[0], other[1],
          other[2], other[3], other[4]);
    train_config tc;
    cluster_config cc;
    app_train_config(&c, 0, same, &tc);
    app_cluster_config(&c, 0, same, &cc);
    CHECK(tc.host_nodes == 3, "nodes sharing the memory: %d, expected 3", tc.host_nodes);
    CHECK(cc.machine.hosted == 3 && cc.machine.demand == 9,
          "machine fact: %ld nodes, %ld threads, expected 3 and 9", (long)cc.machine.hosted,
          (long)cc.machine.demand);
    CHECK(app_checkpoint_shared(&c, 1, same), "127.0.0.1 and localhost write one file: no warning");
    app_train_config(&c, 0, NULL, &tc);
    CHECK(tc.host_nodes == 2 && !app_checkpoint_shared(&c, 1, NULL),
          "as written: %d nodes (localhost, LOCALHOST), expected 2", tc.host_nodes);
    cfg_free(&c);
}

/* Hosts written differently at one port that resolve to one socket are refused, naming both
 * nodes' FILE:LINE, how each is written and the address: a common address ("127.1" is
 * 127.0.0.1 written otherwise; so is localhost where it resolves there), or a wildcard host
 * beside an address of this machine. 127.0.0.2 beside 127.0.0.1 is another endpoint, and a
 * wildcard beside another machine's address is not this machine's socket. Any two nodes are
 * checked, not only this process's. */
static int hosts_ok(const char *tmp, const char *h0, const char *h1, const char *h2, char *err) {
    char text[512];
    cfg c;
    int same[3];
    snprintf(text, sizeof text,
             "[cluster]\nsecurity = none\n[node.0]\nhost = %s\nport = 7001\n[node.1]\n"
             "host = %s\nport = 7002\n[node.2]\nhost = %s\nport = 7002\n",
             h0, h1, h2);
    write_file(tmp, text);
    CHECK(cfg_load(&c, tmp, err, HR_ERRLEN) == HR_OK, "%s", err);
    err[0] = 0;
    hr_status st = node_id_check_hosts(&c, 0, same, err, HR_ERRLEN);
    CHECK(st == HR_OK || st == HR_ERR_CONFIG, "%s %s %s: %s", h0, h1, h2, err);
    cfg_free(&c);
    return st == HR_OK;
}

/* Whether one of name's addresses is 127.0.0.1. */
static int resolves_to_loopback_one(const char *name) {
    struct sockaddr_storage a[8];
    int n = 0;
    char err[HR_ERRLEN];
    if (tcp_lookup(name, hr_now() + 30, a, 8, &n, err, sizeof err) != HR_OK) return 0;
    for (int k = 0; k < n; k++)
        if (a[k].ss_family == AF_INET &&
            ntohl(((const struct sockaddr_in *)(const void *)&a[k])->sin_addr.s_addr) == 0x7f000001)
            return 1;
    return 0;
}

static void test_endpoints(const char *tmp) {
    char err[HR_ERRLEN] = "", at[64];
    CHECK(!hosts_ok(tmp, "127.0.0.3", "127.0.0.1", "127.1", err), "127.1 beside 127.0.0.1 passed");
    snprintf(at, sizeof at, "%s:10: [node.2] 127.1:7002 and %s:7: [node.1] 127.0.0.1:7002", tmp,
             tmp);
    CHECK(strstr(err, at) && strstr(err, "are the same endpoint (127.0.0.1:7002)"), "got: %s", err);
    CHECK(hosts_ok(tmp, "127.0.0.1", "127.0.0.1", "127.0.0.2", err),
          "127.0.0.2 beside 127.0.0.1: %s", err);
    CHECK(!hosts_ok(tmp, "127.0.0.1", "0.0.0.0", "127.0.0.2", err), "0.0.0.0 beside 127.0.0.2");
    CHECK(strstr(err, "[node.2] 127.0.0.2:7002 and ") &&
              strstr(err, "[node.1] 0.0.0.0:7002 are the same endpoint (127.0.0.2:7002, where a "
                          "wildcard host listens on every address of this machine)"),
          "got: %s", err);
    CHECK(!hosts_ok(tmp, "127.0.0.1", "127.0.0.2", "::", err), ":: beside 127.0.0.2: %s", err);
    CHECK(!hosts_ok(tmp, "127.0.0.1", "0.0.0.0", "::", err), ":: beside 0.0.0.0: %s", err);
    CHECK(hosts_ok(tmp, "127.0.0.1", "0.0.0.0", "192.0.2.1", err),
          "0.0.0.0 beside another machine's address: %s", err);
    CHECK(hosts_ok(tmp, "127.0.0.1", "0.0.0.0", "::1", err), "0.0.0.0 beside ::1: %s", err);
    if (resolves_to_loopback_one("localhost")) {
        CHECK(!hosts_ok(tmp, "127.0.0.3", "127.0.0.1", "localhost", err),
              "localhost beside 127.0.0.1 passed");
        CHECK(strstr(err, "[node.2] localhost:7002 and ") &&
                  strstr(err, "[node.1] 127.0.0.1:7002 are the same endpoint (127.0.0.1:7002)"),
              "got: %s", err);
    }
}

static void test_launchers(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    int idx = -1;
    write_file(tmp, two_nodes);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    setenv("RANK", "1", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 1, "RANK: %d %s", idx,
          err);
    setenv("PMI_RANK", "0", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 0,
          "PMI_RANK before RANK: %d %s", idx, err);
    setenv("PMI_SIZE", "2", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 0,
          "PMI_SIZE = 2 fits 2 nodes: %s", err);
    setenv("PMI_SIZE", "3", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_ERR_CONFIG, "PMI_SIZE = 3");
    CHECK(strstr(err, "PMI_SIZE = 3") && strstr(err, "has 2 nodes"), "PMI_SIZE: %s", err);
    unsetenv("PMI_RANK");
    unsetenv("PMI_SIZE");
    setenv("WORLD_SIZE", "4", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_ERR_CONFIG, "WORLD_SIZE = 4");
    CHECK(strstr(err, "WORLD_SIZE = 4") && strstr(err, "has 2 nodes"), "WORLD_SIZE: %s", err);
    setenv("RANK", "2", 1);
    setenv("WORLD_SIZE", "2", 1);
    CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_ERR_CONFIG, "RANK = 2 of 2");
    CHECK(strstr(err, "RANK = 2 names no node"), "RANK out of range: %s", err);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    static const char *const sizes[][2] = {{"SLURM_PROCID", "SLURM_NTASKS"},
                                           {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}};
    for (int i = 0; i < 2; i++) {
        setenv(sizes[i][0], "0", 1);
        setenv(sizes[i][1], "3", 1);
        CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_ERR_CONFIG, "%s = 3",
              sizes[i][1]);
        CHECK(strstr(err, sizes[i][1]) && strstr(err, " = 3, but ") && strstr(err, "has 2 nodes"),
              "%s: %s", sizes[i][1], err);
        setenv(sizes[i][1], "2", 1);
        CHECK(node_id_resolve(&c, NULL, &idx, err, sizeof err) == HR_OK && idx == 0, "%s = 2: %s",
              sizes[i][1], err);
        unsetenv(sizes[i][0]);
        unsetenv(sizes[i][1]);
    }
    /* an id given outright is not a launcher's rank: its sizes are not consulted */
    setenv("SLURM_NTASKS", "7", 1);
    CHECK(node_id_resolve(&c, "5", &idx, err, sizeof err) == HR_OK && idx == 1, "--node: %s", err);
    unsetenv("SLURM_NTASKS");
    cfg_free(&c);
}

int main(void) {
    char tmp[] = "/tmp/hr-node-id-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) return 1;
    close(fd);
    test_resolve(tmp);
    test_local();
    test_reachable(tmp);
    test_same_machine(tmp);
    test_endpoints(tmp);
    test_launchers(tmp);
    unlink(tmp);
    return check_exit();
}
