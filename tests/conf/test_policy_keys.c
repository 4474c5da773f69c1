/*
 * test_policy_keys.c: conf's table of which [controller] keys each policy reads
 * (cfg_policy_uses) against what the controllers do (ctrl/ctrl.c). Every policy runs the same
 * four nodes (speeds 1 : 1.5 : 2 : 4, 5% deterministic timing noise, node 1 three times slower
 * from iteration 120, an epoch every 30 iterations) with every key at its default, then with
 * one key moved: a key the table says the policy does not read must leave every split as it
 * was (else conf refuses a setting that works), and one it says the policy reads must change
 * some split (else conf accepts a setting that is then ignored). [node] capacity, the hints a
 * first split starts from, is checked the same way: hints 1 : 2 : 3 : 4 against none. calibrate
 * is not the
 * controller's (cluster/cluster_setup.c drops it for static) and min_batch and max_batch bound
 * every policy, so neither is simulated here.
 */
#include "cluster/trainer_setup.h"
#include "conf/cfg.h"
#include "ctrl/ctrl.h"
#include "tests/check.h"

#include <math.h>
#include <string.h>

enum { N = 4, ITERS = 240, EPOCH_LEN = 30 };
#define B 256

/* Every split of a run under `policy` with `set` ("controller.gain=0.4", or NULL) and the
 * capacity hints `cap` (NULL: every node's default) into splits[ITERS][N]; returns 0, or -1
 * when the controller refused something. */
static int run(int policy, const char *set, const double *cap, long splits[ITERS][N]) {
    static const double speed[N] = {1e-3, 1.5e-3, 2e-3, 4e-3}; /* s per sample */
    char err[HR_ERRLEN], pol[64];
    cfg c;
    cfg_init(&c);
    snprintf(pol, sizeof pol, "controller.policy=%s", cfg_policy_name(policy));
    int bad = cfg_set(&c, pol, err, sizeof err) != HR_OK ||
              (set && cfg_set(&c, set, err, sizeof err) != HR_OK);
    CHECK(!bad, "%s", err);
    ctrl_config g;
    app_ctrl_config(&c, &g); /* as a node makes it from its file */
    cfg_free(&c);
    ctrl ct;
    long b[N];
    if (bad || ctrl_init(&ct, &g, N, B, cap, b) != HR_OK) return -1;
    int rc = 0;
    for (long it = 0; it < ITERS && rc == 0; it++) {
        ctrl_stat st[N];
        for (int k = 0; k < N; k++) {
            double slow = k == 1 && it >= ITERS / 2 ? 3 : 1;
            double noise = 0.05 * sin(12.9898 * (double)(it * N + k + 1)); /* in [-5%, 5%] */
            st[k] =
                (ctrl_stat){.t = (2e-3 + (double)b[k] * speed[k] * slow) * (1 + noise), .b = b[k]};
        }
        int changed;
        if (ctrl_observe(&ct, it, st) != HR_OK ||
            ctrl_decide(&ct, it, (it + 1) % EPOCH_LEN == 0, b, &changed) != HR_OK)
            rc = -1;
        memcpy(splits[it], b, sizeof b);
    }
    ctrl_free(&ct);
    return rc;
}

int main(void) {
    /* each key of the controller moved well away from its default */
    static const char *const moved[] = {"controller.interval=1",     "controller.deadband=0.95",
                                        "controller.gain=0.4",       "controller.ki=1",
                                        "controller.kd=1",           "controller.smoothing=1",
                                        "controller.rate_limit=0.1", "controller.forgetting=0.5"};
    static long base[ITERS][N], other[ITERS][N];
    int checked = 0;
    for (int p = CFG_POLICY_STATIC; p <= CFG_POLICY_EPOCH; p++) {
        const char *name = cfg_policy_name(p);
        CHECK(run(p, NULL, NULL, base) == 0, "%s with the defaults: refused", name);
        for (size_t i = 0; i < sizeof moved / sizeof *moved; i++) {
            char key[32];
            snprintf(key, sizeof key, "%.*s", (int)strcspn(moved[i] + 11, "="), moved[i] + 11);
            CHECK(run(p, moved[i], NULL, other) == 0, "%s with %s: refused", name, moved[i]);
            int same = memcmp(base, other, sizeof base) == 0, uses = cfg_policy_uses(p, key);
            CHECK(same != uses, "%s: %s %s the splits, but cfg_policy_uses says it is %s", name,
                  moved[i], same ? "changes none of" : "changes", uses ? "read" : "not read");
            checked++;
        }
        static const double cap[N] = {1, 2, 3, 4};
        CHECK(run(p, NULL, cap, other) == 0, "%s with capacity hints: refused", name);
        int same = memcmp(base, other, sizeof base) == 0, uses = cfg_policy_uses(p, "capacity");
        CHECK(same != uses, "%s: capacity 1:2:3:4 %s the splits, but cfg_policy_uses says it is %s",
              name, same ? "changes none of" : "changes", uses ? "read" : "not read");
        checked++;
    }
    printf("policy and key pairs checked: %d\n", checked);
    return check_exit();
}
