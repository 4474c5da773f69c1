/*
 * test_conf.c: the configuration schema against golden files, overrides and node identity.
 *
 * bad/NAME.ini must fail with exactly the line in bad/NAME.err; good/NAME.ini must load and
 * print exactly good/NAME.out (HETRING_UPDATE_GOLDEN=1 rewrites the .out files). What
 * cfg_print writes reads back as the same configuration (good files, examples), except that an
 * inline psk is redacted and must be refused as such when read back.
 */
#include "conf/cfg.h"
#include "tests/check.h"
#include "tests/conf/two_nodes.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    while (got && (s[got - 1] == '\n' || s[got - 1] == '\r')) s[--got] = 0;
    return s;
}

static int has_suffix(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a > b && strcmp(s + a - b, suf) == 0;
}

/* Call `fn` on each NAME.ini in TEST_DIR/`sub` (the working directory while it runs), with the
 * path of NAME.`ext` beside it; returns how many there were. */
static int each_ini(const char *sub, const char *ext,
                    void (*fn)(const char *ini, const char *gold)) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/%s", TEST_DIR, sub);
    CHECK(chdir(dir) == 0, "chdir %s", dir);
    DIR *d = opendir(".");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!has_suffix(e->d_name, ".ini")) continue;
        char gold[512];
        snprintf(gold, sizeof gold, "%.*s.%s", (int)strlen(e->d_name) - 4, e->d_name, ext);
        fn(e->d_name, gold);
        n++;
    }
    if (d) closedir(d);
    return n;
}

/* `c` as cfg_print writes it, trailing newlines dropped; the caller frees it. */
static char *print_to_string(const cfg *c) {
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    cfg_print(c, m);
    fclose(m);
    while (len && buf[len - 1] == '\n') buf[--len] = 0;
    return buf;
}

static void check_bad_file(const char *ini, const char *errfile) {
    char err[HR_ERRLEN] = "";
    char *want = slurp(errfile);
    CHECK(want != NULL, "%s has no .err golden file", ini);
    cfg c;
    hr_status st = cfg_load(&c, ini, err, sizeof err);
    CHECK(st == HR_ERR_CONFIG, "%s: expected a configuration error, got %d", ini, st);
    CHECK(want && strcmp(err, want) == 0, "%s:\n   got: %s\n  want: %s", ini, err,
          want ? want : "");
    cfg_free(&c); /* must be safe after a failed load */
    free(want);
}

static void test_bad_files(void) {
    int n = each_ini("bad", "err", check_bad_file);
    printf("bad files checked: %d\n", n);
    CHECK(n >= 20, "expected at least 20 bad files, found %d", n);
}

static void check_good_file(const char *ini, const char *outfile) {
    char err[HR_ERRLEN] = "";
    cfg c;
    hr_status st = cfg_load(&c, ini, err, sizeof err);
    CHECK(st == HR_OK, "%s: %s", ini, err);
    if (st != HR_OK) return;
    char *buf = print_to_string(&c);
    if (getenv("HETRING_UPDATE_GOLDEN")) {
        FILE *o = fopen(outfile, "w");
        fprintf(o, "%s\n", buf);
        fclose(o);
    }
    char *want = slurp(outfile);
    CHECK(want && strcmp(buf, want) == 0, "%s: printed config differs from %s:\n%s", ini, outfile,
          buf);
    CHECK(strstr(buf, "<redacted>") || !c.has_psk, "%s: psk not redacted", ini);
    free(want);
    free(buf);
    cfg_free(&c);
}

static void test_good_files(void) {
    int n = each_ini("good", "out", check_good_file);
    CHECK(n >= 2, "expected good files, found %d", n);
}

/* ================================================================ printed configs read back */

static char g_tmp[64];     /* scratch file for the printed configuration */
static char g_tmp_src[64]; /* scratch file for a configuration written here */

/* Whether each key of `c` was given (in the file or by an override) or has its default. */
static void given_keys(const cfg *c, char *out, size_t n) {
    static const char *const keys[] = {
        "name",   "security",   "interval", "smoothing",   "eval_samples", "checkpoint_interval",
        "policy", "iterations", "epochs",   "bucket_bytes"};
    size_t o = 0;
    for (size_t i = 0; i < sizeof keys / sizeof *keys && o < n; i++)
        o += (size_t)snprintf(out + o, n - o, "%s%s ", cfg_key_line(c, -1, keys[i]) ? "+" : "-",
                              keys[i]);
    for (int k = 0; k < c->n_nodes && o < n; k++)
        o += (size_t)snprintf(out + o, n - o, "%sthreads.%d ",
                              cfg_key_line(c, k, "threads") ? "+" : "-", k);
}

