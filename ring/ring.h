/*
 * ring.h: the TCP ring and its collectives.
 *
 * A ring is formed from a membership view (epoch, ordered member ids): every member listens on
 * its configured host:port, connects to its successor (retrying with backoff until
 * connect_timeout) and accepts its predecessor; both links are authenticated by the handshake
 * in sec.h. Data flows one way round the ring: a node sends only to its successor and
 * receives only from its predecessor, both at once.
 * From the first listen until ring_free a thread accepts every connection and handshakes it
 * (in parallel, each with a short deadline, at most 16 pending): an authenticated lobby call
 * from a member (elastic membership, below) is answered; the authenticated predecessor is taken
 * while a view forms; anything else is closed at once and its address logged, so a peer without
 * the key cannot delay or stop the cluster.
 *
 * Contract of every collective:
 *  - all members call the same collectives in the same order with matching arguments;
 *  - each call returns HR_OK, or an error with ring_error() naming the peer (id, host:port)
 *    and what went wrong; no call blocks longer than the config's `timeout` without progress;
 *  - after an error the ring is failed: later calls return the same error until ring_reform()
 *    forms a new view; buffers handed to the failed call hold unspecified (never unverified)
 *    data;
 *  - a failure seen by one node is forwarded round the ring, so every member reports the node
 *    that failed, not just its neighbour.
 * Every frame carries the view epoch and the collective's sequence number (I7). The all-reduce
 * is a reduce-scatter then an all-gather, so every member ends with bitwise-identical bytes
 * (I4); small all-reduces gather every contribution and add them in rank order, which gives
 * the same guarantee. In views of four members or more, collectives of at most tree_bytes go
 * over a binary tree of extra links instead where its 2·depth hops are fewer than the ring's:
 * reduced up to rank 0 in a fixed order (all-gathers and broadcasts as an OR of blocks that
 * are zero elsewhere), then rank 0's bytes copied down (ring/tree.c).
 */
#ifndef HR_RING_H
#define HR_RING_H

#include "base/hr_status.h"
#include "ring/ring_config.h"

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* A ring: its config's copy, its view, its links and their keys (ring/ring_internal.h). Users
 * hold it by pointer, from ring_init or ring_open to ring_free. */
typedef struct ring ring;

/* A membership view. */
typedef struct {
    uint64_t epoch;           /* 0 at start, +1 per re-formation */
    int n;                    /* members */
    long ids[RING_MAX_NODES]; /* member ids in ring order */
} ring_view;

/* Form the ring for view epoch 0 (all members of `rc`, in their order) as node rc->self_id,
 * into *out. `rc` is copied: the caller may wipe and drop its own after the call. On failure
 * `err` says which peer and why, *out is NULL and nothing is left to free. */
hr_status ring_init(ring **out, const ring_config *rc, char *err, size_t errlen);

/* Drop the current links and form the ring of view `v` (which must contain this node),
 * keeping the listening socket and the keys. Clears a failed state. */
hr_status ring_reform(ring *r, const ring_view *v, char *err, size_t errlen);

int ring_rank(const ring *r);
/* HR_OK while the current view works, else the error that failed it: every collective returns
 * it until ring_reform or ring_elect forms a new view. */
hr_status ring_status(const ring *r);
/* Let a collective wait up to `secs` without progress when that is longer than the config's
 * timeout (which stays the floor): the training loop sets it from its measured step times,
 * so a slow step is not taken for a dead peer. 0 restores the plain timeout. */
void ring_set_step_timeout(ring *r, double secs);
/* How long a collective may go without progress before a peer counts as dead: the config's
 * timeout, or ring_set_step_timeout's when that is longer (the view's NCCL all-reduce waits as
 * long). */
double ring_timeout(const ring *r);
/* Worker threads the threaded engine uses beside its sender (engine_mt.c):
 * HETRING_RING_WORKERS when set, else the cores this process may use, shared among the
 * config's nodes on this host, less two. */
int ring_workers(const ring *r);
/* Collectives run on the threaded engine so far (for tests and benches). */
uint64_t ring_threaded_runs(const ring *r);
/* Collectives run over the tree so far (ring/tree.c; for tests and benches). */
uint64_t ring_tree_runs(const ring *r);
/* Pipeline segment size in bytes (segment_bytes, or the measured default). */
size_t ring_segment_bytes(const ring *r);
/* The config's tree_bytes: the largest collective any view's tree takes (0: no tree). */
long ring_tree_bytes(const ring *r);
/* The largest collective this view's tree takes now: tree_bytes, or the cut ring_set_tree_cut
 * set in this view; 0 where the view has no tree. */
