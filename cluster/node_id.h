/*
 * node_id.h: which node of the cluster file this process is.
 *
 * Every node reads the same file, so a process must learn its own id from outside it: the
 * command line, the environment a launcher sets (srun, mpirun, torchrun), or the one node whose
 * host is an address of this machine.
 */
#ifndef HR_NODE_ID_H
#define HR_NODE_ID_H

#include "base/hr_status.h"
#include "conf/cfg.h"

/* Which node is this process? In order: `cli_id` (may be NULL), HETRING_NODE (an id), a
 * launcher's rank (the position in id order): SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK or
 * torchrun's RANK, then the one node whose host is an address of this machine. On ambiguity
 * or none, `err` lists candidates. A rank comes with its launcher's world size (SLURM_NTASKS,
 * OMPI_COMM_WORLD_SIZE, PMI_SIZE, WORLD_SIZE), which must equal the node count: otherwise
 * `err` names the variable and both numbers. Looking the hosts up takes at most connect_timeout
 * (HR_ERR_TIMEOUT after, `err` naming the node and the host). */
hr_status node_id_resolve(const cfg *c, const char *cli_id, int *out_idx, char *err, size_t errlen);

/* Is `host` (name or numeric) an address of this machine? *local = 1 if so, 0 if not or if it
 * does not resolve; *resolves (may be NULL) = 0 where it does not (even for now: the resolver
 * failed), `err` then saying why, else 1. A name is looked up by `deadline` (tcp_lookup):
 * HR_ERR_TIMEOUT, `err` saying so, when the resolver has not answered by then; else HR_OK. */
hr_status node_id_host_is_local(const char *host, double deadline, int *local, int *resolves,
                                char *err, size_t errlen);

/* Node c->nodes[self] listens on its host's address: when that is loopback only here (a host
 * name that /etc/hosts maps to 127.0.1.1, or localhost) while another node is on another
 * machine, that node could never connect to it, and the ring would wait out connect_timeout
 * and rejoin_timeout. Returns HR_ERR_CONFIG then, `err` naming the host's FILE:LINE, the
 * address and the other node; else HR_OK. A node alone listens on nothing: HR_OK. `same` (may
 * be NULL): node_id_check_hosts' answer, whose nodes on self's machine need no lookup here. The
 * lookups share one deadline, connect_timeout from now: HR_ERR_TIMEOUT when the resolver has not
 * answered by then, `err` naming the node and its host's FILE:LINE. */
hr_status node_id_check_reachable(const cfg *c, int self, const int *same, char *err,
                                  size_t errlen);

/* The start's one look at every node's host, each name looked up at most once:
 *  - two nodes at one port whose hosts are written differently but resolve to one socket (a
 *    common address, or a wildcard host, 0.0.0.0 or ::, beside an address of this machine)
 *    would both listen on it: HR_ERR_CONFIG, `err` naming both nodes' FILE:LINE, host:port and
 *    the address. conf/ compares hosts only as written (it resolves nothing: a file may be
 *    checked on another machine), so "localhost" and "127.0.0.1" at one port pass it;
 *  - which nodes of c share the machine of node c->nodes[self]: same[k] = 1 (for self too) where
 *    node k's host is written as self's (case aside) or resolves to an address that self's host
 *    resolves to, else 0 (c->n_nodes entries). So "localhost" and "127.0.0.1" are one machine,
 *    and so are a name and its address; 127.0.0.2 beside 127.0.0.1 is another (another
 *    endpoint too), as a cluster of loopback addresses stands for several machines in tests
 *    (which node this process is, node_id_resolve, takes any local address, all of 127/8).
 * A peer's host that does not resolve matches none (its connect says why: it may resolve once
 * that peer is up); this node's own, where it has peers to listen for, is refused
 * (HR_ERR_CONFIG, `err` naming its FILE:LINE and the resolver's answer). The lookups
 * share one deadline, connect_timeout from now: HR_ERR_TIMEOUT when the resolver has not
 * answered by then, `err` naming the node and its host's FILE:LINE. `hetring run` calls it once
 * and hands `same` to the library (hetring_app.same), so both decide from the same answers. */
hr_status node_id_check_hosts(const cfg *c, int self, int *same, char *err, size_t errlen);

#endif