/* Load `path`, print it, load the print and print again: the two prints must be equal but for
 * their first line, which names the file, and each key given in one must be given in the other
 * (a key at its default prints as a comment). With an inline psk the print says <redacted>,
 * and reading it back must fail on that line, saying so, rather than load some other key. */
static void check_round_trip(const char *path, const char *unused) {
    (void)unused;
    char err[HR_ERRLEN] = "";
    cfg c, back;
    CHECK(cfg_load(&c, path, err, sizeof err) == HR_OK, "%s: %s", path, err);
    char *first = print_to_string(&c);
    FILE *f = fopen(g_tmp, "w");
    fprintf(f, "%s\n", first);
    fclose(f);
    hr_status st = cfg_load(&back, g_tmp, err, sizeof err);
    if (c.has_psk) {
        CHECK(st == HR_ERR_CONFIG && strstr(err, ": psk: the key was redacted when this "
                                                 "configuration was printed (expected 64 hex"),
              "%s: a printed inline psk read back as %d: %s", path, st, err);
    } else {
        CHECK(st == HR_OK, "%s: its printed form does not read back: %s", path, err);
        char *second = st == HR_OK ? print_to_string(&back) : NULL;
        const char *a = strchr(first, '\n'), *b = second ? strchr(second, '\n') : NULL;
        CHECK(a && b && strcmp(a, b) == 0, "%s: printed twice, differs:\n%s\n----\n%s", path, first,
              second ? second : "");
        free(second);
        char was[512] = "", now[512] = "";
        given_keys(&c, was, sizeof was);
        if (st == HR_OK) given_keys(&back, now, sizeof now);
        CHECK(strcmp(was, now) == 0, "%s: keys given, then read back: %s / %s", path, was, now);
    }
    cfg_free(&back);
    cfg_free(&c);
    free(first);
}

