/*
 * elastic_metrics.c: see elastic_metrics.h. Every measure is a plain pass over the records;
 * a missing record makes its measure NAN rather than a guess.
 */
#include "bench/elastic_metrics.h"
#include "bench/bench_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ================================================================ reading */

/* The string value of "key" in a one-line object into out ("" when absent). */
static void json_str(const char *line, const char *key, char *out, size_t n) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(line, pat);
    out[0] = 0;
    if (!p || (p = strchr(p + strlen(pat), '"')) == NULL) return;
    size_t len = strcspn(p + 1, "\"");
    snprintf(out, n, "%.*s", (int)(len < n ? len : n - 1), p + 1);
}

/* "key": [ids...] into v (at most EM_MAX_NODES); returns the count. */
static int json_ids(const char *line, const char *key, long *v) {
    double d[EM_MAX_NODES];
    int k = json_array(line, key, d, EM_MAX_NODES);
    for (int i = 0; i < k; i++) v[i] = (long)d[i];
    return k;
}

static int parse_iter(const char *line, em_iter *it) {
    double iter, epoch, t, view = -1, loss = NAN;
    if (json_number(line, "iter", &iter) || json_number(line, "epoch", &epoch) ||
        json_number(line, "t_unix", &t))
        return -1;
    json_number(line, "loss", &loss);
    json_number(line, "view", &view);
    memset(it, 0, sizeof *it);
    it->iter = (long)iter, it->epoch = (long)epoch, it->t = t, it->view = (long)view;
    it->loss = loss;
    it->nb = json_array(line, "b", it->b, EM_MAX_NODES);
    for (int k = 0; k < it->nb; k++) it->bsum += it->b[k];
    json_ids(line, "nodes", it->nodes);
    return 0;
}

static int parse_view(const char *line, em_view *v) {
    double epoch, iter, t, bytes = 0;
    if (json_number(line, "epoch", &epoch) || json_number(line, "iter", &iter) ||
        json_number(line, "t_unix", &t))
        return -1;
    json_number(line, "state_bytes", &bytes);
    memset(v, 0, sizeof *v);
    v->epoch = (long)epoch, v->iter = (long)iter, v->t = t, v->state_bytes = bytes;
    v->n = json_ids(line, "nodes", v->nodes);
    v->n_joined = json_ids(line, "joined", v->joined);
    return 0;
}

static void parse_end(const char *line, em_node *n) {
    double iter, t;
    if (json_number(line, "iter", &iter) || json_number(line, "t_unix", &t)) return;
    n->has_end = 1;
    n->end_iter = (long)iter, n->end_t = t;
    json_str(line, "param_hash", n->hash, sizeof n->hash);
    n->end_n = json_ids(line, "nodes", n->end_nodes);
}

/* Append one line's record to `n`. Returns -1 when memory ran out. */
static int add_line(em_node *n, const char *line, long *cap_it, long *cap_v) {
    char event[32];
    json_str(line, "event", event, sizeof event);
    if (strcmp(event, "end") == 0) {
        parse_end(line, n);
    } else if (strcmp(event, "view") == 0) {
        if (n->n_v == *cap_v) {
            *cap_v = *cap_v ? 2 * *cap_v : 16;
            em_view *v = realloc(n->v, sizeof *v * (size_t)*cap_v);
            if (!v) return -1;
            n->v = v;
        }
        if (parse_view(line, &n->v[n->n_v]) == 0) n->n_v++;
    } else if (!event[0] && strchr(line, '}')) { /* an iteration record, not cut short */
        if (n->n_it == *cap_it) {
            *cap_it = *cap_it ? 2 * *cap_it : 1024;
            em_iter *it = realloc(n->it, sizeof *it * (size_t)*cap_it);
            if (!it) return -1;
            n->it = it;
        }
        if (parse_iter(line, &n->it[n->n_it]) == 0) n->n_it++;
    }
    return 0;
}

int em_node_load(em_node *n, long id, const char *path) {
    memset(n, 0, sizeof *n);
    n->id = id;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char *line = NULL;
    size_t lcap = 0;
    long cap_it = 0, cap_v = 0;
    int rc = 0;
    while (rc == 0 && getline(&line, &lcap, f) > 0) rc = add_line(n, line, &cap_it, &cap_v);
    free(line);
    fclose(f);
    return rc;
}

void em_node_free(em_node *n) {
    free(n->it);
    free(n->v);
    memset(n, 0, sizeof *n);
}

/* ================================================================ analysis */

static int has_id(const long *ids, int n, long id) {
    for (int i = 0; i < n; i++)
        if (ids[i] == id) return 1;
    return 0;
}

