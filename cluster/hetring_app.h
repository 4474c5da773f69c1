/*
 * hetring_app.h: what `hetring run` adds to hetring_open for the built-in trainer. Not part of
 * the installed API: the application links hetring.c into its own executable (with the test
 * fault hooks of its build) and opens its nodes with hr_lib_open.
 *
 * The built-in trainer is a libhetring user like any other (its state goes through get_state
 * and put_state, its slices come from hetring_next, its gradients through hetring_ready and
 * hetring_step); these extras only spare it work the public API would make it repeat:
 *  - the configuration it already loaded and checked, instead of reading the INI again, and
 *    the nodes on its machine as it looked the hosts up (so the trainer's memory check and the
 *    library's decisions follow one answer of the resolver, waited for once);
 *  - its gradient computed in place: the model computes into the library's own buffer
 *    (hr_lib_grads), which holds the stats tail before it, so it is all-reduced where it lies,
 *    and hetring_step leaves the SUMS there (the trainer's optimizer divides by B itself, as a
 *    one-node run does, so both round alike);
 *  - its gradient in device memory, for NCCL among GPU nodes;
 *  - a resumed checkpoint's split, the checkpoint written when the node leaves, the metrics
 *    file for view records, and a call once the port is bound (its "ready on" line);
 *  - a probe that times its passes, so that a view's first split follows measured speed.
 */
#ifndef HETRING_APP_H
#define HETRING_APP_H

#include "base/hr_status.h"
#include "cluster/hetring.h"
#include "conf/cfg.h"

#include <stdio.h>

typedef struct {
    const cfg *c; /* the loaded, validated configuration (borrowed; o->conf is then unused) */
    int self;     /* this node's index in c->nodes */
    /* Non-zero: the gradient has n_grads floats and the application computes it in place, into
     * hr_lib_grads (hetring_grads.bufs must be consecutive pieces of it, from its start);
     * hetring_step leaves the sums over the cluster there, not the mean. Zero: the user's
     * buffers are copied, as for any libhetring user. */
    size_t n_grads;
    /* Non-NULL: the same gradient in device memory (n_params floats: the built-in trainer on a
     * GPU, or on the emulated one of the tests), so a view of GPU nodes may all-reduce it there
     * over NCCL (transport.h): the trainer then keeps it on the device for the iterations
     * hr_lib_on_device says, and hetring_step leaves the sums there. NULL: host buffers only. */
    float *device_grads;
    const long *start_split; /* a resumed split for all c->n_nodes nodes, or NULL */
    /* When this node leaves: write its checkpoint (may be NULL). user is o->cb.user. */
    hr_status (*save)(void *user, char *err, size_t errlen);
    FILE *(*metrics)(void *user);  /* where view records go (NULL: nowhere) */
    void (*on_listen)(void *user); /* the port is bound, before the first election */
    /* Time one forward and backward pass over b samples, changing no state (the first split of
     * a view follows the measured speeds, [controller] calibrate); NULL: capacity hints. */
    hr_status (*probe)(void *user, long b, double *seconds);
    /* The nodes on this node's machine (c->n_nodes entries) as the application found them with
     * node_id_check_hosts, which also refused two nodes at one endpoint; NULL: the library
     * looks the hosts up itself. Given, every decision of the run (the memory check, the
     * overlap's cores, the shared checkpoint) follows one set of answers, and a slow resolver
     * is waited for once. */
    const int *same;
} hetring_app;

/* hetring_open with the extras above. */
int hr_lib_open(hetring **out, const hetring_options *o, const hetring_app *app, char *err,
                size_t errlen);

/* The buffer an application with app.n_grads computes its gradient into (n_grads floats,
 * zeroed at open, the handle's until hetring_free); NULL without app.n_grads. */
float *hr_lib_grads(hetring *h);

/* The split of the next iteration, every member's batch in ring order: the first max into
 * out; returns the view's size. A checkpoint records it. */
int hr_lib_split(const hetring *h, long *out, int max);

/* Whether the current view all-reduces the gradient on the device (NCCL): asked after
 * hetring_next, it holds for that iteration's hetring_step. */
int hr_lib_on_device(const hetring *h);

/* This node's error-feedback residual as of its last applied step (app.n_grads floats: what
 * its share lost on the bf16 or powersgd wire, added to its next gradient), or NULL where it
 * has none (wire = fp32, or no lossy step and nothing resumed). A checkpoint records it. */
const float *hr_lib_residual(const hetring *h);

/* The powersgd wire's Q as of the last applied step (*n floats; NULL and 0 where there is
 * none), for the checkpoint (hetring_powersgd_q without the copy). */
const float *hr_lib_powersgd_q(const hetring *h, size_t *n);
/* Take up this node's residual from its own checkpoint (n = app.n_grads floats) before the
 * first step; the first bf16 or powersgd step adds it to its gradient. HETRING_EINVAL without
 * app.n_grads or with another n, or with wire = fp32. */
int hr_lib_resume_residual(hetring *h, const float *r, size_t n);

/* Which nodes of the configuration run on this node's machine (node_id_check_hosts: c.n_nodes
 * entries, 1 for those), as the library counted them at open. */
const int *hr_lib_same_machine(const hetring *h);

/* The ring's own account of its last failure ("" when none, or once the node left). */
const char *hr_lib_ring_error(const hetring *h);

#endif
