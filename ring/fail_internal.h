/*
 * fail_internal.h: a view's failures (fail.c), as both engines, the tree and the collectives
 * report them. Each function records the failure in the ring (r->failed, r->err), tells the
 * neighbours in abort frames, and returns the status it recorded.
 */
#ifndef HR_FAIL_INTERNAL_H
#define HR_FAIL_INTERNAL_H

#include "ring/ring_internal.h"

#include <stddef.h>
#include <stdint.h>

/* Record a failure of this view, blaming node `culprit`, seen `from` a link or here, and tell
 * the neighbours. Returns `st`. */
hr_status fail_view(ring *r, txf *t, int coll, hr_status st, long culprit, int from,
                    const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A frame on the link `from` failed authentication (or, unverified, cannot be a genuine one).
 * `frame` names it (" 3", or ""), `hint` ("" or "; ...") follows the verdict. */
hr_status fail_link_auth(ring *r, txf *t, int coll, int from, const char *frame, const char *hint);
/* fail_link_auth's hint for a data frame whose header `hdr` (not verified) came where one of
 * `want` payload bytes was expected: "", or where the header gives another length, that the
 * nodes may disagree on the collective's size (an honest longer frame fails verification too,
 * as only `want` bytes of it are read). The length is said to be unverified: no field of a
 * frame that failed is taken as a fact. Returns out. */
const char *fail_size_hint(char *out, size_t n, const uint8_t *hdr, size_t want);
/* The node on link `from` moved nothing for `limit` seconds (sent nothing, or with `tx`
 * accepted nothing), its incoming stream standing at `pp` (NULL: a frame boundary): blame it,
 * unless its own abort, within a short wait, names the node it was waiting on. */
hr_status fail_silent(ring *r, txf *t, int coll, int from, int tx, double limit,
                      const link_pos *pp);
/* Something happened on link `from`, which carries nothing this way but an abort (the
 * successor link, or a tree link while this node sends on it): report what (see fail.c). */
hr_status fail_tx_trouble(ring *r, txf *t, int coll, int from, int e, const link_pos *pp);
/* The link `from` that this node receives on closed (`e`: 0 at end-of-file, else the error) with
 * no abort on it: report an abort queued on the successor link when the predecessor link closed
 * (see fail.c), else blame the node at the other end. */
hr_status fail_rx_closed(ring *r, txf *t, int coll, int from, int e);
/* Report the abort frame whose payload (`len` bytes, verified in secure modes) is `body`, which
 * came on link `from`, and pass it on. */
hr_status fail_abort_report(ring *r, txf *t, int coll, uint8_t *body, size_t len, int from);
/* Read the rest of a frame whose header `raw` came in on link `from` and that should be an
 * abort, and report it. */
hr_status fail_on_abort(ring *r, txf *t, int coll, const uint8_t *raw, int from);

/* A local failure in the middle of a collective: the others are already sending, so the view
 * is failed and they are told. */
hr_status fail_local(ring *r, int coll, hr_status st, const char *what);

#endif
