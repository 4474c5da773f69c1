/*
 * test_conf.c: the configuration schema against golden files, overrides and node identity.
 *
 * bad/NAME.ini must fail with exactly the line in bad/NAME.err; good/NAME.ini must load and
 * print exactly good/NAME.out (HETRING_UPDATE_GOLDEN=1 rewrites the .out files).
 */
#include "../check.h"
#include "cfg.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
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

static void test_bad_files(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/bad", TEST_DIR);
    CHECK(chdir(dir) == 0, "chdir %s", dir);
    DIR *d = opendir(".");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!has_suffix(e->d_name, ".ini")) continue;
        char errfile[512], err[HR_ERRLEN] = "";
        snprintf(errfile, sizeof errfile, "%.*s.err", (int)strlen(e->d_name) - 4, e->d_name);
        char *want = slurp(errfile);
        CHECK(want != NULL, "%s has no .err golden file", e->d_name);
        cfg c;
        hr_status st = cfg_load(&c, e->d_name, err, sizeof err);
        CHECK(st == HR_ERR_CONFIG, "%s: expected a configuration error, got %d", e->d_name, st);
        CHECK(want && strcmp(err, want) == 0, "%s:\n   got: %s\n  want: %s", e->d_name, err,
              want ? want : "");
        cfg_free(&c); /* must be safe after a failed load */
        free(want);
        n++;
    }
    if (d) closedir(d);
    printf("bad files checked: %d\n", n);
    CHECK(n >= 20, "expected at least 20 bad files, found %d", n);
}

static void test_good_files(void) {
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/good", TEST_DIR);
    CHECK(chdir(dir) == 0, "chdir %s", dir);
    DIR *d = opendir(".");
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!has_suffix(e->d_name, ".ini")) continue;
        char outfile[512], err[HR_ERRLEN] = "";
        snprintf(outfile, sizeof outfile, "%.*s.out", (int)strlen(e->d_name) - 4, e->d_name);
        cfg c;
        hr_status st = cfg_load(&c, e->d_name, err, sizeof err);
        CHECK(st == HR_OK, "%s: %s", e->d_name, err);
        if (st != HR_OK) continue;
        char *buf = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&buf, &len);
        cfg_print(&c, m);
        fclose(m);
        while (len && buf[len - 1] == '\n') buf[--len] = 0;
        if (getenv("HETRING_UPDATE_GOLDEN")) {
            FILE *o = fopen(outfile, "w");
            fprintf(o, "%s\n", buf);
            fclose(o);
        }
        char *want = slurp(outfile);
        CHECK(want && strcmp(buf, want) == 0, "%s: printed config differs from %s:\n%s", e->d_name,
              outfile, buf);
        CHECK(strstr(buf, "<redacted>") || !c.has_psk, "%s: psk not redacted", e->d_name);
        free(want);
        free(buf);
        cfg_free(&c);
        n++;
    }
    if (d) closedir(d);
    CHECK(n >= 2, "expected good files, found %d", n);
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

static const char *two_nodes = "[cluster]\nsecurity = none\n[train]\nlr = 0.2\n"
                               "[node.0]\nhost = 127.0.0.1\nport = 7001\n"
                               "[node.5]\nhost = 192.0.2.1\nport = 7002\n";

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
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
    CHECK(strstr(err, "unknown key 'nope'"), "%s", err);
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

static void test_factor(const char *tmp) {
    char err[HR_ERRLEN] = "";
    cfg c;
    write_file(tmp, "[cluster]\nsecurity = none\n[node.0]\nhost = 127.0.0.1\nport = 7001\n"
                    "slowdown = 2\ninterference = 10:4, 20:1\n");
    CHECK(cfg_load(&c, tmp, err, sizeof err) == HR_OK, "%s", err);
    CHECK(cfg_node_factor(&c, 0, 0) == 2, "before interference");
    CHECK(cfg_node_factor(&c, 0, 10) == 4, "during interference");
    CHECK(cfg_node_factor(&c, 0, 25) == 1, "after interference");
    cfg_free(&c);
}

int main(void) {
    char tmp[] = "/tmp/hetring-test-conf-XXXXXX";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    test_bad_files();
    test_good_files();
    test_examples();
    test_overrides(tmp);
    test_factor(tmp);
    unlink(tmp);
    return check_exit();
}
