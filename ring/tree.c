/*
 * tree.c: small collectives over a binary tree (see tree_internal.h).
 *
 * Every collective of the ring takes n - 1 hops at least (an all-reduce 2(n - 1), or n - 1 when
 * it gathers every contribution): at large n a small all-reduce, such as the stats and
 * gradients of a small model, costs n hops of latency however few its bytes. A view of four
 * members or more therefore also forms a binary tree over its ranks: rank p's parent is
 * (p - 1) / 2 and its children are 2p + 1 and 2p + 2, each link made by the parent, with the
 * same handshake as the ring's (form.c). An all-reduce over the tree takes 2·depth hops,
 * depth = floor(log2 n): 14 at n = 128 against the ring's 254.
 *
 * The tree takes an all-reduce of at most the view's cut (tree_bytes, or less where the members
 * set less: ring_set_tree_cut) and one segment, where its hops are fewer
 * than the ring's; larger ones stay on the ring, which moves 2(n - 1)/n of the bytes each way
 * per node against up to 3x at an inner node of the tree. All-gathers whose total is that
 * small, broadcasts and barriers go over it the same way, as an OR of the members' disjoint
 * blocks in a buffer that is zero elsewhere: 2·depth hops against the ring's n - 1. Every
 * member decides the same way from the view's size, the sizes and the cut (tree_bytes, which the
 * handshake checks is the same at both ends, or what every member set at the same point).
 *
 * The all-reduce runs as single-frame steps on the engine (engine.c), each over one tree link,
 * so framing, verification, deadlines and the news of failures are the ring's own:
 *  1. the partial sums of the children come up in a fixed order: buf += child 1's, then
 *     buf += child 2's (each child's own sum of its subtree; OR for an all-gather);
 *  2. a node with a parent sends its sum up, then takes the total from the parent;
 *  3. it sends the total down to child 1, then child 2.
 * Rank 0 adds every contribution in one fixed order and every other member copies its bytes, so
 * every member ends with the same bytes (I4). A child reads its parent while the parent sends,
 * and a parent reads its children one after another: no wait goes round in a circle. A node
 * silent on a tree link may be waiting on another one, so a blame for silence on a tree link
 * is provisional (engine.c, follow_blame) like a blame of a predecessor.
 */
#include "ring/tree_internal.h"

#include "ring/engine_internal.h"
#include "ring/fail_internal.h"
#include "ring/frame.h"
#include "ring/ring_internal.h"

#include <stdint.h>

int tree_wanted(const ring *r, int n) {
    return r->rc.tree_bytes > 0 && n >= 4;
}

/* Depth of the tree of n ranks: the level of rank n - 1. */
static int tree_depth(int n) {
    int d = 0;
    for (int p = n; p > 1; p >>= 1) d++;
    return d;
}

int tree_takes(const ring *r, size_t bytes, int ring_hops) {
    if (!r->tree_on || bytes > (size_t)r->tree_cut || bytes > r->seg_bytes) return 0;
    return 2 * tree_depth(r->view.n) < ring_hops;
}

/* One frame of `bytes` bytes of buf on tree link `link`: sent (tx), or received and combined
 * (`add`: RX_ADD, RX_OR) or copied (RX_COPY). */
static hr_status tree_step(ring *r, int coll, uint8_t *buf, size_t bytes, int link, int tx,
                           int add) {
    ring_sched *s = r->sched;
    if (sched_reserve(s, 1) != HR_OK) return fail_local(r, coll, HR_ERR_NOMEM, "out of memory");
    s->tx_off[0] = s->rx_off[0] = 0;
    s->tx_len[0] = s->rx_len[0] = bytes;
    s->tx_need[0] = 0;
    s->rx_add[0] = (uint8_t)add;
    s->n_tx = tx ? 1 : 0;
    s->n_rx = tx ? 0 : 1;
    return eng_run_links(r, coll, buf, tx ? link : FROM_SUCC, tx ? FROM_PRED : link);
}

hr_status tree_reduce(ring *r, int coll, uint8_t *buf, size_t bytes, int op) {
    r->tree_runs++;
    const int parent = FROM_TREE, child[2] = {FROM_TREE + 1, FROM_TREE + 2};
    for (int c = 0; c < 2; c++)
        if (r->tree_peer[c + 1] >= 0) HR_CHECK(tree_step(r, coll, buf, bytes, child[c], 0, op));
    if (r->tree_peer[0] >= 0) {
        HR_CHECK(tree_step(r, coll, buf, bytes, parent, 1, RX_COPY));
        HR_CHECK(tree_step(r, coll, buf, bytes, parent, 0, RX_COPY));
    }
    for (int c = 0; c < 2; c++)
        if (r->tree_peer[c + 1] >= 0)
            HR_CHECK(tree_step(r, coll, buf, bytes, child[c], 1, RX_COPY));
    return HR_OK;
}
