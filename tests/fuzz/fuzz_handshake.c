/*
 * fuzz_handshake.c: every handshake message (sec.h), read by a real sec_handshake.
 *
 * The real node (node 0 of a two-node cluster "fuzz") runs sec_handshake on one end of a
 * socketpair; the input is everything the peer (node 1) says, written to the other end in one
 * piece and followed by end-of-file, so the handshake ends at once and never waits for its
 * deadline (FUZZ_WAIT_S, fuzz_ring.h, which only a hang would reach). Input: one selector byte,
 * then the peer's bytes. Selector bits: 0: node 0 is the initiator (else the responder);
 * 1-2: mode, 0 none, 1 auth (a PSK), 2 encrypt (pinned identity keys), 3 encrypt with both;
 * 3: the responder also accepts lobby hellos, as the ring's gate does.
 *
 * The peer's proof cannot verify (every handshake has fresh ephemeral keys), so in the secure
 * modes the fuzzer reaches the hello checks, the message framing and the refusal of a bad
 * proof; in mode none it reaches a complete handshake.
 *
 * Seeds (corpus/handshake) are honest handshakes, recorded by running node 1's real
 * sec_handshake against node 0's through a copying relay: FUZZ_RECORD=DIR fuzz_handshake
 * writes them to DIR.
 */
#include "base/hr_log.h"
#include "ring/sec.h"
#include "ring/tcp.h"
#include "tests/fuzz/fuzz.h"
#include "tests/fuzz/fuzz_ring.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define SEG      65536u
#define MAX_PEER 16384 /* a socketpair buffers this much without a reader */

static ring_config g_rc[4][2]; /* [mode variant][node] */
static sec_keys g_keys[4][2];
static sec_chan *g_ch;

static void setup(void) {
    if (sodium_init() < 0) abort();
    uint8_t seed[2][32], pk[2][32], psk[32];
    for (int i = 0; i < 32; i++) seed[0][i] = (uint8_t)i, seed[1][i] = (uint8_t)(100 + i);
    memset(psk, 0x5a, sizeof psk);
    for (int v = 0; v < 4; v++)
        for (int n = 0; n < 2; n++) {
            ring_config *rc = &g_rc[v][n];
            sec_keys *k = &g_keys[v][n];
            fuzz_ring_config(rc, v, n, 1, 0); /* port 1: never used, nothing listens here */
            memset(k, 0, sizeof *k);
            for (int m = 0; m < 2; m++) {
                if (v >= 2) {
                    uint8_t sk[64];
                    crypto_sign_seed_keypair(pk[m], sk, seed[m]);
                    memcpy(rc->members[m].pubkey, pk[m], 32);
                    rc->members[m].has_pubkey = 1;
                    if (m == n) memcpy(k->sign_sk, sk, 64), memcpy(k->sign_pk, pk[m], 32);
                    sodium_memzero(sk, sizeof sk);
                }
            }
            k->mode = rc->security;
            k->have_identity = v >= 2;
            if (v == 1 || v == 3) {
                memcpy(rc->psk, psk, 32);
                rc->has_psk = 1;
                memcpy(k->psk, psk, 32);
                k->have_psk = 1;
            }
        }
    g_ch = aligned_alloc(64, (sizeof *g_ch + 63) & ~(size_t)63); /* AES-GCM state alignment */
    if (!g_ch) abort();
}

static sec_hs_params params(int variant, int node, int accept_lobby, int lobby_call) {
    return (sec_hs_params){.rc = &g_rc[variant][node],
                           .keys = &g_keys[variant][node],
                           .epoch = lobby_call ? SEC_EPOCH_LOBBY : 0,
                           .self_id = node,
                           .expect_id = !node,
                           .seg_bytes = SEG,
                           .accept_lobby = accept_lobby};
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size - 1 > MAX_PEER) return 0;
    int sel = data[0], initiator = sel & 1, variant = (sel >> 1) & 3, lobby = (sel >> 3) & 1;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) abort();
    fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
    if (size > 1 && send(sv[1], data + 1, size - 1, MSG_NOSIGNAL) != (ssize_t)(size - 1)) abort();
    shutdown(sv[1], SHUT_WR);
    sec_hs_params p = params(variant, 0, lobby && !initiator, 0);
    sec_hs_peer who;
    p.peer = &who;
    int refused = 0;
    char err[HR_ERRLEN];
    double t0 = tcp_now();
    if (sec_handshake(sv[0], initiator, &p, t0 + FUZZ_WAIT_S, g_ch, &refused, err,
                      sizeof err) == HR_OK)
        sec_chan_free(g_ch);
    fuzz_waited("fuzz_handshake: the handshake", t0, tcp_now());
    close(sv[0]);
    close(sv[1]);
    return 0;
}

