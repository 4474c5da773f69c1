/*
 * test_ring_setup.c: the application's cfg -> ring_config conversion (cluster/ring_setup.h).
 *
 * Checks that the ring gets the INI's members, timeouts and key sources, with "{id}" expanded
 * in key_file and an unresolved `auto` security mode turned into encrypt; that a bad node
 * index and an expansion that does not fit are errors; that app_expand_id reports a cut; and
 * that ring_config_wipe leaves no PSK behind.
 */
#include "cluster/ring_setup.h"
#include "conf/cfg.h"
#include "ring/ring_config.h"
#include "tests/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int is_zero(const uint8_t *p, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (p[i]) return 0;
    return 1;
}

static void test_expand(void) {
    char out[32];
    CHECK(app_expand_id(out, sizeof out, "m-{id}-{id}.jsonl", 12) == 0, "fits");
    CHECK(strcmp(out, "m-12-12.jsonl") == 0, "expanded to '%s'", out);
    CHECK(app_expand_id(out, sizeof out, "no id", 3) == 0 && strcmp(out, "no id") == 0,
          "no {id}: '%s'", out);
    CHECK(app_expand_id(out, 6, "m-{id}-x", 12345) == -1, "a cut is reported");
    CHECK(strlen(out) == 5 && strncmp(out, "m-123", 5) == 0, "cut to '%s'", out);
    CHECK(app_expand_id(out, 5, "abcd", 1) == 0 && strcmp(out, "abcd") == 0, "exact fit '%s'", out);
}

static void test_convert(const char *dir) {
    char path[256], err[HR_ERRLEN] = "";
    snprintf(path, sizeof path, "%s/c.ini", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    fprintf(f,
            "[cluster]\nname = setup-test\nconnect_timeout = 7\ntimeout = 3\n"
            "segment_bytes = 4096\nkey_file = %s/node{id}.key\n"
            "psk = %s\n[train]\niterations = 1\n"
            "[node.4]\nhost = 127.0.0.1\nport = 9004\n"
            "[node.9]\nhost = 127.0.0.2\nport = 9009\n",
            dir, "0101010101010101010101010101010101010101010101010101010101010101");
    fclose(f);
    cfg c;
    cfg_init(&c);
    CHECK(cfg_load(&c, path, err, sizeof err) == HR_OK, "config: %s", err);
    if (c.n_nodes != 2) {
        cfg_free(&c);
        return;
    }
    ring_config *rc = calloc(1, sizeof *rc); /* 48 KiB: off the stack */
    CHECK(app_ring_config(&c, 1, rc, err, sizeof err) == HR_OK, "convert: %s", err);
    CHECK(strcmp(rc->name, "setup-test") == 0, "name '%s'", rc->name);
    CHECK(rc->security == RING_SEC_ENCRYPT, "security %d", rc->security);
    CHECK(rc->self_id == 9, "self id %ld", rc->self_id);
    CHECK(rc->n_members == 2 && rc->members[0].id == 4 && rc->members[1].id == 9, "members");
    CHECK(strcmp(rc->members[1].host, "127.0.0.2") == 0 && rc->members[1].port == 9009,
          "node 9 at %s:%ld", rc->members[1].host, rc->members[1].port);
    CHECK(rc->connect_timeout == 7 && rc->timeout == 3 && rc->segment_bytes == 4096,
          "timeouts and segment");
    char want[300];
    snprintf(want, sizeof want, "%s/node9.key", dir);
    CHECK(strcmp(rc->key_file, want) == 0, "key_file '%s', want '%s'", rc->key_file, want);
    CHECK(rc->has_psk && rc->psk[0] == 1 && rc->psk[31] == 1, "inline psk copied");
    CHECK(strcmp(rc->label, path) == 0, "label '%s'", rc->label);
    ring_config_wipe(rc);
    CHECK(!rc->has_psk && is_zero(rc->psk, sizeof rc->psk), "psk wiped");

    c.security = CFG_SEC_AUTO; /* a cfg built in code, never validated (as the bench does) */
    CHECK(app_ring_config(&c, 0, rc, err, sizeof err) == HR_OK, "convert: %s", err);
    CHECK(rc->security == RING_SEC_ENCRYPT, "auto gives encrypt, not %d", rc->security);
    c.security = CFG_SEC_NONE;
    CHECK(app_ring_config(&c, 0, rc, err, sizeof err) == HR_OK && rc->security == RING_SEC_NONE,
          "none stays none");

    CHECK(app_ring_config(&c, 2, rc, err, sizeof err) == HR_ERR_INVAL, "index 2 of 2 nodes");
    CHECK(strstr(err, "out of range") != NULL, "message '%s'", err);

    memset(c.key_file, 'k', sizeof c.key_file - 5);
    memcpy(c.key_file + sizeof c.key_file - 5, "{id}", 5); /* 511 chars; 9 makes 508: fits */
    CHECK(app_ring_config(&c, 1, rc, err, sizeof err) == HR_OK, "convert: %s", err);
    memcpy(c.key_file + sizeof c.key_file - 9, "{id}{id}", 9); /* 511 chars -> 511 - 8 + 2 */
    CHECK(app_ring_config(&c, 1, rc, err, sizeof err) == HR_OK, "convert: %s", err);
    c.nodes[1].id = 123456789; /* "{id}{id}" grows by 10 characters: cut */
    CHECK(app_ring_config(&c, 1, rc, err, sizeof err) == HR_ERR_CONFIG, "a cut key_file");
    CHECK(strstr(err, "key_file") != NULL && strstr(err, path) != NULL, "message '%s'", err);
    ring_config_wipe(rc);
    free(rc);
    cfg_free(&c);
}

int main(void) {
    char dir[] = "/tmp/hr-rs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_expand();
    test_convert(dir);
    char path[64];
    snprintf(path, sizeof path, "%s/c.ini", dir);
    unlink(path);
    rmdir(dir);
    return check_exit();
}
