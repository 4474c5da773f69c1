/*
 * tree_internal.h: the view's binary tree (tree.c), for small collectives: whether a view forms
 * one (form.c), whether a collective takes it and the collective over it (coll.c).
 */
#ifndef HR_TREE_INTERNAL_H
#define HR_TREE_INTERNAL_H

#include "ring/ring.h"

#include <stddef.h>
#include <stdint.h>

/* Whether a view of `n` members forms a tree (tree_bytes set and n >= 4). */
int tree_wanted(const ring *r, int n);
/* Whether a collective of `bytes` bytes that takes `ring_hops` hops round the ring goes over
 * the tree in this view. */
int tree_takes(const ring *r, size_t bytes, int ring_hops);
/* Collective `coll` over the tree on `bytes` bytes of buf: combined up to rank 0 in a fixed
 * order (`op` RX_ADD: floats added; RX_OR: bytes OR'ed), then rank 0's bytes copied down. */
hr_status tree_reduce(ring *r, int coll, uint8_t *buf, size_t bytes, int op);

#endif
