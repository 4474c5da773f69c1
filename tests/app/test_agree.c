/*
 * test_agree.c: the text of what must agree between nodes (app_agree_text) holds the wire's
 * keys and no deadline, and is the same when several threads of one process build it at once,
 * as libhetring's nodes may.
 */
#include "cluster/ring_setup.h"
#include "tests/check.h"
#include "tests/conf/two_nodes.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

enum { THREADS = 4, ROUNDS = 3000, CAP = 8192 };

static cfg conf;
static char want[CAP];
static size_t want_len;
static int bad[THREADS];

static void *build(void *arg) {
    int t = (int)(long)arg;
    char got[CAP];
    for (int i = 0; i < ROUNDS; i++) {
        size_t n = app_agree_text(&conf, got, sizeof got);
        if (n != want_len || memcmp(got, want, n) != 0) bad[t]++;
    }
    return NULL;
}

int main(void) {
    char tmp[] = "/tmp/hetring-agree.XXXXXX", err[HR_ERRLEN] = "";
    int fd = mkstemp(tmp);
    CHECK(fd >= 0, "mkstemp");
    close(fd);
    write_file(tmp, two_nodes);
    CHECK(cfg_load(&conf, tmp, err, sizeof err) == HR_OK, "%s", err);
    want_len = app_agree_text(&conf, want, sizeof want);
    CHECK(want_len > 0 && strstr(want, "[cluster]\n") && strstr(want, "security = "),
          "the text: %.*s", (int)want_len, want);
    /* the gradient's wire and the link probe shape what every member sends: they must agree;
     * deadlines are each node's own */
    static const char *const agree[] = {
        "\nwire = ", "\npowersgd_rank = ", "\nwire_auto_gbit = ", "\nlink_probe = "};
    for (int i = 0; i < 4; i++)
        CHECK(want_len > 0 && strstr(want, agree[i]), "'%s' is not compared: %.*s", agree[i] + 1,
              (int)want_len, want);
    CHECK(!strstr(want, "timeout = "), "a deadline is compared: %.*s", (int)want_len, want);
    pthread_t th[THREADS];
    for (long t = 0; t < THREADS; t++)
        CHECK(pthread_create(&th[t], NULL, build, (void *)t) == 0, "thread");
    for (int t = 0; t < THREADS; t++) pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++)
        CHECK(bad[t] == 0, "thread %d built another text %d times of %d", t, bad[t], ROUNDS);
    cfg_free(&conf);
    unlink(tmp);
    return check_exit();
}