static void test_round_trip(void) {
    int n = each_ini("good", "out", check_round_trip);
    static const char *const examples[] = {"demo.ini", "two-node.ini", "reference.ini"};
    for (int i = 0; i < 3; i++, n++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", EXAMPLES_DIR, examples[i]);
        check_round_trip(path, NULL);
    }
    /* every value type set away from its default: keys, lists, a factor %g would round */
    FILE *f = fopen(g_tmp_src, "w");
    fprintf(f,
            "[cluster]\nkey_file = k{id}.key\n[train]\nseed = 18446744073709551615\n"
            "layers = 4,3,2\nlr = 0.123456789012\n[node.3]\nhost = h3\nport = 9\n"
            "device = cuda:1\npubkey = %s\ninterference = 5:1.23456789,9:2\n",
            "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff");
    fclose(f);
    check_round_trip(g_tmp_src, NULL);
    /* equal prints are not enough if the first print rounded: the values must survive too */
    char err[HR_ERRLEN] = "";
    cfg back;
    CHECK(cfg_load(&back, g_tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(back.n_nodes == 1 && back.nodes[0].interference[0].factor == 1.23456789 &&
              back.lr == 0.123456789012 && back.seed == UINT64_MAX && back.nodes[0].device == 1,
          "values changed in print and read back");
    cfg_free(&back);
    printf("configs printed and read back: %d\n", n + 1);
}

static void test_examples(void) {
    static const char *const files[] = {"demo.ini", "two-node.ini", "reference.ini"};
    for (int i = 0; i < 3; i++) {
        char path[1024], err[HR_ERRLEN] = "";
        snprintf(path, sizeof path, "%s/%s", EXAMPLES_DIR, files[i]);
        cfg c;
        CHECK(cfg_load(&c, path, err, sizeof err) == HR_OK, "%s: %s", files[i], err);
        cfg_free(&c);
    }
    /* reference.ini is generated from the schema and must stay current */
    char path[1024], *buf = NULL;
    size_t len = 0;
    snprintf(path, sizeof path, "%s/reference.ini", EXAMPLES_DIR);
    FILE *m = open_memstream(&buf, &len);
    cfg_print_reference(m);
    fclose(m);
    while (len && buf[len - 1] == '\n') buf[--len] = 0;
    char *want = slurp(path);
    CHECK(want && strcmp(want, buf) == 0,
          "conf/examples/reference.ini is stale: regenerate it with "
          "`hetring config --reference > conf/examples/reference.ini`");
    free(want);
    free(buf);
}

static void test_overrides(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    write_file(tmp, two_nodes);
    /* file beats default */
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(c.lr == 0.2, "file lr: %g", c.lr);
    CHECK(c.momentum == 0.9, "default momentum: %g", c.momentum);
    cfg_free(&c);
    /* environment beats file, --set beats environment */
    setenv("HETRING_TRAIN_LR", "0.3", 1);
    setenv("HETRING_NODE_5_SLOWDOWN", "3", 1);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(c.lr == 0.3, "env lr: %g", c.lr);
    CHECK(c.nodes[1].slowdown == 3, "env node slowdown: %g", c.nodes[1].slowdown);
    CHECK(cfg_set(&c, "train.lr=0.4", err, sizeof err) == HR_OK, "%s", err);
    CHECK(c.lr == 0.4, "--set lr: %g", c.lr);
    CHECK(cfg_set(&c, "node.5.slowdown=2", err, sizeof err) == HR_OK, "%s", err);
    CHECK(c.nodes[1].slowdown == 2, "--set node slowdown: %g", c.nodes[1].slowdown);
    CHECK(cfg_set(&c, "train.nope=1", err, sizeof err) == HR_ERR_CONFIG, "unknown --set key");
    CHECK(strstr(err, "unknown key 'nope' in [train] (expected one of model, layers,"), "%s", err);
    CHECK(cfg_set(&c, "node.5.prt=1", err, sizeof err) == HR_ERR_CONFIG, "unknown node key");
    CHECK(strstr(err, "unknown key 'prt' in [node.ID] (expected one of host, port,"), "%s", err);
    /* a section that does not exist is named as one (it was "unknown key 'lr' in [trian]") */
    CHECK(cfg_set(&c, "trian.lr=1", err, sizeof err) == HR_ERR_CONFIG, "unknown --set section");
    CHECK(strcmp(err, "--set trian.lr=1: unknown section 'trian' (expected cluster, train, "
                      "controller or node.ID)") == 0,
          "%s", err);
    CHECK(cfg_set(&c, "node.9.slowdown=2", err, sizeof err) == HR_ERR_CONFIG, "unknown node");
    cfg_free(&c);
    /* a malformed override names its variable */
    setenv("HETRING_TRAIN_LR", "abc", 1);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "malformed env accepted");
    CHECK(strcmp(err, "environment HETRING_TRAIN_LR: malformed number 'abc' (expected a number "
                      "in [0, 100])") == 0,
          "got: %s", err);
    unsetenv("HETRING_TRAIN_LR");
    /* a misspelt override is an error, not silently ignored */
    setenv("HETRING_TRAIN_LRATE", "1", 1);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "unknown env accepted");
    CHECK(strstr(err, "HETRING_TRAIN_LRATE: unknown setting"), "got: %s", err);
    unsetenv("HETRING_TRAIN_LRATE");
    unsetenv("HETRING_NODE_5_SLOWDOWN");
}

/* Keys given are keys used, whoever gave them: HETRING_CLUSTER_PSK beside the file's psk_file,
 * and security = none from --set over a file with keys, are refused at the file's key. */
