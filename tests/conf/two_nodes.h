/*
 * two_nodes.h: the two-node cluster file the conf and app tests load, and the helper that
 * writes it. Node 0 is on a loopback address, node 5 on a documentation address (never
 * contacted), so exactly one node is local.
 */
#ifndef HR_TEST_TWO_NODES_H
#define HR_TEST_TWO_NODES_H
#include <stdio.h>

static const char *two_nodes = "[cluster]\nsecurity = none\n[train]\nlr = 0.2\n"
                               "[node.0]\nhost = 127.0.0.1\nport = 7001\n"
                               "[node.5]\nhost = 192.0.2.1\nport = 7002\n";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

#endif