/* Final members: those of the end record at the highest iteration, the latest of them. */
static void final_members(const em_node *nodes, int n, em_result *r) {
    const em_node *last = NULL;
    for (int i = 0; i < n; i++) {
        const em_node *x = &nodes[i];
        if (x->has_end && (!last || x->end_iter > last->end_iter ||
                           (x->end_iter == last->end_iter && x->end_t > last->end_t)))
            last = x;
    }
    r->final_iter = last ? last->end_iter : -1;
    r->n_final = last ? last->end_n : 0;
    if (last) memcpy(r->final_nodes, last->end_nodes, sizeof r->final_nodes);
    if (last && r->n_final == 0) r->final_nodes[r->n_final++] = last->id; /* a one-node run */
}

static const em_node *node_by_id(const em_node *nodes, int n, long id) {
    for (int i = 0; i < n; i++)
        if (nodes[i].id == id) return &nodes[i];
    return NULL;
}

/* Every final member ended at the final iteration with the same parameters. */
static int replicas_identical(const em_node *nodes, int n, const em_result *r) {
    const char *ref = NULL;
    for (int k = 0; k < r->n_final; k++) {
        const em_node *x = node_by_id(nodes, n, r->final_nodes[k]);
        if (!x || !x->has_end || x->end_iter != r->final_iter || !x->hash[0]) return 0;
        if (ref && strcmp(ref, x->hash) != 0) return 0;
        ref = x->hash;
    }
    return ref != NULL;
}

/* detect_s and resume_s: every survivor's first view after the fault without the target, and
 * its first iteration in that view. */
static void detect_resume(const em_node *nodes, int n, const em_fault *f, em_result *r) {
    double detect = -INFINITY, resume = -INFINITY;
    int survivors = 0, resumed = 0;
    r->excl_view = -1;
    for (int i = 0; i < n; i++) {
        const em_node *x = &nodes[i];
        if (x->id == f->target) continue;
        const em_view *v = NULL;
        for (long k = 0; k < x->n_v && !v; k++)
            if (x->v[k].t >= f->fault_t && !has_id(x->v[k].nodes, x->v[k].n, f->target))
                v = &x->v[k];
        if (!v) continue;
        survivors++;
        detect = fmax(detect, v->t);
        if (v->epoch > r->excl_view) r->excl_view = v->epoch;
        for (long k = 0; k < x->n_it; k++)
            if (x->it[k].view == v->epoch && x->it[k].t >= f->fault_t) {
                resume = fmax(resume, x->it[k].t);
                resumed++;
                break;
            }
    }
    r->detect_s = survivors ? detect - f->fault_t : NAN;
    r->resume_s = survivors && resumed == survivors ? resume - f->fault_t : NAN;
}

/* join_s and state_bytes: the target's first iteration after its restart, and the view that
 * admitted it. Returns the iteration it joined at, or -1. */
static long join(const em_node *nodes, int n, const em_fault *f, em_result *r) {
    const em_node *x = node_by_id(nodes, n, f->target);
    r->join_s = r->state_bytes = NAN;
    if (f->restart_t <= 0 || !x) return -1;
    long at = -1;
    for (long k = 0; k < x->n_it && at < 0; k++)
        if (x->it[k].t >= f->restart_t && x->it[k].view > r->excl_view) {
            r->join_s = x->it[k].t - f->restart_t;
            at = x->it[k].iter;
        }
    const em_view *found = NULL; /* the target's own view record first, then a member's */
    for (int pass = 0; pass < 2 && !found; pass++)
        for (int i = 0; i < n && !found; i++) {
            const em_node *y = &nodes[i];
            if ((pass == 0) != (y == x)) continue;
            for (long k = 0; k < y->n_v && !found; k++) /* the joiner's first view after its
                                                         * restart; a member's naming it */
                if (y->v[k].t >= f->restart_t &&
                    (y == x || has_id(y->v[k].joined, y->v[k].n_joined, x->id)))
                    found = &y->v[k];
        }
    if (found) r->state_bytes = found->state_bytes;
    return at;
}

/* The iterations whose samples are counted: the epochs from the one the fault struck in to the
 * one the target joined in (the last one when it never did), within [0, final). */
static void touched(const em_node *nodes, int n, const em_fault *f, long joined_at, em_result *r) {
    const em_node *x = node_by_id(nodes, n, f->target);
    long struck = 0; /* the first iteration the target did not record before the fault */
    for (long k = 0; x && k < x->n_it; k++)
        if (x->it[k].t < f->fault_t && x->it[k].iter + 1 > struck) struck = x->it[k].iter + 1;
    long ipe = f->ipe > 0 ? f->ipe : 1;
    long end = joined_at >= 0 ? joined_at : r->final_iter;
    r->touched_from = struck / ipe * ipe;
    r->touched_to = (end / ipe + 1) * ipe;
    if (r->touched_to > r->final_iter) r->touched_to = r->final_iter;
}