static void test_keys_used(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    write_file(tmp, "[cluster]\npsk_file = c.psk\n[node.0]\nhost = 127.0.0.1\nport = 7001\n");
    setenv("HETRING_CLUSTER_PSK",
           "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "env psk beside psk_file accepted");
    CHECK(strstr(err, ":2: psk_file and psk are both given") && strstr(err, "HETRING_CLUSTER_PSK"),
          "got: %s", err);
    unsetenv("HETRING_CLUSTER_PSK");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    cfg_free(&c);
    cfg_init(&c);
    CHECK(cfg_parse_file(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_set(&c, "cluster.security=none", err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_validate(&c, err, sizeof err) == HR_ERR_CONFIG, "--set security=none with keys");
    CHECK(strstr(err, ":2: psk_file is configured, but security = none"), "got: %s", err);
    cfg_free(&c);
}

/* A value an override set is blamed on that override, never on a line of the file that does
 * not hold it: "--set train.global_batch: ...", "environment HETRING_TRAIN_GLOBAL_BATCH: ...",
 * "--set node.5.pubkey: ..."; a value of the file keeps its FILE:LINE. */
static int starts_with(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void test_override_blame(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    write_file(tmp, two_nodes); /* global_batch and min_batch (1) at their defaults */
    cfg_init(&c);
    CHECK(cfg_parse_file(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_set(&c, "train.global_batch=1", err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_validate(&c, err, sizeof err) == HR_ERR_CONFIG, "global_batch 1 accepted");
    CHECK(starts_with(err, "--set train.global_batch: global_batch = 1 is smaller than 2 nodes"),
          "got: %s", err);
    cfg_free(&c);
    setenv("HETRING_TRAIN_GLOBAL_BATCH", "1", 1);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "env global_batch 1 accepted");
    CHECK(starts_with(err, "environment HETRING_TRAIN_GLOBAL_BATCH: global_batch = 1 is smaller"),
          "got: %s", err);
    unsetenv("HETRING_TRAIN_GLOBAL_BATCH");
    cfg_init(&c);
    CHECK(cfg_parse_file(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_set(&c,
                  "node.5.pubkey="
                  "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
                  err, sizeof err) == HR_OK,
          "%s", err);
    CHECK(cfg_validate(&c, err, sizeof err) == HR_ERR_CONFIG, "pubkey with security none");
    CHECK(starts_with(err, "--set node.5.pubkey: [node.5] pubkey is configured"), "got: %s", err);
    cfg_free(&c);
    write_file(tmp, "[cluster]\nsecurity = none\n[train]\nglobal_batch = 1\n"
                    "[node.0]\nhost = 127.0.0.1\nport = 7001\n[node.1]\nhost = 127.0.0.1\n"
                    "port = 7002\n");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "file global_batch 1 accepted");
    CHECK(starts_with(err, tmp) && strstr(err, ":4: global_batch = 1 is smaller"), "got: %s", err);
}

/* A [controller] key that the policy does not read, given another value than its default, is
 * refused wherever it was given, naming the policies that read it; at its default it is not
 * (reference.ini gives every key), and cfg_policy_unused lists what cfg_reset puts back, after
 * which the configuration runs under that policy. */
static void test_policy_keys(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    write_file(tmp, "[cluster]\nsecurity = none\n[controller]\npolicy = pid\nki = 0.3\n"
                    "kd = 0\n[node.0]\nhost = 127.0.0.1\nport = 7001\n");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "pid's own ki refused: %s", err);
    cfg_free(&c);
    cfg_init(&c);
    CHECK(cfg_parse_file(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_set(&c, "controller.policy=model", err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_validate(&c, err, sizeof err) == HR_ERR_CONFIG, "ki = 0.3 under model accepted");
    CHECK(starts_with(err, tmp) && strstr(err, ":5: ki is set, but policy = model does not use it "
                                               "(expected policy = pid, or no ki)"),
          "got: %s", err);
    const char *keys[8];
    CHECK(cfg_policy_unused(&c, CFG_POLICY_MODEL, keys, 8) == 1 && strcmp(keys[0], "ki") == 0,
          "model's unused keys: not just ki (kd = 0 is its default)");
    CHECK(cfg_reset(&c, "ki") == HR_OK && c.ki == 0.05 && cfg_key_line(&c, -1, "ki") == 0,
          "ki not put back: %g, line %d", c.ki, cfg_key_line(&c, -1, "ki"));
    CHECK(strcmp(cfg_key_default("ki"), "0.05") == 0 && cfg_reset(&c, "nope") == HR_ERR_CONFIG &&
              cfg_reset(&c, "psk") == HR_ERR_CONFIG,
          "cfg_key_default, cfg_reset of no key or of a key without a default");
    CHECK(cfg_validate(&c, err, sizeof err) == HR_OK, "after cfg_reset: %s", err);
    cfg_free(&c);
    /* an override is named as the place; static reads no key but its bounds */
    cfg_init(&c);
    CHECK(cfg_parse_file(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_set(&c, "controller.policy=static", err, sizeof err) == HR_OK &&
              cfg_set(&c, "controller.ki=0.05", err, sizeof err) == HR_OK &&
              cfg_set(&c, "controller.rate_limit=0.5", err, sizeof err) == HR_OK &&
              cfg_set(&c, "controller.min_batch=2", err, sizeof err) == HR_OK,
          "%s", err);
    CHECK(cfg_validate(&c, err, sizeof err) == HR_ERR_CONFIG, "rate_limit under static accepted");
    CHECK(strcmp(err, "--set controller.rate_limit: rate_limit is set, but policy = static does "
                      "not use it (expected policy = proportional, pid, model or epoch, or no "
                      "rate_limit)") == 0,
          "got: %s", err);
    cfg_free(&c);
    /* a node's capacity under static: refused naming the node and where it was set; at its
     * default it is not; cfg_capacity_unused lists it and cfg_reset_node puts it back */
    cfg_init(&c);
    CHECK(cfg_parse_file(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_set(&c, "controller.policy=static", err, sizeof err) == HR_OK &&
              cfg_set(&c, "controller.ki=0.05", err, sizeof err) == HR_OK &&
              cfg_set(&c, "node.0.capacity=1", err, sizeof err) == HR_OK,
          "%s", err);
    CHECK(cfg_validate(&c, err, sizeof err) == HR_OK, "capacity = 1 under static: %s", err);
    int nodes[4];
    CHECK(cfg_set(&c, "node.0.capacity=2.5", err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_capacity_unused(&c, CFG_POLICY_STATIC, nodes, 4) == 1 && nodes[0] == 0 &&
              cfg_capacity_unused(&c, CFG_POLICY_PID, nodes, 4) == 0,
          "cfg_capacity_unused: not node 0 alone under static, none under pid");
    CHECK(cfg_validate(&c, err, sizeof err) == HR_ERR_CONFIG, "capacity under static accepted");
    CHECK(strcmp(err, "--set node.0.capacity: [node.0] capacity is set, but policy = static does "
                      "not use it: every node gets global_batch / nodes (expected policy = "
                      "proportional, pid, model or epoch, or no capacity)") == 0,
          "got: %s", err);
    CHECK(strcmp(cfg_key_default("capacity"), "1") == 0 &&
              cfg_reset_node(&c, 0, "capacity") == HR_OK && c.nodes[0].capacity == 1 &&
              cfg_key_line(&c, 0, "capacity") == 0 && cfg_reset_node(&c, 1, "capacity") != HR_OK &&
              cfg_reset_node(&c, 0, "host") != HR_OK,
          "cfg_reset_node: capacity %g, line %d", c.nodes[0].capacity,
          cfg_key_line(&c, 0, "capacity"));
    CHECK(cfg_validate(&c, err, sizeof err) == HR_OK, "after cfg_reset_node: %s", err);
    cfg_free(&c);
    setenv("HETRING_NODE_0_CAPACITY", "4", 1);
    cfg_init(&c);
    CHECK(cfg_parse_file(&c, tmp, err, sizeof err) == HR_OK &&
              cfg_apply_env(&c, err, sizeof err) == HR_OK,
          "%s", err);
    CHECK(cfg_set(&c, "controller.policy=static", err, sizeof err) == HR_OK &&
              cfg_set(&c, "controller.ki=0.05", err, sizeof err) == HR_OK,
          "%s", err);
    CHECK(cfg_validate(&c, err, sizeof err) == HR_ERR_CONFIG &&
              starts_with(err, "environment HETRING_NODE_0_CAPACITY: [node.0] capacity is set"),
          "got: %s", err);
    unsetenv("HETRING_NODE_0_CAPACITY");
    cfg_free(&c);
    /* reference.ini, which gives every key at its default, runs under every policy */
    char path[1024];
    snprintf(path, sizeof path, "%s/reference.ini", EXAMPLES_DIR);
    for (int p = CFG_POLICY_STATIC; p <= CFG_POLICY_EPOCH; p++) {
        char set[64];
        cfg_init(&c);
        snprintf(set, sizeof set, "controller.policy=%s", cfg_policy_name(p));
        CHECK(cfg_parse_file(&c, path, err, sizeof err) == HR_OK &&
                  cfg_set(&c, set, err, sizeof err) == HR_OK &&
                  cfg_validate(&c, err, sizeof err) == HR_OK,
              "reference.ini with %s: %s", set, err);
        cfg_free(&c);
    }
    /* what each policy reads (ctrl/ctrl.c, calibrate: cluster/cluster_setup.c) */
    static const struct {
        int policy;
        const char *key;
        int uses;
    } uses[] = {{CFG_POLICY_STATIC, "gain", 0},      {CFG_POLICY_STATIC, "calibrate", 0},
                {CFG_POLICY_STATIC, "min_batch", 1}, {CFG_POLICY_STATIC, "max_batch", 1},
                {CFG_POLICY_EPOCH, "interval", 0},   {CFG_POLICY_EPOCH, "smoothing", 0},
                {CFG_POLICY_EPOCH, "deadband", 1},   {CFG_POLICY_EPOCH, "rate_limit", 1},
                {CFG_POLICY_PID, "ki", 1},           {CFG_POLICY_PID, "forgetting", 0},
                {CFG_POLICY_MODEL, "kd", 0},         {CFG_POLICY_MODEL, "forgetting", 1},
                {CFG_POLICY_PROPORTIONAL, "ki", 0},  {CFG_POLICY_PROPORTIONAL, "interval", 1},
                {CFG_POLICY_PROPORTIONAL, "lr", 1},  {CFG_POLICY_STATIC, "capacity", 0},
                {CFG_POLICY_EPOCH, "capacity", 1},   {CFG_POLICY_MODEL, "capacity", 1}};
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++)
        CHECK(cfg_policy_uses(uses[i].policy, uses[i].key) == uses[i].uses,
              "cfg_policy_uses(%s, %s) != %d", cfg_policy_name(uses[i].policy), uses[i].key,
              uses[i].uses);
}

/* Values are read whole and as written: a NUL byte is refused (it would cut the value), numbers
 * are decimal (no octal, no hex), and long lines are read (a line over the limit is refused
 * with its file:line); the file is never waited on, nor a directory read. */
static void test_input_holes(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    const char *head = "[cluster]\nsecurity = none\n[node.0]\nhost = 127.0.0.1\nport = 7001\n"
                       "[train]\n";
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%siterations = 5", head);
    fputc(0, f);
    fprintf(f, "99999\n");
    fclose(f);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "a NUL byte in a value accepted");
    CHECK(strstr(err, tmp) && strstr(err, ":7: ") && strstr(err, "NUL byte"), "got: %s", err);
    cfg_free(&c);

    f = fopen(tmp, "w");
    fprintf(f, "%sseed = 010\n", head);
    fclose(f);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(c.seed == 10, "seed = 010 reads as %llu, not 10", (unsigned long long)c.seed);
    cfg_free(&c);
    f = fopen(tmp, "w");
    fprintf(f, "%sseed = 0x10\n", head);
    fclose(f);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "seed = 0x10 accepted");
    CHECK(strstr(err, ":7: seed: malformed integer '0x10'"), "got: %s", err);
    cfg_free(&c);

    f = fopen(tmp, "w");
    fprintf(f, "%s; %01000d\nseed = 3\n", head, 0);
    fclose(f);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "a 1000-character line: %s", err);
    CHECK(c.seed == 3, "seed after a long line: %llu", (unsigned long long)c.seed);
    cfg_free(&c);
    f = fopen(tmp, "w");
    fprintf(f, "%s; %0100000d\nseed = 3\n", head, 0);
    fclose(f);
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_ERR_CONFIG, "a 100000-character line accepted");
    CHECK(strstr(err, ":7: line is too long (expected at most "), "got: %s", err);
    cfg_free(&c);

    /* a FIFO that no one writes is read as empty, not waited on for ever in open (a 5 s alarm
     * ends the test if it is); a directory is refused by what it is */
    char fifo[300];
    snprintf(fifo, sizeof fifo, "%s.fifo", tmp);
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo %s", fifo);
    alarm(5);
    CHECK(cfg_load(&c, fifo, err, sizeof err) == HR_ERR_CONFIG, "a FIFO with no writer: %s", err);
    alarm(0);
    CHECK(strstr(err, "the peer list is empty"), "got: %s", err);
    cfg_free(&c);
    unlink(fifo);
    CHECK(cfg_load(&c, "/tmp", err, sizeof err) == HR_ERR_IO, "a directory as the INI file");
    CHECK(strstr(err, "/tmp: cannot open: Is a directory"), "got: %s", err);
    cfg_free(&c);
}

/* key_file, psk_file, data_dir and checkpoint written relative are relative to the INI file's
 * directory, whatever the working directory; absolute paths stay; {id} survives; overrides from
 * --set and the environment are relative to the working directory. */
static void test_paths(void) {
    char dir[] = "/tmp/hetring-test-paths-XXXXXX", sub[128], ini[192], want[256], err[HR_ERRLEN];
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    snprintf(sub, sizeof sub, "%s/conf", dir);
    CHECK(mkdir(sub, 0700) == 0, "mkdir %s", sub);
    snprintf(ini, sizeof ini, "%s/c.ini", sub);
    write_file(ini, "[cluster]\nsecurity = encrypt\nkey_file = keys/node{id}.key\n"
                    "psk_file = ./../c.psk\n[train]\ndataset = mnist\ndata_dir = data\n"
                    "checkpoint = /abs/run.ckpt\n"
                    "[node.0]\nhost = 127.0.0.1\nport = 7001\npubkey = "
                    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n");
    CHECK(chdir(dir) == 0, "chdir %s", dir); /* the file is conf/c.ini from here */
    cfg c;
    CHECK(cfg_load(&c, "conf/c.ini", err, sizeof err) == HR_OK, "%s", err);
    snprintf(want, sizeof want, "%s/keys/node{id}.key", sub);
    CHECK(strcmp(c.key_file, want) == 0, "key_file: %s, want %s", c.key_file, want);
    snprintf(want, sizeof want, "%s/../c.psk", sub);
    CHECK(strcmp(c.psk_file, want) == 0, "psk_file: %s, want %s", c.psk_file, want);
    snprintf(want, sizeof want, "%s/data", sub);
    CHECK(strcmp(c.data_dir, want) == 0, "data_dir: %s, want %s", c.data_dir, want);
    CHECK(strcmp(c.checkpoint, "/abs/run.ckpt") == 0, "checkpoint: %s", c.checkpoint);
    /* overrides: the working directory */
    CHECK(cfg_set(&c, "train.checkpoint=out/r.ckpt", err, sizeof err) == HR_OK, "%s", err);
    snprintf(want, sizeof want, "%s/out/r.ckpt", dir);
    CHECK(strcmp(c.checkpoint, want) == 0, "--set checkpoint: %s, want %s", c.checkpoint, want);
    cfg_free(&c);
    setenv("HETRING_TRAIN_DATA_DIR", "d2", 1);
    CHECK(cfg_load(&c, "conf/c.ini", err, sizeof err) == HR_OK, "%s", err);
    snprintf(want, sizeof want, "%s/d2", dir);
    CHECK(strcmp(c.data_dir, want) == 0, "env data_dir: %s, want %s", c.data_dir, want);
    unsetenv("HETRING_TRAIN_DATA_DIR");
    cfg_free(&c);
    /* the same file from its own directory and from / means the same files */
    CHECK(chdir("/") == 0, "chdir /");
    CHECK(cfg_load(&c, ini, err, sizeof err) == HR_OK, "%s", err);
    snprintf(want, sizeof want, "%s/keys/node{id}.key", sub);
    CHECK(strcmp(c.key_file, want) == 0, "key_file from /: %s, want %s", c.key_file, want);
    cfg_free(&c);
    unlink(ini);
    rmdir(sub);
    rmdir(dir);
}

int main(void) {
    char tmp[] = "/tmp/hetring-test-conf-XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    test_bad_files();
    test_good_files();
    test_examples();
    snprintf(g_tmp, sizeof g_tmp, "%s.ini", tmp);
    snprintf(g_tmp_src, sizeof g_tmp_src, "%s.src.ini", tmp);
    test_round_trip();
    unlink(g_tmp);
    unlink(g_tmp_src);
    test_overrides(tmp);
    test_keys_used(tmp);
    test_override_blame(tmp);
    test_policy_keys(tmp);
    test_input_holes(tmp);
    unlink(tmp);
    test_paths();
    return check_exit();
}