/* ================================================================ recording honest seeds */

typedef struct {
    int from, to; /* copy from -> to until end-of-file */
    FILE *rec;    /* and append what passed here, or NULL */
} relay;

static void *relay_main(void *arg) {
    relay *r = arg;
    uint8_t buf[4096];
    for (ssize_t n; (n = read(r->from, buf, sizeof buf)) > 0;) {
        if (r->rec) fwrite(buf, 1, (size_t)n, r->rec);
        if (send(r->to, buf, (size_t)n, MSG_NOSIGNAL) != n) break;
    }
    shutdown(r->to, SHUT_WR);
    return NULL;
}

typedef struct {
    int fd, initiator;
    sec_hs_params p;
    hr_status st;
} side;

static void *side_main(void *arg) {
    side *s = arg;
    sec_chan *ch = aligned_alloc(64, (sizeof *ch + 63) & ~(size_t)63);
    int refused;
    char err[HR_ERRLEN];
    s->st = sec_handshake(s->fd, s->initiator, &s->p, tcp_now() + 5, ch, &refused, err, sizeof err);
    if (s->st != HR_OK) fprintf(stderr, "record: node %ld: %s\n", s->p.self_id, err);
    sec_chan_free(ch);
    free(ch);
    shutdown(s->fd, SHUT_WR);
    return NULL;
}

/* One honest handshake; node 1's bytes, after the selector, go to DIR/NAME. */
static void record(const char *dir, const char *name, int sel) {
    int initiator = sel & 1, variant = (sel >> 1) & 3, lobby = (sel >> 3) & 1;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *rec = fopen(path, "wb");
    if (!rec) abort();
    fputc(sel, rec);
    int a[2], b[2]; /* node 0 = a[0] <-> a[1] relay b[1] <-> b[0] = node 1 */
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, a) || socketpair(AF_UNIX, SOCK_STREAM, 0, b)) abort();
    fcntl(a[0], F_SETFL, fcntl(a[0], F_GETFL) | O_NONBLOCK);
    fcntl(b[0], F_SETFL, fcntl(b[0], F_GETFL) | O_NONBLOCK);
    relay up = {b[1], a[1], rec}, down = {a[1], b[1], NULL};
    side s0 = {a[0], initiator, params(variant, 0, lobby && !initiator, 0), HR_OK};
    side s1 = {b[0], !initiator, params(variant, 1, 0, lobby && initiator == 0), HR_OK};
    pthread_t t[4];
    pthread_create(&t[0], NULL, relay_main, &up);
    pthread_create(&t[1], NULL, relay_main, &down);
    pthread_create(&t[2], NULL, side_main, &s0);
    pthread_create(&t[3], NULL, side_main, &s1);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    fclose(rec);
    for (int i = 0; i < 2; i++) close(a[i]), close(b[i]);
    printf("%s: node 0 %s, node 1 %s\n", path, hr_strerror(s0.st), hr_strerror(s1.st));
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    setup();
    const char *dir = getenv("FUZZ_RECORD");
    if (dir) {
        const char *mode[4] = {"none", "auth", "encrypt", "encrypt_psk"};
        for (int v = 0; v < 4; v++)
            for (int init = 0; init < 2; init++) {
                char name[64];
                snprintf(name, sizeof name, "%s_%s", mode[v], init ? "initiator" : "responder");
                record(dir, name, init | v << 1);
            }
        record(dir, "encrypt_lobby_call", 0 | 2 << 1 | 1 << 3);
        record(dir, "none_lobby_call", 0 | 0 << 1 | 1 << 3);
        exit(0);
    }
    return 0;
}
