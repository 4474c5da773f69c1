/*
 * elect_internal.h: the election's part in a ring's life (elect.c), for open.c.
 */
#ifndef HR_ELECT_INTERNAL_H
#define HR_ELECT_INTERNAL_H

#include "ring/ring.h"

typedef struct ring_elastic ring_elastic;

/* The election state of a ring (r->el), allocated by ring_init and ring_open, which also
 * registers the gate's lobby handler, and freed by ring_free after the gate stopped. */
hr_status elect_alloc(ring *r);
void elect_free(ring *r);
/* ring_init or ring_reform formed r->view outside an election: the lobby reports it. */
void elect_formed(ring *r);

#endif
