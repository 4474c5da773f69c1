/*
 * transport.h: which transport carries a view's gradient all-reduce, TCP or NCCL (DESIGN.md,
 * "The GPU path"), and the start-up check of `[cluster] backend`.
 *
 * The choice is a pure function of the view and the configuration, computed alike on every
 * member (so every member calls the same collectives): `auto` picks NCCL when every member
 * is a GPU node (device = cuda:N in the INI) whose gradients stay on its device (the built-in
 * trainer's; a libhetring user hands host buffers), whose build has NCCL (or the test fake is
 * armed), and security = none: NCCL's traffic is neither authenticated nor encrypted, so with
 * auth or encrypt the gradients stay on the TCP ring. Otherwise TCP, with the reason. The
 * stats tail, the hashes, the elections and the state always travel over TCP.
 *
 * The INI's facts are known to every node; a member's own facts (device gradients, NCCL in
 * its build) are not, so the choice goes in two steps: without them it answers TCP (the INI
 * rules NCCL out) or TRANSPORT_GATHER (all-gather the members' facts and ask again).
 */
#ifndef HR_TRANSPORT_H
#define HR_TRANSPORT_H

#include "base/hr_status.h"
#include "conf/cfg.h"

#include <stddef.h>

typedef enum {
    TRANSPORT_TCP,    /* the gradient goes round the TCP ring */
    TRANSPORT_NCCL,   /* the gradient is all-reduced on the devices by NCCL */
    TRANSPORT_GATHER, /* the INI allows NCCL: the members' own facts decide */
} transport_kind;

/* One member's facts. */
typedef struct {
    long id;          /* node id */
    int gpu;          /* device = cuda:N in the INI */
    int device_grads; /* its gradients stay on its device (gathered) */
    int nccl;         /* its build has NCCL or the test fake is armed (gathered) */
} transport_member;

typedef struct {
    int backend;               /* cfg_backend */
    int wire;                  /* cfg_wire: bf16 and powersgd are the TCP ring's */
    int security;              /* cfg_security, resolved (never AUTO) */
    int n;                     /* members of the view */
    const transport_member *m; /* (n) in ring order */
    int gathered;              /* m[].device_grads and m[].nccl are known */
} transport_facts;

/* The transport of the view f describes; `why` (len bytes) says why, e.g. "node 2 is a CPU
 * node (device = cpu)". Never TRANSPORT_GATHER when f->gathered. */
transport_kind transport_choose(const transport_facts *f, char *why, size_t len);

/* "tcp" or "nccl". */
const char *transport_name(transport_kind k);

/* Start-up check of [cluster] backend = nccl against the file (have_nccl: this build has NCCL,
 * or the test fake is armed): HR_ERR_CONFIG naming the file and the keys when security is auth
 * or encrypt, when the build has no NCCL, or when a node is a CPU node. HR_OK otherwise, and
 * for auto and tcp. */
hr_status transport_check_config(const cfg *c, int have_nccl, char *err, size_t errlen);

/* Start-up check of [train] bucket_bytes = N (N > 0) for the built-in trainer (whose gradients
 * stay on the device) with backend = auto: where the file makes every view of two or more
 * NCCL's (wire = fp32, security = none, every node a GPU node) and the build has NCCL
 * (have_nccl), the gradient goes whole after the compute and the buckets would be ignored:
 * HR_ERR_CONFIG naming the file, the key's line and what to set. HR_OK otherwise. (backend =
 * nccl with buckets is refused by cfg_validate, whatever the build.) */
hr_status transport_check_buckets(const cfg *c, int have_nccl, char *err, size_t errlen);

#endif
