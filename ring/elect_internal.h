/*
 * elect_internal.h: the election's part in a ring's life (elect.c), for open.c, and the check
 * of a view's own entry, for ring.unit.
 */
#ifndef HR_ELECT_INTERNAL_H
#define HR_ELECT_INTERNAL_H

#include "ring/ring.h"

/* Probes in flight at once from one node: its most lobby connections (open.c's descriptor
 * budget). */
#define ELECT_THREADS 16

typedef struct ring_elastic ring_elastic;

/* The election state of a ring (r->el), allocated by ring_init and ring_open, which also
 * registers the gate's lobby handler, and freed by ring_free after the gate stopped. */
hr_status elect_alloc(ring *r);
void elect_free(ring *r);
/* ring_init or ring_reform formed r->view outside an election: the lobby reports it. */
void elect_formed(ring *r);

/* Whether view `v` (its members' lineages `lin` and lives `lives`, by rank), adopted or decided
 * here, holds at this node's rank `rank` the life `life` and the lineage `mine` this node has
 * now. A view decided from an older call of this node (an earlier life, or an earlier election
 * whose lineage has moved on since, which two leaders of different epochs at once can give)
 * names a state the node does not hold, and the donor rule would act on it. HR_OK, else
 * HR_ERR_VIEW with `err` saying which: the view fails to install and an election repairs it.
 * (Tested by ring.unit, and through confirm, from ring_elect, by ring.elect_stale.) */
hr_status elect_check_own(const ring_view *v, int rank, const ring_lineage *lin,
                          const uint64_t *lives, const ring_lineage *mine, uint64_t life, char *err,
                          size_t errlen);

#endif
