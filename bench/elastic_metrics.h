/*
 * elastic_metrics.h: what `hetring bench elastic` measures, computed from the nodes' --metrics
 * files alone, so that it can be checked on crafted files (tests/bench/test_elastic_metrics.c).
 *
 * A metrics file is JSON lines, one object per line, each with "t_unix" (CLOCK_REALTIME
 * seconds) and "node" (the writer's id): an iteration record {"iter","epoch","loss","b":[per
 * rank],"view","nodes":[ids by rank],...}; a view record {"event":"view","epoch","nodes","iter"
 * (the next iteration),"left","joined","state_bytes","elect_s"}; an end record {"event":"end",
 * "iter","param_hash","nodes"}. A restarted node appends to its file. Lines that are none of
 * these (or cut short) are skipped. The measures and their exact definitions are em_result's.
 */
#ifndef HR_ELASTIC_METRICS_H
#define HR_ELASTIC_METRICS_H

#define EM_MAX_NODES 16

/* One iteration record. */
typedef struct {
    long iter;                /* the iteration computed, 0-based */
    long epoch;               /* data epoch */
    double loss;              /* training loss of the global batch */
    double t;                 /* t_unix when it was written */
    long view;                /* view epoch it was computed in */
    double bsum;              /* sum of "b" over the ranks */
    int nb;                   /* ranks in "b" */
    double b[EM_MAX_NODES];   /* batch of each rank */
    long nodes[EM_MAX_NODES]; /* node id of each rank */
} em_iter;

/* One view record. */
typedef struct {
    long epoch;               /* view epoch */
    long iter;                /* next iteration to compute */
    double t;                 /* t_unix */
    double state_bytes;       /* state moved to install it */
    int n;                    /* members */
    long nodes[EM_MAX_NODES]; /* member ids */
    int n_joined;
    long joined[EM_MAX_NODES]; /* ids that joined in this view */
} em_view;

/* Everything one node's file holds. */
typedef struct {
    long id;       /* node id */
    em_iter *it;   /* iteration records in file order */
    long n_it;     /* entries in it */
    em_view *v;    /* view records in file order */
    long n_v;      /* entries in v */
    int has_end;   /* an end record was read (the last one counts) */
    long end_iter; /* its iteration */
    double end_t;  /* its t_unix */
    char hash[32]; /* its param_hash */
    int end_n;     /* members of its view */
    long end_nodes[EM_MAX_NODES];
} em_node;

/* Read `path` as node `id`'s metrics. Returns 0, or -1 when it cannot be opened (n stays
 * empty and safe to free). */
int em_node_load(em_node *n, long id, const char *path);
void em_node_free(em_node *n);

/* The fault the bench caused, and the run's constants. */
typedef struct {
    int kill;         /* 1: SIGKILL, then a new process; 0: SIGSTOP, then SIGCONT */
    long target;      /* id of the node hit */
    double fault_t;   /* t_unix when the signal was sent */
    double restart_t; /* t_unix of the restart (spawn or SIGCONT); 0 for none */
    long B;           /* global batch */
    long ipe;         /* iterations per epoch */
    long iters;       /* iterations the run should end at */
} em_fault;

/* The measures of one run; NAN (or -1 for counts) when the records do not allow one. */
typedef struct {
    double detect_s;          /* fault -> the latest t_unix, over the survivors, of each one's
                               * first view record after the fault that excludes the target */
    double resume_s;          /* fault -> the latest, over the survivors, of each one's first
                               * iteration record in that view */
    double join_s;            /* restart -> the target's first iteration record after it */
    double state_bytes;       /* state_bytes of the view that admitted the target: its own
                               * first view record after the restart, else a member's that
                               * names it in "joined" */
    long samples_missing;     /* B x the iterations of the touched epochs, within [0, final), that
                               * no final member recorded; plus B - sum(b) for a short record */
    long samples_duplicated;  /* B x the extra records of one iteration by one final member in
                               * the touched epochs, plus sum(b) - B for a long record */
    int replicas_identical;   /* every final member's last end record is at the final iteration
                               * and all their param_hash are equal */
    double throughput_before; /* samples/s over the W iterations up to fault_iter */
    double throughput_after;  /* samples/s over the last W iterations (W: a quarter of the run,
                               * at most the iterations between warm-up and the fault, and
                               * between the join plus a settling time and the end; warm-up
                               * and settling are 5% of the run each) */
    double final_loss;        /* loss of the last iteration */
    long fault_iter;          /* one past the last iteration the reference node recorded
                               * before the fault, or -1 */
    long window;              /* W, iterations in each throughput window */
    long final_iter;          /* iteration the run ended at (highest end record), or -1 */
    long touched_from, touched_to; /* iterations [from, to) whose samples were counted */
    long excl_view;                /* epoch of the view that left the target out, or -1 */
    int n_final;                   /* final members */
    long final_nodes[EM_MAX_NODES];
} em_result;

/* Analyse the files of one run (`nodes[0..n)`, every node of the cluster). */
void em_analyse(const em_node *nodes, int n, const em_fault *f, em_result *r);

/* The loss of the last iteration any of the files recorded (the reference run's), or NAN. */
double em_final_loss(const em_node *nodes, int n);

#endif