/* samples_missing and samples_duplicated over [touched_from, touched_to). */
static void samples(const em_node *nodes, int n, const em_fault *f, em_result *r) {
    long lo = r->touched_from, len = r->touched_to - lo;
    r->samples_missing = r->samples_duplicated = -1;
    if (len < 0 || r->n_final == 0) return;
    int *seen = calloc((size_t)len + 1, sizeof *seen),
        *mine = calloc((size_t)len + 1, sizeof *mine);
    if (!seen || !mine) goto out;
    long missing = 0, dup = 0;
    for (int m = 0; m < r->n_final; m++) {
        const em_node *x = node_by_id(nodes, n, r->final_nodes[m]);
        memset(mine, 0, sizeof *mine * (size_t)len);
        for (long k = 0; x && k < x->n_it; k++) {
            const em_iter *it = &x->it[k];
            if (it->iter < lo || it->iter >= lo + len) continue;
            seen[it->iter - lo] = 1;
            if (mine[it->iter - lo]++) dup += f->B;
            double d = it->bsum - (double)f->B;
            if (d > 0) dup += (long)d;
            if (d < 0) missing += (long)-d;
        }
    }
    for (long i = 0; i < len; i++)
        if (!seen[i]) missing += f->B;
    r->samples_missing = missing, r->samples_duplicated = dup;
out:
    free(seen);
    free(mine);
}

/* t_unix of node x's record of iteration i (its last one), or NAN. */
static double time_of(const em_node *x, long i) {
    for (long k = x->n_it - 1; k >= 0; k--)
        if (x->it[k].iter == i) return x->it[k].t;
    return NAN;
}

/* samples/s over iterations [a, b) from node x's record times of a-1 and b-1. */
static double rate(const em_node *x, long a, long b, long B) {
    double t0 = time_of(x, a - 1), t1 = time_of(x, b - 1);
    return b > a && t1 > t0 ? (double)(b - a) * (double)B / (t1 - t0) : NAN;
}

/* Throughput before the fault and at the end, over equal windows, and the final loss, from the
 * lowest final member that is not the target (it saw the whole run). The windows are W
 * iterations: a quarter of the run, but no more than fit between the warm-up (5% of the run)
 * and the fault, nor between the join plus as much again to settle and the end. */
static void throughput(const em_node *nodes, int n, const em_fault *f, long joined_at,
                       em_result *r) {
    const em_node *x = NULL;
    r->throughput_before = r->throughput_after = r->final_loss = NAN;
    r->fault_iter = -1;
    for (int m = 0; m < r->n_final; m++) {
        const em_node *y = node_by_id(nodes, n, r->final_nodes[m]);
        if (y && y->id != f->target && (!x || y->id < x->id)) x = y;
    }
    if (!x || r->final_iter < 1) return;
    for (long k = x->n_it - 1; k >= 0 && isnan(r->final_loss); k--)
        if (x->it[k].iter == r->final_iter - 1) r->final_loss = x->it[k].loss;
    long fault_iter = -1; /* one past the last iteration x recorded before the fault (the one
                           * after it may be missing: x can take it up as state from a member
                           * that applied it, without a record of its own) */
    for (long k = 0; k < x->n_it; k++)
        if (x->it[k].t < f->fault_t && x->it[k].iter + 1 > fault_iter)
            fault_iter = x->it[k].iter + 1;
    long warm = r->final_iter / 20 + 1, w = r->final_iter / 4;
    r->fault_iter = fault_iter;
    if (fault_iter < 0) return;
    if (fault_iter - warm < w) w = fault_iter - warm;
    if (joined_at >= 0 && r->final_iter - (joined_at + warm) < w)
        w = r->final_iter - (joined_at + warm);
    r->window = w;
    if (w < 1) return;
    r->throughput_before = rate(x, fault_iter - w, fault_iter, f->B);
    r->throughput_after = rate(x, r->final_iter - w, r->final_iter, f->B);
}

void em_analyse(const em_node *nodes, int n, const em_fault *f, em_result *r) {
    memset(r, 0, sizeof *r);
    final_members(nodes, n, r);
    r->replicas_identical = replicas_identical(nodes, n, r);
    detect_resume(nodes, n, f, r);
    long joined_at = join(nodes, n, f, r);
    touched(nodes, n, f, joined_at, r);
    samples(nodes, n, f, r);
    throughput(nodes, n, f, joined_at, r);
}

double em_final_loss(const em_node *nodes, int n) {
    double loss = NAN;
    long best = -1;
    for (int i = 0; i < n; i++)
        for (long k = 0; k < nodes[i].n_it; k++)
            if (nodes[i].it[k].iter > best) best = nodes[i].it[k].iter, loss = nodes[i].it[k].loss;
    return loss;
}