long ring_tree_cut(const ring *r);
/* This view's tree takes collectives of at most `bytes` (clamped to [0, tree_bytes]) from now
 * on; a new view starts again from tree_bytes. Whether the tree takes a collective must be the
 * same on every member, so every member sets the same cut at the same point of the view's
 * collectives (libhetring: from the link probes every member gathered, link_tune.h). */
void ring_set_tree_cut(ring *r, long bytes);

/* What a ring all-reduce of S bytes costs in this view, as measured by ring_probe_links: about
 * 2(n-1) * alpha + 2(n-1)/n * S * beta (alpha a hop's latency, beta a byte's time on the
 * slowest link). */
typedef struct {
    double alpha_s; /* seconds of latency a hop */
    double beta_s;  /* seconds a byte */
} ring_link;
#define RING_PROBE_SMALL (64L << 10) /* the probe's two sizes: above the small all-reduce's */
#define RING_PROBE_LARGE (1L << 20)  /* single message, and not yet the threaded engine's */
#define RING_PROBE_REPS  3           /* timed all-reduces of each size (the least counts) */
/* Time RING_PROBE_REPS ring all-reduces of each size (after one untimed, which absorbs the
 * members' different arrival) with the tree off meanwhile, and fit alpha and beta; a
 * collective: every member calls it at the same point. A view of one member measures
 * nothing (zeros). */
hr_status ring_probe_links(ring *r, ring_link *out);
int ring_size(const ring *r);
const ring_view *ring_get_view(const ring *r);

/* In-place float32 sum over all members; any count, 0 included. One small enough goes over
 * the view's tree (ring_tree_takes_allreduce), every other one round the ring. */
hr_status ring_allreduce(ring *r, float *buf, size_t count);
/* Whether an all-reduce of count floats goes over the view's tree: the view has one (4 nodes
 * or more, tree_bytes > 0), the message fits tree_bytes and one segment, and the tree's
 * 2 * depth hops are fewer than the ring's. A fact of the view, the same on every member. */
int ring_tree_takes_allreduce(const ring *r, size_t count);
/* ring_allreduce over the tree, for a caller that chose it: an all-reduce the tree does not
 * take fails the ring (a caller's bug, HR_ERR_INVAL). */
hr_status ring_allreduce_tree(ring *r, float *buf, size_t count);
/* ring_allreduce with bfloat16 on the wire: half the bytes. The reduce-scatter adds each
 * received bf16 partial sum to this node's float32 values and sends the sum rounded to bf16
 * (to nearest; a finite float that would round to inf saturates at bf16's largest finite,
 * about ±3.39e38, so only an inf, or a float32 sum that overflowed, is inf on the wire);
 * the all-gather copies the owners' rounded sums unchanged, so every member ends with the same
 * bits (I4): buf[i] becomes the bf16 sum widened to float32. What this node's roundings
 * dropped goes to dropped[i] (count floats, or NULL): summed over the members it is the exact
 * sum minus the result, so a caller that adds it to its next contribution loses nothing over
 * time (error feedback). `wire` is count bf16 values of scratch. A count the ring would send
 * as one small message or over the tree goes as ring_allreduce does, float32 (dropped: 0). */
hr_status ring_allreduce_bf16(ring *r, float *buf, uint16_t *wire, float *dropped, size_t count);
/* Everyone's `bytes_each` bytes, in rank order, into `all` (n * bytes_each bytes). */
hr_status ring_allgather(ring *r, const void *mine, void *all, size_t bytes_each);
/* Variable sizes: rank k contributes bytes_of[k] bytes (my_bytes must equal bytes_of[rank]);
 * `all` receives them back to back in rank order. */
hr_status ring_allgatherv(ring *r, const void *mine, size_t my_bytes, void *all,
                          const size_t *bytes_of);
/* `bytes` bytes of root_rank's buf into everyone's buf. */
hr_status ring_broadcast(ring *r, void *buf, size_t bytes, int root_rank);
/* Returns once every member has entered the barrier. */
hr_status ring_barrier(ring *r);
/* A failure outside the ring's own collectives (the view's NCCL all-reduce): the view is failed
 * as a failed collective's would be, `what` is logged and sent round the ring both ways, so
 * every member leaves what it is in and elects; returns st (a status a new view cures:
 * HR_ERR_IO, HR_ERR_TIMEOUT). */
