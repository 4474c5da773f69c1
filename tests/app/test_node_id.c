/*
 * test_node_id.c: which node a process is: --node, HETRING_NODE, SLURM_PROCID,
 * OMPI_COMM_WORLD_RANK, then the one node on a local address; errors list the candidates.
 */
#include "../check.h"
#include "../conf/two_nodes.h"
#include "node_id.h"

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

static void test_local(void) {
    CHECK(node_id_host_is_local("127.0.0.1") && node_id_host_is_local("127.9.9.9"),
          "127/8 is this machine");
    CHECK(node_id_host_is_local("::1"), "::1 is this machine");
    CHECK(!node_id_host_is_local("192.0.2.1"), "a documentation address is not");
}

int main(void) {
    char tmp[] = "/tmp/hr-node-id-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd < 0) return 1;
    close(fd);
    test_resolve(tmp);
    test_local();
    unlink(tmp);
    return check_exit();
}
