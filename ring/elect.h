/*
 * elect.h: the seam between form.c (formation, the gate) and elect.c (elections and the lobby).
 * Internal to ring/: nothing outside it includes this header.
 */
#ifndef HR_ELECT_H
#define HR_ELECT_H

#include "ring.h"
#include "sec.h"

#include <stddef.h>

typedef struct ring_elastic ring_elastic;

/* form.c: form the ring of r->view, both links within `secs` seconds; ring.c: drop both links. */
hr_status ring_form(ring *r, double secs, char *err, size_t errlen);
void ring_close_links(ring *r);

/* elect.c: the election state of a ring (r->el), allocated by ring_init and ring_open and
 * freed by ring_free after the gate stopped. */
hr_status elect_alloc(ring *r);
void elect_free(ring *r);
/* ring_init or ring_reform formed r->view outside an election: the lobby reports it. */
void elect_formed(ring *r);
/* Serve one lobby call on `fd` (its handshake succeeded; `ch` is its channel; `peer` is the
 * caller's proven id, `addr` its address for messages): read one request, send one reply, all
 * by `deadline`. Runs on a gate thread; the caller closes fd. */
void elect_serve(ring *r, int fd, sec_chan *ch, long peer, const char *addr, double deadline);

#endif