hr_status ring_fail_view(ring *r, hr_status st, const char *what);

/* ---------------------------------------------------------------- elastic membership
 * (DESIGN.md "Elastic membership"; ring/elect.c)
 *
 * Views after the first are agreed on with no coordinator. Every node's gate also answers
 * lobby requests: short authenticated connections (the same handshake, any member of the
 * config may call) that ask a node for its status (electing, forming or training, its view,
 * its lineage) or ask it to admit the caller. ring_elect runs on every node that needs a new
 * view: at start, after a collective failed, or when the members agreed to admit a joiner.
 * It probes every peer of the config, and the lowest id among the electing nodes decides the
 * next view (epoch = 1 + the highest epoch any of them has seen, members = the electing
 * nodes) once two probe rounds agree and the view has min_nodes members; the others adopt the
 * decision from any peer that forms or trains in it. A node that finds the others training a
 * view it is not in asks them to admit it (ring_join_requested on their side) and keeps
 * probing. At most one view per epoch is ever formed: a node adopts at most one view per
 * epoch, and two quorums share a node.
 *
 * State: a node's lineage says which state it holds; the election hands every member every
 * member's lineage, so all of them pick the same donor (ring_agreement.donor). */

#define RING_PROGRESS_NONE (-1) /* lineage.progress of a node that holds no training state */

/* Which training state a node holds. */
typedef struct {
    uint64_t epoch;   /* the last view whose state this node took up completely (0: none) */
    int64_t progress; /* iterations applied, or RING_PROGRESS_NONE */
} ring_lineage;

/* What an election decided, the same on every member. */
typedef struct {
    ring_view view;                       /* the view formed (ring_get_view gives it too) */
    ring_lineage lineage[RING_MAX_NODES]; /* every member's, by rank */
    int donor;                            /* rank whose state everyone takes: the lowest rank
                                           * of the highest lineage (epoch, then progress) */
    int in_sync;                          /* every member's lineage equals the donor's: no
                                           * state needs to move */
    uint64_t prev_epoch;                  /* the view this node held before, 0 at start */
    int failed_views;                     /* views that failed to form in this election before
                                           * this one (a member died or left while it formed) */
} ring_agreement;

/* Agree on the next view with every peer that can be reached, and form its ring; `mine` is
 * this node's lineage. Gives up with HR_ERR_TIMEOUT after rc.rejoin_timeout without a
 * quorum (the error says which nodes were reachable), logging every few seconds while it
 * waits. Safe to call on a failed ring, and as the first thing after ring_open. */
hr_status ring_elect(ring *r, const ring_lineage *mine, ring_agreement *out, char *err,
                     size_t errlen);

/* Open a ring for elections into *out: copy `rc`, load the keys, listen and start the gate
 * (which answers lobby calls from then on), form nothing yet: the view is {epoch 0, no members}
 * and every collective fails with HR_ERR_VIEW until ring_elect formed one. On failure `err`
 * says why, *out is NULL and nothing is left to free. */
hr_status ring_open(ring **out, const ring_config *rc, char *err, size_t errlen);

/* A flag (a signal handler's) that ring_elect polls between probe rounds: once it is nonzero
 * an election gives up with HR_ERR_INTERRUPTED. NULL: none. */
void ring_set_stop(ring *r, const volatile sig_atomic_t *stop);

/* Whether the elections that follow agree on the run's end (the caller's last step is done):
 * their log then says so, rather than that training pauses. 0 at ring_open. */
void ring_set_ending(ring *r, int ending);

/* Whether a node outside the view has asked to be admitted since the last ring_elect
 * (read by the training loop at every iteration; thread-safe). */
int ring_join_requested(ring *r);

/* The last detailed error ("" if none). */
const char *ring_error(const ring *r);
/* CPU seconds the ring's own communication threads (the threaded engine's) have used: with the
 * calling thread's clock, what a collective costs in CPU, apart from other threads of the
 * process (a BLAS's, spinning on after its products). 0 while they have not started. */
double ring_engine_cpu_s(const ring *r);
/* Close everything, wipe the keys (the config's PSK too) and free the ring; does nothing on
 * NULL. */
void ring_free(ring *r);

#endif
