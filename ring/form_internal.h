/*
 * form_internal.h: the gate and formation (form.c): the lobby handler elect.c registers, the
 * gate's start and stop (open.c), and ring_form (open.c, elect.c).
 */
#ifndef HR_FORM_INTERNAL_H
#define HR_FORM_INTERNAL_H

#include "ring/ring_internal.h"

#include <stddef.h>

/* The gate's sockets (form.c): at most GATE_SLOTS at once, which open.c's descriptor budget
 * counts. */
#define GATE_PENDING 16                 /* unauthenticated connections handshaking at once */
#define GATE_SLOTS   (2 * GATE_PENDING) /* those, and evicted ones still winding down */

/* Register the gate's handler of lobby calls (elect.c does, as the ring is set up): before the
 * gate starts, so that its threads only read it. */
void gate_set_lobby(ring *r, gate_lobby_fn *serve, void *ctx);
/* Listen on this node's address and start the gate (ring_init, ring_open, ring_reform). */
hr_status listen_start(ring *r, char *err, size_t errlen);
/* Stop the gate: every pending connection is closed and every thread joined (ring_free). */
void gate_stop(ring *r);

/* Form the ring of r->view: connect to the successor and take the predecessor, both within
 * `secs` seconds (ring_init, ring_reform, and elect.c once a view is agreed on). */
hr_status ring_form(ring *r, double secs, char *err, size_t errlen);

#endif
